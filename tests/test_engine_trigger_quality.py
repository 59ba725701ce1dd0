"""Trigger quality a curator can read (issue 24 items 6a and 7): triggers that fire on more than half a
run are flagged DEGENERATE with the reason read from the signals (data_engine/triggers.py), and each
trigger's precision is measured against the fleet's withheld truth on two measures that stay
informative when most frames have error 1.0 (data_engine/evaluation.py). Every expected number here is
computed by hand from constructed signals and truth."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from data_engine.evaluation import HARD_SHARE, Precision, RunTruth, trigger_markdown, trigger_rows
from data_engine.triggers import TRIGGERS, degenerate, firing_share
from data_engine.signals import SIGNALS

NAN = math.nan


def table_of(n: int, **cols) -> dict:
    """A run's table of n frames (ids 1..n, one clip per frame): every signal NaN unless given."""
    t = {"frame_id": np.arange(1, n + 1), "clip": np.array([f"c{i}" for i in range(n)], object), "idx": np.zeros(n, np.int64)}
    for s in SIGNALS:
        t[s] = np.asarray(cols.get(s, [NAN] * n), np.float64)
    return t


def truth_of(errors: dict[int, float], detected: set[int], rare: set[int] = frozenset()) -> RunTruth:
    clip_of = {f: f"c{f}" for f in errors}
    return RunTruth(1, Path("fleet"), errors, clip_of, {"cones_on_road": set(rare)}, {f: f in detected for f in errors})


# -- 6a: degenerate triggers ---------------------------------------------------------------------------
def test_a_trigger_on_a_head_that_never_detects_is_degenerate_and_says_so():
    # det3d sees nothing, det2d sees boxes: box2d_vs_3d = 1 on every frame (signals.py: unexplained 2D boxes)
    t = table_of(6, box2d_vs_3d=[1.0] * 6, num_det3d=[0] * 6, num_det2d=[2, 1, 3, 1, 1, 2])
    assert firing_share(TRIGGERS["box2d_vs_3d"], t) == (6, 6)
    assert degenerate(TRIGGERS["box2d_vs_3d"], t) == ("box2d_vs_3d fires on 100% of frames (6 of 6): the model's det3d "
                                                      "never detects (num_det3d = 0 on every frame)")


def test_degenerate_reasons_at_chance_constant_and_by_median():
    n = 4
    at_chance = table_of(n, drivable_entropy_p95=[0.69, 0.693, 0.68, 0.2])
    assert degenerate(TRIGGERS["dense_entropy"], at_chance) == (
        "dense_entropy fires on 75% of frames (3 of 4): the model is at chance there (drivable_entropy_p95 median 0.685 "
        "of at most 0.693 nats: p ~ 0.5 everywhere)")
    constant = table_of(n, flicker=[2, 2, 2, NAN], num_det2d=[3, 3, 3, 3])  # a NaN frame counts in the run, never fires
    assert degenerate(TRIGGERS["flicker"], constant) == (
        "flicker fires on 75% of frames (3 of 4): its value flicker is 2 on every frame with a value (constant)")
    varied = table_of(n, speed_excess=[1.5, 2.5, 3.0, 0.5], num_det3d=[1, 2, 1, 1])
    assert degenerate(TRIGGERS["speed"], varied) == (
        "speed fires on 75% of frames (3 of 4): the run's median speed_excess 2 is above the threshold 1")


def test_half_the_frames_or_fewer_is_not_degenerate():
    half = table_of(6, box2d_vs_3d=[1, 1, 1, 0, 0, 0], num_det3d=[0] * 6)
    assert firing_share(TRIGGERS["box2d_vs_3d"], half) == (3, 6) and degenerate(TRIGGERS["box2d_vs_3d"], half) is None
    assert degenerate(TRIGGERS["box2d_vs_3d"], table_of(0)) is None


def test_the_trigger_table_flags_degenerate_triggers_without_truth():
    t = table_of(4, box2d_vs_3d=[1.0] * 4, num_det3d=[0] * 4, num_det2d=[1] * 4, speed_excess=[2, 0, 0, 0])
    trig = [TRIGGERS["box2d_vs_3d"], TRIGGERS["speed"]]
    rows = trigger_rows(trig, {t.name: t.fire(table) for t, table in zip(trig, [t, t])}, None, t)
    md = trigger_markdown(rows, None).splitlines()
    assert md[0] == "| trigger | version | fired | fires on | note |"
    assert md[2] == ("| box2d_vs_3d | 1 | 4 | 4 (100%) | DEGENERATE: box2d_vs_3d fires on 100% of frames (4 of 4): the "
                     "model's det3d never detects (num_det3d = 0 on every frame) |")
    assert md[3] == "| speed | 1 | 1 | 1 (25%) |  |"
    # without the run's table the share is unknown: shown "-", nothing flagged
    assert trigger_markdown(trigger_rows(trig, {}, None), None).splitlines()[2] == "| box2d_vs_3d | 1 | 0 | - |  |"


# -- 7: precision against the withheld truth -----------------------------------------------------------
def test_rare_precision_base_rate_and_lift_by_hand():
    errors = {f: 0.5 for f in range(1, 11)}
    truth = truth_of(errors, detected=set(errors), rare={1, 2})  # 2 of 10 frames in rare clips: base 0.2
    p = truth.rare_precision([1, 5, 6, 7])  # 1 of 4 fired is rare
    assert (p.precision, p.base, p.n) == (0.25, 0.2, 4) and p.lift == pytest.approx(1.25)
    none = truth.rare_precision([])
    assert math.isnan(none.precision) and math.isnan(none.lift) and none.n == 0 and none.base == 0.2
    plain = truth_of(errors, detected=set(errors)).rare_precision([1, 2])  # no rare frame at all: lift undefined
    assert (plain.precision, plain.base) == (0.0, 0.0) and math.isnan(plain.lift)


def test_hardness_shares_the_quarter_among_tied_frames():
    # detected frames 1-8; k = 0.25 x 8 = 2 places; three frames tied at 1.0 share them: 2/3 each
    errors = {1: 1.0, 2: 1.0, 3: 1.0, 4: 0.5, 5: 0.2, 6: 0.0, 7: 0.3, 8: 0.6, 9: 1.0}
    truth = truth_of(errors, detected=set(range(1, 9)))  # frame 9: no detection (its 1.0 counts only misses)
    w = truth.hardness()
    assert set(w) == set(range(1, 9)) and sum(w.values()) == pytest.approx(HARD_SHARE * 8)
    assert [w[f] for f in (1, 2, 3)] == [pytest.approx(2 / 3)] * 3 and all(w[f] == 0 for f in (4, 5, 6, 7, 8))
    p = truth.hard_precision([1, 4, 9])  # measured on 1 and 4 only: (2/3 + 0) / 2
    assert p.n == 2 and p.precision == pytest.approx(1 / 3) and p.base == pytest.approx(0.25)
    assert p.lift == pytest.approx(4 / 3)
    assert math.isnan(truth.hard_precision([9]).precision) and truth.hard_precision([9]).n == 0
    # one frame above the edge, three tied at it for the one place left: 1 and 1/3
    w = truth_of({1: 0.9, 2: 0.5, 3: 0.5, 4: 0.5, 5: 0.1, 6: 0.1, 7: 0.1, 8: 0.1}, detected=set(range(1, 9))).hardness()
    assert w[1] == 1.0 and [w[f] for f in (2, 3, 4)] == [pytest.approx(1 / 3)] * 3 and w[5] == 0.0
    # no ties: the top quarter exactly
    p = truth_of({1: 0.9, 2: 0.8, 3: 0.1, 4: 0.2}, detected={1, 2, 3, 4}).hard_precision([1, 2])
    assert (p.precision, p.lift) == (0.5, 2.0)


def test_a_saturated_error_gives_lift_one_where_the_old_measure_gave_precision_one():
    """A weak model: error 1.0 on every frame. The former measure (share of fired frames with error >= the
    75th percentile, here 1.0) was 1.00 for every trigger; the hard measure gives every trigger lift 1."""
    errors = {f: 1.0 for f in range(1, 9)}
    old_worst = float(np.quantile(list(errors.values()), 0.75))
    assert np.mean([errors[f] >= old_worst for f in (1, 2)]) == 1.0  # what the old table printed
    truth = truth_of(errors, detected=set(errors))
    for fired in ([1, 2], [3], list(errors)):
        p = truth.hard_precision(fired)
        assert p.precision == pytest.approx(0.25) and p.lift == pytest.approx(1.0)
    # a model that detects on no frame: nothing to rank, no hard precision (NaN, "-"), never a false 1.00
    blind = truth_of(errors, detected=set()).hard_precision([1, 2])
    assert blind.n == 0 and math.isnan(blind.precision) and math.isnan(blind.base) and math.isnan(blind.lift)


def test_the_trigger_table_with_truth_by_hand():
    # 8 frames; frames 7, 8 in rare clips (base 0.25); detected 1-8 with errors: 1 0.9, 2 0.8 hard (k = 2), rest low
    errors = {1: 0.9, 2: 0.8, 3: 0.1, 4: 0.1, 5: 0.2, 6: 0.3, 7: 0.0, 8: 0.4}
    truth = truth_of(errors, detected=set(errors), rare={7, 8})
    t = table_of(8, speed_excess=[2, 3, 0, 0, 0, 0, 0, 5], num_det3d=[1] * 8)
    trig = [TRIGGERS["speed"]]
    rows = trigger_rows(trig, {"speed": TRIGGERS["speed"].fire(t)}, truth, t)  # fires on 8, 2, 1 (best first)
    r = rows[0]
    assert (r.fired, r.fires, r.frames, r.degenerate) == (3, 3, 8, None)
    assert r.rare == Precision(pytest.approx(1 / 3), 0.25, 3) and r.rare.lift == pytest.approx(4 / 3)
    assert r.hard == Precision(pytest.approx(2 / 3), 0.25, 3) and r.hard.lift == pytest.approx(8 / 3)
    assert r.recall == {"cones_on_road": 0.5}
    md = trigger_markdown(rows, truth).splitlines()
    assert md[0] == ("| trigger | version | fired | fires on | rare: precision | base | lift | n | hard: precision | base | "
                     "lift | n | recall cones_on_road | note |")
    assert md[2] == "| speed | 1 | 3 | 3 (38%) | 0.33 | 0.25 | 1.33 | 3 | 0.67 | 0.25 | 2.67 | 3 | 0.50 |  |"


def test_a_computed_trigger_names_its_value_not_its_input():
    emb = np.eye(4, dtype=np.float32)  # four orthogonal frames of four clips: novelty 1 - 0 = 1 on each
    t = table_of(4)
    t["embedding"] = emb
    assert degenerate(TRIGGERS["novelty"], t) == (
        "novelty fires on 100% of frames (4 of 4): its value novelty is 1 on every frame with a value (constant)")
