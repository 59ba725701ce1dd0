"""Every pick carries its reasons, whatever the strategy (issue 24.1): the strategy, its score, the item's
rank and every trigger that fired on the frame, in the selection and in the catalog's selection_items;
the report's "triggers fired" column shows them for hybrid picks; the loop's unit-test stage (mined
frames a trigger fired on) grows under the default hybrid strategy."""
from __future__ import annotations

import json
import types

import numpy as np
import pytest
from engine_catalogs import write_fixture_catalog
from engine_fixtures import make_fleet

from data_engine.catalog import Catalog
from data_engine.config import EngineConfig
from data_engine.mining import OFFLINE, STRATEGIES, mine
from data_engine.triggers import build_triggers, fire_all


@pytest.mark.parametrize("unit, budget", [("frame", 7), ("clip", 3)])
@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s not in OFFLINE])  # offline: tests/test_engine_intervals.py
def test_every_strategy_records_rank_score_and_every_trigger_hit(tmp_path, strategy, unit, budget):
    cat = write_fixture_catalog(tmp_path / "c.db")
    sel = mine(cat, budget, strategy, unit=unit)
    hits: dict[int, dict[str, float]] = {}
    if unit == "frame":  # the hits `engine triggers` stores for the run
        _, fired = fire_all(cat, build_triggers())
    else:  # a clip item: the triggers over the clip pool (max of its frames' signals)
        from data_engine.mining import load_pool

        with Catalog(cat) as c:
            pool = load_pool(c, c.latest_run(), "clip")
        fired = {t.name: t.fire(pool) for t in build_triggers()}
    for name, hs in fired.items():
        for f, s in hs:
            hits.setdefault(f, {})[name] = round(s, 6)
    assert any(hits.get(it["frame_id"]) for it in sel["items"])  # the fixture has hits among the picks
    for it in sel["items"]:
        r = it["reason"]
        assert r["strategy"].startswith(strategy if strategy != "triggers" or "trigger" in r else "uncertainty")
        assert "score" in r and r["rank"] == it["rank"]
        assert r["triggers"] == sorted(hits.get(it["frame_id"], {}))
        assert r["trigger_scores"] == hits.get(it["frame_id"], {})
    with Catalog(cat) as c:  # the catalog holds the same reasons
        stored = c.db.execute("SELECT i.rank, i.reason FROM selection_items i JOIN selections s ON i.selection_id = s.id "
                              "WHERE s.name = ? ORDER BY i.rank", (sel["name"],)).fetchall()
    assert [json.loads(r) for _, r in stored] == [it["reason"] for it in sel["items"]]


def test_the_report_lists_the_triggers_of_hybrid_picks(tmp_path):
    from data_engine.report import items_markdown

    sel = mine(write_fixture_catalog(tmp_path / "c.db"), 7, "hybrid")
    names = {it["frame_id"]: (it["clip"], it["frame"]) for it in sel["items"]}
    rows = items_markdown(sel["items"], names, None).splitlines()[2:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert [c[3] for c in cells] == ["hybrid"] * 7
    assert [c[6] for c in cells] == [", ".join(it["reason"]["triggers"]) or "-" for it in sel["items"]]
    assert any(c[6] != "-" for c in cells)


# -- the loop's unit-test stage under the default strategy -----------------------------------------------
def _shadowed(fleet, path):
    """A catalog of the fleet with one shadow run written without a model: seeded signals, and embeddings
    of clips far apart (novelty fires on every frame, as on a weak model's fleet)."""
    from data_engine.fleet import Fleet

    rng = np.random.default_rng(0)
    with Catalog(path, create=True) as cat:
        fleet_id, clips, frames = cat.add_fleet(Fleet(fleet))
        with cat.transaction():
            cat.db.execute("INSERT INTO models (sha256, path, embedding_dim, meta, added) VALUES ('m', 'm.onnx', 8, '{}', 0)")
            run = cat.db.execute("INSERT INTO shadow_runs (model_id, candidate_id, fleet_id, started) VALUES (1, 0, ?, 0)",
                                 (fleet_id,)).lastrowid
        for clip, cid in clips.items():
            rows = [{"frame_id": fid, "status": "ok", "error": None,
                     "signals": {"det2d_entropy": float(rng.uniform(0, 0.6)), "det2d_uncertain": float(rng.integers(0, 3))},
                     "embedding": rng.normal(size=(6, 8))} for (c, _), fid in sorted(frames.items()) if c == clip]
            cat.write_clip(run, cid, rows)
    return path, run


def test_the_unit_tests_grow_in_a_default_hybrid_round(tmp_path):
    from data_engine.loop import Loop
    from data_engine.suites import FORMAT, SUITES_FILE, load_suites
    from hydranet.config import load_config

    fleet = make_fleet(tmp_path / "fleet", clips=2, frames=2, seed=3)
    cat, run = _shadowed(fleet, tmp_path / "catalog.sqlite")
    cfg = load_config(EngineConfig, "engine", ["loop.budget=2"])
    assert cfg.loop.strategy == "hybrid" and cfg.loop.unit_tests
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / SUITES_FILE).write_text(json.dumps({"format": FORMAT, "version": 1, "slices": {}}))  # no frozen slice
    state: dict = {"done": {"fleet": {"fleet": str(fleet), "recorded": False}, "shadow": {"run_id": run}}}
    loop = Loop.__new__(Loop)  # the stages alone: mine -> label (oracle, accepted) -> unit_tests
    loop.cfg, loop.catalog, loop.suites, loop.progress = cfg, cat, suites, False
    loop.journal = types.SimpleNamespace(round=lambda r: state)
    for stage in ("mine", "label", "unit_tests"):
        rdir = tmp_path / "r000"
        rdir.mkdir(exist_ok=True)
        state["done"][stage] = getattr(loop, f"stage_{stage}")(0, rdir)
    items = json.loads((tmp_path / "r000" / "selection.json").read_text())["items"]
    assert all(it["reason"]["strategy"] == "hybrid" and "novelty" in it["reason"]["triggers"] for it in items)
    assert state["done"]["label"]["accepted"] == 2
    assert state["done"]["unit_tests"]["added"] == 2
    assert load_suites(suites, verify=False)["suites"]["unit_tests"]["frames"] == 2


def test_engine_mine_prints_each_pick_with_its_score_and_triggers():
    """A curator reads why each frame was picked from the command's output, not only a count."""
    from hydranet.cli.engine import PICKS_SHOWN, format_picks

    items = [{"rank": k, "frame_id": 10 + k, "clip": "clip_00003", "frame": k,
              "reason": {"strategy": "hybrid", "score": 0.5 - k / 100, "trigger_scores": {"novelty": 0.91, "flicker": 2.0}}}
             for k in range(PICKS_SHOWN + 3)]
    items[1]["reason"] = {"strategy": "random", "score": None}
    lines = format_picks(items).splitlines()
    assert lines[0].split()[:3] == ["rank", "frame", "id"]
    assert lines[1].split() == ["0", "10", "clip_00003/000000", "0.5000", "novelty", "0.91,", "flicker", "2"]
    assert lines[2].split()[3:] == ["-", "-"]  # no score, no trigger fired: said, not left blank
    assert len(lines) == 1 + PICKS_SHOWN + 1 and lines[-1] == "... and 3 more in the selection file"
