"""benchmarks/randomization_ablation.py's table: per arm the median [min, max] over seeds of each realism-gap cell,
each arm's median minus the reference's, and "every seed apart" only when the two arms' seeds do not overlap."""
from __future__ import annotations

from benchmarks.randomization_ablation import table


def _seed(kitti_car: float, cs_drivable: float) -> dict:
    return {"cells": {"kitti": {"det2d/car AP50": {"value": kitti_car}},
                      "cityscapes": {"drivable/iou": {"value": cs_drivable}, "det2d/car AP50": {"value": None}}}}


def test_medians_differences_and_the_apart_rule():
    arms = {"recipe": [_seed(0.0, 0.50), _seed(0.1, 0.52), _seed(0.0, 0.54)],
            "knob": [_seed(0.0, 0.60), _seed(0.2, 0.58), _seed(0.1, 0.61)]}
    text, figures = table(arms)
    rows = {tuple(r.split(" | ")[:2]): r for r in text.splitlines()[2:]}
    drivable = rows[("| cityscapes", "drivable/iou")]
    assert "0.520 [0.500, 0.540]" in drivable and "0.600 [0.580, 0.610]" in drivable
    assert "+0.080 (every seed apart)" in drivable
    car = rows[("| kitti", "det2d/car AP50")]
    assert "+0.100" in car and "apart" not in car  # the seeds overlap
    assert ("| cityscapes", "det2d/car AP50") not in rows  # no value in any seed: no row
    assert figures["cityscapes: drivable/iou"]["knob"] == [0.60, 0.58, 0.61]
    assert text.splitlines()[0] == "| source | metric | recipe | knob | knob - recipe |"


def test_one_arm_has_no_difference_column():
    text, _ = table({"recipe": [_seed(0.1, 0.5)]})
    head, rule, row = text.splitlines()[:3]
    assert head == "| source | metric | recipe |" and rule == "|---|---|---|"
    assert row.count("|") == head.count("|")
