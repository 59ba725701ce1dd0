"""Mining strategies as a dict of functions: the same selections as the former if-chain on a fixture
catalog (digests computed with data_engine/mining.py before the change), and unknown names refused."""
from __future__ import annotations

import hashlib
import json

import pytest
from engine_catalogs import write_fixture_catalog

from data_engine.config import EngineConfig
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
    sel = mine(write_fixture_catalog(tmp_path / "c.db"), int(budget), strategy, unit=unit)
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
