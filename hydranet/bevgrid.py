"""The bird's-eye-view grid around the ego, shared by the view transform, the video module and
the BEV heads (numpy only, so targets can be built in data-loader workers).

Conventions follow the `bev.png` raster of docs/dataset_format.md: a (X, Y) grid whose row 0 is
the largest x (ahead) and column 0 the largest y (left); cell (r, c) has its centre at
x = x_max - (r + 0.5) * res, y = y_max - (c + 0.5) * res (ego frame, metres).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BevGrid:
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    resolution: float

    def __post_init__(self):
        (x0, x1), (y0, y1), r = self.x_range, self.y_range, self.resolution
        if not (x1 > x0 and y1 > y0 and r > 0):
            raise ValueError(f"BEV grid needs x_range/y_range with max > min and resolution > 0, got "
                             f"x_range={self.x_range}, y_range={self.y_range}, resolution={r}")
        for lo, hi, axis in ((x0, x1, "x"), (y0, y1, "y")):
            n = (hi - lo) / r
            if abs(n - round(n)) > 1e-6:
                raise ValueError(f"BEV {axis}_range {lo}..{hi} is not a whole number of {r} m cells")

    @property
    def shape(self) -> tuple[int, int]:
        """(X, Y): rows (along -x), columns (along -y)."""
        return (round((self.x_range[1] - self.x_range[0]) / self.resolution),
                round((self.y_range[1] - self.y_range[0]) / self.resolution))

    def cell_centers(self) -> np.ndarray:
        """(X, Y, 2) ego (x, y) of every cell centre."""
        X, Y = self.shape
        x = self.x_range[1] - (np.arange(X) + 0.5) * self.resolution
        y = self.y_range[1] - (np.arange(Y) + 0.5) * self.resolution
        return np.stack(np.meshgrid(x, y, indexing="ij"), -1)

    def to_cell(self, xy: np.ndarray) -> np.ndarray:
        """Ego (..., 2) -> continuous (row, col) (..., 2), cell centres at integers."""
        xy = np.asarray(xy, dtype=np.float64)
        row = (self.x_range[1] - xy[..., 0]) / self.resolution - 0.5
        col = (self.y_range[1] - xy[..., 1]) / self.resolution - 0.5
        return np.stack([row, col], -1)

    def from_cell(self, rc: np.ndarray) -> np.ndarray:
        """Continuous (row, col) (..., 2) -> ego (x, y) (..., 2)."""
        rc = np.asarray(rc, dtype=np.float64)
        return np.stack([self.x_range[1] - (rc[..., 0] + 0.5) * self.resolution,
                         self.y_range[1] - (rc[..., 1] + 0.5) * self.resolution], -1)

    @classmethod
    def from_meta(cls, meta: Mapping, downsample: int = 1) -> BevGrid:
        """The dataset raster grid (meta["bev"]) with cells `downsample` times larger."""
        if "bev" not in meta:
            raise ValueError(f"the dataset meta has no 'bev' grid (x_range, y_range, resolution); meta has {sorted(meta)}; "
                             "give model.bev.x_range, y_range and resolution in the config")
        b = meta["bev"]
        return cls(tuple(b["x_range"]), tuple(b["y_range"]), float(b["resolution"]) * downsample)

    def as_dict(self) -> dict:
        return {"x_range": list(self.x_range), "y_range": list(self.y_range), "resolution": self.resolution}


def grid_of(meta: Mapping) -> BevGrid:
    """The model's BEV grid as `build_model` records it in meta["bev_grid"], else meta["bev"] itself."""
    if "bev_grid" in meta:
        g = meta["bev_grid"]
        return g if isinstance(g, BevGrid) else BevGrid(tuple(g["x_range"]), tuple(g["y_range"]), float(g["resolution"]))
    return BevGrid.from_meta(meta)


def resample_raster(raster: np.ndarray, src: BevGrid, dst: BevGrid) -> tuple[np.ndarray, np.ndarray]:
    """Area-resample a (K, Xs, Ys) raster on grid `src` to grid `dst`.

    Returns (fraction (K, X, Y) float32: share of the dst cell's source pixels that are non-zero,
    covered (X, Y) bool: the dst cell holds at least one source pixel). Works for any pair of grids
    (each source pixel centre is assigned to the dst cell containing it)."""
    K = raster.shape[0]
    if raster.shape[1:] != src.shape:
        raise ValueError(f"BEV raster has shape {raster.shape[1:]}, its grid {src.as_dict()} is {src.shape}")
    X, Y = dst.shape
    rc = np.floor(dst.to_cell(src.cell_centers().reshape(-1, 2)) + 0.5).astype(np.int64)  # (P, 2)
    inside = (rc[:, 0] >= 0) & (rc[:, 0] < X) & (rc[:, 1] >= 0) & (rc[:, 1] < Y)
    flat = rc[inside, 0] * Y + rc[inside, 1]
    count = np.bincount(flat, minlength=X * Y).astype(np.float32)
    vals = (raster.reshape(K, -1)[:, inside] > 0).astype(np.float32)
    frac = np.stack([np.bincount(flat, weights=v, minlength=X * Y) for v in vals]) / np.maximum(count, 1)
    return frac.reshape(K, X, Y).astype(np.float32), (count > 0).reshape(X, Y)

