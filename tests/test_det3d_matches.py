"""benchmarks/det3d_matches.py: per class, what a detection list can match and where nuScenes' 10% floors cut it."""
from __future__ import annotations

import numpy as np
import pytest

from benchmark_scripts import load

dm = load("det3d_matches")


def box(x: float, y: float) -> np.ndarray:
    return np.array([x, y, 0, 1, 1, 1, 0, 0, 0], np.float32)


@pytest.fixture
def frames():
    # class 0: 10 true boxes along y = 10 (one per frame); each frame's detections: a decoy at score 0.9 far away,
    # and the box's detection 1.5 m off at score 0.5 (frames 0-4) or none (5-9)
    out = []
    for f in range(10):
        gt = np.stack([box(f, 10)])
        dets = [box(f, -20)] + ([box(f + 1.5, 10)] if f < 5 else [])
        scores = np.array([0.9] + ([0.5] if f < 5 else []), np.float32)
        out.append((np.stack(dets), scores, np.zeros(len(dets), int), gt, np.zeros(1, int)))
    return out


def test_recall_reach_and_the_precision_at_ten_percent(frames):
    row = dm.class_row(frames, 0)
    assert row["gt"] == 10 and row["detections"] == 15
    assert row[0.5][0] == 0 and row[1.0][0] == 0  # 1.5 m off: out of reach under 2 m
    hits, top, precision = row[2.0]
    assert hits == 5 and top == 0  # the 10 top-ranked are the decoys
    # ranked: 10 decoys (0.9), then the 5 hits: recall 10% at the 11th detection, precision 1 / 11
    assert precision == pytest.approx(1 / 11)
    assert row[4.0][:2] == (5, 0)


def test_a_class_without_true_boxes_has_no_reach():
    f = [(np.stack([box(0, 0)]), np.array([0.5], np.float32), np.array([1]), np.zeros((0, 9), np.float32),
          np.zeros(0, int))]
    row = dm.class_row(f, 1)
    assert row["gt"] == 0 and row["detections"] == 1 and row[4.0][0] == 0 and np.isnan(row[4.0][2])


def test_each_true_box_names_its_nearest_detection(frames):
    rows = dm.nearest(frames, 0)
    assert len(rows) == 10
    found = sorted(r for r in rows if r[2] == pytest.approx(0.5))
    assert len(found) == 5 and all(d == pytest.approx(1.5) for _, d, _ in found)
    # frames 5-9: the nearest is the decoy, 30 m away
    assert all(d == pytest.approx(30.0) and s == pytest.approx(0.9) for _, d, s in rows if s > 0.8)


def test_a_missing_data_folder_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no such folder"):
        dm.main(["--checkpoint", str(tmp_path / "run"), "--data", str(tmp_path / "nothing")])
