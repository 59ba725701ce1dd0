"""Lane lines per camera: binary line segmentation with instance separation by connectivity.

The head segments painted lane-line centre lines drawn `line_width_frac * H` pixels wide (BCE on
logits, positive pixels up-weighted as lines are thin; as the lane branch of YOLOP, Wu et al.
2021); decoding splits the predicted line mask into lane instances by 8-connected components.
Metrics: pixel IoU of the line mask (as YOLOP reports) and lane F1 as CULane (Pan et al., "Spatial
as Deep: Spatial CNN for Traffic Scene Understanding", AAAI 2018): every lane is drawn with a
width proportional to the image (CULane's 30 px at 590 rows), predicted and ground-truth lanes
are matched one-to-one by IoU (greedy by IoU, which equals the optimal assignment at IoU >= 0.5
for non-overlapping lanes), and a match with IoU >= 0.5 is a true positive.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np
import torch

from hydranet import heads
from hydranet.tasks.base import (BinaryMaskTask, Metric, PrimaryMetric, camera_labels, decode_numpy, image_hw,
                                 score_constant)
from hydranet.tasks.drivable import BinaryIoU

CULANE_WIDTH_FRAC = 30 / 590  # CULane evaluation draws lanes 30 px wide on 590-row images


def line_width(height: int, frac: float) -> int:
    return max(1, int(round(height * frac)))


def draw_lanes(lanes: list[list[np.ndarray]], hw: tuple[int, int], width: int) -> np.ndarray:
    """Instance masks (L, H, W) bool: lane l is every polyline (P, 2) of lanes[l] drawn `width` px."""
    out = np.zeros((len(lanes),) + tuple(hw), np.uint8)
    for k, polylines in enumerate(lanes):
        for pts in polylines:
            pts = np.round(np.asarray(pts, np.float64)).astype(np.int32).reshape(-1, 1, 2)
            if len(pts) == 1:
                cv2.circle(out[k], tuple(int(v) for v in pts[0, 0]), max(width // 2, 0), 1, -1)
            else:
                cv2.polylines(out[k], [pts], False, 1, thickness=width)
    return out.astype(bool)


class LanesTask(BinaryMaskTask):
    """Per camera: line logits (B*N, 1, H, W); decode: {"mask" (H, W) bool, "instances" (H, W)
    int32 with 0 = background and 1..K one lane each}."""

    name = "lanes"
    spec = heads.Lanes  # the numpy side: decoder, label keys, blank labels, engine signals
    primary_metric = PrimaryMetric("pixel_iou")
    baseline_name = "no lanes"

    def __init__(self, in_channels: int, in_stride: int = 8, width: int = 32, line_width_frac: float = 0.02,
                 pos_weight: float = 4.0, threshold: float = 0.5, min_area_frac: float = 2e-4,
                 eval_width_frac: float = CULANE_WIDTH_FRAC):
        super().__init__(in_channels, in_stride, width, pos_weight, threshold)
        self.line_width_frac = line_width_frac
        self.min_area_frac, self.eval_width_frac = min_area_frac, eval_width_frac

    @classmethod
    def from_meta(cls, meta: Mapping, in_channels: int, **options: Any) -> LanesTask:
        return cls(in_channels, **options)

    def build_targets(self, sample: Mapping) -> dict[str, Any]:
        hw = image_hw(sample)
        masks, lanes = [], []
        for cam in camera_labels(sample, self.name):
            by_id: dict[Any, list[np.ndarray]] = {}
            for lane in cam.get("lanes2d", []):  # a lane leaving and re-entering the image is two polylines
                by_id.setdefault(lane["lane_id"], []).append(np.asarray(lane["points"], np.float32).reshape(-1, 2))
            cam_lanes = list(by_id.values())
            inst = draw_lanes(cam_lanes, hw, line_width(hw[0], self.line_width_frac))
            masks.append(inst.any(axis=0) if len(cam_lanes) else np.zeros(hw, bool))
            lanes.append(cam_lanes)
        return {"mask": np.stack(masks)[:, None].astype(np.float32),  # (N, 1, H, W)
                "lanes": lanes}  # N x [lane][polyline] (P, 2) pixel points

    def decoding(self) -> dict[str, Any]:
        return {"kind": "lanes", "params": {"threshold": self.threshold, "min_area_frac": self.min_area_frac}}

    @torch.no_grad()
    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Threshold, then 8-connected components: `hydranet.decoding.decode_lanes` (shared with deploy)."""
        return decode_numpy(self.decoding(), outputs)

    def metric(self) -> LaneMetric:
        return LaneMetric(self.line_width_frac, self.eval_width_frac)

    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """No lane pixels anywhere (the per-pixel majority)."""
        def predict(t):
            hw = t["mask"].shape[-2:]
            empty = {"mask": torch.zeros(hw, dtype=torch.bool), "instances": torch.zeros(hw, dtype=torch.int32)}
            return [empty] * len(t["mask"])

        return score_constant(self, targets, predict)

    def draw(self, canvas: np.ndarray, result: Mapping[str, Any], truth: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
        canvas[result["mask"].cpu().numpy()] = (255, 255, 255)
        return []


def match_f1_counts(pred: np.ndarray, gt: np.ndarray, iou_threshold: float = 0.5) -> tuple[int, int, int]:
    """(tp, fp, fn) of instance masks pred (P, H, W) vs gt (G, H, W), one-to-one by IoU."""
    if not len(pred) or not len(gt):
        return 0, len(pred), len(gt)
    p, g = pred.reshape(len(pred), -1).astype(np.float64), gt.reshape(len(gt), -1).astype(np.float64)
    inter = p @ g.T
    iou = inter / (p.sum(1)[:, None] + g.sum(1)[None, :] - inter).clip(min=1)
    tp, used_p, used_g = 0, set(), set()
    for flat in np.argsort(-iou, axis=None):
        i, j = np.unravel_index(flat, iou.shape)
        if iou[i, j] < iou_threshold:
            break
        if i not in used_p and j not in used_g:
            used_p.add(i)
            used_g.add(j)
            tp += 1
    return tp, len(pred) - tp, len(gt) - tp


class LaneMetric(Metric):
    """Pixel IoU of the line mask and CULane-style lane F1 at IoU 0.5."""

    def __init__(self, line_width_frac: float, eval_width_frac: float = CULANE_WIDTH_FRAC):
        self.line_width_frac, self.eval_width_frac = line_width_frac, eval_width_frac
        self.pixel = BinaryIoU()
        self.tp = self.fp = self.fn = 0
        self._counts: list[tuple[int, int, int]] = []  # per image: lane (tp, fp, fn)

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        self.pixel.update(decoded, targets)
        for det, lanes in zip(decoded, targets["lanes"], strict=True):
            inst = det["instances"].cpu().numpy()
            hw = inst.shape
            w_eval = line_width(hw[0], self.eval_width_frac)
            grow = max(1, w_eval - line_width(hw[0], self.line_width_frac) + 1)
            kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (grow, grow))
            pred = np.stack([cv2.dilate((inst == k).astype(np.uint8), kernel) for k in range(1, inst.max() + 1)]) \
                if inst.max() > 0 else np.zeros((0,) + hw, np.uint8)
            gt = draw_lanes(lanes, hw, w_eval)
            tp, fp, fn = match_f1_counts(pred.astype(bool), gt)
            self.tp, self.fp, self.fn = self.tp + tp, self.fp + fp, self.fn + fn
            self._counts.append((tp, fp, fn))

    def compute(self) -> dict[str, float]:
        return self._values(self.pixel.compute()["iou"], self.tp, self.fp, self.fn)

    @staticmethod
    def _values(pixel_iou: float, tp: int, fp: int, fn: int) -> dict[str, float]:
        denom = 2 * tp + fp + fn
        return {"pixel_iou": pixel_iou, "f1": 2 * tp / denom if denom else float("nan"),
                "precision": tp / (tp + fp) if tp + fp else float("nan"),
                "recall": tp / (tp + fn) if tp + fn else float("nan")}

    def states(self) -> list[dict[str, int]]:
        """Per image: pixel "inter", "union" and lane "tp", "fp", "fn"."""
        return [{**s, "tp": c[0], "fp": c[1], "fn": c[2]} for s, c in zip(self.pixel.states(), self._counts, strict=True)]

    def compute_states(self, states: Sequence) -> dict[str, float]:
        states = [s for s in states if s is not None]
        tp, fp, fn = (sum(s[k] for s in states) for k in ("tp", "fp", "fn"))
        return self._values(self.pixel.compute_states(states)["iou"], tp, fp, fn)
