"""Lens distortion for the rasterizer: a distorted camera is drawn as a pinhole and resampled.

OpenGL projects straight lines to straight lines, so a camera with a lens model
(`hydranet.geometry.Distortion`: OpenCV radial-tangential or fisheye) is rendered through a
*source* pinhole with the same centre, axes and focal length whose image covers every ray of the
distorted image, then resampled once per pixel along the exact inverse lens mapping (the
approach of CARLA's and AirSim's fisheye cameras; the same per-pixel look-up as
`cv2.initUndistortRectifyMap` run the other way). The colour is bilinear; every label channel
takes its nearest source pixel (depth, normals, and the background), and `sim.silhouette` then
makes the object masks exact at each pixel's own ray (`exact_lens_channels`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import cv2
import numpy as np

from hydranet.geometry import Camera

SOURCE_MARGIN = 2  # source pixels beyond the outermost ray: room for the bilinear footprint
MAX_SOURCE_PIXELS = 12.0  # a source image at most this many times the camera's pixel count


class LensError(ValueError):
    """A camera's lens cannot be rendered through a pinhole (its field of view is too wide)."""


@dataclass(frozen=True)
class LensView:
    """How one camera is rendered: `source` is what OpenGL draws (its K and size only: views are
    cached by intrinsics, so its cam2ego is whichever the first caller had; the frame's extrinsics
    go to the renderer and the labels separately); `map_x`/`map_y` (H, W) float32 give the source
    pixel of every camera pixel (None for a pinhole: the source is the camera)."""

    source: Camera
    map_x: np.ndarray | None = None
    map_y: np.ndarray | None = None
    q: np.ndarray | None = None  # (H*W, 2) float64: the exact source point of every camera pixel's ray, row-major

    @property
    def distorted(self) -> bool:
        return self.map_x is not None

    def nearest_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(row, column) (H, W) of the source pixel each camera pixel takes its labels from."""
        return (np.rint(self.map_y).astype(np.intp), np.rint(self.map_x).astype(np.intp))

    def nearest(self, src: np.ndarray) -> np.ndarray:
        """A label channel (Hs, Ws, ...) of the source -> (H, W, ...) of the camera (nearest pixel)."""
        if not self.distorted:
            return src
        iy, ix = self.nearest_index()
        return np.ascontiguousarray(src[iy, ix])

    @cached_property
    def by_x(self) -> tuple[np.ndarray, np.ndarray]:
        """Camera pixels (flat) sorted by their source x, and those x: a band of source columns
        is a slice (`sim.silhouette.lens_coverage`)."""
        order = np.argsort(self.q[:, 0], kind="stable")
        return order, self.q[order, 0]

    @cached_property
    def neighbours(self) -> np.ndarray:
        """(H*W, 9) flat source pixels of the 3x3 around each pixel's q, nearest to q first."""
        return self.neighbours_at(np.arange(len(self.q)), 1)

    def neighbours_at(self, pixels: np.ndarray, r: int) -> np.ndarray:
        """(K, (2r+1)^2) flat source pixels within r of the nearest one to q of camera pixels
        `pixels` (flat), nearest to q first (clipped to the source image)."""
        q = self.q[pixels]
        d = np.arange(-r, r + 1)
        dx, dy = np.meshgrid(d, d)
        x = np.clip(np.rint(q[:, :1]) + dx.ravel(), 0, self.source.width - 1)  # (K, N)
        y = np.clip(np.rint(q[:, 1:]) + dy.ravel(), 0, self.source.height - 1)
        order = np.argsort((x - q[:, :1]) ** 2 + (y - q[:, 1:]) ** 2, axis=1, kind="stable")
        flat = (y * self.source.width + x).astype(np.intp)
        return np.take_along_axis(flat, order, 1)

    def bilinear(self, src: np.ndarray) -> np.ndarray:
        """The colour image (Hs, Ws, 3) of the source -> (H, W, 3) of the camera (bilinear)."""
        if not self.distorted:
            return src
        return cv2.remap(src, self.map_x, self.map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def lens_view(cam: Camera) -> LensView:
    """The source pinhole and the resampling maps of `cam` (a pinhole camera is its own source)."""
    if cam.distortion is None:
        return LensView(cam)
    key = (cam.name, cam.K.tobytes(), cam.width, cam.height, cam.distortion)  # the maps ignore the extrinsics
    if key not in _CACHE:
        _CACHE[key] = _build(cam)
    return _CACHE[key]


_CACHE: dict[tuple, LensView] = {}


def _build(cam: Camera) -> LensView:
    u, v = np.meshgrid(np.arange(cam.width, dtype=np.float64), np.arange(cam.height, dtype=np.float64))
    xy = cam.pixel_rays(np.stack([u, v], -1))[..., :2]  # (H, W, 2) undistorted normalized coordinates
    # the pixel footprints reach half a pixel past the centres: take the border corners' rays too
    edge = cam.pixel_rays(np.array([[-0.5, -0.5], [cam.width - 0.5, -0.5], [-0.5, cam.height - 0.5],
                                    [cam.width - 0.5, cam.height - 0.5]]))[:, :2]
    lo = np.minimum(xy.reshape(-1, 2).min(0), edge.min(0))
    hi = np.maximum(xy.reshape(-1, 2).max(0), edge.max(0))
    fx, fy = cam.K[0, 0], cam.K[1, 1]
    ws = int(np.ceil((hi[0] - lo[0]) * fx)) + 2 * SOURCE_MARGIN + 1
    hs = int(np.ceil((hi[1] - lo[1]) * fy)) + 2 * SOURCE_MARGIN + 1
    if ws * hs > MAX_SOURCE_PIXELS * cam.width * cam.height:
        raise LensError(f"camera {cam.name}: its {cam.distortion.model} lens sees too wide to render through a pinhole "
                        f"({ws}x{hs} source pixels for a {cam.width}x{cam.height} image); narrow its field of view")
    K = np.array([[fx, cam.K[0, 1], SOURCE_MARGIN - lo[0] * fx], [0.0, fy, SOURCE_MARGIN - lo[1] * fy], [0, 0, 1]])
    src = xy @ K[:2, :2].T + K[:2, 2]  # (H, W, 2) source pixel of each camera pixel
    source = Camera(cam.name, K, cam.cam2ego, ws, hs)
    return LensView(source, src[..., 0].astype(np.float32), src[..., 1].astype(np.float32), src.reshape(-1, 2))
