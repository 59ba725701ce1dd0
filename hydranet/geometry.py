"""Frames, camera models and rigid transforms shared by sim/, hydranet/ and deploy/.

Frames (as nuScenes): world and ego are x forward, y left, z up; the camera frame is OpenCV's,
x right, y down, z forward. Extrinsics are camera-to-ego 4x4 matrices, ego poses ego-to-world.
Pure numpy so the sim and the torch-free runtime can use it.
"""
from __future__ import annotations

from dataclasses import dataclass

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


def project(points_cam: np.ndarray, K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pinhole projection of camera-frame points (..., 3) -> pixels (..., 2) and depth z (...)."""
    z = points_cam[..., 2]
    uvw = points_cam @ K.T
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = uvw[..., :2] / uvw[..., 2:3]
    return uv, z


def unproject(uv: np.ndarray, depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Pixels (..., 2) with z-depth (...) -> camera-frame points (..., 3)."""
    ones = np.ones(uv.shape[:-1] + (1,))
    rays = np.concatenate([uv, ones], axis=-1) @ np.linalg.inv(K).T  # (..., 3) with z = 1
    return rays * depth[..., None]


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


def box_corners(center, size, yaw: float) -> np.ndarray:
    """8 corners (8, 3) of a box with `size` = (length, width, height) along (x, y, z) of its
    own frame, rotated by `yaw` about z. Bottom face first, counter-clockwise from front-left."""
    l, w, h = size
    x = np.array([1, 1, -1, -1, 1, 1, -1, -1]) * l / 2
    y = np.array([1, -1, -1, 1, 1, -1, -1, 1]) * w / 2
    z = np.array([-1, -1, -1, -1, 1, 1, 1, 1]) * h / 2
    pts = np.stack([x, y, z], axis=1)
    return pts @ rot_z(yaw).T + np.asarray(center, dtype=np.float64)


@dataclass(frozen=True)
class Camera:
    """One pinhole camera: name, intrinsics K (3x3), camera-to-ego extrinsics (4x4), size."""

    name: str
    K: np.ndarray
    cam2ego: np.ndarray
    width: int
    height: int

    @property
    def ego2cam(self) -> np.ndarray:
        return invert_rigid(self.cam2ego)

    def project_ego(self, points_ego: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ego-frame points (..., 3) -> pixels (..., 2) and z-depth (...)."""
        return project(transform_points(self.ego2cam, points_ego), self.K)

    def scaled(self, width: int, height: int) -> "Camera":
        """The same camera resampled to another resolution (K scaled per axis)."""
        sx, sy = width / self.width, height / self.height
        K = self.K.copy()  # pixel centres sit at integer coordinates (OpenCV)
        K[0, 0] *= sx
        K[0, 1] *= sx
        K[1, 1] *= sy
        K[0, 2] = (K[0, 2] + 0.5) * sx - 0.5
        K[1, 2] = (K[1, 2] + 0.5) * sy - 0.5
        return Camera(self.name, K, self.cam2ego.copy(), width, height)
