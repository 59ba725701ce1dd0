"""KITTI AP|R40 (hydranet/metrics/kitti.py) against values computed by hand on small cases."""
from __future__ import annotations

import numpy as np
import pytest

from hydranet.metrics.kitti import ap_r11, ap_r40, bev_overlap, box3d_overlap, detections_2d, get_thresholds, \
    kitti_eval, precision_curve, statistics


def car(x=0.0, z=20.0, height_px=50.0, occluded=0, truncated=0.0, kind="Car", score=None, u=100.0, ry=0.0):
    """A 4 x 1.6 x 1.5 m car at (x, 1.7, z) whose 2D box is height_px tall at column u."""
    o = {"type": kind, "truncated": truncated, "occluded": occluded, "alpha": 0.0,
         "bbox": [u, 100.0, u + 80.0, 100.0 + height_px], "dimensions": [1.5, 1.6, 4.0],
         "location": [x, 1.7, z], "rotation_y": ry}
    if score is not None:
        o["score"] = score
    return o


def images(n):
    """n images with one easy car each, and their perfect detections (scores 1 - k/1000)."""
    gts = [[car()] for _ in range(n)]
    dts = [[car(score=1 - k / 1000)] for k in range(n)]
    return gts, dts


def test_thresholds_follow_the_recall_steps():
    assert len(get_thresholds(list(np.linspace(1, 0.1, 80)), 80)) == 41  # recall 1/80, then every 2/80
    assert len(get_thresholds([0.9] * 10, 10)) == 10  # fewer GT than steps: one per TP


def test_perfect_detections():
    gts, dts = images(80)
    r = kitti_eval(gts, dts, classes=("Car",))
    for m in ("bbox", "bev", "3d"):
        assert r["Car"][m] == {"easy": 1.0, "moderate": 1.0, "hard": 1.0}
    # the official method with few GT: the precision array is indexed by threshold
    gts, dts = images(10)
    assert kitti_eval(gts, dts, classes=("Car",), metrics=("bbox",))["Car"]["bbox"]["easy"] == pytest.approx(9 / 40)
    gts, dts = images(1)
    prec = precision_curve(gts, dts, "Car", 0, "bbox")
    assert ap_r40(prec) == 0.0 and ap_r11(prec) == pytest.approx(1 / 11)


def test_confident_false_positives_halve_precision():
    # 80 GT found, plus 80 misplaced detections scored above all of them: at every threshold
    # precision = tp / (tp + 80), largest (1/2) at full recall; interpolation makes it 1/2 everywhere
    gts, dts = images(80)
    dts = [d + [car(x=30.0, u=400.0, score=2.0)] for d in dts]
    r = kitti_eval(gts, dts, classes=("Car",))
    assert r["Car"]["bbox"]["easy"] == pytest.approx(0.5) and r["Car"]["3d"]["easy"] == pytest.approx(0.5)


def test_dontcare_and_neighbour_classes_swallow_false_positives():
    gts, dts = images(80)
    dts[0].append(car(u=400.0, x=30.0, score=5.0))  # one confident false positive: 80/81 at every threshold
    assert kitti_eval(gts, dts, ("Car",), ("bbox",))["Car"]["bbox"]["easy"] == pytest.approx(80 / 81)
    gts[0].append({**car(u=395.0), "type": "DontCare"})  # ... unless it lies in a DontCare region (2D only)
    assert kitti_eval(gts, dts, ("Car",), ("bbox",))["Car"]["bbox"]["easy"] == pytest.approx(1.0)
    gts, dts = images(80)
    gts[0].append(car(x=30.0, u=400.0, kind="Van"))  # a Car detection on a Van is neither TP nor FP
    dts[0].append(car(x=30.0, u=400.0, score=5.0))
    assert kitti_eval(gts, dts, ("Car",), ("bbox", "3d"))["Car"]["3d"]["easy"] == pytest.approx(1.0)


def test_difficulty_levels():
    gts = [[car(height_px=30.0)] for _ in range(80)]  # 30 px: moderate and hard, not easy
    dts = [[car(height_px=30.0, score=1 - k / 1000)] for k in range(80)]
    r = kitti_eval(gts, dts, ("Car",), ("bbox",))["Car"]["bbox"]
    assert r == {"easy": 0.0, "moderate": 1.0, "hard": 1.0}
    gts = [[car(occluded=2, truncated=0.4)] for _ in range(80)]  # hard only
    r = kitti_eval(gts, images(80)[1], ("Car",), ("bbox",))["Car"]["bbox"]
    assert r == {"easy": 0.0, "moderate": 0.0, "hard": 1.0}


def test_overlaps_by_hand():
    a = np.array([[0.0, 1.7, 20.0, 4.0, 1.5, 1.6, 0.0]])  # x, y, z, l, h, w, ry
    for dx, iou in ((0.5, 3.5 / 4.5), (1.0, 3.0 / 5.0)):  # shifted along the length: l' = 4 - dx
        b = a.copy()
        b[0, 0] += dx
        assert box3d_overlap(a, b)[0, 0] == pytest.approx(iou)
    b = a.copy()
    b[0, 1] += 0.5  # 0.5 m lower: height overlap 1.0 of 1.5
    assert box3d_overlap(a, b)[0, 0] == pytest.approx(1.0 / 2.0)
    sq = np.array([[0.0, 0.0, 2.0, 2.0, 0.0]])  # x, z, l, w, ry
    turned = sq.copy()
    turned[0, 4] = np.pi / 4  # a square and itself turned 45 deg: octagon 8 (sqrt2 - 1)
    inter = 8 * (np.sqrt(2) - 1)
    assert bev_overlap(sq, turned)[0, 0] == pytest.approx(inter / (8 - inter))
    turned[0, 4] = np.pi / 2
    assert bev_overlap(sq, turned)[0, 0] == pytest.approx(1.0)
    # 3D: a detection 1 m off along the car is a false positive at IoU 0.7 (0.6), 0.5 m off a true one (0.78)
    gts, dts = images(80)
    shifted = [[{**d[0], "location": [1.0, 1.7, 20.0]}] for d in dts]
    r = kitti_eval(gts, shifted, ("Car",), ("bbox", "3d"))["Car"]
    assert r["bbox"]["easy"] == 1.0 and r["3d"]["easy"] == 0.0


@pytest.mark.parametrize("fit", ["crop", "stretch", "camera"])
def test_detections_at_the_model_size_map_back_to_the_kitti_image(fit):
    """A label's box taken to the model's input by `fit_to` and back by `detections_2d` is the label again."""
    from hydranet.loader import fit_to, fit_windows

    K = np.array([[721.5, 0.0, 609.6], [0.0, 721.5, 172.9], [0.0, 0.0, 1.0]], np.float32)  # KITTI's P2
    model_K = {"CAM_FRONT": np.array([[150.0, 0.0, 79.5], [0.0, 150.0, 47.5], [0.0, 0.0, 1.0]])}

    labels = [[400.0, 150.0, 480.0, 210.0], [700.5, 170.25, 820.0, 260.0]]  # KITTI pixels, inside the centre crop
    sample = {"images": np.zeros((1, 375, 1242, 3), np.uint8), "camera_names": ["CAM_FRONT"],
              "intrinsics": K[None],
              "labels": {"cameras": {"CAM_FRONT": {"boxes2d": [{"bbox": [c + 0.5 for c in b], "class": "car"}
                                                               for b in labels], "lanes2d": []}}}}
    fitted = fit_to(sample, (96, 160), fit, model_K)
    model_boxes = np.array([b["bbox"] for b in fitted["labels"]["cameras"]["CAM_FRONT"]["boxes2d"]])
    assert len(model_boxes) == 2  # both inside the window, not clipped
    scales, offsets = fit_windows(sample, (96, 160), fit, model_K)
    back = detections_2d(model_boxes, np.array([0.9, 0.8]), np.array([0, 1]), ["car", "truck"], scales[0], offsets[0])
    assert [d["type"] for d in back] == ["Car"]  # truck has no KITTI class of its name
    np.testing.assert_allclose(back[0]["bbox"], labels[0], atol=1e-4)
    assert back[0]["score"] == pytest.approx(0.9)


def test_min_overlap_replaces_the_benchmark_threshold():
    gts = [[car()] for _ in range(10)]
    loose = [[{**car(score=1 - k / 1000), "bbox": [100.0, 100.0, 148.0, 150.0]}] for k in range(10)]  # IoU 48 / 80 = 0.6
    assert kitti_eval(gts, loose, ("Car",), ("bbox",))["Car"]["bbox"]["easy"] == 0.0  # the benchmark's IoU > 0.7
    assert kitti_eval(gts, loose, ("Car",), ("bbox",), min_overlap=0.5)["Car"]["bbox"]["easy"] == pytest.approx(9 / 40)


def loop_statistics(ov: np.ndarray, scores: np.ndarray, ig_gt, ig_dt, dc_overlap: np.ndarray | None, min_overlap: float,
               thresh: float = 0.0, compute_fp: bool = False) -> tuple[int, int, int, list[float]]:
    """The official loop as devkit_object's C++ writes it (the oracle of the numpy `statistics`)."""
    n_det = len(scores)
    assigned = [False] * n_det
    below = [compute_fp and scores[j] < thresh for j in range(n_det)]
    NO = -1e7
    tp = fp = fn = 0
    tp_scores = []
    for i in range(len(ig_gt)):
        if ig_gt[i] == -1:
            continue
        det, valid, max_ov, assigned_ignored = -1, NO, 0.0, False
        for j in range(n_det):
            if ig_dt[j] == -1 or assigned[j] or below[j]:
                continue
            o = ov[j, i]
            if not compute_fp and o > min_overlap and scores[j] > valid:
                det, valid = j, scores[j]
            elif compute_fp and o > min_overlap and (o > max_ov or assigned_ignored) and ig_dt[j] == 0:
                max_ov, det, valid, assigned_ignored = o, j, 1, False
            elif compute_fp and o > min_overlap and valid == NO and ig_dt[j] == 1:
                det, valid, assigned_ignored = j, 1, True
        if valid == NO and ig_gt[i] == 0:
            fn += 1
        elif valid != NO and (ig_gt[i] == 1 or ig_dt[det] == 1):
            assigned[det] = True
        elif valid != NO:
            tp += 1
            tp_scores.append(float(scores[det]))
            assigned[det] = True
    if compute_fp:
        fp = sum(1 for j in range(n_det) if not (assigned[j] or ig_dt[j] in (-1, 1) or below[j]))
        if dc_overlap is not None:  # detections inside DontCare regions are not false positives
            for k in range(dc_overlap.shape[1]):
                for j in range(n_det):
                    if assigned[j] or ig_dt[j] in (-1, 1) or below[j]:
                        continue
                    if dc_overlap[j, k] > min_overlap:
                        assigned[j] = True
                        fp -= 1
    return tp, fp, fn, tp_scores


def test_numpy_statistics_equal_the_official_loop():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n_gt, n_det, n_dc = rng.integers(0, 6), rng.integers(0, 12), rng.integers(0, 3)
        ov = rng.uniform(0, 1, (n_det, n_gt)) * (rng.random((n_det, n_gt)) < 0.5)
        scores = np.round(rng.uniform(0, 1, n_det), 1)  # ties included
        ig_gt, ig_dt = list(rng.integers(-1, 2, n_gt)), list(rng.integers(-1, 2, n_det))
        dc = rng.uniform(0, 1, (n_det, n_dc)) if n_dc else None
        for compute_fp, thresh in ((False, 0.0), (True, 0.0), (True, 0.5)):
            args = (ov, scores, ig_gt, ig_dt, dc, 0.5, thresh, compute_fp)
            assert statistics(*args) == loop_statistics(*args)
