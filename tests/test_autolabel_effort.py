"""benchmarks/autolabel.py's human-effort and accept-policy counts on hand-made frames: the edits a person makes to
turn a pre-fill into the truth (the edit record), the accepted boxes' matches, and the ratios with their intervals."""
from __future__ import annotations

import numpy as np
import pytest
from benchmark_scripts import load

from data_engine.config import AutolabelConfig


@pytest.fixture(scope="module")
def al():
    return load("autolabel")


def box(cls, bbox, conf=None):
    return {"class": cls, "bbox": list(map(float, bbox)), **({"confidence": conf} if conf is not None else {})}


CAMERAS, CLASSES = ("CAM_FRONT", "CAM_BACK"), ["car", "truck", "pedestrian"]
TRUTH = {"cameras": {"CAM_FRONT": {"boxes2d": [box("car", (10, 10, 50, 40)), box("car", (100, 10, 140, 40)),
                                               box("pedestrian", (60, 10, 70, 40))]},
                     "CAM_BACK": {"boxes2d": []}}}


def test_effort_counts_each_edit_a_person_makes(al):
    """Pre-fill: one car exact, one car 1.5 px off, one false truck, the pedestrian missed: at 0.5 px that is
    1 move + 1 delete + 1 add = 3 edits for 3 true boxes; at 2 px the near box stays: 2 edits."""
    payload = {"cameras": {"CAM_FRONT": {"boxes2d": [box("car", (10, 10, 50, 40), 0.9), box("car", (101.5, 10, 140, 40), 0.8)]},
                           "CAM_BACK": {"boxes2d": [box("truck", (0, 0, 30, 30), 0.7)]}}}
    c = al.frame_counts(payload, TRUTH, AutolabelConfig(), al.image_states(payload, TRUTH, CAMERAS, CLASSES))
    assert c["truth_boxes"] == 3
    assert c["edits@0.5"] == 3 and c["edits@2"] == 2
    assert (c["added"], c["deleted"], c["moved"], c["class_changed"]) == (1, 1, 0, 0)  # the parts at 2 px
    # every box at or above 0.5: the frame is accepted; 2 of its 3 boxes are right, 2 of the 3 true boxes found
    assert c["accepted_frames"] == 1 and (c["accepted_boxes"], c["accepted_true"], c["accepted_frames_truth"]) == (3, 2, 3)
    # one box under the threshold: the frame goes to a person and contributes nothing to the accepted counts
    payload["cameras"]["CAM_BACK"]["boxes2d"][0]["confidence"] = 0.2
    c = al.frame_counts(payload, TRUTH, AutolabelConfig(), al.image_states(payload, TRUTH, CAMERAS, CLASSES))
    assert c["accepted_frames"] == 0 and c["accepted_boxes"] == c["accepted_true"] == 0


def test_accepted_matches_need_the_class_and_iou_half(al):
    """The accepted boxes are scored by COCO's matching (`coco_image_state`, bit 0: IoU 0.5, same class)."""
    pred = {"cameras": {"CAM_FRONT": {"boxes2d": [box("truck", (10, 10, 50, 40), 0.9),   # right place, wrong class
                                                  box("car", (30, 10, 70, 40), 0.8),     # IoU 1/3 with the first car
                                                  box("car", (100, 10, 140, 40), 0.7),
                                                  box("car", (100, 10, 140, 40), 0.6)]}}}  # a duplicate: one match only
    c = al.frame_counts(pred, TRUTH, AutolabelConfig(), al.image_states(pred, TRUTH, CAMERAS, CLASSES))
    assert (c["accepted_true"], c["accepted_boxes"], c["accepted_frames_truth"]) == (1, 4, 3)


def test_ratio_table_sums_over_clips_and_resamples_them(al):
    clip = lambda e, t: {"edits@0.5": e, "edits@2": e, "truth_boxes": t, "frames": 2, "accepted_frames": 1,  # noqa: E731
                         "accepted_boxes": 4, "accepted_true": 3, "accepted_frames_truth": 6}
    r = al.ratio_table({"v": [clip(2, 10), clip(8, 10), clip(5, 10)]}, resamples=200)["v"]
    assert r["effort@0.5"]["value"] == pytest.approx(0.5) and r["effort@0.5"]["of"] == 30
    lo, hi = r["effort@0.5"]["interval"]
    assert 0.2 <= lo < 0.5 < hi <= 0.8
    assert r["accepted_precision"]["value"] == pytest.approx(0.75) and r["accepted_recall"]["value"] == pytest.approx(0.5)
    assert r["accepted_share"]["value"] == pytest.approx(0.5)
    # nothing accepted anywhere: precision is undefined (NaN), never a number
    none = {k: 0 if k.startswith("accepted") else v for k, v in clip(1, 1).items()}
    assert np.isnan(al.ratio_table({"v": [none, none]}, resamples=100)["v"]["accepted_precision"]["value"])
