"""Mining strategies as a dict of functions: the same selections as the former if-chain on a fixture
catalog (digests computed with data_engine/mining.py before the change), and unknown names refused."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from engine_catalogs import write_fixture_catalog

from data_engine.config import EngineConfig, MiningConfig
from data_engine.mining import STRATEGIES, MiningError, mine, select, strategy_fn

# sha256 of json.dumps(selection["items"], sort_keys=True), computed with the if-chain of select()
EXPECTED = {
    "random/frame/7": "d8f0c86253f640561458ad20ca1228ff3b974bd2fa040c559376d91d2eb9a1c3",
    "uncertainty/frame/7": "eda4c2e6746bb555f1e83f8090753246240a57dcd0006687cdd13c7f4748cfdf",
    "diversity/frame/7": "5bf416aec3c25660398be06440c4d9743e0d3e4353a57f3cbf180307935b5627",
    "hybrid/frame/7": "52b68c0ce524e74cf922410885b764f3dbeaa3cbed1ff7fbbb1b15505adf2829",
    "triggers/frame/7": "a6cf1c46d14e483ae6f951e707eef1caa860ee287023b01d46964e64946d2784",
    "random/clip/3": "93284c2a09bb2b942be49f18da206e71b60e51f4f7e003fb61af97f8025862df",
    "uncertainty/clip/3": "213bcf577d5e46729bd15d9aa18a7ba9eb72ad17431e48c73faf1a3e9248f4e6",
    "diversity/clip/3": "b537842fae81f76d8b08614e6032c5bfc7e63358f60d68a8dd0dfe9c86236742",
    "hybrid/clip/3": "3301db9e22da86c2533190caa6ffe60512a89d21742cc3f8e948654f913c15b3",
    "triggers/clip/3": "6064029a9eca9ff402d1c0a79a56a35a8f07b87acbfab9e046828a2a964fdb9a",
}


def test_the_strategies_are_the_known_seven():
    assert list(STRATEGIES) == ["random", "uncertainty", "diversity", "hybrid", "triggers", "ensemble", "tta"]
    assert all(callable(f) for f in STRATEGIES.values())


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_each_strategy_selects_as_before(key, tmp_path):
    strategy, unit, budget = key.split("/")
    old_cfg = EngineConfig(mining=MiningConfig(min_gap_s=0.0))  # no time gap: the selections before it (issue 34)
    sel = mine(write_fixture_catalog(tmp_path / "c.db"), int(budget), strategy, old_cfg, unit=unit)
    assert len(sel["items"]) == int(budget)
    # the digests predate the reasons' rank and trigger hits (every strategy records them now; tests/test_engine_reasons.py):
    # the same picks in the same order with the same strategy reasons
    added = ("rank", "trigger_scores") + (() if strategy == "triggers" else ("triggers",))
    old = [{**it, "reason": {k: v for k, v in it["reason"].items() if k not in added}} for it in sel["items"]]
    if strategy == "triggers":  # the triggers strategy listed the hits of the frames a trigger chose only
        old = [{**it, "reason": {k: v for k, v in it["reason"].items() if k != "triggers" or "trigger" in it["reason"]}}
               for it in old]
    assert hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest() == EXPECTED[key]


def test_unknown_strategy_lists_the_known_ones(tmp_path):
    msg = (r"unknown strategy 'best'; choose one of \['random', 'uncertainty', 'diversity', 'hybrid', 'triggers', "
           r"'ensemble', 'tta'\]")
    with pytest.raises(MiningError, match=msg):
        strategy_fn("best")
    with pytest.raises(MiningError, match=msg):
        select({"frame_id": []}, 1, "best", EngineConfig())
    with pytest.raises(MiningError, match=msg):
        mine(write_fixture_catalog(tmp_path / "c.db"), 1, "best")


def test_the_loop_refuses_an_unknown_strategy_naming_the_key(tmp_path):
    from data_engine.config import LoopConfig
    from data_engine.loop import Loop
    from hydranet.config import ConfigError

    cfg = EngineConfig(loop=LoopConfig(strategy="best"))  # the config alone does not know the miner's strategies
    with pytest.raises(ConfigError, match=r"config key 'loop.strategy': unknown strategy 'best'; choose one of \['random'"):
        Loop(tmp_path / "loop", cfg, production=tmp_path / "run")
    assert not (tmp_path / "loop").exists()


def test_the_engine_config_is_a_leaf():
    """data_engine/config.py imports no stage of the engine (nor anything of data_engine), anywhere in it."""
    import ast

    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[1] / "data_engine" / "config.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    assert names and not [m for m in names if m.startswith("data_engine")], names


def test_k_center_greedy_never_picks_a_row_twice_even_when_rows_are_identical():
    """A recorded fleet of a parked car: every frame's embedding is the same; the budget still gets distinct frames."""
    import numpy as np

    from data_engine.mining import k_center_greedy

    emb = np.tile(np.array([[0.6, 0.8]]), (3, 1))
    picked, _ = k_center_greedy(emb, 3)
    assert sorted(picked) == [0, 1, 2]
    picked, _ = k_center_greedy(emb, 2, candidates=np.array([2, 0]))
    assert sorted(picked) == [0, 2]


# -- the time gap between two picks of one clip (issue 34 item 6) ------------------------------------------------
RANKING = ("uncertainty", "diversity", "hybrid", "triggers", "ensemble", "tta")


def gap_pool() -> dict:
    """Clip a: six frames 0.1 s apart at the top of every score, then one 2 s later; clips b, c: lower, 1 s apart."""
    import numpy as np

    clips = ["a"] * 6 + ["a"] + ["b"] * 4 + ["c"] * 4
    t = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 2.5] + [0.0, 1.0, 2.0, 3.0] * 2
    score = [9, 8.9, 8.8, 8.7, 8.6, 8.5, 5] + [4, 3, 2, 1] * 2
    emb = np.random.default_rng(0).normal(size=(len(clips), 16))
    emb[:6] = emb[0] + 0.01 * emb[:6]  # the burst looks alike, as a parked car's frames do
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    v = np.asarray(score, np.float64)
    return {"frame_id": np.arange(1, len(clips) + 1), "clip": np.asarray(clips, object), "t_s": np.asarray(t),
            "embedding": emb, "dominant": np.asarray(["none"] * len(clips), object), "det2d_entropy": v,
            "ensemble": v, "tta": v}


def gaps(pool: dict, picks) -> list[float]:
    """The time between every two picks of one clip."""
    rows = [i for i, _ in picks]
    return [abs(pool["t_s"][i] - pool["t_s"][j]) for k, i in enumerate(rows) for j in rows[k + 1:]
            if pool["clip"][i] == pool["clip"][j]]


@pytest.mark.parametrize("strategy", ["uncertainty", "hybrid", "ensemble", "tta"])
def test_picks_of_one_clip_are_min_gap_apart_and_the_budget_is_filled_from_other_frames(strategy):
    from data_engine.config import MiningConfig

    pool = gap_pool()
    cfg = EngineConfig(mining=MiningConfig(dedup=0.0, min_gap_s=1.0, pool_factor=3.0))
    picks = select(pool, 5, strategy, cfg)
    assert len(picks) == 5 and len({i for i, _ in picks}) == 5
    assert min(gaps(pool, picks)) >= 1.0
    in_a = sum(pool["clip"][i] == "a" for i, _ in picks)
    assert in_a == 2 or (strategy == "hybrid" and in_a <= 2)  # t 0.0 and 2.5: the rest of the burst is left
    # 0: the old behaviour, the burst taken whole by the score
    old = select(pool, 5, strategy, EngineConfig(mining=MiningConfig(dedup=0.0, min_gap_s=0.0, pool_factor=3.0)))
    if strategy != "hybrid":  # (hybrid's k-center spreads by embedding, not by time)
        assert [i for i, _ in old] == [0, 1, 2, 3, 4]


def test_diversity_keeps_the_gap():
    from data_engine.config import MiningConfig

    pool = gap_pool()
    pool["embedding"][:6] = pool["embedding"][6:12]  # the burst now spread out in embedding space
    picks = select(pool, 8, "diversity", EngineConfig(mining=MiningConfig(min_gap_s=0.9)))
    assert len({i for i, _ in picks}) == 8 and min(gaps(pool, picks)) >= 0.9


@pytest.mark.parametrize("strategy", RANKING[:4])
def test_every_ranking_strategy_keeps_the_gap_on_the_fixture_catalog(strategy, tmp_path):
    """4 clips x 10 frames 0.1 s apart: budget 7 with a 0.5 s gap fits (two picks per clip); a 1 s gap fits 4 and
    the rest is filled (relaxed) so the budget is met."""
    from data_engine.config import MiningConfig

    cat = write_fixture_catalog(tmp_path / "c.db")
    sel = mine(cat, 7, strategy, EngineConfig(mining=MiningConfig(min_gap_s=0.5)), name="g")
    t = {it["frame_id"]: (it["clip"], it["frame"] * 0.1) for it in sel["items"]}
    pairs = [(a, b) for a in t.values() for b in t.values() if a is not b and a[0] == b[0]]
    assert len(sel["items"]) == 7 and all(abs(a[1] - b[1]) >= 0.5 - 1e-9 for a, b in pairs)
    assert json_params(cat, "g")["mining"]["min_gap_s"] == 0.5
    assert len(mine(cat, 7, strategy, EngineConfig(mining=MiningConfig(min_gap_s=1.0)), name="h")["items"]) == 7


def json_params(cat, name: str) -> dict:
    from data_engine.catalog import Catalog

    with Catalog(cat) as c:
        return json.loads(c.db.execute("SELECT params FROM selections WHERE name = ?", (name,)).fetchone()[0])


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), "1", True])
def test_min_gap_is_a_finite_number_of_seconds(value):
    from data_engine.config import MiningConfig
    from hydranet.config import ConfigError

    with pytest.raises(ConfigError, match=r"config key 'mining.min_gap_s' must be a finite number of seconds >= 0"):
        MiningConfig(min_gap_s=value)
    assert MiningConfig(min_gap_s=0).min_gap_s == 0 and MiningConfig().min_gap_s == 1.0


def test_every_place_that_lists_the_strategies_lists_the_registry():
    """The strategies are spelled once (data_engine.mining.STRATEGIES); the CLI help of `engine mine --strategy` and
    configs/engine.yaml's loop.strategy comment, which cannot import it, are checked against it here."""
    import re

    from data_engine.mining import STRATEGIES
    from hydranet.cli.main import build_parser

    REPO = Path(__file__).resolve().parents[1]
    sub = build_parser()._subparsers._group_actions[0].choices["engine"]._subparsers._group_actions[0].choices["mine"]
    help_text = next(a.help for a in sub._actions if "--strategy" in a.option_strings)
    assert re.findall(r"[a-z]+", help_text.split("(")[0]) == list(STRATEGIES)
    comment = next(line for line in (REPO / "configs" / "engine.yaml").read_text().splitlines()
                   if line.strip().startswith("strategy:")).split("#", 1)[1]
    assert re.findall(r"[a-z]+", comment.split("(")[0]) == list(STRATEGIES)

