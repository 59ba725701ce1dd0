"""Track-level hindsight: a Kalman filter and the Rauch-Tung-Striebel smoother over whole tracks.

Each coordinate of a track (a 2D box's x0, y0, x1, y1 in pixels; a 3D track's world x, y in metres) follows a
constant-velocity model, state [p, v] per coordinate, with white-noise acceleration of variance `q`
(`filterpy.common.Q_discrete_white_noise`) and measurement noise sigma `r`. `filterpy.kalman.KalmanFilter`
filters forward (`batch_filter`, a frame the track missed is a prediction without update) and its
`rts_smoother` runs backward (Rauch, Tung, Striebel, "Maximum likelihood estimates of linear dynamic systems",
AIAA Journal 3(8), 1965): each frame's estimate then uses every frame of the track, past and future, so the
positions are smoother than any frame's detection, the missed frames are filled, and the velocity comes from
the whole trajectory (not one frame's regression). A 3D track also measures its detections' own velocities (a
video model's velocity head: `noise_mps` > 0), so its velocity weighs the trajectory's slope against the
network's estimates by their noise; with `noise_mps` 0 the velocity is the trajectory's alone.

`hindsight_3d` adds what holds for a rigid object over its whole track: one size (the median of its
detections), one class (score-weighted vote), the height of its centre (median), and the yaw from its motion
where it moves faster than `min_speed` (else the circular mean of its detected headings).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def rts_smooth(times: np.ndarray, z: np.ndarray, q: float, r: float, zv: np.ndarray | None = None,
               rv: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Constant-velocity RTS smoothing of measurements z (T, D) at `times` (T,) seconds, rows of NaN = missed
    frames -> (positions (T, D), velocities (T, D)) smoothed. `zv` (T, D): the detections' own velocity estimates
    (a video model's velocity head), measured too with sigma `rv` when rv > 0 (else only the positions are)."""
    from filterpy.common import Q_discrete_white_noise
    from filterpy.kalman import KalmanFilter

    times, z = np.asarray(times, np.float64), np.asarray(z, np.float64)
    T, D = z.shape
    with_v = zv is not None and rv > 0
    if with_v:
        z = np.concatenate([z, np.asarray(zv, np.float64)], 1)  # (T, 2D): positions, then velocities
    kf = KalmanFilter(dim_x=2 * D, dim_z=z.shape[1])  # state [p_0, v_0, p_1, v_1, ...]
    kf.H = np.zeros((z.shape[1], 2 * D))
    kf.H[np.arange(D), 2 * np.arange(D)] = 1.0
    if with_v:
        kf.H[D + np.arange(D), 2 * np.arange(D) + 1] = 1.0
    kf.R = np.diag([r ** 2] * D + [rv ** 2] * (D if with_v else 0))
    first = np.flatnonzero(np.isfinite(z).all(1))[0]
    kf.x = np.zeros(2 * D)
    kf.x[0::2] = z[first, :D]
    kf.P = np.diag(np.tile([r ** 2, 1e4], D))  # position known to the measurement, velocity unknown
    dts = np.diff(times, prepend=times[0])
    F = {dt: np.kron(np.eye(D), np.array([[1.0, dt], [0.0, 1.0]])) for dt in set(dts.tolist())}  # one per distinct step
    Q = {dt: Q_discrete_white_noise(dim=2, dt=max(dt, 1e-6), var=q, block_size=D, order_by_dim=True) for dt in F}
    Fs, Qs = [F[dt] for dt in dts.tolist()], [Q[dt] for dt in dts.tolist()]
    zs = [row if np.isfinite(row).all() else None for row in z]
    mu, cov, _, _ = kf.batch_filter(zs, Fs=Fs, Qs=Qs)
    xs, _, _, _ = kf.rts_smoother(mu, cov, Fs=Fs, Qs=Qs)
    return xs[:, 0::2], xs[:, 1::2]


def span(frames: Sequence[int]) -> np.ndarray:
    """Every frame index from a track's first to its last (the gaps included) (S,)."""
    return np.arange(min(frames), max(frames) + 1)


def measurements(frames: Sequence[int], values: np.ndarray) -> np.ndarray:
    """values (n, D) at `frames` laid on the track's span, NaN rows at the missed frames -> (S, D)."""
    s = span(frames)
    out = np.full((len(s), values.shape[1]), np.nan)
    out[np.asarray(frames) - s[0]] = values
    return out


def track_confidence(frames: Sequence[int], scores: np.ndarray) -> float:
    """Mean fused score over the track's span, a missed frame counting 0."""
    return float(np.sum(scores) / len(span(frames)))


def vote(labels: np.ndarray, scores: np.ndarray) -> int:
    """The class with the largest score sum (the smaller id on a tie)."""
    labs = np.unique(labels)
    return int(labs[np.argmax([scores[labels == lab].sum() for lab in labs])])


def hindsight_2d(times: np.ndarray, frames: Sequence[int], boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray,
                 q: float, r: float) -> dict:
    """One 2D track: times (T,) s of the clip's frames; its detections at `frames` (n,), boxes (n, 4) xyxy px ->
    {"frames" (S,), "boxes" (S, 4) smoothed, gaps filled, "label", "confidence", "detected" (S,) bool}."""
    s = span(frames)
    pos, _ = rts_smooth(np.asarray(times)[s], measurements(frames, boxes), q, r)
    x0, x1 = np.minimum(pos[:, 0], pos[:, 2]), np.maximum(pos[:, 0], pos[:, 2])
    y0, y1 = np.minimum(pos[:, 1], pos[:, 3]), np.maximum(pos[:, 1], pos[:, 3])
    return {"frames": s, "boxes": np.stack([x0, y0, x1, y1], 1), "label": vote(labels, scores),
            "confidence": track_confidence(frames, scores), "detected": np.isin(s, frames)}


def circular_mean(angles: np.ndarray, weights: np.ndarray) -> float:
    return float(np.arctan2((weights * np.sin(angles)).sum(), (weights * np.cos(angles)).sum()))


def hindsight_3d(times: np.ndarray, frames: Sequence[int], world: np.ndarray, scores: np.ndarray, labels: np.ndarray,
                 q: float, r: float, min_speed: float, rv: float = 0.0) -> dict:
    """One world-frame 3D track: its detections at `frames` (n,), world boxes (n, 9) x, y, z, l, w, h, yaw, vx, vy ->
    {"frames" (S,), "boxes" (S, 9) world: smoothed x, y, median z and size, yaw from motion where it moves, the
    smoothed velocity; "label", "confidence", "detected" (S,) bool, "moving" (S,) bool}. `rv` > 0: the detections'
    own velocities are measured too (sigma rv, m/s), beside their positions (sigma r)."""
    s = span(frames)
    pos, vel = rts_smooth(np.asarray(times)[s], measurements(frames, world[:, :2]), q, r,
                          measurements(frames, world[:, 7:9]), rv)  # (S, 2) each
    speed = np.linalg.norm(vel, axis=1)
    moving = speed >= min_speed
    still_yaw = circular_mean(world[:, 6], scores)
    yaw = np.where(moving, np.arctan2(vel[:, 1], vel[:, 0]), still_yaw)
    S = len(s)
    out = np.zeros((S, 9))
    out[:, :2], out[:, 2] = pos, np.median(world[:, 2])
    out[:, 3:6] = np.median(world[:, 3:6], axis=0)  # one size per rigid object
    out[:, 6], out[:, 7:9] = yaw, vel
    return {"frames": s, "boxes": out, "label": vote(labels, scores), "confidence": track_confidence(frames, scores),
            "detected": np.isin(s, frames), "moving": moving}


def to_ego(world: np.ndarray, ego2world: np.ndarray) -> np.ndarray:
    """World-frame boxes (K, 9) -> the frame's ego frame (K, 9) (inverse of track.to_world)."""
    b = np.asarray(world, np.float64).reshape(-1, 9).copy()
    R, t = ego2world[:3, :3], ego2world[:3, 3]
    b[:, :3] = (b[:, :3] - t) @ R
    b[:, 6] = np.angle(np.exp(1j * (b[:, 6] - np.arctan2(R[1, 0], R[0, 0]))))
    b[:, 7:9] = b[:, 7:9] @ R[:2, :2]
    return b
