"""benchmarks/autolabel_value.py's parts that decide its table (the loops themselves are the engine's, tested there):
each arm's engine config, the paired differences over seeds, and no NaN reaching results.json."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from benchmark_scripts import load

from data_engine.config import EngineConfig
from hydranet.config import load_config

av = load("autolabel_value")
ARGS = SimpleNamespace(image="320x192", budget=8, fleet_clips=6, retrain_steps=40, suite_clips=2, suite_frames=2)


@pytest.mark.parametrize("arm, labeller, budget", [("oracle N", "oracle", 8), ("auto N", "auto", 8), ("auto 2N", "auto", 16)])
def test_each_arm_is_a_valid_engine_config(arm, labeller, budget):
    cfg = load_config(EngineConfig, "engine", av.arm_sets(arm, 2, ARGS))
    assert (cfg.loop.labeller, cfg.loop.budget, cfg.loop.fleet_seed) == (labeller, budget, 1002)
    assert cfg.loop.unit_tests is False and cfg.retrain.steps == 40 and cfg.suites.clips == 2
    if labeller == "auto":  # every frame accepted: the labels train as they are
        assert cfg.autolabel.accept == {"det2d": 0.0, "det3d": 0.0} and cfg.autolabel.accept_empty


def test_paired_differences_drop_undefined_seeds():
    got = av.paired({"a": [0.3, 0.5, float("nan")], "b": [0.1, 0.2, 0.4]}, "a", "b", resamples=500)
    assert got["per_seed"] == pytest.approx([0.2, 0.3]) and got["mean"] == pytest.approx(0.25)
    assert 0.2 - 1e-9 <= got["ci"][0] < got["ci"][1] <= 0.3 + 1e-9  # the bootstrap of two seeds spans their values
    none = av.paired({"a": [float("nan")], "b": [1.0]}, "a", "b", 10)
    assert math.isnan(none["mean"]) and none["ci"] is None and none["per_seed"] == []


def test_results_hold_no_nan():
    out = av.finite({"x": [1.0, float("nan")], "y": {"z": np.float64("inf"), "w": 2}})
    assert out == {"x": [1.0, None], "y": {"z": None, "w": 2}}
    json.dumps(out, allow_nan=False)
    assert math.isnan(av.nanmean([float("nan")])) and av.nanmean([1.0, float("nan"), 3.0]) == 2.0
