"""BEV map segmentation: drivable area, lane lines and object occupancy on the BEV grid.

As the map heads of BEVFusion (Liu et al., ICRA 2023) and Lift-Splat-Shoot (Philion & Fidler,
ECCV 2020): independent per-cell binary channels (a cell can be drivable and hold a lane line),
trained with BCE-with-logits, evaluated with IoU per channel. Targets come from the dataset's
`bev` raster (docs/dataset_format.md: drivable, lane lines, object class + 1) area-resampled to the
model's grid: a cell is drivable when at least `drivable_fraction` of its raster pixels are, holds
a lane line / an object when any of its pixels does (thin lines survive coarse cells). Cells the
raster does not cover are ignored by loss and metric.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hydranet import heads
from hydranet.bevgrid import BevGrid, grid_of, resample_raster
from hydranet.models.layers import conv_bn_relu
from hydranet.tasks.base import (Metric, PrimaryMetric, Task, decode_numpy, masked_mean, require, score_constant,
                                 weighted_bce_prior_logit)

CHANNELS = ("drivable", "lanes", "objects")  # the bev.png channels, in order


class BevMapHead(nn.Module):
    """BEV features (B, C, X, Y) -> {"logits": (B, K, X, Y)}: 3x3 conv-BN-ReLU (x depth), 1x1 conv, plus a
    per-cell logit (K, X, Y) when `grid_shape` is given: the layout prior of the ego frame (a road ahead of
    the car, kerbs at the sides) fitted to the training labels, as BEVFormer's learned BEV queries carry
    one, so the features only have to explain how this frame differs from it."""

    def __init__(self, in_channels: int, num_channels: int, width: int = 32, depth: int = 2,
                 grid_shape: tuple[int, int] | None = None):
        super().__init__()
        self.body = conv_bn_relu(in_channels, width, depth)
        self.out = nn.Conv2d(width if depth else in_channels, num_channels, 1)
        # fitted to the training labels (BevMapTask.fit_prior), not trained: Adam moves every cell's own logit by
        # about lr a step whatever its gradient, so batches of 2 frames would random-walk the prior away
        self.register_buffer("cell_prior", torch.zeros(num_channels, *grid_shape) if grid_shape is not None else None)

    def forward(self, bev: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.out(self.body(bev))  # (B, K, X, Y)
        return {"logits": logits + self.cell_prior if self.cell_prior is not None else logits}


class BevMapTask(Task):
    """Per-cell binary map channels (subset of CHANNELS). Loss "bce" (masked, per-channel
    `pos_weight` optional); decode gives per frame {"mask": (K, X, Y) bool}; metric: IoU per
    channel and their mean."""

    name = "bevmap"
    spec = heads.BevMap  # the numpy side: decoder, label keys, blank labels, engine signals
    space = "bev"
    primary_metric = PrimaryMetric("mIoU")
    baseline_name = "per-cell majority"

    def __init__(self, in_channels: int, grid: BevGrid, source_grid: BevGrid | None, channels: Sequence[str] = CHANNELS,
                 width: int = 32, depth: int = 2, drivable_fraction: float = 0.5,
                 pos_weight: Sequence[float] | None = None, threshold: float = 0.5, cell_prior: bool = False):
        super().__init__(in_channels, in_stride=1)
        unknown = [c for c in channels if c not in CHANNELS]
        if unknown or not channels:
            raise ValueError(f"task '{self.name}': unknown map channel '{unknown[0] if unknown else ''}'; "
                             f"choose from {list(CHANNELS)}")
        if pos_weight is not None and len(pos_weight) != len(channels):
            raise ValueError(f"task '{self.name}': pos_weight has {len(pos_weight)} values for {len(channels)} channels")
        self.channels, self.grid, self.source_grid = list(channels), grid, source_grid
        self.head = BevMapHead(in_channels, len(self.channels), width, depth, grid.shape if cell_prior else None)
        self.drivable_fraction, self.threshold = drivable_fraction, threshold
        self.register_buffer("pos_weight", torch.tensor(pos_weight if pos_weight is not None else [1.0] * len(channels),
                                                        dtype=torch.float32).view(-1, 1, 1), persistent=False)

    @classmethod
    def from_meta(cls, meta: Mapping, in_channels: int, **options: Any) -> BevMapTask:
        source = BevGrid.from_meta(meta) if "bev" in meta else None
        return cls(in_channels, grid_of(meta), source, **options)

    def build_targets(self, sample: Mapping) -> dict[str, Any]:
        raster = np.asarray(require(sample, "bev", self.name))  # (3, Xs, Ys) uint8
        src = self.source_grid or self.grid
        frac, covered = resample_raster(raster, src, self.grid)  # (3, X, Y), (X, Y)
        if "bev_valid" in sample:  # a turned raster (hydranet/bev_augment.py): cells from outside are unknown
            unknown, _ = resample_raster((~np.asarray(sample["bev_valid"], bool))[None].astype(np.uint8), src, self.grid)
            covered &= unknown[0] == 0
        thresholds = {"drivable": self.drivable_fraction, "lanes": 1e-6, "objects": 1e-6}
        mask = np.stack([frac[CHANNELS.index(c)] >= thresholds[c] for c in self.channels]).astype(np.float32)
        return {"mask": mask[None], "valid": covered[None]}  # (1, K, X, Y), (1, X, Y)

    def loss(self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        logits = outputs["logits"].float()
        if logits.shape != targets["mask"].shape:
            raise ValueError(f"task '{self.name}': logits {tuple(logits.shape)} vs target {tuple(targets['mask'].shape)}; "
                             "targets must be built on the model's BEV grid")
        bce = F.binary_cross_entropy_with_logits(logits, targets["mask"], pos_weight=self.pos_weight, reduction="none")
        return {"bce": masked_mean(bce, targets["valid"][:, None].expand_as(bce))}

    @torch.no_grad()
    def fit_prior(self, targets: Mapping[str, Any]) -> None:
        """Each channel's bias at its positive rate over the valid cells of `targets`; with the per-cell
        prior, the bias stays 0 and each cell's logit starts at that cell's own rate, with one pseudo-count
        of the channel's rate so a cell seen in few frames keeps near the channel's. Not smoothed over
        neighbours: lane lines are one 2 m cell wide, and a 3x3 box blurred them away (the prior alone
        decoded at 0.3 scored lanes IoU 0.32 smoothed, 0.57 not; docs/benchmarks.md)."""
        valid = targets["valid"][:, None].expand_as(targets["mask"]).float()  # (B, K, X, Y)
        pos = (targets["mask"] * valid).sum(0)  # (K, X, Y)
        seen = valid.sum(0)
        rate = pos.sum((1, 2)) / seen.sum((1, 2)).clamp(min=1)  # (K,)
        w = self.pos_weight.view(-1, 1, 1).cpu()
        if self.head.cell_prior is None:
            self.head.out.bias.copy_(weighted_bce_prior_logit(rate, w.view(-1)))
            return
        cell = (pos + rate[:, None, None]) / (seen + 1)  # (K, X, Y)
        self.head.out.bias.zero_()
        self.head.cell_prior.copy_(weighted_bce_prior_logit(cell.cpu(), w).to(self.head.cell_prior.device))

    def decoding(self) -> dict[str, Any]:
        return {"kind": "multi_mask", "params": {"threshold": self.threshold}}

    @torch.no_grad()
    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """sigmoid > threshold per channel: `hydranet.decoding.decode_multi_mask` (shared with deploy)."""
        return decode_numpy(self.decoding(), outputs)

    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """The per-cell majority map of the evaluated frames."""
        frac = sum(t["mask"].double().sum(0) for t in targets) / sum(len(t["mask"]) for t in targets)
        majority = frac > 0.5  # (K, X, Y)
        return score_constant(self, targets, lambda t: [{"mask": majority}] * len(t["mask"]))

    def draw(self, canvas, result: Mapping[str, Any], truth: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
        """The predicted map on the BEV canvas (a `hydranet.viz.BevCanvas`): drivable grey, lanes white."""
        mask = result["mask"].cpu().numpy()  # (K, X, Y)
        for name, color in (("drivable", (80, 80, 85)), ("lanes", (230, 230, 230))):
            if name in self.channels:
                canvas.paint(mask[self.channels.index(name)], color)
        return []

    def metric(self) -> ChannelIoU:
        return ChannelIoU(self.channels)


class ChannelIoU(Metric):
    """IoU per channel over every valid cell seen ("iou/<channel>") and their mean ("mIoU")."""

    def __init__(self, channels: Sequence[str]):
        self.channels = list(channels)
        self.inter = np.zeros(len(channels))
        self.union = np.zeros(len(channels))
        self._states: list[dict[str, list[int]]] = []  # per frame: {"inter", "union"} per channel

    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        for det, gt, valid in zip(decoded, targets["mask"], targets["valid"], strict=True):
            p, g, v = det["mask"].cpu().bool(), gt.cpu().bool(), valid.cpu().bool()[None]
            inter, union = ((p & g) & v).flatten(1).sum(1).numpy(), ((p | g) & v).flatten(1).sum(1).numpy()
            self.inter += inter
            self.union += union
            self._states.append({"inter": inter.tolist(), "union": union.tolist()})

    def compute(self) -> dict[str, float]:
        return self._values(self.inter, self.union)

    def _values(self, inter: np.ndarray, union: np.ndarray) -> dict[str, float]:
        ious = {f"iou/{c}": float(i / u) if u > 0 else float("nan") for c, i, u in zip(self.channels, inter, union)}
        vals = [v for v in ious.values() if v == v]
        return {**ious, "mIoU": float(np.mean(vals)) if vals else float("nan")}

    def states(self) -> list[dict[str, list[int]]]:
        return self._states

    def compute_states(self, states: Sequence) -> dict[str, float]:
        states = [s for s in states if s is not None]
        inter, union = np.zeros(len(self.channels)), np.zeros(len(self.channels))
        for s in states:
            inter += s["inter"]
            union += s["union"]
        return self._values(inter, union)
