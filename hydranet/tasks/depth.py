"""Dense metric depth per camera.

The head predicts log depth; the loss is the scale-invariant log error of Eigen, Puhrsch and
Fergus ("Depth Map Prediction from a Single Image using a Multi-Scale Deep Network", NeurIPS
2014) with lambda < 1 so absolute scale is still learned (as BTS / AdaBins use it), computed only
on valid pixels (0 < depth <= max_depth; 0 marks sky / no surface). Metrics over every valid
pixel seen: AbsRel, RMSE (metres) and delta < 1.25 (Eigen et al.).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hydranet import heads
from hydranet.tasks.base import DenseHead, Metric, PrimaryMetric, Task, decode_numpy, require, score_constant
from hydranet.viz import depth_rgb


class DepthTask(Task):
    """Per camera: log-depth logits (B*N, 1, H, W); decode: depth (H, W) metres."""

    name = "depth"
    spec = heads.Depth  # the numpy side: decoder, label keys, blank labels, engine signals
    primary_metric = PrimaryMetric("abs_rel", higher_is_better=False)
    baseline_name = "mean depth"

    def __init__(self, in_channels: int, in_stride: int = 8, width: int = 32, max_depth: float = 100.0,
                 min_depth: float = 0.1, silog_lambda: float = 0.85):
        super().__init__(in_channels, in_stride)
        self.head = DenseHead(in_channels, 1, width, in_stride=in_stride, bias_init=math.log(10.0))
        self.max_depth, self.min_depth, self.silog_lambda = max_depth, min_depth, silog_lambda

    @classmethod
    def from_meta(cls, meta: Mapping, in_channels: int, **options: Any) -> DepthTask:
        return cls(in_channels, **options)

    def build_targets(self, sample: Mapping) -> dict[str, Any]:
        depth = np.asarray(require(sample, "depth", self.name), np.float32)  # (N, H, W) metres
        return {"depth": depth[:, None]}  # (N, 1, H, W)

    def valid(self, depth: torch.Tensor) -> torch.Tensor:
        return (depth > 0) & (depth <= self.max_depth)

    def loss(self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        pred_log = outputs["logits"].float()  # (B*N, 1, H, W)
        gt = targets["depth"]
        valid = self.valid(gt)
        if not valid.any():
            return {"silog": pred_log.sum() * 0.0}
        d = pred_log[valid] - gt[valid].clamp(min=self.min_depth).log()  # (P,)
        silog = (d.pow(2).mean() - self.silog_lambda * d.mean().pow(2)).clamp(min=1e-8).sqrt()
        return {"silog": silog}

    def decoding(self) -> dict[str, Any]:
        return {"kind": "depth", "params": {"min_depth": self.min_depth, "max_depth": self.max_depth}}

    @torch.no_grad()
    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """exp of the clamped log depth: `hydranet.decoding.decode_depth` (shared with deploy)."""
        return decode_numpy(self.decoding(), outputs)

    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """The mean valid depth of the evaluated frames, everywhere."""
        valid = [(t["depth"] > 0) & (t["depth"] <= self.max_depth) for t in targets]
        total = sum(float(t["depth"][v].double().sum()) for t, v in zip(targets, valid))
        mean = total / max(sum(int(v.sum()) for v in valid), 1)
        return score_constant(self, targets, lambda t: [{"depth": torch.full(t["depth"].shape[-2:], mean)}] * len(t["depth"]))

    def draw(self, canvas: np.ndarray, result: Mapping[str, Any], truth: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
        panels = [("depth truth", depth_rgb(truth["depth"]))] if "depth" in truth else []
        return panels + [("depth prediction", depth_rgb(result["depth"].cpu().numpy()))]

    def metric(self) -> DepthMetric:
        return DepthMetric(self.max_depth)


class DepthMetric(Metric):
    """AbsRel, RMSE and delta<1.25 over every valid pixel (0 < gt <= max_depth)."""

    def __init__(self, max_depth: float):
        self.max_depth = max_depth
        self.n = 0
        self.abs_rel = 0.0
        self.sq = 0.0
        self.delta1 = 0
        self._states: list[dict[str, float]] = []  # per image: {"n", "abs_rel", "sq", "delta1"} sums

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        for det, gt in zip(decoded, targets["depth"], strict=True):
            pred, gt = det["depth"].cpu().double(), gt.cpu().double().reshape(det["depth"].shape)
            valid = (gt > 0) & (gt <= self.max_depth)
            p, g = pred[valid], gt[valid]
            s = {"n": int(valid.sum()), "abs_rel": float(((p - g).abs() / g).sum()), "sq": float(((p - g) ** 2).sum()),
                 "delta1": int((torch.maximum(p / g, g / p) < 1.25).sum())}
            self.n += s["n"]
            self.abs_rel += s["abs_rel"]
            self.sq += s["sq"]
            self.delta1 += s["delta1"]
            self._states.append(s)

    def compute(self) -> dict[str, float]:
        return self._values(self.n, self.abs_rel, self.sq, self.delta1)

    @staticmethod
    def _values(n: int, abs_rel: float, sq: float, delta1: int) -> dict[str, float]:
        if not n:
            return {"abs_rel": float("nan"), "rmse": float("nan"), "delta1": float("nan")}
        return {"abs_rel": abs_rel / n, "rmse": math.sqrt(sq / n), "delta1": delta1 / n}

    def states(self) -> list[dict[str, float]]:
        return self._states

    def compute_states(self, states: Sequence) -> dict[str, float]:
        states = [s for s in states if s is not None]
        n, abs_rel, sq, delta1 = (0, 0.0, 0.0, 0)
        for s in states:  # summed in item order, as `update` does: the same floats over every item
            n, abs_rel, sq, delta1 = n + s["n"], abs_rel + s["abs_rel"], sq + s["sq"], delta1 + s["delta1"]
        return self._values(n, abs_rel, sq, delta1)
