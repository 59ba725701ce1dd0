"""A reader's `dontcare` regions (KITTI's DontCare): the loader moves them with the pixels, and det2d's evaluation
ignores a detection inside one (neither hit nor false positive), in pycocotools and in the per-image states the
realism gap and the gate bootstrap from."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hydranet.loader import mirror, resize_crop
from hydranet.tasks.det2d import Det2dTask

CLASSES = ["car", "pedestrian"]


def sample(dontcare: list) -> dict:
    return {"images": np.zeros((1, 100, 200, 3), np.uint8), "camera_names": ["CAM_FRONT"],
            "intrinsics": np.eye(3, dtype=np.float32)[None],
            "labels": {"cameras": {"CAM_FRONT": {"boxes2d": [{"bbox": [20.0, 20.0, 60.0, 50.0], "class": "car"}],
                                                 "lanes2d": [], "dontcare": dontcare}}}}


def scores(task: Det2dTask, s: dict, dets: dict) -> tuple[float, float]:
    """(mAP50 by pycocotools, mAP50 from the per-image states) of one image's detections."""
    metric = task.metric()
    metric.update([{k: torch.as_tensor(v) for k, v in dets.items()}], task.build_targets(s))
    return metric.compute()["mAP50"], metric.compute_states(metric.states())["mAP50"]


def test_a_detection_inside_a_dontcare_region_is_not_a_false_positive():
    task = Det2dTask(CLASSES, in_channels=8)
    dets = {"boxes": np.array([[120.0, 30.0, 150.0, 60.0], [20.0, 20.0, 60.0, 50.0]], np.float32),
            "scores": np.array([0.9, 0.8], np.float32), "labels": np.array([0, 0])}  # a false car first, then the car
    without = scores(task, sample([]), dets)
    inside = scores(task, sample([[110.0, 20.0, 170.0, 70.0]]), dets)
    assert without[0] == pytest.approx(without[1]) and without[0] < 0.6  # the first detection is a false positive
    assert inside == pytest.approx((1.0, 1.0))  # the region swallows it
    targets = task.build_targets(sample([[110.0, 20.0, 170.0, 70.0]]))
    assert len(targets["gt_boxes"][0]) == 1 and sorted(targets["ignore_labels"][0]) == [0, 1]  # every class ignored
    assert targets["heatmap"][0].max() == 1.0 and targets["heatmap"][0][:, :, 28:].max() < 1e-3  # not a training box


def test_the_loader_moves_dontcare_regions_with_the_pixels():
    s = sample([[110.0, 20.0, 170.0, 70.0], [190.0, 0.0, 200.0, 10.0]])
    out = resize_crop(s, [(0.5, 0.5)], [(10.0, 0.0)], (50, 80))  # half size, 10 px cut on the left
    assert out["labels"]["cameras"]["CAM_FRONT"]["dontcare"] == [[45.0, 10.0, 75.0, 35.0]]  # the second left the window
    flipped = mirror(s, [True])["labels"]["cameras"]["CAM_FRONT"]["dontcare"]
    assert flipped == [[30.0, 20.0, 90.0, 70.0], [0.0, 0.0, 10.0, 10.0]]
