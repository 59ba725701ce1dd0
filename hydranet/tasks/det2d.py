"""2D detection of every object class, anchor-free, CenterNet style.

Zhou, Wang, Krähenbühl, "Objects as Points", arXiv 2019 (CenterNet): one heatmap per class whose
peaks are object centres, plus per-pixel box regression. The heatmap is trained with the
penalty-reduced focal loss of CornerNet (Law & Deng, ECCV 2018) on elliptical Gaussians whose
spread follows the box (TTFNet, Liu et al., AAAI 2020). The box branch regresses the offset from a
cell to its object's centre and log width/height in stride units (L1), at the centre cell (CenterNet), or
with `box_region: gaussian` at every cell of the object's Gaussian weighted by it, and `giou_weight` adds
GIoU on the box they make (TTFNet's dense samples: a peak decoded a cell off the centre reads a trained
box; measured on the demo, not kept: docs/benchmarks.md). Decoding keeps 3x3
local maxima, then class-wise NMS (numpy, `hydranet.decoding`, shared with the deployed runtime).
Metric: COCO mAP@[.5:.95] and mAP50 computed by pycocotools; `write_coco_json` writes ground truth and predictions as COCO JSON.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torch import nn

from hydranet import heads
from hydranet.io import atomic_write_text
from hydranet.models.layers import MergeLevels
from hydranet.tasks.base import (Metric, PrimaryMetric, Task, camera_labels, decode_numpy, image_hw, no_detections,
                                 score_constant)
from hydranet.viz import draw_camera

_GAUSS_ALPHA = 0.54  # TTFNet: Gaussian sigma = alpha * size / 6
# configs/full.yaml starts heatmap logits at prior probability 0.01 (RetinaNet, Lin et al. ICCV 2017), not CenterNet's 0.1: with
# tens of classes over every cell of 6 cameras and a few peaks a batch, 0.1 makes the negatives' focal term
# 10-15x every other head's loss at step 1 (signs_lights: 100-200), 0.01 about 100x smaller
HEATMAP_PRIOR = 0.01
BOX_REGIONS = ("centre", "gaussian")


class CenterNetHead(nn.Module):
    """Merged pyramid (at its finest stride, 8 or 4) -> upsampling to `out_stride` 4 where coarser -> two branches:
    {"heatmap": (B, C, H/s, W/s) class logits, "box": (B, 4, H/s, W/s) dx, dy, log w/s, log h/s}."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 64, in_stride: int = 8, out_stride: int = 4,
                 prior: float = 0.1):
        super().__init__()
        if in_stride % out_stride:
            raise ValueError(f"det2d out_stride {out_stride} must divide the neck's finest stride {in_stride}")
        self.merge = MergeLevels()
        self.scale = in_stride // out_stride

        def branch(cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(inplace=True),
                                 nn.Conv2d(width, cout, 1))

        self.heatmap = branch(num_classes)
        self.box = branch(4)
        nn.init.constant_(self.heatmap[-1].bias, math.log(prior / (1 - prior)))  # CenterNet's 0.1 by default

    def forward(self, feats: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        x = self.merge(feats)  # (B, C_in, H/s, W/s), s = in_stride (8, or 4)
        if self.scale > 1:
            x = F.interpolate(x, scale_factor=self.scale, mode="bilinear", align_corners=False)
        return {"heatmap": self.heatmap(x), "box": self.box(x)}  # (B, K, h, w), (B, 4, h, w)


def encode_boxes(boxes: np.ndarray, labels: np.ndarray, num_classes: int, out_hw: tuple[int, int],
                 stride: int, box_region: str = "centre") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CenterNet targets of one image from xyxy pixel boxes (M, 4) and class ids (M,).

    Returns heatmap (C, h, w) with 1.0 at each centre cell, box (4, h, w) = (dx, dy, log w/s, log h/s) from a
    cell's corner to its object's centre, and box_weight (h, w): where the box is regressed, each object's
    weights summing to 1. `box_region` "centre": the centre cell alone (CenterNet); "gaussian": every cell of
    the object's Gaussian, weighted by it (TTFNet: a peak decoded a cell off the centre still reads a trained
    box). Larger boxes are written first; a cell goes to the object whose Gaussian is highest there (the
    smaller on a tie), so a small box keeps its centre.
    """
    if box_region not in BOX_REGIONS:
        raise ValueError(f"det2d box_region {box_region!r}: expected one of {BOX_REGIONS}")
    h, w = out_hw
    heat = np.zeros((num_classes, h, w), np.float32)
    reg = np.zeros((4, h, w), np.float32)
    weight = np.zeros((h, w), np.float32)
    owner = np.zeros((h, w), np.float32)  # the Gaussian value of the object that holds each cell
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    for k in np.argsort(-areas, kind="stable"):
        x0, y0, x1, y1 = boxes[k] / stride
        bw, bh = x1 - x0, y1 - y0
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        j, i = min(int(np.floor(cx)), w - 1), min(int(np.floor(cy)), h - 1)
        sx, sy = max(_GAUSS_ALPHA * bw / 6, 0.3), max(_GAUSS_ALPHA * bh / 6, 0.3)
        rx, ry = int(np.ceil(3 * sx)), int(np.ceil(3 * sy))
        ys, xs = np.arange(max(0, i - ry), min(h, i + ry + 1)), np.arange(max(0, j - rx), min(w, j + rx + 1))
        g = np.exp(-((xs[None, :] - j) ** 2) / (2 * sx**2) - ((ys[:, None] - i) ** 2) / (2 * sy**2)).astype(np.float32)
        window = (slice(ys[0], ys[-1] + 1), slice(xs[0], xs[-1] + 1))
        np.maximum(heat[labels[k]][window], g, out=heat[labels[k]][window])
        take = claim_cells(owner, weight, window, g, (i - ys[0], j - xs[0]), box_region)
        target = (cx - xs[None, :], cy - ys[:, None], np.full_like(g, np.log(bw)), np.full_like(g, np.log(bh)))
        for c, t in enumerate(target):
            reg[c][window] = np.where(take, t, reg[c][window])
    return heat, reg, weight


def claim_cells(owner: np.ndarray, weight: np.ndarray, window: tuple[slice, slice], g: np.ndarray,
                centre: tuple[int, int], box_region: str) -> np.ndarray:
    """One object's regression cells in `window` of the maps `owner` (the Gaussian value of the object holding
    each cell) and `weight` (its regression weight), both updated: the centre cell alone, or ("gaussian") every
    cell where its Gaussian g (wy, wx) is at least the holder's, weighted g / sum g. Returns where it took (wy, wx)."""
    if box_region == "centre":
        g = np.where(np.arange(g.shape[0])[:, None] == centre[0], g, 0) * (np.arange(g.shape[1]) == centre[1])
    take = (g >= owner[window]) & (g > 0)
    weight[window] = np.where(take, g / g.sum(), weight[window])
    owner[window] = np.where(take, g, owner[window])
    return take


def giou_loss_cells(box: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - GIoU of boxes given per cell as (dx, dy, log w, log h) from the cell's corner, stride units:
    box, target (K, 4) -> (K,)."""
    from torchvision.ops import generalized_box_iou_loss  # not at the top: torchvision imports torch._dynamo (7.7 s)

    def xyxy(b: torch.Tensor) -> torch.Tensor:
        half = torch.exp(b[:, 2:].clamp(max=12)) / 2  # (K, 2)
        return torch.cat([b[:, :2] - half, b[:, :2] + half], dim=1)

    return generalized_box_iou_loss(xyxy(box), xyxy(target), reduction="none")


def focal_loss_with_logits(logits: torch.Tensor, target: torch.Tensor, alpha: float = 2.0,
                           beta: float = 4.0) -> torch.Tensor:
    """Penalty-reduced pixel focal loss (CornerNet/CenterNet), summed, divided by #peaks."""
    pos = target >= 1.0
    log_p, log_not_p = F.logsigmoid(logits), F.logsigmoid(-logits)
    p = log_p.exp()
    pos_loss = -(log_p * (1 - p) ** alpha)[pos].sum()
    neg_loss = -(log_not_p * p**alpha * (1 - target) ** beta)[~pos].sum()
    return (pos_loss + neg_loss) / pos.sum().clamp(min=1)


class Det2dTask(Task):
    """Multi-class 2D boxes per camera over every class of the dataset meta (`classes`).

    Loss components: "heatmap" (focal), "offset" and "size" (L1) and "giou" (1 - GIoU) over the regression
    cells (`box_region`), each scaled by its constructor weight (giou_weight 0: no GIoU term). `decode` gives per
    image {"boxes" (K, 4) xyxy pixels, "scores" (K,), "labels" (K,) class ids}.
    """

    name = "det2d"
    spec = heads.Det2d  # the numpy side: decoder, label keys, blank labels, engine signals
    primary_metric = PrimaryMetric("mAP50")
    baseline_name = "empty detections"
    dontcare_ignores = True  # a reader's dontcare regions are ignore regions of every class (`camera_boxes`)

    def __init__(self, classes: Sequence[str], in_channels: int, in_stride: int = 8, out_stride: int = 4,
                 width: int = 64, heatmap_weight: float = 1.0, offset_weight: float = 1.0, size_weight: float = 1.0,
                 score_threshold: float = 0.05, nms_iou: float = 0.6, max_detections: int = 100,
                 min_size: float = 6.0, min_visibility: float = 0.1, heatmap_prior: float = 0.1,
                 box_region: str = "centre", giou_weight: float = 0.0,  # gaussian + GIoU 1.0: not kept (benchmarks.md)
                 train_min_size: float | None = None):
        super().__init__(in_channels, in_stride)
        if box_region not in BOX_REGIONS:
            raise ValueError(f"task '{self.name}': box_region {box_region!r}, expected one of {BOX_REGIONS}")
        if train_min_size is not None and not 0 <= train_min_size <= min_size:
            raise ValueError(f"task '{self.name}': train_min_size {train_min_size} must be in [0, min_size {min_size:g}] "
                             "pixels (a larger one would leave boxes the evaluation scores untrained), or null: min_size")
        if not classes:
            raise ValueError(f"task '{self.name}' needs a non-empty class list")
        self.classes = list(classes)
        self.out_stride = out_stride
        self.head = CenterNetHead(in_channels, len(self.classes), width, in_stride, out_stride, heatmap_prior)
        self.weights = {"heatmap": heatmap_weight, "offset": offset_weight, "size": size_weight, "giou": giou_weight}
        self.box_region = box_region
        self.score_threshold, self.nms_iou, self.max_detections = score_threshold, nms_iou, max_detections
        # boxes smaller than `min_size` pixels (short side, at the model input size) or less visible
        # than `min_visibility` are ignore regions of the evaluation: detections on them count neither
        # as hits nor as false positives (COCO iscrowd), as KITTI's "DontCare" boxes
        self.min_size, self.min_visibility = min_size, min_visibility
        # boxes trained on: at least `train_min_size` pixels (None: min_size, the evaluation's) and min_visibility;
        # smaller boxes are background to the heatmap. Under min_size a trained box is still an ignore region of
        # the evaluation: a detection on it is neither hit nor false positive
        self.train_min_size = min_size if train_min_size is None else train_min_size

    @classmethod
    def from_meta(cls, meta: Mapping, in_channels: int, **options: Any) -> Det2dTask:
        return cls(meta_list(meta, "classes", cls.name), in_channels, **options)

    def box_label(self, box: Mapping, where: str) -> int | None:
        """Class id of one labels `boxes2d` entry, None for boxes this task does not detect."""
        if box["class"] not in self.classes:
            raise ValueError(f"task '{self.name}': {where} has a box of class '{box['class']}', "
                             f"not in the dataset classes {self.classes}")
        return self.classes.index(box["class"])

    def camera_boxes(self, cam: Mapping, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """xyxy boxes (M, 4) float32, class ids (M,) int64, ignore flags (M,) bool (the evaluation's) and trained flags
        (M,) bool (`train_min_size`) of one camera's labels entry; each of its `dontcare` regions (KITTI's DontCare,
        Cityscapes' group regions, BDD100K's ignored classes) is an ignore box of every class (a detection inside it is
        neither hit nor false positive, as KITTI's evaluation treats it), never trained."""
        boxes, labels, ignore, trained = [], [], [], []
        for b in cam.get("boxes2d", []):
            label = self.box_label(b, where)
            x0, y0, x1, y1 = b["bbox"]
            if label is None or not (x1 > x0 and y1 > y0):
                continue
            boxes.append((x0, y0, x1, y1))
            labels.append(label)
            visible, side = b.get("visible_fraction", 1.0) >= self.min_visibility, min(x1 - x0, y1 - y0)
            ignore.append(side < self.min_size or not visible)
            trained.append(side >= self.train_min_size and visible)
        for region in cam.get("dontcare", []) if self.dontcare_ignores else []:  # ignores every class inside it
            boxes += [tuple(region)] * len(self.classes)
            labels += range(len(self.classes))
            ignore += [True] * len(self.classes)
            trained += [False] * len(self.classes)
        return (np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(labels, np.int64),
                np.asarray(ignore, bool).reshape(-1), np.asarray(trained, bool).reshape(-1))

    def build_targets(self, sample: Mapping) -> dict[str, Any]:
        H, W = image_hw(sample)
        out_hw = (H // self.out_stride, W // self.out_stride)
        per_cam = [self.camera_boxes(cam, f"camera {name}")
                   for cam, name in zip(camera_labels(sample, self.name), sample["camera_names"])]
        enc = [encode_boxes(b[tr], l[tr], len(self.classes), out_hw, self.out_stride, self.box_region)
               for b, l, _, tr in per_cam]
        return {"heatmap": np.stack([e[0] for e in enc]),  # (N, C, h, w)
                "box": np.stack([e[1] for e in enc]),  # (N, 4, h, w)
                "box_weight": np.stack([e[2] for e in enc]),  # (N, h, w), each object's weights sum to 1
                "gt_boxes": [b[~ig] for b, _, ig, _ in per_cam],  # N x (M, 4)
                "gt_labels": [l[~ig] for _, l, ig, _ in per_cam],  # N x (M,)
                "ignore_boxes": [b[ig] for b, _, ig, _ in per_cam],  # N x (K, 4) ignore regions
                "ignore_labels": [l[ig] for _, l, ig, _ in per_cam]}  # N x (K,)

    def loss(self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        heat_logits, box = outputs["heatmap"], outputs["box"]  # (B*N, C, h, w), (B*N, 4, h, w)
        if heat_logits.shape != targets["heatmap"].shape:
            raise ValueError(f"task '{self.name}': heatmap output {tuple(heat_logits.shape)} vs target "
                             f"{tuple(targets['heatmap'].shape)}; images must be the size the targets were built at")
        weight = targets["box_weight"]  # (B*N, h, w)
        num = weight.sum().clamp(min=1)  # about the number of objects
        cells = weight > 0
        box, target = box.float().permute(0, 2, 3, 1)[cells], targets["box"].permute(0, 2, 3, 1)[cells]  # (K, 4)
        err = (box - target).abs() * weight[cells][:, None]  # (K, 4)
        losses = {"heatmap": self.weights["heatmap"] * focal_loss_with_logits(heat_logits.float(), targets["heatmap"]),
                  "offset": self.weights["offset"] * err[:, :2].sum() / num,
                  "size": self.weights["size"] * err[:, 2:].sum() / num}
        if self.weights["giou"]:
            losses["giou"] = self.weights["giou"] * (giou_loss_cells(box, target) * weight[cells]).sum() / num
        return losses

    def decoding(self) -> dict[str, Any]:
        return {"kind": "centernet", "params": {"stride": self.out_stride, "score_threshold": self.score_threshold,
                                                "nms_iou": self.nms_iou, "max_detections": self.max_detections}}

    @torch.no_grad()
    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """3x3 peaks, top-k, class-wise NMS: `hydranet.decoding.decode_centernet` (shared with deploy)."""
        return decode_numpy(self.decoding(), outputs)

    def metric(self) -> CocoMetric:
        return CocoMetric(self.classes)

    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        return score_constant(self, targets, lambda t: no_detections(len(t["gt_boxes"]), 4))

    def draw(self, canvas: np.ndarray, result: Mapping[str, Any], truth: Mapping[str, Any],
             min_score: float = 0.3) -> list[tuple[str, np.ndarray]]:
        """Boxes scoring at least `min_score`, labelled with class and score."""
        boxes = [{"bbox": b, "class": self.classes[lab], "score": sc}
                 for b, sc, lab in zip(result["boxes"].cpu().tolist(), result["scores"].cpu().tolist(),
                                       result["labels"].cpu().tolist()) if sc >= min_score]
        canvas[:] = draw_camera(canvas, {"boxes2d": boxes}, self.classes)
        return []


def meta_list(meta: Mapping, key: str, task: str) -> list[str]:
    if key not in meta or not meta[key]:
        raise ValueError(f"task '{task}' needs the dataset meta key '{key}' (a list of names); meta has {sorted(meta)}")
    return list(meta[key])


def coco_dicts(gts: Sequence[tuple[np.ndarray, ...]], preds: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
               classes: Sequence[str]) -> tuple[dict, list[dict]]:
    """COCO ground-truth dataset dict and detection-result list.

    gts: per image (boxes (M, 4) xyxy, labels (M,)) or (boxes, labels, ignore boxes (K, 4),
    ignore labels (K,)), the ignore regions written with iscrowd=1; preds: per image (boxes
    (K, 4) xyxy, scores (K,), labels (K,)). Image ids are 1-based positions, category id =
    class index + 1.
    """
    if len(gts) != len(preds):
        raise ValueError(f"coco_dicts: {len(gts)} ground-truth images but {len(preds)} prediction images")
    images, anns, dets = [], [], []
    for img_id, (gt, (pb, ps, pl)) in enumerate(zip(gts, preds), start=1):
        images.append({"id": img_id})
        groups = [(gt[0], gt[1], 0)] + ([(gt[2], gt[3], 1)] if len(gt) == 4 else [])
        for gb, gl, crowd in groups:
            for box, label in zip(np.asarray(gb, np.float64).reshape(-1, 4), np.asarray(gl).reshape(-1)):
                w, h = box[2] - box[0], box[3] - box[1]
                anns.append({"id": len(anns) + 1, "image_id": img_id, "category_id": int(label) + 1,
                             "bbox": [float(box[0]), float(box[1]), float(w), float(h)], "area": float(w * h),
                             "iscrowd": crowd})
        for box, score, label in zip(np.asarray(pb, np.float64).reshape(-1, 4), np.asarray(ps).reshape(-1),
                                     np.asarray(pl).reshape(-1)):
            dets.append({"image_id": img_id, "category_id": int(label) + 1, "score": float(score),
                         "bbox": [float(box[0]), float(box[1]), float(box[2] - box[0]), float(box[3] - box[1])]})
    categories = [{"id": i + 1, "name": n} for i, n in enumerate(classes)]
    return {"images": images, "annotations": anns, "categories": categories}, dets


def write_coco_json(gts, preds, classes: Sequence[str], gt_path: str | Path, pred_path: str | Path) -> None:
    """Write ground truth (COCO dataset JSON) and predictions (COCO results JSON); see `coco_dicts`."""
    gt, dets = coco_dicts(gts, preds, classes)
    atomic_write_text(gt_path, json.dumps(gt))  # never half-written beside an older metrics.json
    atomic_write_text(pred_path, json.dumps(dets))


def coco_map(gt: dict, dets: list[dict]) -> dict[str, float]:
    """{"mAP": mAP@[.5:.95], "mAP50"} by pycocotools; NaN when there is no ground truth box."""
    if not any(a["iscrowd"] == 0 for a in gt["annotations"]):
        return {"mAP": float("nan"), "mAP50": float("nan")}
    if not dets:
        return {"mAP": 0.0, "mAP50": 0.0}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress and tables
        coco = COCO()
        coco.dataset = gt
        coco.createIndex()
        ev = COCOeval(coco, coco.loadRes(dets), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {"mAP": max(float(ev.stats[0]), 0.0), "mAP50": max(float(ev.stats[1]), 0.0)}


COCO_IOUS = np.linspace(0.5, 0.95, 10)  # pycocotools' iouThrs
COCO_RECALLS = np.linspace(0.0, 1.0, 101)  # pycocotools' recThrs
COCO_MAX_DETS = 100


def _xywh(boxes: np.ndarray) -> np.ndarray:
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], 1)  # as coco_dicts writes them


def _coco_iou(d: np.ndarray, g: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """pycocotools' bbox IoU of xywh boxes d (D, 4) and g (G, 4); a crowd box's is intersection / det area."""
    w = np.minimum(d[:, None, 0] + d[:, None, 2], g[None, :, 0] + g[None, :, 2]) - np.maximum(d[:, None, 0], g[None, :, 0])
    h = np.minimum(d[:, None, 1] + d[:, None, 3], g[None, :, 1] + g[None, :, 3]) - np.maximum(d[:, None, 1], g[None, :, 1])
    inter = np.where((w > 0) & (h > 0), w * h, 0.0)
    da, ga = (d[:, 2] * d[:, 3])[:, None], (g[:, 2] * g[:, 3])[None, :]
    union = np.where(crowd[None, :], da, da + ga - inter)
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def coco_image_state(gt: Sequence[np.ndarray], pred: Sequence[np.ndarray], num_classes: int) -> dict[str, list]:
    """The sufficient statistics of COCO bbox mAP (area "all", 100 detections) of one image, as
    pycocotools' `evaluateImg` matches it: per kept detection (per class, score-sorted, the first 100)
    its "label", "score", "tp" and "ignored" (bit t: matched / matched to a crowd box at IoU threshold
    COCO_IOUS[t]), and per class "npig" (non-crowd ground-truth boxes). gt: (boxes, labels[, ignore
    boxes, ignore labels]); pred: (boxes, scores, labels), xyxy pixels."""
    gb, gl = _xywh(gt[0]), np.asarray(gt[1]).reshape(-1)
    ib, il = (_xywh(gt[2]), np.asarray(gt[3]).reshape(-1)) if len(gt) == 4 else (np.zeros((0, 4)), np.zeros(0))
    pb, ps, pl = _xywh(pred[0]), np.asarray(pred[1], np.float64).reshape(-1), np.asarray(pred[2]).reshape(-1)
    out: dict[str, list] = {"label": [], "score": [], "tp": [], "ignored": [],
                            "npig": np.bincount(gl.astype(np.int64), minlength=num_classes).tolist()}
    for k in sorted(set(pl.astype(int).tolist())):
        d_idx = np.nonzero(pl == k)[0]
        d_idx = d_idx[np.argsort(-ps[d_idx], kind="mergesort")][:COCO_MAX_DETS]
        g = np.concatenate([gb[gl == k], ib[il == k]])
        crowd = np.concatenate([np.zeros(int((gl == k).sum()), bool), np.ones(int((il == k).sum()), bool)])
        ious = _coco_iou(pb[d_idx], g, crowd)
        tp_bits, ig_bits = np.zeros(len(d_idx), np.int64), np.zeros(len(d_idx), np.int64)
        for t, thr in enumerate(COCO_IOUS):
            taken = np.zeros(len(g), bool)
            for di in range(len(d_idx)):
                best, m = min(thr, 1 - 1e-10), -1
                for gi in range(len(g)):
                    if taken[gi] and not crowd[gi]:
                        continue
                    if m > -1 and not crowd[m] and crowd[gi]:
                        break
                    if ious[di, gi] < best:
                        continue
                    best, m = ious[di, gi], gi
                if m == -1:
                    continue
                taken[m] = True
                tp_bits[di] |= 1 << t
                if crowd[m]:
                    ig_bits[di] |= 1 << t
        out["label"] += [k] * len(d_idx)
        out["score"] += ps[d_idx].tolist()
        out["tp"] += tp_bits.tolist()
        out["ignored"] += ig_bits.tolist()
    return out


def coco_map_states(states: Sequence[Mapping[str, list]], num_classes: int) -> dict[str, float]:
    """{"mAP", "mAP50"} over per-image states (`coco_image_state`), as pycocotools' `accumulate` and
    `summarize` compute them (and `coco_map` returns them): NaN without a ground-truth box, 0 without
    a detection."""
    states = [s for s in states if s is not None]
    npig = np.sum([s["npig"] for s in states], axis=0) if states else np.zeros(num_classes)
    if not npig.sum():
        return {"mAP": float("nan"), "mAP50": float("nan")}
    label = np.concatenate([np.asarray(s["label"], np.int64) for s in states])
    if not len(label):
        return {"mAP": 0.0, "mAP50": 0.0}
    score = np.concatenate([np.asarray(s["score"], np.float64) for s in states])
    bits = np.arange(len(COCO_IOUS))
    tp = (np.concatenate([np.asarray(s["tp"], np.int64) for s in states])[:, None] >> bits) & 1  # (D, T)
    ig = (np.concatenate([np.asarray(s["ignored"], np.int64) for s in states])[:, None] >> bits) & 1
    precision = np.full((len(COCO_IOUS), num_classes, len(COCO_RECALLS)), -1.0)  # (T, K, R)
    for k in range(num_classes):
        if npig[k] == 0:
            continue
        sel = np.nonzero(label == k)[0]
        sel = sel[np.argsort(-score[sel], kind="mergesort")]
        if not len(sel):  # ground truth, no detection: precision 0 at every recall point
            precision[:, k] = 0.0
            continue
        tps = (tp[sel] == 1) & (ig[sel] == 0)
        fps = (tp[sel] == 0) & (ig[sel] == 0)
        tp_sum, fp_sum = np.cumsum(tps, axis=0).astype(float), np.cumsum(fps, axis=0).astype(float)  # (D_k, T)
        rc, pr = tp_sum / npig[k], tp_sum / (fp_sum + tp_sum + np.spacing(1))
        pr = np.maximum.accumulate(pr[::-1], axis=0)[::-1]  # pycocotools' backward loop: each precision the max after it
        for t in range(len(COCO_IOUS)):
            inds = np.searchsorted(rc[:, t], COCO_RECALLS, side="left")
            ok = inds < len(pr)  # inds only grow: past the first miss every recall point stays 0
            precision[t, k] = np.where(ok, pr[np.minimum(inds, len(pr) - 1), t], 0.0)
    s_all, s50 = precision[precision > -1], precision[0][precision[0] > -1]
    return {"mAP": max(float(np.mean(s_all)) if s_all.size else -1.0, 0.0),
            "mAP50": max(float(np.mean(s50)) if s50.size else -1.0, 0.0)}


class CocoMetric(Metric):
    """COCO box mAP over every image seen (targets need "gt_boxes" and "gt_labels")."""

    def __init__(self, classes: Sequence[str]):
        self.classes = list(classes)
        self.gts: list[tuple[np.ndarray, ...]] = []
        self.preds: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._states: list = []  # `states()`, computed once per item as items arrive

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        n = len(targets["gt_boxes"])
        ignore = zip(targets.get("ignore_boxes", [np.zeros((0, 4))] * n), targets.get("ignore_labels", [np.zeros(0)] * n))
        for det, gb, gl, (ib, il) in zip(decoded, targets["gt_boxes"], targets["gt_labels"], ignore, strict=True):
            self.gts.append(tuple(np.asarray(a.cpu() if torch.is_tensor(a) else a) for a in (gb, gl, ib, il)))
            self.preds.append(tuple(np.asarray(det[k].cpu()) for k in ("boxes", "scores", "labels")))

    def compute(self) -> dict[str, float]:
        return coco_map(*coco_dicts(self.gts, self.preds, self.classes))

    def states(self) -> list[dict[str, list]]:
        """Per image: `coco_image_state` (the detections' scores, labels and match bits at every COCO
        IoU threshold, and the ground-truth counts per class)."""
        cache = self._states
        cache += [coco_image_state(g, p, len(self.classes)) for g, p in zip(self.gts[len(cache):], self.preds[len(cache):],
                                                                             strict=True)]
        return cache

    def compute_states(self, states: Sequence) -> dict[str, float]:
        return coco_map_states(states, len(self.classes))

    def merge_states(self, states: Sequence) -> dict[str, np.ndarray]:
        """Items' states as one (numpy arrays, concatenated in order): what `compute_states` gives the same
        metric from, faster (the gate merges each clip once before resampling clips)."""
        states = [s for s in states if s is not None]
        cat = {k: np.concatenate([np.asarray(s[k], np.int64 if k != "score" else np.float64) for s in states])
               if states else np.zeros(0) for k in ("label", "score", "tp", "ignored")}
        return {**cat, "npig": np.sum([s["npig"] for s in states], axis=0) if states else np.zeros(len(self.classes))}

    def write_predictions(self, folder: str | Path) -> list[Path]:
        """COCO JSON of the evaluated ground truth and predictions: FOLDER/det2d_gt.json, det2d_predictions.json."""
        gt, pred = Path(folder) / "det2d_gt.json", Path(folder) / "det2d_predictions.json"
        self.write_json(gt, pred)
        return [gt, pred]

    def write_json(self, gt_path: str | Path, pred_path: str | Path) -> None:
        """Everything seen so far as COCO JSON files."""
        write_coco_json(self.gts, self.preds, self.classes, gt_path, pred_path)
