"""Surface normals per camera (unit vectors in the camera frame: x right, y down, z forward).

The head predicts an unnormalized 3-vector per pixel; the loss normalizes it and takes the mean
of 1 - cos(angle) to the ground truth over valid pixels (ground-truth normal nonzero; the
angular / cosine loss of Bansal et al., "Marr Revisited", CVPR 2016, and Eigen & Fergus, ICCV
2015). Metrics over every valid pixel: mean angular error in degrees and the share of pixels
under 11.25, 22.5 and 30 degrees (Fouhey et al., ICCV 2013).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hydranet import heads
from hydranet.tasks.base import DenseHead, Metric, PrimaryMetric, Task, decode_numpy, masked_mean, require, score_constant
from hydranet.viz import normals_rgb


class NormalsTask(Task):
    """Per camera: raw vectors (B*N, 3, H, W); decode: unit normals (H, W, 3)."""

    name = "normals"
    spec = heads.Normals  # the numpy side: decoder, label keys, blank labels, engine signals
    primary_metric = PrimaryMetric("mean_angle_deg", higher_is_better=False, margin=0.5)
    baseline_name = "mean normal"

    def __init__(self, in_channels: int, in_stride: int = 8, width: int = 32):
        super().__init__(in_channels, in_stride)
        self.head = DenseHead(in_channels, 3, width, in_stride=in_stride)

    @classmethod
    def from_meta(cls, meta: Mapping, in_channels: int, **options: Any) -> NormalsTask:
        return cls(in_channels, **options)

    def build_targets(self, sample: Mapping) -> dict[str, Any]:
        n = np.asarray(require(sample, "normals", self.name), np.float32)  # (N, H, W, 3)
        return {"normals": np.ascontiguousarray(n.transpose(0, 3, 1, 2))}  # (N, 3, H, W)

    def loss(self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        # unit vectors as F.normalize(dim=1, eps=1e-6) gives them, 10x faster on CPU (torch's vector norm over the
        # channel dim of an NCHW tensor is slow: 80 of the 1300 ms of a demo step); the clamp before the rsqrt
        # keeps the gradient finite at a zero vector
        x = outputs["logits"].float()  # (B*N, 3, H, W)
        pred = x * torch.rsqrt((x * x).sum(dim=1, keepdim=True).clamp_min(1e-12))
        gt = targets["normals"]
        valid = (gt * gt).sum(dim=1) > 0.25  # (B*N, H, W): |gt| > 0.5
        cos = (pred * gt).sum(dim=1)
        return {"cosine": masked_mean(1.0 - cos, valid)}

    def decoding(self) -> dict[str, Any]:
        return {"kind": "normals", "params": {}}

    @torch.no_grad()
    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """Unit vectors (H, W, 3): `hydranet.decoding.decode_normals` (shared with deploy)."""
        return decode_numpy(self.decoding(), outputs)

    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """The mean normal of the evaluated frames, everywhere."""
        tot = sum(t["normals"].double().sum(dim=(0, 2, 3)) for t in targets)
        mean = (tot / tot.norm().clamp(min=1e-9)).float()
        return score_constant(self, targets,
                              lambda t: [{"normals": mean.expand(*t["normals"].shape[-2:], 3)}] * len(t["normals"]))

    def draw(self, canvas: np.ndarray, result: Mapping[str, Any], truth: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
        panels = [("normals truth", normals_rgb(truth["normals"]))] if "normals" in truth else []
        return panels + [("normals prediction", normals_rgb(result["normals"].cpu().numpy()))]

    def metric(self) -> NormalsMetric:
        return NormalsMetric()


class NormalsMetric(Metric):
    """Mean angular error (degrees) and share of valid pixels under 11.25/22.5/30 degrees."""

    THRESHOLDS = (11.25, 22.5, 30.0)

    def __init__(self):
        self.n = 0
        self.sum_deg = 0.0
        self.under = {t: 0 for t in self.THRESHOLDS}
        self._states: list[dict[str, Any]] = []  # per image: {"n", "sum_deg", "under": [count per threshold]}

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        for det, gt in zip(decoded, targets["normals"], strict=True):
            pred = det["normals"].cpu().double()  # (H, W, 3)
            gt = gt.cpu().double().permute(1, 2, 0)  # (H, W, 3)
            valid = gt.norm(dim=-1) > 0.5
            cos = (pred[valid] * F.normalize(gt[valid], dim=-1)).sum(-1).clamp(-1.0, 1.0)
            deg = torch.rad2deg(torch.acos(cos))
            s = {"n": int(valid.sum()), "sum_deg": float(deg.sum()), "under": [int((deg < t).sum()) for t in self.THRESHOLDS]}
            self.n += s["n"]
            self.sum_deg += s["sum_deg"]
            for t, u in zip(self.THRESHOLDS, s["under"]):
                self.under[t] += u
            self._states.append(s)

    def compute(self) -> dict[str, float]:
        return self._values(self.n, self.sum_deg, [self.under[t] for t in self.THRESHOLDS])

    def _values(self, n: int, sum_deg: float, under: Sequence[int]) -> dict[str, float]:
        if not n:
            return {"mean_angle_deg": float("nan"), **{f"under_{t:g}": float("nan") for t in self.THRESHOLDS}}
        return {"mean_angle_deg": sum_deg / n, **{f"under_{t:g}": u / n for t, u in zip(self.THRESHOLDS, under)}}

    def states(self) -> list[dict[str, Any]]:
        return self._states

    def compute_states(self, states: Sequence) -> dict[str, float]:
        n, sum_deg, under = 0, 0.0, [0] * len(self.THRESHOLDS)
        for s in states:
            if s is not None:
                n, sum_deg, under = n + s["n"], sum_deg + s["sum_deg"], [a + b for a, b in zip(under, s["under"])]
        return self._values(n, sum_deg, under)
