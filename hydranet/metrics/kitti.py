"""The KITTI object benchmark's average precision: 2D (bbox), BEV and 3D, at 40 recall positions
(AP|R40, Simonelli et al., "Disentangling Monocular 3D Object Detection", ICCV 2019, adopted by
the KITTI server in 2019), and the older 11 positions, for Easy / Moderate / Hard.

A numpy port of the official `evaluate_object.cpp` (devkit_object) as its widely used Python
rewrite (traveller59/kitti-object-eval-python) structures it: per class and difficulty,

1. clean: a GT of the class counts (0) unless too occluded / truncated / small for the
   difficulty, then it is ignored (1), as are GT of the neighbour class (Van for Car,
   Person_sitting for Pedestrian); other GT are not considered (-1). A detection of the class
   smaller than the difficulty's minimum height is ignored (1). DontCare regions swallow
   unmatched detections (2D only: the detection's area inside the region > the IoU threshold).
2. thresholds: the scores of the true positives at score 0 (best-scoring match per GT), thinned
   to about one per recall step of 1/40 (`get_thresholds`).
3. at each threshold: tp, fp, fn (a GT takes the unassigned detection of largest overlap above
   the threshold IoU, preferring a counted one to an ignored one); precision = tp / (tp + fp),
   made monotone from the right; AP|R40 = mean of precision[1..40], AP|R11 = mean of
   precision[0, 4, ..., 40]. Values are fractions (the leaderboard prints x100).

Known property of the official method kept as is: the precision array is indexed by threshold,
so with fewer than ~40 GT of a class the AP is below 1 even for perfect detections (10 GT, 10
perfect detections: 9/40 = 0.225 AP|R40). tests/test_kitti_metric.py has hand-computed cases.

Boxes are in KITTI's camera terms: bbox [left, top, right, bottom] (area (r-l)(b-t), no +1),
dimensions (h, w, l), location = bottom centre (x, y, z) in the rectified camera frame,
rotation_y about the camera's y axis.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

CLASSES = ("Car", "Pedestrian", "Cyclist")
NEIGHBOUR = {"Car": "Van", "Pedestrian": "Person_sitting"}
MIN_OVERLAP = {"bbox": {"Car": 0.7, "Pedestrian": 0.5, "Cyclist": 0.5},
               "bev": {"Car": 0.7, "Pedestrian": 0.5, "Cyclist": 0.5},
               "3d": {"Car": 0.7, "Pedestrian": 0.5, "Cyclist": 0.5}}
DIFFICULTIES = ("easy", "moderate", "hard")
MIN_HEIGHT = (40, 25, 25)  # pixels
MAX_OCCLUSION = (0, 1, 2)
MAX_TRUNCATION = (0.15, 0.3, 0.5)
N_SAMPLE_PTS = 41


def _arr(objs: Sequence[Mapping], key: str, width: int) -> np.ndarray:
    return np.asarray([o[key] for o in objs], np.float64).reshape(-1, width)


# -- overlaps -----------------------------------------------------------------------------
def box2d_overlap(boxes: np.ndarray, query: np.ndarray, criterion: int = -1) -> np.ndarray:
    """(N, 4) x (K, 4) -> (N, K): IoU (criterion -1) or intersection over the first box's area (0)."""
    b, q = np.asarray(boxes, np.float64).reshape(-1, 1, 4), np.asarray(query, np.float64).reshape(1, -1, 4)
    iw = np.minimum(b[..., 2], q[..., 2]) - np.maximum(b[..., 0], q[..., 0])  # (N, K)
    ih = np.minimum(b[..., 3], q[..., 3]) - np.maximum(b[..., 1], q[..., 1])
    inter = np.where((iw > 0) & (ih > 0), iw * ih, 0.0)
    area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # (N, 1)
    ua = area_b + (q[..., 2] - q[..., 0]) * (q[..., 3] - q[..., 1]) - inter if criterion == -1 else area_b
    return np.where(inter > 0, inter / np.where(ua > 0, ua, 1.0), 0.0)


def _footprint(x: float, z: float, l: float, w: float, ry: float) -> np.ndarray:
    """Corners (4, 2) in the camera's (x, z) plane of a box whose length runs along (cos ry, -sin ry)."""
    u, v = np.array([np.cos(ry), -np.sin(ry)]), np.array([np.sin(ry), np.cos(ry)])
    c = np.array([x, z])
    return np.stack([c + l / 2 * u + w / 2 * v, c - l / 2 * u + w / 2 * v, c - l / 2 * u - w / 2 * v,
                     c + l / 2 * u - w / 2 * v])


def _poly_area(p: np.ndarray) -> float:
    if len(p) < 3:
        return 0.0
    return float(abs(np.dot(p[:, 0], np.roll(p[:, 1], -1)) - np.dot(p[:, 1], np.roll(p[:, 0], -1))) / 2)


def _convex_intersection(a: np.ndarray, b: np.ndarray) -> float:
    """Area of the intersection of two convex polygons (Sutherland-Hodgman, b as the clipper)."""
    def orient(p):
        s = np.dot(p[:, 0], np.roll(p[:, 1], -1)) - np.dot(p[:, 1], np.roll(p[:, 0], -1))
        return p if s > 0 else p[::-1]
    poly, clip = orient(a), orient(b)
    for i in range(len(clip)):
        if len(poly) == 0:
            return 0.0
        c0, c1 = clip[i], clip[(i + 1) % len(clip)]
        e = c1 - c0

        def side(p, e=e, c0=c0):
            return e[0] * (p[1] - c0[1]) - e[1] * (p[0] - c0[0])
        out = []
        for j in range(len(poly)):
            p, q = poly[j], poly[(j + 1) % len(poly)]
            sp, sq = side(p), side(q)
            if sp >= 0:
                out.append(p)
            if (sp >= 0) != (sq >= 0):
                out.append(p + sp / (sp - sq) * (q - p))
        poly = np.asarray(out).reshape(-1, 2)
    return _poly_area(poly)


def bev_overlap(a: np.ndarray, b: np.ndarray, intersection_only: bool = False) -> np.ndarray:
    """(N, 5) x (K, 5) boxes (x, z, l, w, ry) -> (N, K) rotated IoU (or intersection area)."""
    out = np.zeros((len(a), len(b)))
    if len(a) == 0 or len(b) == 0:
        return out
    # boxes farther apart than their half-diagonals overlap nowhere: only the other pairs are clipped
    reach = np.hypot(a[:, None, 2], a[:, None, 3]) / 2 + np.hypot(b[None, :, 2], b[None, :, 3]) / 2  # (N, K)
    near = np.hypot(a[:, None, 0] - b[None, :, 0], a[:, None, 1] - b[None, :, 1]) < reach
    fb = [_footprint(*q) for q in b]
    for n, p in enumerate(a):
        fp = _footprint(*p)
        for k in np.flatnonzero(near[n]):
            q = b[k]
            inter = _convex_intersection(fp, fb[k])
            out[n, k] = inter if intersection_only else inter / (p[2] * p[3] + q[2] * q[3] - inter)
    return out


def box3d_overlap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, 7) x (K, 7) boxes (x, y, z, l, h, w, ry), y = bottom (camera y points down) -> 3D IoU."""
    inter = bev_overlap(a[:, [0, 2, 3, 5, 6]], b[:, [0, 2, 3, 5, 6]], intersection_only=True)
    out = np.zeros_like(inter)
    for n in range(len(a)):
        for k in range(len(b)):
            iw = min(a[n, 1], b[k, 1]) - max(a[n, 1] - a[n, 4], b[k, 1] - b[k, 4])
            if inter[n, k] > 0 and iw > 0:
                inc = inter[n, k] * iw
                out[n, k] = inc / (a[n, 3] * a[n, 4] * a[n, 5] + b[k, 3] * b[k, 4] * b[k, 5] - inc)
    return out


def _boxes(objs: Sequence[Mapping], metric: str) -> np.ndarray:
    if metric == "bbox":
        return _arr(objs, "bbox", 4)
    loc, dims = _arr(objs, "location", 3), _arr(objs, "dimensions", 3)  # dims (h, w, l)
    ry = np.asarray([o["rotation_y"] for o in objs], np.float64).reshape(-1, 1)
    if metric == "bev":
        return np.concatenate([loc[:, [0, 2]], dims[:, [2, 1]], ry], 1)  # x, z, l, w, ry
    return np.concatenate([loc, dims[:, [2, 0, 1]], ry], 1)  # x, y, z, l, h, w, ry


def overlaps(dts: Sequence[Mapping], gts: Sequence[Mapping], metric: str) -> np.ndarray:
    """(num det, num gt) overlaps of one image."""
    if not dts or not gts:
        return np.zeros((len(dts), len(gts)))
    d, g = _boxes(dts, metric), _boxes(gts, metric)
    return {"bbox": box2d_overlap, "bev": bev_overlap, "3d": box3d_overlap}[metric](d, g)


# -- the official statistics --------------------------------------------------------------
def clean(gts: Sequence[Mapping], dts: Sequence[Mapping], cls: str, difficulty: int):
    """(num counted GT, GT ignore flags, det ignore flags, DontCare boxes (M, 4))."""
    ig_gt, ig_dt, dc, n_valid = [], [], [], 0
    for g in gts:
        h = g["bbox"][3] - g["bbox"][1]
        valid = 1 if g["type"] == cls else 0 if NEIGHBOUR.get(cls) == g["type"] else -1
        ignore = (g["occluded"] > MAX_OCCLUSION[difficulty] or g["truncated"] > MAX_TRUNCATION[difficulty]
                  or h <= MIN_HEIGHT[difficulty])
        if valid == 1 and not ignore:
            ig_gt.append(0)
            n_valid += 1
        elif valid == 0 or (ignore and valid == 1):
            ig_gt.append(1)
        else:
            ig_gt.append(-1)
        if g["type"] == "DontCare":
            dc.append(g["bbox"])
    for d in dts:
        h = d["bbox"][3] - d["bbox"][1]
        ig_dt.append(1 if (d["type"] == cls and h < MIN_HEIGHT[difficulty]) else 0 if d["type"] == cls else -1)
    return n_valid, ig_gt, ig_dt, np.asarray(dc, np.float64).reshape(-1, 4)


def statistics(ov: np.ndarray, scores: np.ndarray, ig_gt, ig_dt, dc_overlap: np.ndarray | None, min_overlap: float,
               thresh: float = 0.0, compute_fp: bool = False) -> tuple[int, int, int, list[float]]:
    """tp, fp, fn and the scores of the true positives of one image (`compute_statistics_jit`), its loop over
    the detections done in numpy: each GT in turn takes, among the unassigned detections above `min_overlap`,
    the best-scoring one (`compute_fp` False), or the most overlapping counted one, else the first ignored one."""
    scores = np.asarray(scores, np.float64)
    ig_dt = np.asarray(ig_dt, np.int64).reshape(-1)
    n_det = len(scores)
    assigned = np.zeros(n_det, bool)
    usable = ig_dt != -1
    if compute_fp:
        usable &= scores >= thresh
    tp = fp = fn = 0
    tp_scores = []
    for i, g in enumerate(ig_gt):
        if g == -1:
            continue
        cand = usable & ~assigned & (ov[:, i] > min_overlap) if n_det else np.zeros(0, bool)
        det = -1
        if cand.any():
            if not compute_fp:
                det = int(np.argmax(np.where(cand, scores, -np.inf)))
            elif (cand & (ig_dt == 0)).any():
                det = int(np.argmax(np.where(cand & (ig_dt == 0), ov[:, i], -np.inf)))
            else:
                det = int(np.argmax(cand))  # the first ignored one
        if det < 0:
            fn += g == 0
        elif g == 1 or ig_dt[det] == 1:
            assigned[det] = True
        else:
            tp += 1
            tp_scores.append(float(scores[det]))
            assigned[det] = True
    if compute_fp:
        free = usable & (ig_dt == 0) & ~assigned
        fp = int(free.sum())
        if dc_overlap is not None:  # detections inside DontCare regions are not false positives
            for k in range(dc_overlap.shape[1]):
                swallowed = free & (dc_overlap[:, k] > min_overlap)
                fp -= int(swallowed.sum())
                free &= ~swallowed
    return tp, fp, fn, tp_scores


def get_thresholds(scores: Sequence[float], num_gt: int, num_sample_pts: int = N_SAMPLE_PTS) -> list[float]:
    scores = sorted(scores, reverse=True)
    current, out = 0.0, []
    for i, s in enumerate(scores):
        l_recall = (i + 1) / num_gt
        r_recall = (i + 2) / num_gt if i < len(scores) - 1 else l_recall
        if (r_recall - current) < (current - l_recall) and i < len(scores) - 1:
            continue
        out.append(s)
        current += 1 / (num_sample_pts - 1.0)
    return out


def precision_curve(gt_annos: Sequence[Sequence[Mapping]], dt_annos: Sequence[Sequence[Mapping]], cls: str,
                    difficulty: int, metric: str, min_overlap: float | None = None) -> np.ndarray:
    """(41,) interpolated precision of one class, difficulty and metric ("bbox", "bev", "3d"), at the benchmark's
    overlap threshold (`MIN_OVERLAP`) or at `min_overlap`."""
    if len(gt_annos) != len(dt_annos):
        raise ValueError(f"KITTI eval: {len(gt_annos)} GT images but {len(dt_annos)} prediction images; give one "
                         "(possibly empty) list of detections per GT image")
    min_ov = MIN_OVERLAP[metric][cls] if min_overlap is None else min_overlap
    per_image, all_tp, n_gt = [], [], 0
    for gts, dts in zip(gt_annos, dt_annos):
        n_valid, ig_gt, ig_dt, dc = clean(gts, dts, cls, difficulty)
        ov = overlaps(dts, gts, metric)
        scores = np.asarray([d.get("score", 1.0) for d in dts], np.float64)
        dc_ov = box2d_overlap(_arr(dts, "bbox", 4), dc, criterion=0) if metric == "bbox" and len(dc) and dts else None
        n_gt += n_valid
        all_tp += statistics(ov, scores, ig_gt, ig_dt, dc_ov, min_ov)[3]
        per_image.append((ov, scores, ig_gt, ig_dt, dc_ov))
    prec = np.zeros(N_SAMPLE_PTS)
    if n_gt == 0:
        return prec
    thresholds = get_thresholds(all_tp, n_gt)
    for t, thr in enumerate(thresholds):
        tp = fp = 0
        for ov, scores, ig_gt, ig_dt, dc_ov in per_image:
            a, b, _, _ = statistics(ov, scores, ig_gt, ig_dt, dc_ov, min_ov, thr, compute_fp=True)
            tp, fp = tp + a, fp + b
        prec[t] = tp / (tp + fp) if tp + fp else 0.0
    for t in range(len(thresholds)):
        prec[t] = prec[t:].max()
    return prec


def ap_r40(prec: np.ndarray) -> float:
    return float(prec[1:].sum() / 40)


def ap_r11(prec: np.ndarray) -> float:
    return float(prec[::4].sum() / 11)


def kitti_eval(gt_annos: Sequence[Sequence[Mapping]], dt_annos: Sequence[Sequence[Mapping]],
               classes: Sequence[str] = CLASSES, metrics: Sequence[str] = ("bbox", "bev", "3d"),
               min_overlap: float | None = None) -> dict:
    """{class: {metric: {"easy"|"moderate"|"hard": AP|R40}}} plus "mAP_moderate" per metric (over
    the classes that have GT). Inputs: per image a list of label dicts as `parse_label_line` gives
    (detections with "score"). `min_overlap`: one IoU threshold for every class and metric in place of the
    benchmark's (`MIN_OVERLAP`: 0.7 for Car), e.g. 0.5 for a car AP50 with KITTI's difficulties."""
    out: dict = {}
    for cls in classes:
        out[cls] = {m: {DIFFICULTIES[d]: ap_r40(precision_curve(gt_annos, dt_annos, cls, d, m, min_overlap))
                        for d in range(3)} for m in metrics}
    present = [c for c in classes if any(g["type"] == c for gts in gt_annos for g in gts)]
    out["mAP_moderate"] = {m: float(np.mean([out[c][m]["moderate"] for c in present])) if present else 0.0
                           for m in metrics}
    return out


def detections_2d(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray, classes: Sequence[str],
                  scale: tuple[float, float], offset: tuple[float, float]) -> list[dict]:
    """A model's 2D detections of one image as KITTI records (`kitti_eval`'s dt_annos, "bbox" only): boxes (K, 4)
    xyxy edges at the model's input, mapped back to the KITTI image through the fit that brought it there (a
    model edge x' = sx * x - x0 of the dataset's edge x, `hydranet.loader.fit_windows`; the dataset's boxes are
    KITTI's + 0.5, pixel centres at integers); class ids into `classes`, kept where a KITTI class has the same name
    (car -> Car, pedestrian -> Pedestrian, cyclist -> Cyclist)."""
    kitti = {c.lower(): c for c in CLASSES}
    (sx, sy), (x0, y0) = scale, offset
    out = []
    for box, score, label in zip(np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(scores).reshape(-1),
                                 np.asarray(labels).reshape(-1)):
        kind = kitti.get(str(classes[int(label)]))
        if kind is None:
            continue
        l, t, r, b = (box[0] + x0) / sx - 0.5, (box[1] + y0) / sy - 0.5, (box[2] + x0) / sx - 0.5, (box[3] + y0) / sy - 0.5
        out.append({"type": kind, "bbox": [l, t, r, b], "score": float(score)})
    return out
