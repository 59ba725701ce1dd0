"""Image features of all cameras lifted into one bird's-eye-view grid by projection look-up tables.

Fast-BEV (Li et al., "Fast-BEV: A Fast and Strong Bird's-Eye View Perception Baseline", 2023)
and M2BEV (Xie et al., 2022): under the assumption of a uniform depth along a ray, every BEV cell
takes the image features of the pixels its 3D points project to. The projection depends only on
the calibration, so it is computed once, in numpy, into a table:

    for every BEV cell, every height in `heights`, every camera:
        ego point (x, y, z) -> camera pixel (u, v) -> feature pixel (i, j) at the neck's stride

A cell's feature is the mean over the (camera, height) pairs that see it (cameras overlap at the
seams). At run time the lift is S gathers (`index_select` on constant indices) and a weighted
sum, S being the most (camera, height) pairs any cell has: standard ONNX ops (Gather, Mul, Add),
no custom operator, so the whole network exports to one graph. Cells no camera sees stay zero
and are reported (`LutViewTransform.coverage`); a rig that sees none of the grid is a ValueError
naming its cameras.

Calibration: `set_calibration(K, cam2ego, image_hw, names, distortion)` precomputes the table
(build_model does it from meta["rig"]); a batch carrying `intrinsics`/`cam2ego` (and
`distortion`, lens rows (N, 6), where cameras have lens models) uses the table of that
calibration, computed on first sight and cached (augmentations that change K just add cache
entries). Cameras
of different resolutions are resized to one model input size first (`hydranet.rig.Rig.resized`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from hydranet.bevgrid import BevGrid
from hydranet.geometry import DISTORTION_WIDTH, distortion_from_row, project
from hydranet.models.layers import MergeLevels, conv_bn_relu

MIN_DEPTH = 0.1  # metres in front of the camera for a point to count as seen
_CACHE_SIZE = 16


@dataclass
class ProjectionLut:
    """Look-up table of one calibration. index/weight: (X*Y, S); index points into the features
    flattened as (N*h*w) rows, N*h*w being an all-zero padding row; weight = 1/#pairs or 0."""

    index: np.ndarray  # (X*Y, S) int64
    weight: np.ndarray  # (X*Y, S) float32
    seen: np.ndarray  # (X, Y) bool
    cells_per_camera: dict[str, int]
    feature_hw: tuple[int, int]

    @property
    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.index, self.weight


def no_camera_sees(names: Sequence[str], grid: BevGrid, where: str) -> ValueError:
    return ValueError(f"no camera of the rig ({', '.join(names)}) sees any cell of the BEV grid x {grid.x_range}, "
                      f"y {grid.y_range} m at {where}; check the extrinsics (cam2ego) or enlarge model.bev x_range/y_range")


def lens_of(distortion: np.ndarray | None, n: int):
    """Camera n's lens (`hydranet.geometry.Distortion`) from a (N, DISTORTION_WIDTH) array, or None."""
    return None if distortion is None else distortion_from_row(np.asarray(distortion)[n])


def projection_lut(grid: BevGrid, heights: Sequence[float], intrinsics: np.ndarray, cam2ego: np.ndarray,
                   image_hw: tuple[int, int], stride: int, camera_names: Sequence[str] | None = None,
                   distortion: np.ndarray | None = None) -> ProjectionLut:
    """The table for cameras K (N, 3, 3), cam2ego (N, 4, 4) and lenses `distortion` (N, 6) (None:
    pinholes; `hydranet.geometry.distortion_array`) at image size (H, W) and feature stride.

    A point is seen by a camera when its z-depth is > MIN_DEPTH and its pixel (u, v) lies in the
    image ([-0.5, W - 0.5) with pixel centres at integers); its feature pixel is
    (floor((v + 0.5) / stride), floor((u + 0.5) / stride))."""
    K = np.asarray(intrinsics, np.float64).reshape(-1, 3, 3)
    T = np.asarray(cam2ego, np.float64).reshape(-1, 4, 4)
    N = len(K)
    names = list(camera_names) if camera_names is not None else [f"camera {n}" for n in range(N)]
    H, W = image_hw
    if H % stride or W % stride:
        raise ValueError(f"image size {H}x{W} is not divisible by the feature stride {stride}")
    h, w = H // stride, W // stride
    X, Y = grid.shape
    Z = len(heights)
    xy = grid.cell_centers().reshape(-1, 1, 2).repeat(Z, 1)  # (X*Y, Z, 2)
    z = np.broadcast_to(np.asarray(heights, np.float64)[None, :, None], (X * Y, Z, 1))
    pts = np.concatenate([xy, z], -1).reshape(-1, 3)  # (P = X*Y*Z, 3) ego
    cells, feats, per_cam = [], [], {}
    for n in range(N):
        R, t = T[n, :3, :3], T[n, :3, 3]
        pc = (pts - t) @ R  # (P, 3) camera frame = R^T (p - t)
        (u, v), depth = project(pc, K[n], lens_of(distortion, n))[0].T, pc[:, 2]  # NaN pixels: not seen
        ok = (depth > MIN_DEPTH) & (u >= -0.5) & (u < W - 0.5) & (v >= -0.5) & (v < H - 0.5)
        j = np.floor((u[ok] + 0.5) / stride).astype(np.int64)
        i = np.floor((v[ok] + 0.5) / stride).astype(np.int64)
        cell = np.nonzero(ok)[0] // Z
        cells.append(cell)
        feats.append(n * h * w + i * w + j)
        per_cam[names[n]] = int(len(np.unique(cell)))
    cell, feat = np.concatenate(cells), np.concatenate(feats)
    if len(cell) == 0:
        raise no_camera_sees(names, grid, f"heights {list(heights)}")
    order = np.argsort(cell, kind="stable")
    cell, feat = cell[order], feat[order]
    count = np.bincount(cell, minlength=X * Y)  # (X*Y,)
    S = int(count.max())
    slot = np.arange(len(cell)) - np.repeat(np.cumsum(count) - count, count)  # position within its cell
    index = np.full((X * Y, S), N * h * w, np.int64)
    weight = np.zeros((X * Y, S), np.float32)
    index[cell, slot] = feat
    weight[cell, slot] = 1.0 / count[cell]
    return ProjectionLut(index, weight, (count > 0).reshape(X, Y), per_cam, (h, w))


def lift_features(feats: torch.Tensor, index: torch.Tensor, weight: torch.Tensor, grid_shape: tuple[int, int]) -> torch.Tensor:
    """feats (F, N, C, h, w) of F frames sharing one table -> BEV (F, C, X, Y): per cell the
    weighted sum of its S gathered feature pixels (index/weight (X*Y, S))."""
    F_, N, C, h, w = feats.shape
    flat = feats.permute(0, 1, 3, 4, 2).reshape(F_, N * h * w, C)
    flat = torch.cat([flat, flat.new_zeros(F_, 1, C)], 1)  # (F, N*h*w + 1, C): last row = zero padding
    out = flat.new_zeros(F_, index.shape[0], C)
    for s in range(index.shape[1]):  # S gathers of (X*Y) rows each
        out = out + flat.index_select(1, index[:, s]) * weight[:, s, None].to(flat.dtype)
    return out.transpose(1, 2).reshape(F_, C, *grid_shape)  # (F, C, X, Y)


class ViewTransform(nn.Module, ABC):
    """Neck pyramid of N cameras -> one BEV feature map (F, out_channels, X, Y).

    The pyramid is merged to its finest level (stride `stride`), reduced by a 1x1 conv to
    `lift_channels`, lifted onto the grid through a table precomputed from the calibration and
    refined by `encoder_depth` 3x3 convs on the BEV grid (Fast-BEV's BEV encoder). Subclasses give
    the table (`make_table`, whose `arrays` become the buffers named in `table_names`) and the
    lift (`lift`); calibration handling and its cache are shared."""

    table_names: tuple[str, ...] = ()

    def __init__(self, in_channels: int, lift_channels: int, out_channels: int, grid: BevGrid, stride: int,
                 encoder_depth: int):
        super().__init__()
        self.grid, self.stride, self.out_channels = grid, stride, out_channels
        self.merge = MergeLevels()
        self.reduce = nn.Conv2d(in_channels, lift_channels, 1)
        self.encoder = conv_bn_relu(out_channels, out_channels, encoder_depth)
        for name in self.table_names:
            self.register_buffer(name, torch.zeros(0), persistent=False)
        self._default_key: tuple | None = None
        self._cache: OrderedDict[tuple, tuple[torch.Tensor, ...]] = OrderedDict()
        self.table = None  # the table of the default calibration (its `seen`, `cells_per_camera`)

    @abstractmethod
    def make_table(self, K: np.ndarray, T: np.ndarray, image_hw: tuple[int, int],
                   camera_names: Sequence[str] | None = None, distortion: np.ndarray | None = None):
        """The table of cameras K (N, 3, 3), cam2ego (N, 4, 4), lenses (N, 6) or None at image size (H, W): an object with
        `arrays` (the buffers named in `table_names`), `seen` (X, Y) and `cells_per_camera`."""

    @abstractmethod
    def lift(self, x: torch.Tensor, tables: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """x (F, N, lift_channels, h, w) -> (F, out_channels, X, Y)."""

    @property
    def auxiliary(self) -> dict:
        """Auxiliary objectives {name: object with build_targets, collate, loss} (none here)."""
        return {}

    def auxiliary_outputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The inputs of the auxiliary objectives from the lift input x (F, N, lift_channels, h, w):
        {name: (F, ...)}."""
        return {}

    # -- calibration ------------------------------------------------------------------------
    @staticmethod
    def _lenses(distortion, n_cams: int) -> np.ndarray | None:
        """(N, 6) float32 lens rows, or None when every camera is a pinhole (all-zero rows)."""
        if distortion is None:
            return None
        D = np.asarray(distortion, np.float32).reshape(n_cams, -1)
        return D if D[:, 0].any() else None

    def _key(self, K: np.ndarray, T: np.ndarray, image_hw: tuple[int, int], D: np.ndarray | None = None) -> tuple:
        return (np.asarray(K, np.float32).tobytes(), np.asarray(T, np.float32).tobytes(), tuple(image_hw),
                None if D is None else D.tobytes())

    def set_calibration(self, intrinsics, cam2ego, image_hw: tuple[int, int], camera_names: Sequence[str] | None = None,
                        distortion=None):
        """Precompute the default table (used when a batch has no calibration, and by export)."""
        K, T = np.asarray(intrinsics, np.float32), np.asarray(cam2ego, np.float32)
        D = self._lenses(distortion, len(K))
        table = self.make_table(K, T, image_hw, camera_names, D)
        dev = self.reduce.weight.device
        for name, array in zip(self.table_names, table.arrays, strict=True):
            setattr(self, name, torch.from_numpy(array).to(dev))
        self._default_key, self.table = self._key(K, T, image_hw, D), table
        return table

    @property
    def coverage(self) -> float:
        """Share of BEV cells the default calibration's cameras see (the rest get zeros)."""
        if self.table is None:
            raise ValueError("no calibration set yet: call set_calibration or run a batch with intrinsics/cam2ego")
        return float(self.table.seen.mean())

    def _tables(self, K: np.ndarray, T: np.ndarray, image_hw: tuple[int, int], device,
                D: np.ndarray | None = None) -> tuple[torch.Tensor, ...]:
        D = self._lenses(D, len(K))
        key = self._key(K, T, image_hw, D)
        if key == self._default_key:
            return tuple(getattr(self, name) for name in self.table_names)
        key = key + (str(device),)
        if key not in self._cache:
            arrays = self.make_table(K, T, image_hw, None, D).arrays
            self._cache[key] = tuple(torch.from_numpy(a).to(device) for a in arrays)
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        self._cache.move_to_end(key)
        return self._cache[key]

    # -- forward ----------------------------------------------------------------------------
    def forward(self, feats: Sequence[torch.Tensor], num_frames: int, image_hw: tuple[int, int],
                intrinsics: torch.Tensor | None = None, cam2ego: torch.Tensor | None = None,
                distortion: torch.Tensor | None = None) -> torch.Tensor:
        """feats: pyramid [(F*N, C, h, w), ...]; intrinsics (F, N, 3, 3) and cam2ego (F, N, 4, 4) or
        None (use the default table); distortion (F, N, 6) lens rows or None (pinholes).
        Returns (F, out_channels, X, Y)."""
        x = self.reduce(self.merge(feats))  # (F*N, C', h, w)
        FN, C, h, w = x.shape
        x = x.view(num_frames, FN // num_frames, C, h, w)  # (F, N, C', h, w)
        exporting = torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()
        if intrinsics is None or cam2ego is None or exporting:
            if self._default_key is None:
                raise ValueError("the view transform has no calibration: pass batch['intrinsics'] and batch['cam2ego'] "
                                 "or build the model with meta['rig'] (or call model.fusion.view.set_calibration)")
            if (h * self.stride, w * self.stride) != tuple(self._default_key[2]):
                raise ValueError(f"images are {h * self.stride}x{w * self.stride} but the calibration was set for "
                                 f"{self._default_key[2][0]}x{self._default_key[2][1]}; pass batch['intrinsics'] for this size")
            bev = self.lift(x, tuple(getattr(self, name) for name in self.table_names))
        else:
            Ks = intrinsics.detach().cpu().numpy().reshape(num_frames, -1, 3, 3)
            Ts = cam2ego.detach().cpu().numpy().reshape(num_frames, -1, 4, 4)
            if Ks.shape[1] != x.shape[1] or Ts.shape[1] != x.shape[1]:
                raise ValueError(f"batch has {x.shape[1]} cameras but intrinsics/cam2ego for {Ks.shape[1]}/{Ts.shape[1]}")
            if distortion is None and self._default_key is not None and self._default_key[3] is not None:
                raise ValueError("the view transform was calibrated with lens models but the batch has intrinsics and "
                                 "cam2ego without batch['distortion'] (N, 6) lens rows; pass them "
                                 "(hydranet.geometry.distortion_array; LabelledFrames does)")
            Ds = None if distortion is None else distortion.detach().cpu().numpy().reshape(num_frames, Ks.shape[1], -1)
            tables = [self._tables(Ks[f], Ts[f], image_hw, x.device, None if Ds is None else Ds[f])
                      for f in range(num_frames)]
            if all(t[0] is tables[0][0] for t in tables):
                bev = self.lift(x, tables[0])
            else:
                bev = torch.cat([self.lift(x[f:f + 1], tables[f]) for f in range(num_frames)])
        return self.encoder(bev), self.auxiliary_outputs(x)  # (F, C', X, Y), {name: (F, ...)}


class LutViewTransform(ViewTransform):
    """Fast-BEV: every BEV cell takes the mean of the features its points (at `heights`) project to
    (`projection_lut`, `lift_features`). The 1x1 conv reduces to out_channels."""

    table_names = ("lut_index", "lut_weight")

    def __init__(self, in_channels: int, out_channels: int, grid: BevGrid, heights: Sequence[float] = (0.0, 0.6, 1.2, 1.8),
                 stride: int = 8, encoder_depth: int = 2):
        if not heights:
            raise ValueError("the view transform needs at least one height (model.bev.heights)")
        super().__init__(in_channels, out_channels, out_channels, grid, stride, encoder_depth)
        self.heights = tuple(float(z) for z in heights)

    def make_table(self, K, T, image_hw, camera_names=None, distortion=None) -> ProjectionLut:
        return projection_lut(self.grid, self.heights, K, T, image_hw, self.stride, camera_names, distortion)

    def lift(self, x: torch.Tensor, tables: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return lift_features(x, *tables, self.grid.shape)


def batch_calibration(batch: Mapping, frames: int) -> tuple[torch.Tensor | None, torch.Tensor | None,
                                                        torch.Tensor | None]:
    """batch intrinsics/cam2ego/distortion as (F, N, 3, 3)/(F, N, 4, 4)/(F, N, 6) for F frames (a
    clip's (B, T, N, ...) or a (B, N, ...) calibration repeated over the T frames of each clip);
    distortion is None when the batch has none (pinholes)."""
    K, T, D = batch.get("intrinsics"), batch.get("cam2ego"), batch.get("distortion")
    if K is None or T is None:
        return None, None, None
    out = []
    for x, tail in ((K, (3, 3)), (T, (4, 4)), (D, (DISTORTION_WIDTH,))):
        if x is None:
            out.append(None)
            continue
        x = torch.as_tensor(x)
        B = x.shape[0]
        if x.dim() == 2 + len(tail) and frames != B:  # (B, N, ...) for clips of frames // B frames
            x = x[:, None].expand(B, frames // B, *x.shape[1:])
        out.append(x.reshape(frames, -1, *tail))
    return tuple(out)
