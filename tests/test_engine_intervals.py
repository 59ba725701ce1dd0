"""Issue 25 items 4-5: the benchmarks' bootstrap and power helpers (data_engine/intervals.py), the engine
mining benchmark's clip-weighted rates, and the offline-signal mining strategies (mining.STRATEGIES)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from data_engine.intervals import (ap50, bootstrap_mean, class_states, detectable_delta, hierarchical_draws,
                                   interval, merge, ratio_interval, required_clips, verdict)
from data_engine.config import EngineConfig
from data_engine.mining import OFFLINE, STRATEGIES, MiningError, add_offline, select
from hydranet.tasks.det2d import coco_map_states


def test_required_clips_by_hand():
    # ((1.959964 + 0.841621) * sd / delta)^2: sd = delta -> 7.849 -> 8; sd = 5 delta -> 196.2 -> 197
    assert required_clips(0.01, 0.01) == 8
    assert required_clips(0.05, 0.01) == 197
    assert required_clips(0.05, 0.01, confidence=0.95, power=0.5) == math.ceil((1.959964 * 5) ** 2)  # 96.04 -> 97
    assert required_clips(0.0, 0.01) == 2  # no spread: the floor of a resample
    assert detectable_delta(0.01, 8) <= 0.01 < detectable_delta(0.01, 7)  # the formula solved back
    with pytest.raises(ValueError):
        required_clips(0.01, 0.0)


def test_interval_is_the_gates_percentile_rule():
    assert interval(np.arange(101.0), 0.9) == pytest.approx((5.0, 95.0))
    v = np.array([1.0, np.nan, np.nan, np.nan, np.nan])  # under half finite: no interval
    assert interval(v) is None
    assert verdict(0.01, 0.05) == "met" and verdict(-0.05, -0.01) == "missed"
    assert verdict(-0.01, 0.02).startswith("undecided")
    assert verdict(3.2, 4.0, target=3.0) == "met" and verdict(2.0, 3.5, target=3.0).startswith("undecided")
    assert ratio_interval(np.full(10, 2.0), np.full(10, 4.0)) == pytest.approx((0.5, 0.5))
    assert ratio_interval(np.full(10, 2.0), np.zeros(10)) is None  # a gain ratio over no gain is undefined


def test_bootstrap_is_seeded_and_exact_on_constants():
    assert bootstrap_mean([0.3, 0.3, 0.3]) == pytest.approx((0.3, 0.3, 0.3))
    a, b = bootstrap_mean([0.0, 1.0, 2.0, 3.0], seed=4), bootstrap_mean([0.0, 1.0, 2.0, 3.0], seed=4)
    assert a == b and a[0] == 1.5 and 0.0 <= a[1] < 1.5 < a[2] <= 3.0
    s1, c1 = hierarchical_draws(3, [2, 5], 50, seed=1)
    s2, c2 = hierarchical_draws(3, [2, 5, 7], 50, seed=1)
    assert s1.shape == (50, 3) and [c.shape for c in c1] == [(50, 2), (50, 5)]
    assert (s1 == s2).all() and all((x == y).all() for x, y in zip(c1, c2))  # more groups: the same earlier draws
    assert s1.min() >= 0 and s1.max() <= 2 and c1[1].max() <= 4


def _image(labels, scores, tp, npig):
    return {"label": labels, "score": scores, "tp": tp, "ignored": [0] * len(labels), "npig": npig}


def test_ap50_by_hand_and_equal_to_coco():
    # class 0: 2 boxes; detections 0.9 hit, 0.8 miss, 0.7 hit: precision envelope 1 up to recall 0.5 (51 of the
    # 101 recall points), 2/3 above it (50 points) -> (51 + 50 * 2/3) / 101
    img = _image([0, 0, 0], [0.9, 0.8, 0.7], [1, 0, 1], [2, 0])
    assert ap50([merge([img], 2)]) == pytest.approx((51 + 50 * 2 / 3) / 101)
    # a second class, every detection a hit: AP 1; the mean over classes, and per class by restriction
    img2 = _image([1, 1], [0.6, 0.5], [1 | 2, 1], [0, 2])
    m = merge([img, img2], 2)
    assert ap50([m]) == pytest.approx(((51 + 50 * 2 / 3) / 101 + 1.0) / 2)
    assert ap50([class_states(m, 1)]) == pytest.approx(1.0)
    assert ap50([class_states(m, 0)]) == pytest.approx((51 + 50 * 2 / 3) / 101)
    assert ap50([m]) == pytest.approx(coco_map_states([img, img2], 2)["mAP50"])
    assert math.isnan(ap50([merge([_image([], [], [], [0, 0])], 2)]))  # no ground truth
    assert ap50([merge([_image([], [], [], [1, 0])], 2)]) == 0.0  # no detection


def test_engine_mining_rates_weight_whole_clips():
    from benchmarks.engine_mining import rates

    frames = {"frame_id": [10, 11, 12, 13], "clip": ["a", "a", "b", "b"], "rare": [1, 1, 0, 0],
              "hard": [1.0, None, 0.0, 0.5], "error": [1.0, 0.5, 0.5, 0.0], "drivable": [None] * 4}
    w = np.array([[1.0, 1.0], [2.0, 0.0], [0.0, 2.0]])  # original, clip a twice, clip b twice
    r = rates(frames, [10, 11, 12, 13], w)
    assert r["rare"] == pytest.approx([0.5, 1.0, 0.0])
    assert r["hard"] == pytest.approx([0.5, 1.0, 0.25])  # frame 11 is not detected: left out
    assert r["error"] == pytest.approx([0.5, 0.75, 0.25])
    assert np.isnan(r["drivable"]).all()
    assert rates(frames, [12], w)["rare"][0] == 0.0


def _pool(n=8):
    emb = np.eye(n)
    return {"frame_id": np.arange(100, 100 + n), "clip": np.array([f"c{i // 2}" for i in range(n)], object),
            "idx": np.arange(n) % 2, "embedding": emb, "dominant": np.array(["none"] * n, object)}


@pytest.mark.parametrize("name", OFFLINE)
def test_offline_strategy_picks_the_highest_signal(name):
    assert name in STRATEGIES
    pool = _pool()
    sig = np.array([0.1, 0.9, 0.3, 0.9, np.nan, 0.5, 0.2, 0.8])  # offline rows, in another order than the pool
    rows = {100 + i: 7 - i for i in range(8)}  # catalog frame id -> offline row
    add_offline(pool, rows, {name: sig})
    assert pool[name][0] == 0.8 and math.isnan(pool[name][3])
    picks = select(pool, 4, name, EngineConfig())
    # pool values: 0.8, 0.2, 0.5, nan, 0.9, 0.3, 0.9, 0.1 -> 0.9 (frame 104), 0.9 (106: tie, by frame id), 0.8, 0.5
    assert [int(pool["frame_id"][i]) for i, _ in picks] == [104, 106, 100, 102]
    assert [r["strategy"] for _, r in picks] == [name] * 4 and picks[0][1]["score"] == 0.9
    assert select(pool, 4, name, EngineConfig()) == picks  # deterministic
    with pytest.raises(MiningError, match="offline column"):
        select(_pool(), 2, name, EngineConfig())  # a catalog pool without the column: refused, never a silent fallback
