"""Drivable-area segmentation per camera: a binary per-pixel head.

Binary cross-entropy on logits (the sigmoid lives in the loss and the decoder, never in the head:
see YOLOP's double sigmoid, hustvl/YOLOP#117); metric: intersection over union of the drivable
class accumulated over the dataset, as YOLOP (Wu et al., "YOLOP: You Only Look Once for Panoptic
Driving Perception", 2021) reports it. Targets come from the sample's `drivable` mask (the
reader derives it from `semantic` in {road, lane_marking, crosswalk}).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hydranet import heads
from hydranet.viz import draw_camera

from hydranet.tasks.base import BinaryMaskTask, Metric, PrimaryMetric, decode_numpy, require, score_constant


class DrivableTask(BinaryMaskTask):
    """Per camera: logits (B*N, 1, H, W); decode: bool mask (H, W) per image."""

    name = "drivable"
    spec = heads.Drivable  # the numpy side: decoder, label keys, blank labels, engine signals
    primary_metric = PrimaryMetric("iou")
    baseline_name = "per-pixel majority"

    @classmethod
    def from_meta(cls, meta: Mapping, in_channels: int, **options: Any) -> DrivableTask:
        return cls(in_channels, **options)

    def build_targets(self, sample: Mapping) -> dict[str, Any]:
        mask = np.asarray(require(sample, "drivable", self.name), bool)  # (N, H, W)
        return {"mask": mask[:, None].astype(np.float32)}  # (N, 1, H, W)

    def decoding(self) -> dict[str, Any]:
        return {"kind": "binary_mask", "params": {"threshold": self.threshold}}

    @torch.no_grad()
    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """sigmoid > threshold: `hydranet.decoding.decode_binary_mask` (shared with deploy)."""
        return decode_numpy(self.decoding(), outputs)

    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """The per-pixel majority mask of the evaluated frames."""
        frac = sum(t["mask"].double().sum(0) for t in targets) / sum(len(t["mask"]) for t in targets)
        majority = frac[0] > 0.5  # (H, W)
        return score_constant(self, targets, lambda t: [{"mask": majority}] * len(t["mask"]))

    def draw(self, canvas: np.ndarray, result: Mapping[str, Any], truth: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
        canvas[:] = draw_camera(canvas, {}, [], result["mask"].cpu().numpy())
        return []

    def metric(self) -> BinaryIoU:
        return BinaryIoU()


class BinaryIoU(Metric):
    """IoU of a binary mask accumulated over every pixel seen (decoded "mask" vs target "mask")."""

    def __init__(self):
        self.inter = 0
        self.union = 0
        self._states: list[dict[str, int]] = []  # per image: {"inter", "union"}

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        for det, gt in zip(decoded, targets["mask"], strict=True):
            pred, gt = det["mask"].cpu().bool(), gt.cpu().reshape(det["mask"].shape) > 0.5
            inter, union = int((pred & gt).sum()), int((pred | gt).sum())
            self.inter += inter
            self.union += union
            self._states.append({"inter": inter, "union": union})

    def compute(self) -> dict[str, float]:
        return {"iou": self.inter / self.union if self.union else float("nan")}

    def states(self) -> list[dict[str, int]]:
        return self._states

    def compute_states(self, states: Sequence) -> dict[str, float]:
        inter = sum(s["inter"] for s in states if s is not None)
        union = sum(s["union"] for s in states if s is not None)
        return {"iou": inter / union if union else float("nan")}
