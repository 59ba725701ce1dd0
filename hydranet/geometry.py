"""Frames, camera models and rigid transforms shared by sim/, hydranet/ and deploy/.

Frames (as nuScenes): world and ego are x forward, y left, z up; the camera frame is OpenCV's,
x right, y down, z forward. Extrinsics are camera-to-ego 4x4 matrices, ego poses ego-to-world.
Lens models are OpenCV's: a pinhole, the radial-tangential (Brown-Conrady) model of
`cv2.projectPoints` (k1, k2, p1, p2, k3) and the equidistant fisheye of `cv2.fisheye`
(Kannala-Brandt, k1..k4), both on normalized coordinates (so K alone changes with resizing).
Pure numpy so the sim and the torch-free runtime can use it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

# Columns are the camera axes (x right, y down, z forward) written in the ego frame for a
# camera looking along ego +x with no tilt.
CAM_BASE = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def rot_x(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]], dtype=np.float64)


def rot_y(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]], dtype=np.float64)


def rot_z(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], dtype=np.float64)


def make_transform(rotation: np.ndarray, translation) -> np.ndarray:
    """4x4 rigid transform from a 3x3 rotation and a 3-vector."""
    T = np.eye(4)
    T[:3, :3] = rotation
    T[:3, 3] = translation
    return T


def invert_rigid(T: np.ndarray) -> np.ndarray:
    """Inverse of a rigid 4x4 transform (R^T, -R^T t); works on (..., 4, 4)."""
    R = T[..., :3, :3]
    t = T[..., :3, 3:]
    out = np.zeros_like(T)
    Rt = np.swapaxes(R, -1, -2)
    out[..., :3, :3] = Rt
    out[..., :3, 3:] = -Rt @ t
    out[..., 3, 3] = 1.0
    return out


def transform_points(T: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Apply 4x4 `T` to points (..., 3)."""
    return points @ T[:3, :3].T + T[:3, 3]


def camera_rotation(yaw: float, pitch: float = 0.0, roll: float = 0.0) -> np.ndarray:
    """Camera-to-ego rotation for a camera turned `yaw` left of ego +x, tilted `pitch` down
    and rolled `roll` clockwise about its optical axis (radians)."""
    return rot_z(yaw) @ rot_y(pitch) @ rot_x(roll) @ CAM_BASE


def yaw_pitch_roll(R_cam2ego: np.ndarray) -> tuple[float, float, float]:
    """Inverse of `camera_rotation`."""
    M = R_cam2ego @ CAM_BASE.T  # = Rz(yaw) Ry(pitch) Rx(roll)
    pitch = float(np.arcsin(-np.clip(M[2, 0], -1, 1)))
    yaw = float(np.arctan2(M[1, 0], M[0, 0]))
    roll = float(np.arctan2(M[2, 1], M[2, 2]))
    return yaw, pitch, roll


def is_rotation(R: np.ndarray, tol: float = 1e-4) -> bool:
    return R.shape == (3, 3) and np.allclose(R @ R.T, np.eye(3), atol=tol) and abs(np.linalg.det(R) - 1) < tol


DISTORTION_MODELS = {"radtan": 5, "fisheye": 4}  # model -> number of coefficients (OpenCV order)
DISTORTION_WIDTH = 6  # distortion_array row: [model code (0 none, 1 radtan, 2 fisheye), 5 coefficients]


@dataclass(frozen=True)
class Distortion:
    """A lens model on normalized image coordinates (x/z, y/z), as OpenCV defines it.

    radtan: (k1, k2, p1, p2, k3), `cv2.projectPoints`; fisheye: (k1, k2, k3, k4), `cv2.fisheye`:
    r_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8), theta the ray's angle
    to the optical axis. `max_radius` is the undistorted radius (tan theta) up to which the
    mapping is monotonic: rays beyond it fold back into the image and are never seen."""

    model: str
    coeffs: tuple[float, ...]

    def __post_init__(self):
        if self.model not in DISTORTION_MODELS:
            raise ValueError(f"unknown distortion model {self.model!r}; known: {sorted(DISTORTION_MODELS)}")
        if len(self.coeffs) != DISTORTION_MODELS[self.model]:
            raise ValueError(f"{self.model} distortion takes {DISTORTION_MODELS[self.model]} coefficients, "
                             f"got {len(self.coeffs)}")
        object.__setattr__(self, "coeffs", tuple(float(c) for c in self.coeffs))

    def _radial(self, r: np.ndarray) -> np.ndarray:
        """Distorted radius of the undistorted radius r (radtan without tangential terms)."""
        if self.model == "fisheye":
            t = np.arctan(r)
            k1, k2, k3, k4 = self.coeffs
            t2 = t * t
            return t * (1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))
        k1, k2, _, _, k3 = self.coeffs
        r2 = r * r
        return r * (1 + r2 * (k1 + r2 * (k2 + r2 * k3)))

    @cached_property
    def max_radius(self) -> float:
        """Largest undistorted radius with a monotonic mapping (searched up to tan 89 deg)."""
        r = np.tan(np.radians(np.linspace(0.0, 89.0, 8901)))
        grows = np.diff(self._radial(r)) > 0
        return float(r[-1] if grows.all() else r[int(np.argmin(grows))])

    def distort(self, xy: np.ndarray) -> np.ndarray:
        """Undistorted normalized coordinates (..., 2) -> distorted (..., 2); NaN past max_radius."""
        x, y = xy[..., 0], xy[..., 1]
        r2 = x * x + y * y
        if self.model == "fisheye":
            r = np.sqrt(r2)
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(r > 1e-12, self._radial(r) / r, 1.0)
            out = xy * scale[..., None]
        else:
            k1, k2, p1, p2, k3 = self.coeffs
            radial = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
            out = np.stack([x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x),
                            y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y], axis=-1)
        bad = ~(r2 <= self.max_radius ** 2)
        return np.where(bad[..., None], np.nan, out)

    def undistort(self, xy_d: np.ndarray, iterations: int = 20) -> np.ndarray:
        """Distorted normalized coordinates (..., 2) -> undistorted (..., 2) by Newton's method
        (radtan on (x, y); fisheye on theta, as cv2.fisheye.undistortPoints). NaN where no ray of
        the lens (within `max_radius`) lands there: the solution must distort back to xy_d."""
        xy_d = np.asarray(xy_d, np.float64)
        xy = self._solve(xy_d, iterations)
        with np.errstate(invalid="ignore"):
            ok = np.linalg.norm(self.distort(xy) - xy_d, axis=-1) <= 1e-9 + 1e-7 * np.linalg.norm(xy_d, axis=-1)
        return np.where(ok[..., None], xy, np.nan)

    def _solve(self, xy_d: np.ndarray, iterations: int) -> np.ndarray:
        if self.model == "fisheye":
            rd = np.linalg.norm(xy_d, axis=-1)
            k1, k2, k3, k4 = self.coeffs
            t = np.minimum(rd, np.pi / 2)
            for _ in range(iterations):
                t2 = t * t
                f = t * (1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))) - rd
                df = 1 + t2 * (3 * k1 + t2 * (5 * k2 + t2 * (7 * k3 + t2 * 9 * k4)))
                t = t - f / df
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(rd > 1e-12, np.tan(t) / rd, 1.0)
            return xy_d * scale[..., None]
        k1, k2, p1, p2, k3 = self.coeffs
        x, y = xy_d[..., 0].copy(), xy_d[..., 1].copy()
        for _ in range(iterations):  # Newton on distort(x, y) = xy_d (converges where the lens is monotonic)
            r2 = x * x + y * y
            radial = 1 + r2 * (k1 + r2 * (k2 + r2 * k3))
            dradial = k1 + r2 * (2 * k2 + 3 * k3 * r2)  # d radial / d r2
            fx = x * radial + 2 * p1 * x * y + p2 * (r2 + 2 * x * x) - xy_d[..., 0]
            fy = y * radial + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y - xy_d[..., 1]
            a = radial + 2 * x * x * dradial + 2 * p1 * y + 6 * p2 * x  # Jacobian [[a, b], [c, d]]
            b = 2 * x * y * dradial + 2 * p1 * x + 2 * p2 * y
            c = 2 * x * y * dradial + 2 * p1 * x + 2 * p2 * y
            d = radial + 2 * y * y * dradial + 6 * p1 * y + 2 * p2 * x
            det = a * d - b * c
            with np.errstate(divide="ignore", invalid="ignore"):
                x, y = x - (d * fx - b * fy) / det, y - (a * fy - c * fx) / det
        return np.stack([x, y], axis=-1)

    def as_row(self) -> np.ndarray:
        """The (DISTORTION_WIDTH,) float row of `distortion_array`."""
        row = np.zeros(DISTORTION_WIDTH)
        row[0] = 1 + list(DISTORTION_MODELS).index(self.model)
        row[1:1 + len(self.coeffs)] = self.coeffs
        return row

    def as_dict(self) -> dict:
        return {"model": self.model, "coeffs": list(self.coeffs)}


def distortion_from_row(row) -> "Distortion | None":
    """Inverse of `Distortion.as_row` (model code 0: a pinhole, None); ValueError for a row that is
    not one (another code, non-finite values, coefficients past the model's)."""
    row = np.asarray(row, np.float64)
    codes = range(len(DISTORTION_MODELS) + 1)
    if row.shape != (DISTORTION_WIDTH,) or not np.isfinite(row).all() or row[0] not in codes:
        raise ValueError(f"a lens row is [model code 0|1|2, {DISTORTION_WIDTH - 1} coefficients], got {row.tolist()}")
    code = int(row[0])
    n = DISTORTION_MODELS[list(DISTORTION_MODELS)[code - 1]] if code else 0
    if row[1 + n:].any():
        raise ValueError(f"lens row {row.tolist()}: only the first {n} coefficients are used by its model")
    if code == 0:
        return None
    return Distortion(list(DISTORTION_MODELS)[code - 1], tuple(row[1:1 + n]))


def project(points_cam: np.ndarray, K: np.ndarray, distortion: Distortion | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Projection of camera-frame points (..., 3) -> pixels (..., 2) and depth z (...).
    With a lens `distortion`, points at or behind z = 0 and rays past its `max_radius` get NaN pixels."""
    z = points_cam[..., 2]
    if distortion is None:
        uvw = points_cam @ K.T
        with np.errstate(divide="ignore", invalid="ignore"):
            uv = uvw[..., :2] / uvw[..., 2:3]
        return uv, z
    with np.errstate(divide="ignore", invalid="ignore"):
        xy = np.where((z > 0)[..., None], points_cam[..., :2] / z[..., None], np.nan)
    xy = distortion.distort(xy)
    return xy @ K[:2, :2].T + K[:2, 2], z


def unproject(uv: np.ndarray, depth: np.ndarray, K: np.ndarray, distortion: Distortion | None = None) -> np.ndarray:
    """Pixels (..., 2) with z-depth (...) -> camera-frame points (..., 3)."""
    ones = np.ones(uv.shape[:-1] + (1,))
    rays = np.concatenate([uv, ones], axis=-1) @ np.linalg.inv(K).T  # (..., 3) with z = 1
    if distortion is not None:
        rays[..., :2] = distortion.undistort(rays[..., :2])
    return rays * depth[..., None]


def distortion_array(cameras) -> np.ndarray:
    """(N, DISTORTION_WIDTH) float32 lens rows of `cameras` (zeros for a pinhole): the batch and
    metadata form of the lens models, beside intrinsics (N, 3, 3)."""
    return np.stack([c.distortion.as_row() if c.distortion is not None else np.zeros(DISTORTION_WIDTH)
                     for c in cameras]).astype(np.float32)


def yaw_to_quaternion(yaw: float) -> list[float]:
    """Rotation about +z as a (w, x, y, z) quaternion (nuScenes order)."""
    return [float(np.cos(yaw / 2)), 0.0, 0.0, float(np.sin(yaw / 2))]


def matrix_to_quaternion(R: np.ndarray) -> list[float]:
    """3x3 rotation -> (w, x, y, z) quaternion with w >= 0."""
    m = R
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr > 0:
        s = np.sqrt(tr + 1.0) * 2
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2]) * 2
        q = [(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s]
    elif m[1, 1] > m[2, 2]:
        s = np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2]) * 2
        q = [(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s]
    else:
        s = np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1]) * 2
        q = [(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s]
    q = np.asarray(q, dtype=np.float64)
    q /= np.linalg.norm(q)
    if q[0] < 0:
        q = -q
    return [float(v) for v in q]


def quaternion_to_matrix(q) -> np.ndarray:
    """(w, x, y, z) quaternion -> 3x3 rotation."""
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


# a box's 8 corners in its own frame, in units of half its size: bottom face first, counter-clockwise from front-left
_CORNER_SIGNS = np.array([[1, 1, -1], [1, -1, -1], [-1, -1, -1], [-1, 1, -1],
                          [1, 1, 1], [1, -1, 1], [-1, -1, 1], [-1, 1, 1]], np.float64)  # (8, 3)


def boxes_corners(boxes: np.ndarray) -> np.ndarray:
    """(M, >=7) rows x, y, z (centre), l, w, h (along the box's x, y, z), yaw about z -> (M, 8, 3)
    corners: bottom face first, counter-clockwise from front-left (`box_corners`' order)."""
    b = np.asarray(boxes, np.float64).reshape(-1, max(np.shape(boxes)[-1], 7))
    local = _CORNER_SIGNS[None] * b[:, None, 3:6] / 2  # (M, 8, 3)
    c, s = np.cos(b[:, 6])[:, None], np.sin(b[:, 6])[:, None]
    x = c * local[..., 0] - s * local[..., 1]
    y = s * local[..., 0] + c * local[..., 1]
    return np.stack([x, y, local[..., 2]], -1) + b[:, None, :3]


def box_corners(center, size, yaw: float) -> np.ndarray:
    """8 corners (8, 3) of one box with `size` = (length, width, height) along (x, y, z) of its
    own frame, rotated by `yaw` about z. Bottom face first, counter-clockwise from front-left."""
    return boxes_corners(np.array([*center, *size, yaw], np.float64)[None])[0]


@dataclass(frozen=True)
class Camera:
    """One camera: name, intrinsics K (3x3), camera-to-ego extrinsics (4x4), size and lens
    distortion (None: a pinhole)."""

    name: str
    K: np.ndarray
    cam2ego: np.ndarray
    width: int
    height: int
    distortion: Distortion | None = None

    @property
    def ego2cam(self) -> np.ndarray:
        return invert_rigid(self.cam2ego)

    def project_ego(self, points_ego: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ego-frame points (..., 3) -> pixels (..., 2) and z-depth (...)."""
        return project(transform_points(self.ego2cam, points_ego), self.K, self.distortion)

    def pixel_rays(self, uv: np.ndarray) -> np.ndarray:
        """Pixels (..., 2) -> camera-frame rays (..., 3) with z = 1 (through the lens model)."""
        return unproject(uv, np.ones(uv.shape[:-1]), self.K, self.distortion)

    def scaled(self, width: int, height: int, fit: str = "stretch") -> "Camera":
        """The same camera resampled to another resolution as `fit_window` does it (K scaled per axis, the
        principal point moved with the crop)."""
        sx, sy, x0, y0 = fit_window(self.width, self.height, width, height, fit)
        K = self.K.copy()  # pixel centres sit at integer coordinates (OpenCV)
        K[0, 0] *= sx
        K[0, 1] *= sx
        K[1, 1] *= sy
        K[0, 2] = (K[0, 2] + 0.5) * sx - 0.5 - x0
        K[1, 2] = (K[1, 2] + 0.5) * sy - 0.5 - y0
        return Camera(self.name, K, self.cam2ego.copy(), width, height, self.distortion)


def fit_window(w: int, h: int, W: int, H: int, fit: str = "stretch") -> tuple[float, float, float, float]:
    """(sx, sy, x0, y0): how a w x h image of a camera reaches W x H under data.fit `fit` (scale, then the window at
    (x0, y0) in scaled pixels; `hydranet.loader.resize_crop`'s convention). "stretch": each axis by its own factor;
    "crop": one scale for both axes, the larger, and the centre window (the aspect kept, the overhanging sides
    dropped); "camera" (resample to the model's camera of that name) is the stretch for the camera itself."""
    if fit in ("stretch", "camera"):
        return W / w, H / h, 0.0, 0.0
    if fit != "crop":
        raise ValueError(f"data.fit {fit!r}: give stretch, crop or camera")
    s = max(W / w, H / h)
    return s, s, 0.5 * (w * s - W), 0.5 * (h * s - H)


def mirror_boxes(boxes: np.ndarray, width: float) -> np.ndarray:
    """xyxy boxes (K, 4) (edges, pixel centres at integers) of an image `width` px wide, mirrored left to right."""
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return np.stack([width - b[:, 2], b[:, 1], width - b[:, 0], b[:, 3]], 1)


def mirror_normals(normals: np.ndarray) -> np.ndarray:
    """Camera-frame normal maps (..., H, W, 3) (x right) of an image mirrored left to right: reversed along W, x negated."""
    out = np.array(normals[..., ::-1, :], copy=True)
    out[..., 0] *= -1
    return out


def window_affine(sx: float, sy: float, x0: float, y0: float) -> np.ndarray:
    """The 2x3 forward affine (dst = M @ src, cv2.warpAffine's) of a scale then a window at (x0, y0): pixel centres
    sit at integer coordinates, so a centre u maps to sx * (u + 0.5) - 0.5 - x0."""
    return np.array([[sx, 0.0, 0.5 * sx - 0.5 - x0], [0.0, sy, 0.5 * sy - 0.5 - y0]], np.float64)


def warp_affine(arr: np.ndarray, M: np.ndarray, out_hw: tuple[int, int], linear: bool) -> np.ndarray:
    """One camera's (H, W[, C]) array through the 2x3 forward affine M (dst = M @ src; a scale and a shift).
    Linear (images): an axis shrunk below 1/2 is first area-averaged to its scale (cv2.INTER_AREA), since a
    bilinear sample of a 4x smaller image reads 4 of every 16 pixels and aliases; at 1/2 and above the bilinear
    sample already averages every pixel it covers (the sim's 2x downscale is unchanged)."""
    import cv2  # here: the geometry needs no OpenCV

    dtype = arr.dtype
    # cv2 does not warp bool or int32: bool via uint8, int32 ids (< 2**24) exactly via float32
    src = arr.astype(np.uint8) if dtype.kind == "b" else arr.astype(np.float32) if dtype == np.int32 else arr
    sx, sy = M[0, 0], M[1, 1]
    if linear and min(sx, sy) < 0.5:
        h, w = src.shape[:2]
        nw, nh = (max(1, round(w * sx)) if sx < 0.5 else w), (max(1, round(h * sy)) if sy < 0.5 else h)
        small = cv2.resize(src, (nw, nh), interpolation=cv2.INTER_AREA)
        src = small[..., None] if small.ndim == src.ndim - 1 else small
        fx, fy = nw / w, nh / h  # the scales done; the rest of M applies to the smaller image
        M = window_affine(sx / fx, sy / fy, 0.5 * sx - 0.5 - M[0, 2], 0.5 * sy - 0.5 - M[1, 2])
    out = cv2.warpAffine(src, M, (out_hw[1], out_hw[0]), flags=cv2.INTER_LINEAR if linear else cv2.INTER_NEAREST,
                         borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    if out.ndim == arr.ndim - 1:  # cv2 drops a trailing channel axis of size 1
        out = out[..., None]
    return out.astype(dtype) if out.dtype != dtype else out


def clip_polyline(points: np.ndarray, lo: Sequence[float], hi: Sequence[float]) -> list[np.ndarray]:
    """The runs of a polyline (P, 2) inside the rectangle [lo, hi] (x, y), each (Q, 2) with Q >= 2 distinct points:
    a segment crossing the edge ends on it (Liang-Barsky), a line leaving and re-entering gives two runs."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    pts = np.asarray(points, np.float64)
    if len(pts) < 2:
        return []
    a, d = pts[:-1], np.diff(pts, axis=0)  # each segment's start and direction (S, 2)
    p = np.stack([-d[:, 0], d[:, 0], -d[:, 1], d[:, 1]], 1)  # (S, 4): left, right, top, bottom edges
    q = np.stack([a[:, 0] - lo[0], hi[0] - a[:, 0], a[:, 1] - lo[1], hi[1] - a[:, 1]], 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = q / p
    t0 = np.where(p < 0, r, 0.0).max(axis=1)  # entering: the last edge crossed inwards
    t1 = np.where(p > 0, r, 1.0).min(axis=1)  # leaving: the first edge crossed outwards
    kept = np.flatnonzero((t0 <= t1) & ~((p == 0) & (q < 0)).any(axis=1))  # a segment parallel to an edge, outside it
    if not len(kept):
        return []
    starts, ends = a[kept] + t0[kept, None] * d[kept], a[kept] + t1[kept, None] * d[kept]
    # a segment starting where the last kept one ended continues its run (np.allclose's tolerances)
    joined = (t0[kept[1:]] == 0.0) & (np.abs(ends[:-1] - starts[1:]) <= 1e-8 + 1e-5 * np.abs(starts[1:])).all(axis=1)
    first = np.flatnonzero(np.r_[True, ~joined])  # the kept segment opening each run
    out = []
    for s, e in zip(first, np.r_[first[1:], len(kept)]):
        run = np.concatenate([starts[s:s + 1], ends[s:e]])  # a vertex on the border would come twice: each point once
        run = run[np.r_[True, np.abs(np.diff(run, axis=0)).max(axis=1) > 1e-9]]
        if len(run) >= 2:
            out.append(run)
    return out
