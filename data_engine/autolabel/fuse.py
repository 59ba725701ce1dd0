"""Per-frame fusion of an ensemble's detections (every model, and each model's horizontally flipped view).

2D boxes: **weighted box fusion** (Solovyev, Wang, Gabruseva, "Weighted boxes fusion: Ensembling boxes from
different object detection models", Image and Vision Computing 107, 2021), through the `ensemble-boxes` package
(its `weighted_boxes_fusion`, the authors' reference code). Unlike NMS, which keeps one member's box, WBF
averages the boxes of a cluster weighted by their scores. Its score (`autolabel.fuse_conf`): "avg" (WBF's
`conf_type="avg"`) the mean score times min(members in the cluster, views) / views, so an object only one of
K views sees gets a K-times lower confidence (agreement is what makes a box sure); "max" the best member's
score (a box any view is sure of stays sure: the union of the views). A flipped view's boxes are flipped back
(x -> W - x) before fusion (test-time augmentation).

3D boxes (BEV, ego frame): the same rule with BEV centre distance instead of IoU (`fuse_3d`): boxes of one
class are clustered greedily, best score first, to the cluster whose fused centre is within `distance` metres;
centre, size and velocity are score-weighted means, the yaw is the best member's, the score by the same rule.
Flip TTA does not apply to 3D boxes (a mirrored image is another calibration).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Boxes = tuple[np.ndarray, np.ndarray, np.ndarray]  # boxes (K, 4 or 9) float, scores (K,), labels (K,) int


def _sorted(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray) -> Boxes:
    """A fixed order (label, score descending, coordinates): the same inputs give the same list."""
    if len(scores) == 0:
        return boxes, scores, labels
    keys = [*(boxes[:, i] for i in reversed(range(boxes.shape[1]))), -scores, labels]
    order = np.lexsort(keys)
    return boxes[order], scores[order], labels[order]


FUSE_CONF = ("avg", "max")  # a fused box's score: WBF's conf_type


def wbf(views: Sequence[Boxes], size: tuple[int, int], iou: float, min_score: float, conf: str = "avg") -> Boxes:
    """Weighted box fusion of `views` ([(boxes (K, 4) xyxy px, scores (K,), labels (K,))], one per model or
    flipped view) of an (H, W) image -> fused (boxes (M, 4) px, scores (M,), labels (M,) int64)."""
    from ensemble_boxes import weighted_boxes_fusion

    H, W = size
    scale = np.array([W, H, W, H], np.float64)
    boxes = [np.clip(np.asarray(b, np.float64).reshape(-1, 4) / scale, 0, 1) for b, _, _ in views]
    scores = [np.asarray(s, np.float64).reshape(-1) for _, s, _ in views]
    labels = [np.asarray(lab, np.int64).reshape(-1) for _, _, lab in views]
    if sum(len(s) for s in scores) == 0:
        return np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64)
    fb, fs, fl = weighted_boxes_fusion(boxes, scores, labels, iou_thr=iou, skip_box_thr=min_score, conf_type=conf)
    keep = (fb[:, 2] > fb[:, 0]) & (fb[:, 3] > fb[:, 1])  # a box squeezed to no area by the image border is no object
    return _sorted(np.asarray(fb)[keep] * scale, np.asarray(fs, np.float64)[keep], np.asarray(fl)[keep].astype(np.int64))


def fuse_3d(views: Sequence[Boxes], distance: float, min_score: float, conf: str = "avg") -> Boxes:
    """`views` ([(boxes (K, 9) x, y, z, l, w, h, yaw, vx, vy ego, scores (K,), labels (K,))], one per model) ->
    fused (boxes (M, 9), scores (M,), labels (M,)): clusters of one class within `distance` m in BEV."""
    n_views = max(len(views), 1)
    rows = [(float(s), int(lab), np.asarray(b, np.float64)) for bs, ss, ls in views
            for b, s, lab in zip(np.asarray(bs).reshape(-1, 9), np.asarray(ss).reshape(-1), np.asarray(ls).reshape(-1))
            if s >= min_score]
    rows.sort(key=lambda r: (-r[0], r[1], *r[2].tolist()))  # best first, ties in a fixed order
    clusters: list[dict] = []
    for s, lab, b in rows:
        near = [c for c in clusters if c["label"] == lab and np.hypot(*(c["centre"] - b[:2])) < distance]
        if near:
            c = min(near, key=lambda c: float(np.hypot(*(c["centre"] - b[:2]))))
            c["members"].append((s, b))
            w = np.array([m[0] for m in c["members"]])
            c["centre"] = (w[:, None] * np.array([m[1][:2] for m in c["members"]])).sum(0) / w.sum()
        else:
            clusters.append({"label": lab, "centre": b[:2].copy(), "members": [(s, b)]})
    out_b, out_s, out_l = [], [], []
    for c in clusters:
        w = np.array([m[0] for m in c["members"]])  # (C,)
        stack = np.array([m[1] for m in c["members"]])  # (C, 9)
        mean = (w[:, None] * stack).sum(0) / w.sum()
        mean[6] = stack[0, 6]  # the best member's heading (a mean of angles near +-pi is meaningless)
        out_b.append(mean)
        out_s.append(w.max() if conf == "max" else w.mean() * min(len(w), n_views) / n_views)
        out_l.append(c["label"])
    if not out_b:
        return np.zeros((0, 9)), np.zeros(0), np.zeros(0, np.int64)
    return _sorted(np.array(out_b), np.array(out_s), np.array(out_l, np.int64))
