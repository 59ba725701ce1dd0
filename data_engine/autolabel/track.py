"""Offline multi-object tracking over a whole clip, in both directions.

Detections are linked frame to frame by the Hungarian algorithm (`scipy.optimize.linear_sum_assignment`;
Kuhn 1955, Munkres 1957) on an affinity between each live track's constant-velocity prediction and the
frame's detections of the same class, gated (SORT: Bewley et al., "Simple Online and Realtime Tracking",
ICIP 2016, without its Kalman filter: the smoother runs afterwards over whole tracks). A track missing up to
`max_gap` frames continues (its prediction extrapolated over the gap).

Offline means both directions: the clip is tracked forward and backward, and the two passes' links are joined
(`merge_links`): a detection pair linked by either pass is one object, so a track the forward pass broke (an
object that appears late, or a bad prediction right after a gap) is joined by the backward pass, which meets it
from its other end. A component the union would give two detections in one frame is a contradiction between
the passes; there only the forward pass's links are kept.

- 2D, per camera (`track_2d`): state = the box (x0, y0, x1, y1) px, affinity = IoU, gate `track_iou`.
- 3D, world frame (`track_3d`): state = the BEV centre (x, y) in metres in the world frame (ego boxes moved by
  each frame's ego2world, so the car's own motion is not the objects'), affinity = -distance, gate
  `track_distance`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment

from hydranet import decoding

Det = tuple[int, int]  # (frame index in the clip, detection index in that frame)
Frames = Sequence[tuple[np.ndarray, np.ndarray]]  # per frame: (states (K, D), labels (K,))
Affinity = Callable[[np.ndarray, np.ndarray], np.ndarray]  # predicted (M, D), detections (K, D) -> (M, K), higher = closer


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of xyxy boxes a (M, 4) and b (K, 4) -> (M, K), in float64 (`hydranet.decoding.box_iou`; a NaN box gives
    NaN, which the Hungarian step refuses: decoded boxes are finite, `hydranet.decoding` raises before)."""
    return decoding.box_iou(np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4))


def neg_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """-Euclidean distance of points a (M, D) and b (K, D) -> (M, K)."""
    return -np.linalg.norm(np.asarray(a, np.float64)[:, None] - np.asarray(b, np.float64)[None], axis=-1)


def _predict(track: list[Det], frames: Frames, t: int) -> np.ndarray:
    """The track's state at frame t, extrapolated at constant velocity from its last two detections (D,)."""
    (t1, k1) = track[-1]
    x1 = frames[t1][0][k1]
    if len(track) < 2:
        return x1
    t0, k0 = track[-2]
    v = (x1 - frames[t0][0][k0]) / (t1 - t0)
    return x1 + v * (t - t1)


def one_pass(frames: Frames, order: Sequence[int], affinity: Affinity, gate: float, max_gap: int) -> list[list[Det]]:
    """Tracks of one pass over the frames in `order` (forward or backward): lists of detections in pass order."""
    tracks: list[list[Det]] = []
    for t in order:
        states, labels = frames[t]
        live = [i for i, tr in enumerate(tracks) if abs(t - tr[-1][0]) <= max_gap + 1]
        free = set(range(len(labels)))
        if live and len(labels):
            pred = np.stack([_predict(tracks[i], frames, t) for i in live])  # (M, D)
            aff = affinity(pred, states)  # (M, K)
            last = np.array([frames[tracks[i][-1][0]][1][tracks[i][-1][1]] for i in live])  # (M,) each track's class
            same = last[:, None] == np.asarray(labels)[None, :]  # (M, K)
            ok = same & (aff >= gate)
            cost = np.where(ok, -aff, 1e9)
            for r, c in zip(*linear_sum_assignment(cost)):
                if ok[r, c]:
                    tracks[live[r]].append((t, int(c)))
                    free.discard(int(c))
        tracks += [[(t, k)] for k in sorted(free)]
    return tracks


def _links(tracks: list[list[Det]]) -> set[tuple[Det, Det]]:
    return {tuple(sorted((a, b))) for tr in tracks for a, b in zip(tr, tr[1:])}


def merge_links(forward: list[list[Det]], backward: list[list[Det]]) -> list[list[Det]]:
    """Tracks from the union of both passes' links; a component holding two detections of one frame keeps the
    forward pass's links only. Sorted by first detection, each in frame order."""
    parent: dict[Det, Det] = {}

    def find(x: Det) -> Det:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    dets = sorted({d for tr in forward + backward for d in tr})
    for d in dets:
        find(d)
    for a, b in sorted(_links(forward) | _links(backward)):
        parent[find(a)] = find(b)
    groups: dict[Det, list[Det]] = {}
    for d in dets:
        groups.setdefault(find(d), []).append(d)
    fwd_of = {d: i for i, tr in enumerate(forward) for d in tr}
    out: list[list[Det]] = []
    for members in groups.values():
        frames = [t for t, _ in members]
        if len(set(frames)) == len(frames):
            out.append(sorted(members))
        else:  # the passes contradict each other here: the forward pass decides
            split: dict[int, list[Det]] = {}
            for d in members:
                split.setdefault(fwd_of[d], []).append(d)
            out += [sorted(v) for v in split.values()]
    return sorted(out)


def track(frames: Frames, affinity: Affinity, gate: float, max_gap: int) -> list[list[Det]]:
    """Offline tracks over a clip (both directions merged): lists of (frame, detection) in frame order."""
    T = len(frames)
    fwd = one_pass(frames, range(T), affinity, gate, max_gap)
    bwd = one_pass(frames, range(T - 1, -1, -1), affinity, gate, max_gap)
    return merge_links(fwd, bwd)


def track_2d(boxes: Sequence[np.ndarray], labels: Sequence[np.ndarray], iou: float, max_gap: int) -> list[list[Det]]:
    """One camera's 2D tracks: boxes[t] (K_t, 4) xyxy px, labels[t] (K_t,) per frame."""
    frames = [(np.asarray(b, np.float64).reshape(-1, 4), np.asarray(lab).reshape(-1)) for b, lab in zip(boxes, labels)]
    return track(frames, box_iou, iou, max_gap)


def to_world(boxes: np.ndarray, ego2world: np.ndarray) -> np.ndarray:
    """Ego-frame 3D boxes (K, 9) x, y, z, l, w, h, yaw, vx, vy -> the same in the world frame (K, 9)."""
    b = np.asarray(boxes, np.float64).reshape(-1, 9).copy()
    R, t = ego2world[:3, :3], ego2world[:3, 3]
    b[:, :3] = b[:, :3] @ R.T + t
    b[:, 6] += np.arctan2(R[1, 0], R[0, 0])
    b[:, 7:9] = b[:, 7:9] @ R[:2, :2].T
    return b


def track_3d(world_boxes: Sequence[np.ndarray], labels: Sequence[np.ndarray], distance: float,
             max_gap: int) -> list[list[Det]]:
    """World-frame 3D tracks: world_boxes[t] (K_t, 9) (`to_world`), labels[t] (K_t,); gate in metres."""
    frames = [(np.asarray(b, np.float64).reshape(-1, 9)[:, :2], np.asarray(lab).reshape(-1))
              for b, lab in zip(world_boxes, labels)]
    return track(frames, neg_distance, -distance, max_gap)
