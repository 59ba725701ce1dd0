"""benchmarks/time_to_accuracy.py: targets, seconds to target and the summary table (no training)."""
from __future__ import annotations

from benchmark_scripts import load

tta = load("time_to_accuracy")


def point(seconds, det2d, depth, acc):
    return {"step": 0, "seconds": seconds, "results": {
        "primary": {"det2d": "mAP50", "depth": "abs_rel", "signs_lights": "accuracy"},
        "model": {"det2d": {"mAP50": det2d}, "depth": {"abs_rel": depth}, "signs_lights": {"accuracy": acc}},
        "baseline": {"det2d": {"mAP50": 0.0}, "depth": {"abs_rel": 1.0}, "signs_lights": {"accuracy": float("nan")}},
        "higher_is_better": {"det2d": True, "depth": False, "signs_lights": True}}}


def test_seconds_to_target_per_head_and_seed():
    per_seed = {0: {"points": [point(10, 0.05, 0.995, float("nan")), point(20, 0.16, 0.95, 0.8)]},
                1: {"points": [point(12, 0.02, 0.98, 0.3), point(24, 0.10, 0.985, 0.4)]}}
    summary = tta.summarize(per_seed, tta.TARGETS["demo"])
    det2d, depth, signs = (summary[h]["seeds"] for h in ("det2d", "depth", "signs_lights"))
    assert det2d[0]["seconds_to_target"] == 20 and det2d[1]["seconds_to_target"] is None
    assert det2d[1]["best"] == 0.10 and det2d[0]["target"] == 0.15
    # lower is better: beat the baseline 1.0 by the demo's 0.01 -> 0.99
    assert depth[0]["target"] == 0.99 and depth[0]["seconds_to_target"] == 20 and depth[1]["seconds_to_target"] == 12
    # a target relative to an undefined baseline is undefined: never reached, the best still reported
    assert signs[0]["target"] is None and signs[0]["seconds_to_target"] is None and signs[0]["best"] == 0.8
    table = tta.format_summary(summary)
    assert "not reached (best 0.100)" in table and "0.16 [0.1, 0.16]" not in table
    assert "det2d         mAP50           0.150" in table
