"""Depth-distribution lifting (Lift-Splat-Shoot) onto the BEV grid, with a precomputed splat table.

Philion & Fidler, "Lift, Splat, Shoot", ECCV 2020; BEVDet (Huang et al., 2021): every feature
pixel predicts a distribution over D depth bins and a context vector; the frustum feature at
(pixel, depth d) is prob(d) * context, and all frustum points are summed into the BEV cell they
fall in ("splat", sum pooling).

Where a frustum point falls depends only on the calibration, so the cell of every
(camera, depth bin, feature pixel) is computed once, in numpy, into a table `index (N*D*h*w,)`;
points outside the grid, behind the camera or outside `z_range` go to one extra dump row that is
dropped. At run time the splat is one `scatter_add` on those constant indices (ONNX
ScatterElements with reduction "add", opset >= 16), so the network still exports to one graph
with standard operators only (TensorRT runs a reducing scatter through the scatterElements
plugin it ships; deploy/trt_check.py warns, docs/bev.md). Compared with the LUT lift (hydranet.models.view_transform), features
land at the depth the network believes, not smeared along the whole ray.

Depth supervision (BEVDepth, Li et al., 2023), optional (`model.bev.depth_weight` > 0): the depth
distributions are also trained against the cameras' depth maps, which the sim renders exactly
(`DepthSupervision`: per feature pixel the nearest surface of its stride x stride patch, as
BEVDepth takes the nearest lidar point, in its bin; cross-entropy; pixels with no depth in range
are ignored). It is an extra objective of the model's balancer, named "view_depth".
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hydranet.bevgrid import BevGrid
from hydranet.geometry import unproject
from hydranet.models.view_transform import ViewTransform, lens_of, no_camera_sees


def depth_bins(bins: Sequence[float]) -> np.ndarray:
    """(min, max, step) metres -> bin centres (D,) = min, min + step, ... < max (BEVDet's dbound)."""
    lo, hi, step = (float(b) for b in bins)
    if not (0 < lo < hi and step > 0):
        raise ValueError(f"model.bev.depth_bins must be [min, max, step] with 0 < min < max and step > 0, got {list(bins)}")
    return np.arange(lo, hi - 1e-9, step)


@dataclass
class FrustumTable:
    """Splat table of one calibration: index (N*D*h*w,) = the BEV cell (row * Y + col) of every
    frustum point in (camera, depth bin, feature row, feature col) order, X*Y for points off the grid."""

    index: np.ndarray  # (N*D*h*w,) int64
    seen: np.ndarray  # (X, Y) bool: cells some frustum point falls in
    cells_per_camera: dict[str, int]
    feature_hw: tuple[int, int]

    @property
    def arrays(self) -> tuple[np.ndarray]:
        return (self.index,)


def frustum_table(grid: BevGrid, depths: np.ndarray, z_range: Sequence[float], intrinsics: np.ndarray,
                  cam2ego: np.ndarray, image_hw: tuple[int, int], stride: int,
                  camera_names: Sequence[str] | None = None, distortion: np.ndarray | None = None) -> FrustumTable:
    """The splat table for cameras K (N, 3, 3), cam2ego (N, 4, 4) and lenses (N, 6) or None at
    image size (H, W).

    Feature pixel (i, j) at `stride` covers image pixels whose centre is ((j + 0.5) stride - 0.5,
    (i + 0.5) stride - 0.5); its point at depth d (z in the camera frame) is d times its ray
    (K^-1 (u, v, 1), through the lens model where the camera has one)."""
    K = np.asarray(intrinsics, np.float64).reshape(-1, 3, 3)
    T = np.asarray(cam2ego, np.float64).reshape(-1, 4, 4)
    N, (H, W) = len(K), image_hw
    names = list(camera_names) if camera_names is not None else [f"camera {n}" for n in range(N)]
    if H % stride or W % stride:
        raise ValueError(f"image size {H}x{W} is not divisible by the feature stride {stride}")
    h, w = H // stride, W // stride
    X, Y = grid.shape
    v, u = np.meshgrid((np.arange(h) + 0.5) * stride - 0.5, (np.arange(w) + 0.5) * stride - 0.5, indexing="ij")
    pix = np.stack([u, v], -1).reshape(-1, 2)  # (h*w, 2)
    index = np.full((N, len(depths), h * w), X * Y, np.int64)
    per_cam = {}
    for n in range(N):
        rays = unproject(pix, np.ones(len(pix)), K[n], lens_of(distortion, n))  # (h*w, 3) with z = 1
        pts = depths[:, None, None] * rays[None] @ T[n, :3, :3].T + T[n, :3, 3]  # (D, h*w, 3) ego
        rc = np.floor(grid.to_cell(pts[..., :2]) + 0.5).astype(np.int64)  # (D, h*w, 2)
        ok = ((rc[..., 0] >= 0) & (rc[..., 0] < X) & (rc[..., 1] >= 0) & (rc[..., 1] < Y)
              & (pts[..., 2] >= z_range[0]) & (pts[..., 2] <= z_range[1]))
        index[n][ok] = rc[..., 0][ok] * Y + rc[..., 1][ok]
        per_cam[names[n]] = int(len(np.unique(index[n][ok])))
    index = index.reshape(-1)
    if not (index < X * Y).any():
        raise no_camera_sees(names, grid, f"depths {depths[0]:g}..{depths[-1]:g} m, z in {list(z_range)}")
    seen = np.bincount(index, minlength=X * Y + 1)[:-1] > 0
    return FrustumTable(index, seen.reshape(X, Y), per_cam, (h, w))


def splat_features(depth: torch.Tensor, context: torch.Tensor, index: torch.Tensor,
                   grid_shape: tuple[int, int]) -> torch.Tensor:
    """depth (F, N, D, h, w) probabilities, context (F, N, C, h, w), index (N*D*h*w,) -> BEV
    (F, C, X, Y): the sum of prob * context over the frustum points of every cell."""
    F_, N, C = context.shape[:3]
    frustum = context[:, :, :, None] * depth[:, :, None]  # (F, N, C, D, h, w)
    flat = frustum.transpose(1, 2).reshape(F_, C, -1)  # (F, C, N*D*h*w) in the table's order
    X, Y = grid_shape
    out = flat.new_zeros(F_, C, X * Y + 1)  # last column: the dump cell of off-grid points
    out = out.scatter_add(2, index.view(1, 1, -1).expand_as(flat), flat)
    return out[:, :, :-1].reshape(F_, C, X, Y)


def depth_bin_targets(depth: np.ndarray, depths: np.ndarray, stride: int) -> np.ndarray:
    """Camera depth maps (N, H, W) metres (0 = none) -> bin index (N, H/stride, W/stride) of the
    nearest surface in each stride x stride patch (the bin whose centre is closest), -1 where the
    patch has no depth or it falls outside the bins."""
    N, H, W = depth.shape
    d = np.where(depth > 0, depth, np.inf).reshape(N, H // stride, stride, W // stride, stride).min((2, 4))
    step = depths[1] - depths[0] if len(depths) > 1 else 1.0
    k = np.floor((d - depths[0]) / step + 0.5)
    return np.where(np.isfinite(k) & (k >= 0) & (k < len(depths)), k, -1).astype(np.int64)


class DepthSupervision:
    """The "view_depth" objective: targets and loss in the shape of a task's (build_targets,
    collate, loss). outputs: depth logits (B, N, D, h, w) of the last frame; targets {"bins":
    (B, N, h, w) int64, -1 = ignored}."""

    name = "view_depth"

    def __init__(self, depths: np.ndarray, stride: int):
        self.depths, self.stride = depths, stride

    def build_targets(self, sample: Mapping[str, Any]) -> dict[str, np.ndarray]:
        if "depth" not in sample:
            raise ValueError("model.bev.depth_weight > 0 needs the cameras' depth maps: the dataset has no depth "
                             "channel (regenerate it with depth, or set model.bev.depth_weight=0)")
        return {"bins": depth_bin_targets(np.asarray(sample["depth"], np.float32), self.depths, self.stride)[None]}

    def collate(self, targets: Sequence[Mapping[str, np.ndarray]]) -> dict[str, torch.Tensor]:
        return {"bins": torch.from_numpy(np.concatenate([t["bins"] for t in targets]))}  # (B, N, h, w)

    def loss(self, logits: torch.Tensor, targets: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        bins = targets["bins"].to(logits.device)
        if logits.shape[:2] + logits.shape[3:] != bins.shape:
            raise ValueError(f"view_depth: logits {tuple(logits.shape)} do not fit targets {tuple(bins.shape)}")
        if not (bins >= 0).any():
            return {"ce": logits.sum() * 0.0}
        return {"ce": F.cross_entropy(logits.float().transpose(1, 2), bins, ignore_index=-1)}


class DepthViewTransform(ViewTransform):
    """Lift-Splat-Shoot: the 1x1 conv gives D depth logits and out_channels context channels per
    feature pixel; softmax over depth, outer product, splat through the frustum table. With
    `supervise`, forward also gives the depth logits (F, N, D, h, w) for the `DepthSupervision`
    objective ("view_depth")."""

    table_names = ("splat_index",)

    def __init__(self, in_channels: int, out_channels: int, grid: BevGrid, bins: Sequence[float] = (1.0, 50.0, 1.0),
                 z_range: Sequence[float] = (-1.0, 4.0), stride: int = 8, encoder_depth: int = 2, supervise: bool = False):
        depths = depth_bins(bins)
        if not z_range[0] < z_range[1]:
            raise ValueError(f"model.bev.z_range must be [min, max] with min < max, got {list(z_range)}")
        super().__init__(in_channels, len(depths) + out_channels, out_channels, grid, stride, encoder_depth)
        self.depths, self.z_range = depths, (float(z_range[0]), float(z_range[1]))
        self.supervision = DepthSupervision(depths, stride) if supervise else None

    @property
    def auxiliary(self) -> dict:
        return {self.supervision.name: self.supervision} if self.supervision is not None else {}

    def auxiliary_outputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.supervision is None:
            return {}
        return {self.supervision.name: x[:, :, :len(self.depths)]}  # depth logits (F, N, D, h, w)

    def make_table(self, K, T, image_hw, camera_names=None, distortion=None) -> FrustumTable:
        return frustum_table(self.grid, self.depths, self.z_range, K, T, image_hw, self.stride, camera_names, distortion)

    def lift(self, x: torch.Tensor, tables: tuple[torch.Tensor, ...]) -> torch.Tensor:
        D = len(self.depths)
        depth = x[:, :, :D].softmax(2)  # (F, N, D, h, w)
        return splat_features(depth, x[:, :, D:], tables[0], self.grid.shape)
