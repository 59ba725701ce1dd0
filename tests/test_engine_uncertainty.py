"""Server-side uncertainty (data_engine/uncertainty.py, issue 25.3): an ensemble of two tiny checkpoints and the
flip TTA over a small sim dataset give finite per-frame columns and per-frame errors from the same pass; the
rank statistics and the mining strategy on constructed values."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from data_engine.uncertainty import (SIGNALS, UncertaintyError, _rank, frame_errors, offline_signals, select_uncertain,
                                     spearman, spearman_interval)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    from hydranet.experiment import load_experiment
    from hydranet.train import train
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    tmp = tmp_path_factory.mktemp("unc")
    data = generate_dataset(tmp / "sim", SimConfig(image_width=160, image_height=96, frames_per_scene=2), scenes=2,
                            seed=4, progress=False)
    runs = []
    for seed in (0, 1):
        cfg = load_experiment(REPO / "configs" / "tiny.yaml",
                              [f"data.root={data}", "data.cameras=[CAM_FRONT]", "num_workers=0", "batch_size=2",
                               "steps=2", "checkpoint_every=2", f"seed={seed}"])
        train(cfg, tmp / f"run{seed}", progress=False)
        runs.append(tmp / f"run{seed}")
    return data, runs


def test_offline_signals_over_a_dataset(members):
    data, runs = members
    out = offline_signals(runs, data)
    assert out["members"] == 2 and len(out["frame_ids"]) == 4 and len(set(out["clips"])) == 2
    assert set(out["signals"]) == set(SIGNALS)
    for name, v in out["signals"].items():
        assert v.shape == (4,) and np.isfinite(v).all(), name
    assert (out["signals"]["ens_drivable"] > 0).all() and (out["signals"]["tta_depth"] > 0).all()
    assert set(out["errors"]) == {"drivable", "depth"} and all(e.shape == (4,) for e in out["errors"].values())
    assert np.nanmin(out["errors"]["depth"]) > 0
    again = offline_signals(runs, data)  # deterministic: eval mode, no randomness
    assert all(np.array_equal(again["signals"][k], v) for k, v in out["signals"].items())
    with pytest.raises(UncertaintyError, match="at least 2"):
        offline_signals(runs[:1], data)


def test_rank_statistics_and_the_strategy():
    assert _rank(np.array([3.0, 1.0, 2.0, 2.0])).tolist() == [1.0, 0.0, 0.5, 0.5]
    x = np.arange(20.0)
    assert spearman(x, x**2) == pytest.approx(1.0) and spearman(x, -x) == pytest.approx(-1.0)
    assert math.isnan(spearman(x[:2], x[:2]))
    rng = np.random.default_rng(0)
    clips = [f"c{i // 4}" for i in range(40)]
    a = rng.normal(size=40)
    rho, lo, hi = spearman_interval(a, a + rng.normal(0, 0.3, 40), clips, resamples=200)
    assert lo <= rho <= hi and lo > 0.5
    rho, lo, hi = spearman_interval(a, rng.normal(size=40), clips, resamples=200)
    assert lo < 0 < hi  # no relation: the interval includes 0
    sel = select_uncertain(["f0", "f1", "f2"], {"ensemble": np.array([0.1, np.nan, 0.7])}, 2)
    assert [f for f, _ in sel] == ["f2", "f0"] and sel[0][1]["rank"] == 1 and sel[0][1]["signal"] == "ensemble"
    with pytest.raises(UncertaintyError, match="unknown signal"):
        select_uncertain(["f0"], {"ensemble": np.array([1.0])}, 1, "tta")


def test_frame_errors_from_states():
    states = {"drivable": [[{"inter": 3, "union": 4}, {"inter": 1, "union": 4}], None, [{"inter": 0, "union": 0}]],
              "depth": [[{"n": 10, "abs_rel": 2.0, "sq": 0.0, "delta1": 0}], None, [{"n": 0, "abs_rel": 0.0, "sq": 0.0,
                                                                                      "delta1": 0}]]}
    e = frame_errors(states)
    assert e["drivable"][0] == pytest.approx(0.5) and math.isnan(e["drivable"][1]) and math.isnan(e["drivable"][2])
    assert e["depth"][0] == pytest.approx(0.2) and math.isnan(e["depth"][2])
