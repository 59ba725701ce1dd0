"""BDD100K benchmark metrics (Yu et al., CVPR 2020; the bdd100k toolkit's eval/{detect,seg,lane}).

- Detection: COCO-style AP (AP@[.5:.95], AP50, AP75, per class) through pycocotools over the
  det_20 classes; "other person" / "other vehicle" ground truth are crowd (ignore) regions, as
  in the toolkit. Boxes are in our labels convention ([x0, y0, x1, y1], x1 exclusive), converted
  to COCO [x, y, w, h].
- Drivable area: per-class IoU over all pixels of direct (0), alternative (1) and background (2),
  and their mean (mIoU), the toolkit's drivable score.
- Lane marking: boundary F-score with pixel tolerances (1, 2, 5, 10) px (the toolkit's
  `bound_ths`): predicted and GT lanes drawn 1 px wide; precision = predicted pixels within the
  tolerance of a GT pixel, recall = GT pixels within it of a prediction; F per tolerance over all
  images, and their mean.
"""
from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

DET_CLASSES = ("pedestrian", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle", "traffic light",
               "traffic sign")
IGNORE = ("other person", "other vehicle")
LANE_TOLERANCES = (1, 2, 5, 10)


def coco_detection_ap(gt_frames: Sequence[dict], pred_frames: Sequence[dict], classes: Sequence[str] = DET_CLASSES) -> dict:
    """COCO AP of Scalabel-like frames: gt {"name", "labels": [{"category", "bbox"}]}, predictions the
    same with "score". Returns {"AP", "AP50", "AP75", "per_class": {class: AP}} as fractions."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    cats = [{"id": k + 1, "name": c} for k, c in enumerate(classes)]
    cid = {c: k + 1 for k, c in enumerate(classes)}
    images, anns, dets = [], [], []
    names = {fr["name"]: k + 1 for k, fr in enumerate(gt_frames)}
    for fr in gt_frames:
        images.append({"id": names[fr["name"]], "file_name": fr["name"], "width": 1280, "height": 720})
        for lab in fr["labels"]:
            x0, y0, x1, y1 = lab["bbox"]
            if lab["category"] in IGNORE:
                ids = list(cid.values())  # a crowd region of every class
                crowd = 1
            elif lab["category"] in cid:
                ids, crowd = [cid[lab["category"]]], 0
            else:
                continue
            for c in ids:
                anns.append({"id": len(anns) + 1, "image_id": names[fr["name"]], "category_id": c, "iscrowd": crowd,
                             "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0)})
    for fr in pred_frames:
        if fr["name"] not in names:
            raise ValueError(f"prediction for image {fr['name']!r}, which is not in the ground truth")
        for lab in fr["labels"]:
            if lab["category"] in cid:
                x0, y0, x1, y1 = lab["bbox"]
                dets.append({"image_id": names[fr["name"]], "category_id": cid[lab["category"]],
                             "bbox": [x0, y0, x1 - x0, y1 - y0], "score": float(lab["score"])})
    gt = COCO()
    gt.dataset = {"images": images, "annotations": anns, "categories": cats}
    gt.createIndex()
    if not dets:
        return {"AP": 0.0, "AP50": 0.0, "AP75": 0.0, "per_class": {c: 0.0 for c in classes}}
    dt = gt.loadRes(dets)
    ev = COCOeval(gt, dt, "bbox")
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    prec = ev.eval["precision"]  # (T, R, K, A, M)
    per_class = {}
    for k, c in enumerate(classes):
        p = prec[:, :, k, 0, -1]
        per_class[c] = float(p[p > -1].mean()) if (p > -1).any() else float("nan")
    return {"AP": float(ev.stats[0]), "AP50": float(ev.stats[1]), "AP75": float(ev.stats[2]), "per_class": per_class}


class DrivableIoU:
    """Accumulates a 3x3 confusion over (pred, gt) masks of 0 direct / 1 alternative / 2 background."""

    def __init__(self):
        self.conf = np.zeros((3, 3), np.int64)

    def update(self, pred: np.ndarray, gt: np.ndarray) -> None:
        pred, gt = np.asarray(pred).ravel(), np.asarray(gt).ravel()
        self.conf += np.bincount(gt.astype(np.int64) * 3 + pred, minlength=9).reshape(3, 3)

    def compute(self) -> dict:
        tp = np.diag(self.conf).astype(np.float64)
        union = self.conf.sum(0) + self.conf.sum(1) - tp
        iou = np.where(union > 0, tp / np.maximum(union, 1), np.nan)
        return {"direct": float(iou[0]), "alternative": float(iou[1]), "background": float(iou[2]),
                "mIoU": float(np.nanmean(iou))}


def draw_lanes(lanes: Sequence[np.ndarray], hw: tuple[int, int]) -> np.ndarray:
    """Polylines (P, 2) drawn 1 px wide -> (H, W) bool."""
    img = np.zeros(hw, np.uint8)
    for pts in lanes:
        p = np.round(np.asarray(pts, np.float64)).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(img, [p], False, 1, 1)
    return img.astype(bool)


class LaneFScore:
    """Boundary F-score of lane polylines at LANE_TOLERANCES pixels, accumulated over images."""

    def __init__(self, tolerances: Sequence[int] = LANE_TOLERANCES):
        self.tol = tuple(tolerances)
        self.counts = np.zeros((len(self.tol), 4))  # matched pred, pred, matched gt, gt

    def update(self, pred_lanes, gt_lanes, hw: tuple[int, int]) -> None:
        pred, gt = draw_lanes(pred_lanes, hw), draw_lanes(gt_lanes, hw)
        d_gt = cv2.distanceTransform((~gt).astype(np.uint8), cv2.DIST_L2, 5) if gt.any() else np.full(hw, np.inf)
        d_pr = cv2.distanceTransform((~pred).astype(np.uint8), cv2.DIST_L2, 5) if pred.any() else np.full(hw, np.inf)
        for k, t in enumerate(self.tol):
            self.counts[k] += [(d_gt[pred] <= t).sum(), pred.sum(), (d_pr[gt] <= t).sum(), gt.sum()]

    def compute(self) -> dict:
        out = {}
        for k, t in enumerate(self.tol):
            mp, n_p, mg, n_g = self.counts[k]
            p = mp / n_p if n_p else 0.0
            r = mg / n_g if n_g else 0.0
            out[f"F@{t}px"] = 2 * p * r / (p + r) if p + r else 0.0
        out["F"] = float(np.mean([out[f"F@{t}px"] for t in self.tol]))
        return out
