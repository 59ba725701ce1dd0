"""3D object detection with velocity on the BEV grid, CenterPoint style.

Yin, Zhou, Krähenbühl, "Center-based 3D Object Detection and Tracking", CVPR 2021 (CenterPoint):
a heatmap per class on the bird's-eye-view grid whose peaks are object centres (penalty-reduced
focal loss of CornerNet on Gaussians whose spread follows the box footprint), and at the centre
cell (`box_region: centre`; "gaussian": every cell of the object's Gaussian, weighted by it, as det2d)
the regression of the offset to the centre, the height z of the centre, log size (l, w, h), the
heading as (sin, cos) and the velocity (vx, vy) over the ground in ego axes (L1).

Decoding keeps 3x3 local maxima of the heatmap (CenterPoint's "circle NMS"-free variant) and
returns per frame boxes (K, 9) = x, y, z, l, w, h, yaw, vx, vy in the ego frame, scores and class
ids. The metric is a light nuScenes-style mAP over centre distances 0.5/1/2/4 m with the mean
translation error and, for frames whose targets carry their sample token (every dataset frame),
the full nuScenes metrics ("nuscenes/mAP", "nuscenes/NDS", "nuscenes/mATE".."nuscenes/mAAE":
hydranet.metrics on GT built from the labels as the nuScenes export filters them,
hydranet/nuscenes_results.py); its predictions can be written as a nuScenes submission whose
sample tokens are those of `export_nuscenes` of the same dataset.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hydranet import heads
from hydranet.bevgrid import BevGrid, grid_of
from hydranet.metrics import DetectionConfig, evaluate_boxes
from hydranet.metrics.nuscenes_detection import merge_sample_states, sample_state, state_metrics
from hydranet.nuscenes_results import (frame_eval_boxes, frame_results, result_eval_boxes, sample_token,
                                       write_results)
from hydranet.tasks.base import Metric, PrimaryMetric, Task, decode_numpy, no_detections, require, score_constant
from hydranet.tasks.det2d import _GAUSS_ALPHA, BOX_REGIONS, HEATMAP_PRIOR, claim_cells, focal_loss_with_logits

BOX_CLASSES = ("car", "truck", "bus", "pedestrian", "cyclist", "traffic_cone", "debris", "construction_vehicle",
               "barrier", "trailer", "motorcycle")
PRIOR_CAP = 0.05  # the per-cell heatmap prior's ceiling, under score_threshold 0.1
HEADING_WINDOW = (9, 3)  # the per-cell heading prior's mean: cells along x (forward), along y (lateral)
HEADING_PSEUDO = 2.0  # objects' worth of "no direction" in each window: a window with few objects stays near 0
REG = {"offset": 2, "height": 1, "size": 3, "rot": 2, "vel": 2}  # regression branches and their channels


class CenterPointHead(nn.Module):
    """BEV features (B, C, X, Y) -> shared 3x3 conv -> {"heatmap": (B, K, X, Y) logits, "offset":
    (B, 2, X, Y) d_row, d_col, "height": (B, 1, X, Y) z, "size": (B, 3, X, Y) log l, w, h,
    "rot": (B, 2, X, Y) sin, cos of yaw, "vel": (B, 2, X, Y) vx, vy}. `grid_shape` (X, Y): a per-cell heatmap
    prior; `heading_shape` (X, Y): a per-cell heading prior added to "rot"."""

    def __init__(self, in_channels: int, num_classes: int, width: int = 64, grid_shape: tuple[int, int] | None = None,
                 heading_shape: tuple[int, int] | None = None):
        super().__init__()
        self.shared = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1, bias=False), nn.BatchNorm2d(width),
                                    nn.ReLU(inplace=True))

        def branch(cout: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(width, cout, 1))

        self.branches = nn.ModuleDict({"heatmap": branch(num_classes), **{k: branch(c) for k, c in REG.items()}})
        nn.init.constant_(self.branches["heatmap"][-1].bias, -2.19)  # prior 0.1 (CenterNet)
        # a per-cell heatmap logit (K, X, Y) fitted to the training labels (zeros until Det3dTask.fit_prior), not
        # trained: where the ego frame's objects tend to be (parked cars along the kerbs), as bevmap's cell prior
        self.register_buffer("cell_prior", torch.zeros(num_classes, *grid_shape) if grid_shape is not None else None)
        # a per-cell (sin, cos) (2, X, Y), the training labels' mean heading vector near each cell (zeros until
        # fit_prior), not trained: which way the ego frame's objects face there (right-hand traffic: the left
        # side's oncoming lanes and its parked cars face the ego), which a small head cannot see from one cell
        self.register_buffer("heading_prior", torch.zeros(2, *heading_shape) if heading_shape is not None else None)

    def forward(self, bev: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.shared(bev)
        out = {k: b(x) for k, b in self.branches.items()}
        if self.cell_prior is not None:
            out["heatmap"] = out["heatmap"] + self.cell_prior
        if self.heading_prior is not None:
            out["rot"] = out["rot"] + self.heading_prior
        return out


def encode_boxes3d(boxes: np.ndarray, labels: np.ndarray, num_classes: int, grid: BevGrid, min_sigma: float = 0.5,
                   box_region: str = "centre") -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """CenterPoint targets of one frame from boxes (M, 9) = x, y, z, l, w, h, yaw, vx, vy and class
    ids (M,). Boxes whose centre lies outside the grid are skipped. Returns heatmap (K, X, Y),
    regression {branch: (c, X, Y)} and its weight (X, Y), each object's summing to 1: at its centre cell
    (`box_region` "centre", CenterPoint) or over its Gaussian ("gaussian", as det2d's `encode_boxes`)."""
    X, Y = grid.shape
    heat = np.zeros((num_classes, X, Y), np.float32)
    reg = {k: np.zeros((c, X, Y), np.float32) for k, c in REG.items()}
    weight, owner = np.zeros((X, Y), np.float32), np.zeros((X, Y), np.float32)
    rc = grid.to_cell(boxes[:, :2]) if len(boxes) else np.zeros((0, 2))
    areas = boxes[:, 3] * boxes[:, 4] if len(boxes) else np.zeros(0)
    for k in np.argsort(-areas, kind="stable"):  # larger first: a smaller box sharing a cell keeps it
        r, c = int(np.floor(rc[k, 0] + 0.5)), int(np.floor(rc[k, 1] + 0.5))
        if not (0 <= r < X and 0 <= c < Y):
            continue
        x, y, z, l, w, h, yaw, vx, vy = boxes[k]
        ext_r = (abs(l * np.cos(yaw)) + abs(w * np.sin(yaw))) / grid.resolution  # footprint in cells
        ext_c = (abs(l * np.sin(yaw)) + abs(w * np.cos(yaw))) / grid.resolution
        sr, sc = max(_GAUSS_ALPHA * ext_r / 6, min_sigma), max(_GAUSS_ALPHA * ext_c / 6, min_sigma)
        rr, rcx = int(np.ceil(3 * sr)), int(np.ceil(3 * sc))
        rows, cols = np.arange(max(0, r - rr), min(X, r + rr + 1)), np.arange(max(0, c - rcx), min(Y, c + rcx + 1))
        g = np.exp(-((rows[:, None] - r) ** 2) / (2 * sr**2) - ((cols[None, :] - c) ** 2) / (2 * sc**2)).astype(np.float32)
        window = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
        np.maximum(heat[labels[k]][window], g, out=heat[labels[k]][window])
        take = claim_cells(owner, weight, window, g, (r - rows[0], c - cols[0]), box_region)
        values = {"offset": (rc[k, 0] - rows[:, None], rc[k, 1] - cols[None, :]), "height": (z,),
                  "size": np.log(np.maximum([l, w, h], 1e-3)), "rot": (np.sin(yaw), np.cos(yaw)), "vel": (vx, vy)}
        for name, vs in values.items():
            for ch, v in enumerate(vs):
                reg[name][ch][window] = np.where(take, v, reg[name][ch][window])
    return heat, reg, weight


def mean_heading_field(rot: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Per-cell mean heading vector (2, X, Y) of rot targets (B, 2, X, Y) weighted by box weights (B, X, Y): the
    sum over a HEADING_WINDOW around each cell over (its weight + HEADING_PSEUDO)."""
    box = torch.ones(1, 1, *HEADING_WINDOW, device=rot.device)
    pad = (HEADING_WINDOW[0] // 2, HEADING_WINDOW[1] // 2)
    num = F.conv2d((rot * weight[:, None]).sum(0)[:, None], box, padding=pad)[:, 0]  # (2, X, Y)
    den = F.conv2d(weight.sum(0)[None, None], box, padding=pad)[0, 0]  # (X, Y)
    return num / (den + HEADING_PSEUDO)


class Det3dTask(Task):
    """3D boxes with velocity in the ego frame over `classes` (the meta box classes that have 3D
    boxes). Loss components "heatmap" (focal) and one L1 term per regression branch, each scaled
    by its constructor weight. `decode` gives per frame {"boxes" (K, 9) x, y, z, l, w, h, yaw,
    vx, vy; "scores" (K,); "labels" (K,)}. `min_sigma`: a heatmap Gaussian's least spread in cells (at 0.5 a car
    or a pedestrian on 1 m cells is a peak of one cell, its neighbours at exp(-2))."""

    name = "det3d"
    spec = heads.Det3d  # the numpy side: decoder, label keys, blank labels, engine signals
    space = "bev"
    primary_metric = PrimaryMetric("nuscenes/NDS")
    baseline_name = "empty detections"

    def __init__(self, classes: Sequence[str], in_channels: int, grid: BevGrid, width: int = 64,
                 heatmap_weight: float = 1.0, offset_weight: float = 1.0, height_weight: float = 1.0,
                 size_weight: float = 1.0, rot_weight: float = 1.0, vel_weight: float = 0.5,
                 min_pixels: int = 1, score_threshold: float = 0.1, max_detections: int = 200, cell_prior: bool = False,
                 box_region: str = "centre", heading_prior: bool = False, min_sigma: float = 0.5):
        super().__init__(in_channels, in_stride=1)
        if box_region not in BOX_REGIONS:
            raise ValueError(f"task '{self.name}': box_region {box_region!r}, expected one of {BOX_REGIONS}")
        if not min_sigma > 0:
            raise ValueError(f"task '{self.name}': min_sigma {min_sigma}: the heatmap Gaussian's least spread in cells, "
                             "must be > 0")
        self.box_region, self.min_sigma = box_region, float(min_sigma)
        if not classes:
            raise ValueError(f"task '{self.name}' needs a non-empty class list")
        self.classes, self.grid = list(classes), grid
        self.head = CenterPointHead(in_channels, len(self.classes), width, grid.shape if cell_prior else None,
                                    grid.shape if heading_prior else None)
        self.weights = {"heatmap": heatmap_weight, "offset": offset_weight, "height": height_weight,
                        "size": size_weight, "rot": rot_weight, "vel": vel_weight}
        self.min_pixels, self.score_threshold, self.max_detections = min_pixels, score_threshold, max_detections

    @classmethod
    def from_meta(cls, meta: Mapping, in_channels: int, **options: Any) -> Det3dTask:
        classes = [c for c in meta.get("classes", []) if c in BOX_CLASSES]
        if not classes:
            raise ValueError(f"task 'det3d' needs meta 'classes' with some of {list(BOX_CLASSES)}; got {meta.get('classes')}")
        return cls(classes, in_channels, grid_of(meta), **options)

    def frame_boxes(self, sample: Mapping) -> tuple[np.ndarray, np.ndarray]:
        """boxes (M, 9) float32 and class ids (M,) of a sample's labels.boxes3d (classes of this task,
        seen by >= min_pixels pixels, centre inside the grid)."""
        boxes, labels = [], []
        (x0, x1), (y0, y1) = self.grid.x_range, self.grid.y_range
        for b in require(sample, "labels", self.name).get("boxes3d", []):
            if b["class"] not in self.classes or b.get("num_pixels", 1) < self.min_pixels:
                continue
            (x, y, z), v = b["center"], b.get("velocity", [np.nan] * 3)  # absent: unknown, left out of the loss
            if x0 <= x < x1 and y0 <= y < y1:
                boxes.append([x, y, z, *b["size"], b["yaw"], v[0], v[1]])
                labels.append(self.classes.index(b["class"]))
        return np.asarray(boxes, np.float32).reshape(-1, 9), np.asarray(labels, np.int64)

    def build_targets(self, sample: Mapping) -> dict[str, Any]:
        boxes, labels = self.frame_boxes(sample)
        heat, reg, weight = encode_boxes3d(boxes, labels, len(self.classes), self.grid, self.min_sigma, self.box_region)
        # a nuScenes sample's own token, else the one export_nuscenes gives a sim frame
        token = sample.get("sample_token") or (sample_token(sample["scene"], sample["frame_dir"]) if "frame_dir" in sample
                                               else None)
        frame = {"token": token,
                 "ego2world": np.asarray(sample.get("ego2world", np.eye(4)), np.float64),
                 "boxes3d": require(sample, "labels", self.name).get("boxes3d", [])}  # for the nuScenes metrics
        return {"heatmap": heat[None], **{k: v[None] for k, v in reg.items()}, "box_weight": weight[None],  # (1, ...)
                "gt_boxes": [boxes], "gt_labels": [labels], "frames": [frame]}

    def loss(self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        if outputs["heatmap"].shape != targets["heatmap"].shape:
            raise ValueError(f"task '{self.name}': heatmap output {tuple(outputs['heatmap'].shape)} vs target "
                             f"{tuple(targets['heatmap'].shape)}; targets must be built on the model's BEV grid")
        weight = targets["box_weight"][:, None]  # (B, 1, X, Y), each object's cells summing to 1
        out = {"heatmap": self.weights["heatmap"] * focal_loss_with_logits(outputs["heatmap"].float(), targets["heatmap"])}
        for k in REG:
            t, m = targets[k], weight
            if k == "vel":  # unknown velocity (KITTI, a nuScenes box annotated once): NaN, left out of the loss
                m = weight * torch.isfinite(t).all(1, keepdim=True).float()
                t = torch.nan_to_num(t)
            out[k] = self.weights[k] * ((outputs[k].float() - t).abs() * m).sum() / m.sum().clamp(min=1)
        return out

    @torch.no_grad()
    def fit_prior(self, targets: Mapping[str, Any]) -> None:
        """Regressions at their targets' mean (height z, log size; offsets, heading and velocity stay at 0)
        and, with the per-cell prior, each class's heatmap logit per cell at its mean target there
        (3x3-smoothed, one pseudo-frame at the global prior, at most PRIOR_CAP: the prior alone detects
        nothing at score_threshold); with the heading prior, the objects' mean (sin, cos) over a
        HEADING_WINDOW around each cell, HEADING_PSEUDO objects' worth of (0, 0) mixed in."""
        weight = targets["box_weight"]  # (B, X, Y)
        if weight.sum() > 0:
            for k in ("height", "size"):
                mean = (targets[k] * weight[:, None]).sum((0, 2, 3)) / weight.sum()  # (c,) over objects
                self.head.branches[k][-1].bias.copy_(mean.to(self.head.branches[k][-1].bias))
        if self.head.heading_prior is not None:
            self.head.heading_prior.copy_(mean_heading_field(targets["rot"].float(), weight.float()).to(self.head.heading_prior))
        if self.head.cell_prior is None:
            return
        heat = targets["heatmap"].float()  # (B, K, X, Y)
        K, B = heat.shape[1], heat.shape[0]
        box = torch.ones(K, 1, 3, 3, device=heat.device) / 9
        mean = F.conv2d(heat.mean(0, keepdim=True), box, padding=1, groups=K)[0]  # (K, X, Y)
        p = ((mean * B + HEATMAP_PRIOR) / (B + 1)).clamp(1e-4, PRIOR_CAP)
        self.head.branches["heatmap"][-1].bias.zero_()
        self.head.cell_prior.copy_(torch.log(p / (1 - p)).to(self.head.cell_prior))

    def decoding(self) -> dict[str, Any]:
        return {"kind": "centerpoint", "params": {"x_range": list(self.grid.x_range), "y_range": list(self.grid.y_range),
                                                  "resolution": self.grid.resolution,
                                                  "score_threshold": self.score_threshold,
                                                  "max_detections": self.max_detections}}

    @torch.no_grad()
    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """3x3 peaks on the BEV grid, top-k: `hydranet.decoding.decode_centerpoint` (shared with deploy)."""
        return decode_numpy(self.decoding(), outputs)

    def metric(self) -> Det3dMetric:
        return Det3dMetric(self.classes)

    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        return score_constant(self, targets, lambda t: no_detections(len(t["gt_boxes"]), 9))

    def draw(self, canvas, result: Mapping[str, Any], truth: Mapping[str, Any],
             min_score: float = 0.3) -> list[tuple[str, np.ndarray]]:
        """True boxes of its classes as white outlines, predicted boxes (score >= min_score) with
        velocity arrows, on the BEV canvas (a `hydranet.viz.BevCanvas`)."""
        gt = [b for b in truth["labels"].get("boxes3d", []) if b["class"] in self.classes and b.get("num_pixels", 1) > 0]
        canvas.boxes(canvas.inside(gt), self.classes, outline=True)
        boxes, scores, labels = (result[k].cpu().numpy() for k in ("boxes", "scores", "labels"))
        canvas.boxes([{"center": b[:3].tolist(), "size": b[3:6].tolist(), "yaw": float(b[6]),
                       "velocity": [float(b[7]), float(b[8])], "class": self.classes[int(lab)]}
                      for b, sc, lab in zip(boxes.reshape(-1, 9), scores, labels) if sc >= min_score], self.classes)
        return []


def interpolated_precision(scores: np.ndarray, tp: np.ndarray, num_gt: int) -> np.ndarray:
    """Precision interpolated on nuScenes' 101 recall points 0, 0.01, ..., 1 (the highest precision at that recall
    or above; 0 where the detections never reach it) of detections (scores (D,), tp (D,) bool) against num_gt > 0."""
    tp = tp[np.argsort(-scores, kind="stable")].astype(np.float64)
    ctp, cfp = np.cumsum(tp), np.cumsum(1 - tp)
    recall, precision = ctp / num_gt, ctp / np.maximum(ctp + cfp, 1e-9)
    return np.array([precision[recall >= r].max() if (recall >= r).any() else 0.0 for r in np.linspace(0, 1, 101)])


def first_counted_precision(scores: np.ndarray, tp: np.ndarray, num_gt: int, min_recall: float = 0.1) -> float:
    """The interpolated precision at the first recall point `average_precision` counts (min_recall + 0.01): AP is
    above 0 exactly when this is above min_precision. NaN without true boxes."""
    if num_gt == 0:
        return float("nan")
    return float(interpolated_precision(scores, tp, num_gt)[round(100 * min_recall) + 1])


def average_precision(scores: np.ndarray, tp: np.ndarray, num_gt: int, min_recall: float = 0.1,
                      min_precision: float = 0.1) -> float:
    """nuScenes-style AP: precision interpolated on 101 recall points, the part above min_recall and
    min_precision normalized to [0, 1]."""
    if num_gt == 0:
        return float("nan")
    prec = interpolated_precision(scores, tp, num_gt)[round(100 * min_recall) + 1:] - min_precision
    return float(np.clip(prec, 0, None).mean() / (1 - min_precision))


def centre_matches(frames: Sequence[tuple[np.ndarray, ...]], k: int,
                   threshold: float) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Class k's detections matched to its true boxes by BEV centre distance, greedily by score within each frame
    (nuScenes): frames of (boxes (D, 9), scores (D,), labels (D,), true boxes (G, >=2), true labels (G,)) ->
    (scores (N,), hit (N,) bool, the distances of the hits in m)."""
    scores, hits, dist = [], [], []
    for pb, ps, pl, gb, gl in frames:
        p, s, g = pb[pl == k], ps[pl == k], gb[gl == k]
        taken = np.zeros(len(g), bool)
        for i in np.argsort(-s, kind="stable"):
            d = np.linalg.norm(g[:, :2] - p[i, :2], axis=1) if len(g) else np.zeros(0)
            d[taken] = np.inf
            j = int(np.argmin(d)) if len(d) else -1
            hit = j >= 0 and d[j] < threshold
            if hit:
                taken[j] = True
                dist.append(float(d[j]))
            scores.append(s[i])
            hits.append(hit)
    return np.asarray(scores), np.asarray(hits, bool), dist


class CenterDistanceAP(Metric):
    """mAP over centre-distance thresholds 0.5, 1, 2, 4 m (greedy matching by score, as nuScenes)
    and the mean translation error of matches at 2 m; per class and mean. Targets need "gt_boxes"
    and "gt_labels"."""

    THRESHOLDS = (0.5, 1.0, 2.0, 4.0)

    def __init__(self, classes: Sequence[str]):
        self.classes = list(classes)
        self.frames: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        for det, gb, gl in zip(decoded, targets["gt_boxes"], targets["gt_labels"], strict=True):
            self.frames.append((np.asarray(det["boxes"].cpu()), np.asarray(det["scores"].cpu()),
                                np.asarray(det["labels"].cpu()), np.asarray(gb.cpu()), np.asarray(gl.cpu())))

    def compute(self) -> dict[str, float]:
        out: dict[str, float] = {}
        aps, ates = [], []
        for k, name in enumerate(self.classes):
            num_gt = sum(int((gl == k).sum()) for *_, gl in self.frames)
            if num_gt == 0:
                continue
            cls_ap, errs = [], []
            for th in self.THRESHOLDS:
                scores, tps, dist = centre_matches(self.frames, k, th)
                cls_ap.append(average_precision(scores, tps, num_gt))
                if th == 2.0:
                    errs += dist
            out[f"AP/{name}"] = float(np.mean(cls_ap))
            aps.append(out[f"AP/{name}"])
            ates.append(float(np.mean(errs)) if errs else 1.0)
        out["mAP"] = float(np.mean(aps)) if aps else float("nan")
        out["mATE"] = float(np.mean(ates)) if ates else float("nan")
        return out


class Det3dMetric(CenterDistanceAP):
    """CenterDistanceAP plus the nuScenes detection metrics (hydranet.metrics) over the frames
    whose targets carry a sample token; `write_predictions` writes the nuScenes submission."""

    def __init__(self, classes: Sequence[str]):
        super().__init__(classes)
        self.config = DetectionConfig()
        self.submission: dict[str, list] = {}
        self.gt: dict[str, list] = {}
        self.pred: dict[str, list] = {}
        self._tokens: list[str | None] = []  # per frame seen: its sample token (None: not in the nuScenes metrics)
        self._states: list = []  # `states()`, computed once per item as items arrive

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        super().update(decoded, targets)
        for det, frame in zip(decoded, targets.get("frames", [None] * len(decoded)), strict=True):
            self._tokens.append(None if frame is None else frame["token"])
            if frame is None or frame["token"] is None:
                continue
            tok, pose = frame["token"], frame["ego2world"]
            entries = frame_results(det["boxes"].cpu().numpy(), det["scores"].cpu().numpy(), det["labels"].cpu().numpy(),
                                    self.classes, pose, tok)
            self.submission[tok] = entries
            self.pred[tok] = result_eval_boxes(entries, pose, self.config)
            self.gt[tok] = frame_eval_boxes({"boxes3d": frame["boxes3d"]}, pose, tok, self.config)

    def compute(self) -> dict[str, float]:
        out = super().compute()
        if self.gt:
            out.update(self._nuscenes_values(evaluate_boxes(self.gt, self.pred, self.config)[0]))
        return out

    def states(self) -> list[dict | None]:
        """Per frame: the nuScenes detection pieces (`hydranet.metrics.nuscenes_detection.sample_state`:
        per class GT count, predictions' scores, match flags per distance and TP errors); None for a frame
        without a sample token. They give the "nuscenes/*" metrics, not the centre-distance AP."""
        cache = self._states
        cache += [None if tok is None or tok not in self.gt else sample_state(tok, self.gt[tok], self.pred[tok], self.config)
                  for tok in self._tokens[len(cache):]]
        return cache

    def compute_states(self, states: Sequence) -> dict[str, float]:
        states = [s for s in states if s is not None]
        if not states:
            return {}
        m = state_metrics(states, self.config)
        return self._nuscenes_values(m)

    def merge_states(self, states: Sequence) -> dict | None:
        """Frames' states as one (numpy arrays, in frame order); None when no frame has one."""
        states = [s for s in states if s is not None]
        return merge_sample_states(states) if states else None

    @staticmethod
    def _nuscenes_values(m) -> dict[str, float]:
        out = {"nuscenes/mAP": float(m.mean_ap), "nuscenes/NDS": float(m.nd_score)}
        short = {"trans_err": "mATE", "scale_err": "mASE", "orient_err": "mAOE", "vel_err": "mAVE", "attr_err": "mAAE"}
        out.update({f"nuscenes/{short[k]}": float(v) for k, v in m.tp_errors.items()})
        return out

    def write_predictions(self, folder: str | Path) -> list[Path]:
        """The nuScenes submission of every evaluated frame: FOLDER/nuscenes_results.json."""
        return [write_results(Path(folder) / "nuscenes_results.json", self.submission)] if self.submission else []
