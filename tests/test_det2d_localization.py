"""benchmarks/det2d_localization.py: AP by IoU threshold and the matched boxes' errors, on hand-made COCO files."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmark_scripts import load

loc = load("det2d_localization")


@pytest.fixture
def folder(tmp_path):
    # image 1: a car 20 x 10 px at (10, 10), found 8 px to the right; image 2: a bus nobody finds
    gt = {"images": [{"id": 1, "width": 160, "height": 96}, {"id": 2, "width": 160, "height": 96}],
          "categories": [{"id": 1, "name": "car"}, {"id": 2, "name": "bus"}],
          "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 10], "area": 200, "iscrowd": 0},
                          {"id": 2, "image_id": 2, "category_id": 2, "bbox": [50, 20, 30, 20], "area": 600, "iscrowd": 0}]}
    # the car's detection: x 18..38 (shifted 8 px): intersection 12 x 10, union 280 -> IoU 0.4286
    dets = [{"image_id": 1, "category_id": 1, "bbox": [18, 10, 20, 10], "score": 0.9}]
    (tmp_path / "det2d_gt.json").write_text(json.dumps(gt))
    (tmp_path / "det2d_predictions.json").write_text(json.dumps(dets))
    return tmp_path


def test_ap_falls_where_the_box_stops_overlapping_enough(folder):
    ap = loc.ap_by_iou(folder)
    assert ap[0.1]["car"] == pytest.approx(1.0) and ap[0.3]["car"] == pytest.approx(1.0)
    assert ap[0.5]["car"] == 0.0 and ap[0.7]["car"] == 0.0
    assert all(ap[t]["bus"] == 0.0 for t in loc.IOUS)  # never found: 0 at every threshold


def test_box_errors_of_the_best_match(folder):
    err = loc.box_errors(folder, "car")
    np.testing.assert_allclose(err, [[120 / 280, 0.0, 0.0, 8 / 20, 0.0]], atol=1e-9)
    assert loc.box_errors(folder, "bus").shape == (0, 5)
