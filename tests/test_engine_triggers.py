"""The trigger table on a fixture catalog: the same hits, names, versions, thresholds and quotas as the
13 trigger modules gave (values below computed with those modules, before they became one table)."""
from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest
from engine_catalogs import write_fixture_catalog

from data_engine.catalog import Catalog
from data_engine.triggers import build_triggers, fire_all, registry

# name -> (version, signal column, threshold, quota), as the trigger modules declared them
DECLARED = {
    "det2d_uncertain": (1, "det2d_uncertain", 3, 50), "det3d_uncertain": (1, "det3d_uncertain", 2, 50),
    "signs_uncertain": (1, "signs_lights_entropy", 0.45, 50), "dense_entropy": (1, "drivable_entropy_p95", 0.6, 50),
    "flicker": (1, "flicker", 1, 50), "jitter": (1, "jitter", 0.08, 50), "cross_camera": (1, "cross_camera", 0.5, 50),
    "box2d_vs_3d": (1, "box2d_vs_3d", 0.8, 50), "depth_vs_3d": (1, "depth_vs_3d", 0.5, 50),
    "speed": (1, "speed_excess", 1.0, 50), "accel": (1, "accel", 15.0, 50),
    "model_disagreement": (1, "disagree_det2d", 0.5, 50), "novelty": (1, "embedding", 0.05, 50),
}
def digest(hits: dict[str, list[tuple[int, float]]]) -> str:
    """sha256 of the hits with scores rounded to 9 digits (stable across platforms)."""
    canon = {k: [[int(f), round(float(s), 9)] for f, s in v] for k, v in sorted(hits.items())}
    return hashlib.sha256(json.dumps(canon, sort_keys=True).encode()).hexdigest()


# computed with the 13 trigger modules (data_engine/triggers/*.py) on write_fixture_catalog's catalog
EXPECTED_COUNTS = {"accel": 12, "box2d_vs_3d": 11, "cross_camera": 25, "dense_entropy": 15, "depth_vs_3d": 14,
                   "det2d_uncertain": 15, "det3d_uncertain": 14, "flicker": 26, "jitter": 19, "model_disagreement": 11,
                   "novelty": 4, "signs_uncertain": 17, "speed": 21}
EXPECTED_FIRST = {"det2d_uncertain": 1, "det3d_uncertain": 3, "signs_uncertain": 9, "dense_entropy": 40, "flicker": 2,
                  "jitter": 30, "cross_camera": 22, "box2d_vs_3d": 31, "depth_vs_3d": 38, "speed": 20, "accel": 16,
                  "model_disagreement": 22, "novelty": 40}
EXPECTED_DIGEST = "1c14ae280b1d4ac1d13cd9a160a4bd4c99c826270a0b737cbb8797a0608af7a5"
EXPECTED_QUOTA_DIGEST = "16094005af521f93c62c95e5750cc723e50070ae00b4e3f173b519abf29738cf"
QUOTAS = {"flicker": {"quota": 3}, "novelty": {"threshold": 0.001, "quota": 5}, "accel": {"threshold": 25.0},
          "jitter": {"enabled": False}}


def test_the_table_declares_what_the_modules_did():
    got = {n: (t.version, t.signal, t.threshold, t.quota) for n, t in registry().items()}
    assert got == DECLARED
    assert [t.name for t in build_triggers()] == list(DECLARED)  # the modules' order
    assert all(t.description for t in registry().values())


def test_the_table_gives_the_same_hits_as_the_modules(tmp_path):
    cat = write_fixture_catalog(tmp_path / "c.db")
    run, hits = fire_all(cat, build_triggers())
    assert run == 1
    assert {k: len(v) for k, v in hits.items()} == EXPECTED_COUNTS
    assert {k: v[0][0] for k, v in hits.items() if v} == EXPECTED_FIRST
    assert digest(hits) == EXPECTED_DIGEST
    with Catalog(cat) as c:  # stored per (trigger, version)
        stored = c.db.execute("SELECT trigger, version, count(*) FROM trigger_hits GROUP BY trigger, version").fetchall()
        assert digest(c.hits(run)) == EXPECTED_DIGEST
    assert sorted(stored) == sorted((n, 1, k) for n, k in EXPECTED_COUNTS.items() if k)
    _, again = fire_all(cat, build_triggers())  # idempotent
    assert digest(again) == EXPECTED_DIGEST
    with Catalog(cat) as c:
        assert digest(c.hits(run)) == EXPECTED_DIGEST


def test_config_parameters_give_the_same_hits_as_the_modules(tmp_path):
    cat = write_fixture_catalog(tmp_path / "c.db")
    triggers = build_triggers(QUOTAS)  # overrides: the others run with their table's parameters, jitter is off
    assert [t.name for t in triggers] == [n for n in DECLARED if n != "jitter"]
    _, hits = fire_all(cat, triggers)
    assert len(hits["flicker"]) == 3 and len(hits["novelty"]) == 5
    assert digest({n: hits[n] for n in ("flicker", "novelty", "accel")}) == EXPECTED_QUOTA_DIGEST
    assert {n: len(hits[n]) for n in hits if n not in QUOTAS} == {n: k for n, k in EXPECTED_COUNTS.items() if n not in QUOTAS}


def test_a_new_row_runs_without_a_config(monkeypatch):
    """A trigger added to the table runs by default: the shipped config holds overrides only."""
    import dataclasses

    from data_engine import triggers as trig
    from data_engine.config import EngineConfig
    from hydranet.config import load_config

    extra = dataclasses.replace(registry()["flicker"], name="flicker_twice", threshold=2)
    monkeypatch.setattr(trig, "TRIGGERS", {**registry(), "flicker_twice": extra})
    cfg = load_config(EngineConfig, "engine", [])
    assert "flicker_twice" in [t.name for t in build_triggers(cfg.trigger_params())]
    assert "flicker_twice" in [t.name for t in build_triggers({"jitter": {"quota": 3}})]  # an override of another


WRITTEN = (  # data_engine/triggers.py's TABLE before each head's rows moved to its spec, verbatim
    ("det2d_uncertain", 1, "det2d_uncertain", 3, 50,
     "2D detections in the uncertain score band: more than threshold heatmap peaks with 0.3 <= p < 0.6"),
    ("det3d_uncertain", 1, "det3d_uncertain", 2, 50,
     "3D detections in the uncertain score band: more than threshold BEV heatmap peaks with 0.3 <= p < 0.6"),
    ("signs_uncertain", 1, "signs_lights_entropy", 0.45, 50,
     "signs and lights the model hesitates on: mean peak entropy above threshold (nats)"),
    ("dense_entropy", 1, "drivable_entropy_p95", 0.6, 50,
     "drivable-area tail entropy: the 95th percentile pixel entropy above threshold (nats)"),
    ("flicker", 1, "flicker", 1, 50,
     "flickering 2D detections: more than threshold one-frame blinks or gaps across consecutive frames"),
    ("jitter", 1, "jitter", 0.08, 50,
     "box jitter: the second difference of tracked 2D boxes, relative to their size, above threshold"),
    ("cross_camera", 1, "cross_camera", 0.5, 50,
     "cameras disagree in their overlap: share of 3D boxes seen by one camera's 2D detector but not the other's"),
    ("box2d_vs_3d", 1, "box2d_vs_3d", 0.8, 50,
     "2D detections and projected 3D boxes disagree: 1 - mean best IoU above threshold"),
    ("depth_vs_3d", 1, "depth_vs_3d", 0.5, 50,
     "the depth head contradicts the 3D boxes: mean relative depth error at box centres above threshold"),
    ("speed", 1, "speed_excess", 1.0, 50,
     "physically implausible speed: a 3D box faster than its class allows (|v| / vmax above threshold)"),
    ("accel", 1, "accel", 15.0, 50,
     "physically implausible acceleration of a tracked 3D box (m/s^2 above threshold)"),
    ("model_disagreement", 1, "disagree_det2d", 0.5, 50,
     "the candidate model disagrees with production on the 2D detections (1 - F1 above threshold)"),
    ("novelty", 1, "embedding", 0.05, 50,
     "novel scenes: embedding distance (1 - cosine) to the nearest frame of any other clip above threshold", "novelty"),
)


def test_the_table_derived_from_the_heads_is_the_one_written_before():
    """Each head's default trigger rows live in its spec (hydranet/heads/<name>.py); the table built from the
    registry has the same triggers, names, order, parameters and descriptions as the hand-written one."""
    from data_engine import triggers

    assert [r[:6] for r in triggers.TABLE] == [r[:6] for r in WRITTEN]
    assert [r[6].__name__ for r in triggers.TABLE if len(r) > 6] == [r[6] for r in WRITTEN if len(r) > 6]


def test_a_new_heads_trigger_rows_join_the_table_after_the_built_in_heads():
    from data_engine.triggers import ENGINE_ROWS, table_rows
    from hydranet.heads import HEADS, HeadSpec, register_head

    class Glare(HeadSpec):
        name, signal_columns = "glare_test", ("glare_fraction",)
        trigger_rows = (("glare", 1, "glare_fraction", 0.5, 10, "too much glare: glare fraction above threshold"),)

    class Bad(HeadSpec):
        name, signal_columns = "bad_test", ("bad_fraction",)
        trigger_rows = (("bad", 1, "det2d_uncertain", 0.5, 10, "reads another head's column"),)

    saved = dict(HEADS)
    try:
        register_head(Glare)
        rows = table_rows()
        assert [r[0] for r in rows] == [*list(DECLARED)[:4], "glare", *(r[0] for r in ENGINE_ROWS)]
        with pytest.raises(ValueError, match=r"head 'bad_test': trigger row .* one of its `signal_columns`"):
            register_head(Bad)
    finally:
        HEADS.clear()
        HEADS.update(saved)


def test_unknown_trigger_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown trigger 'sparkle'; known triggers: \['accel', 'box2d_vs_3d'"):
        build_triggers({"sparkle": {"threshold": 1}})
    with pytest.raises(ValueError, match="unknown parameter 'signal'"):
        build_triggers({"flicker": {"signal": "jitter"}})


def test_the_engine_config_holds_overrides_only_and_an_unknown_name_in_it_is_an_error(tmp_path, capsys):
    """configs/engine.yaml's `triggers:` restates no row's defaults (each head's rows live in its spec, the cross-head
    ones in ENGINE_ROWS); a config naming a trigger no head or ENGINE_ROWS declares stops `engine triggers` with
    the known names, before any hit is written."""
    from data_engine.config import EngineConfig
    from data_engine.triggers import overrides_only
    from hydranet.cli import main
    from hydranet.config import load_config

    params = load_config(EngineConfig, "engine", []).trigger_params()
    assert all(overrides_only(params).get(n) for n in params), "configs/engine.yaml restates a trigger's defaults"
    assert [t.name for t in build_triggers(params or None)] == list(DECLARED)  # the shipped config switches none off
    cat = write_fixture_catalog(tmp_path / "c.db")
    (tmp_path / "engine.yaml").write_text("triggers:\n  sky_heavy: {quota: 3}\n")  # a head that is not registered
    for args in (["--config", str(tmp_path / "engine.yaml")], ["--set", "triggers.sparkle.threshold=1"]):
        assert main(["engine", "triggers", "--catalog", str(cat), *args]) == 2
        err = capsys.readouterr().err
        assert "unknown trigger '" in err and "known triggers: ['accel', 'box2d_vs_3d'" in err, err
    with Catalog(cat) as c:
        assert c.hits(1) == {}


def test_the_loop_refuses_an_unknown_trigger_before_its_first_round(tmp_path):
    from data_engine.config import EngineConfig, TriggerParams
    from data_engine.loop import Loop
    from hydranet.config import ConfigError

    cfg = EngineConfig(triggers={"sparkle": TriggerParams(quota=3)})
    with pytest.raises(ConfigError, match=r"config key 'triggers': unknown trigger 'sparkle'; known triggers: \['accel'"):
        Loop(tmp_path / "loop", cfg, production=tmp_path / "run")
    assert not (tmp_path / "loop").exists()
    with pytest.raises(ConfigError, match=r"config key 'triggers': trigger 'flicker': quota must be at least 1"):
        Loop(tmp_path / "loop", EngineConfig(triggers={"flicker": TriggerParams(quota=0)}), production=tmp_path / "run")


def test_fixture_catalog_is_a_plain_catalog(tmp_path):
    p = write_fixture_catalog(tmp_path / "c.db")
    db = sqlite3.connect(str(p))
    assert db.execute("SELECT count(*) FROM signals WHERE status = 'ok'").fetchone()[0] == 39
    db.close()


def test_a_loop_journal_that_listed_every_trigger_resumes_under_overrides_only(tmp_path):
    """A loop run started when configs/engine.yaml listed the 13 triggers with their defaults holds them in its
    journal: the same run under the overrides-only config resumes; a real change is refused naming it."""
    import json
    from dataclasses import asdict

    from data_engine.config import EngineConfig
    from data_engine.loop import JOURNAL, Journal, LoopError

    now = {"production": None, "config": asdict(EngineConfig())}
    listed = json.loads(json.dumps(now))
    listed["config"]["triggers"] = {n: {"threshold": t.threshold, "quota": t.quota, "enabled": None}
                                    for n, t in registry().items()}
    (tmp_path / JOURNAL).write_text(json.dumps({"identity": listed, "rounds": []}))
    Journal(tmp_path, now)  # same meaning: resumes
    listed["config"]["triggers"]["flicker"]["quota"] = 7
    (tmp_path / JOURNAL).write_text(json.dumps({"identity": listed, "rounds": []}))
    with pytest.raises(LoopError, match="config.triggers.flicker"):
        Journal(tmp_path, now)
