"""One clip, with hindsight: the ensemble's views fused per frame (fuse.py), tracked over the whole clip in both
directions (track.py), each track smoothed (smooth.py), the dense heads averaged (dense.py); the result is a
labels.json payload per frame (docs/dataset_format.md) with a confidence per object.

A clip of one frame cannot be tracked: its frame is labelled from the fused detections alone (said so). A clip
without ego poses gets 2D tracks only and no 3D labels (world-frame tracks need the poses; said so).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from data_engine.autolabel.dense import dense_arrays, fuse_dense
from data_engine.autolabel.fuse import fuse_3d, wbf
from data_engine.autolabel.smooth import hindsight_2d, hindsight_3d, to_ego, track_confidence
from data_engine.autolabel.track import to_world, track_2d, track_3d


def fuse_frames(per_member: Sequence[Sequence[dict | None]], cameras: Sequence[str], sizes: Mapping[str, tuple[int, int]],
                cfg) -> list[dict | None]:
    """Per frame {"det2d": [(boxes, scores, labels) per camera], "det3d": (boxes (K, 9), scores, labels) or absent,
    "dense": {head: (mean, agreement)}} from every member's `run_member` items (None: an unreadable frame)."""
    out: list[dict | None] = []
    for t in range(len(per_member[0])):
        items = [m[t] for m in per_member]
        if items[0] is None:
            out.append(None)
            continue
        fused: dict[str, Any] = {"det2d": [wbf([v for it in items for v in it["det2d"][n]], sizes[cam], cfg.fuse_iou,
                                               cfg.min_score, cfg.fuse_conf) for n, cam in enumerate(cameras)]
                                 if items[0]["det2d"][0] else [],
                                 "dense": fuse_dense([v for it in items for v in it["dense"]])}
        if "det3d" in items[0]:
            fused["det3d"] = fuse_3d([it["det3d"] for it in items], cfg.fuse_distance, cfg.min_score, cfg.fuse_conf)
        out.append(fused)
    return out


def _empty(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((0, k)), np.zeros(0), np.zeros(0, np.int64)


def _kept(tr: Sequence[tuple[int, int]], conf: float, cfg) -> bool:
    return len(tr) >= cfg.min_track_length and conf >= cfg.min_track_score


def tracks_2d(fused: Sequence[dict | None], times: np.ndarray, n: int, cfg) -> list[dict]:
    """Camera n's smoothed 2D tracks (smooth.hindsight_2d dicts), the short and unsure ones dropped."""
    dets = [f["det2d"][n] if f is not None else _empty(4) for f in fused]
    out = []
    for tr in track_2d([d[0] for d in dets], [d[2] for d in dets], cfg.track_iou, cfg.max_gap):
        frames = [t for t, _ in tr]
        boxes = np.array([dets[t][0][k] for t, k in tr])
        scores = np.array([dets[t][1][k] for t, k in tr])
        labels = np.array([dets[t][2][k] for t, k in tr])
        if _kept(tr, track_confidence(frames, scores), cfg):  # judged before the (costlier) smoothing
            out.append(hindsight_2d(times, frames, boxes, scores, labels, cfg.process_noise, cfg.noise_px))
    return out


def tracks_3d(fused: Sequence[dict | None], times: np.ndarray, poses: Sequence[np.ndarray], cfg) -> list[dict]:
    """World-frame smoothed 3D tracks (smooth.hindsight_3d dicts), the short and unsure ones dropped."""
    dets = [(to_world(f["det3d"][0], poses[t]), f["det3d"][1], f["det3d"][2]) if f is not None else _empty(9)
            for t, f in enumerate(fused)]
    out = []
    for tr in track_3d([d[0] for d in dets], [d[2] for d in dets], cfg.track_distance, cfg.max_gap):
        frames = [t for t, _ in tr]
        world = np.array([dets[t][0][k] for t, k in tr])
        scores = np.array([dets[t][1][k] for t, k in tr])
        labels = np.array([dets[t][2][k] for t, k in tr])
        if _kept(tr, track_confidence(frames, scores), cfg):
            out.append(hindsight_3d(times, frames, world, scores, labels, cfg.process_noise, cfg.noise_m, cfg.min_speed,
                                    cfg.noise_mps))
    return out


def _clip_box(b: np.ndarray, size: tuple[int, int]) -> list[float] | None:
    """[x0, y0, x1, y1] inside the (H, W) image, or None when nothing of it is left."""
    H, W = size
    x0, y0, x1, y1 = float(np.clip(b[0], 0, W)), float(np.clip(b[1], 0, H)), float(np.clip(b[2], 0, W)), float(np.clip(b[3], 0, H))
    return [x0, y0, x1, y1] if x1 - x0 >= 0.5 and y1 - y0 >= 0.5 else None


def _box2d(b, cls: str, conf: float, track: int | None, detected: bool) -> dict:
    return {"bbox": [round(v, 3) for v in b], "class": cls, "confidence": round(float(conf), 4), "track_id": track,
            "attributes": {} if detected else {"filled": True}}


def _box3d(b: np.ndarray, cls: str, conf: float, track: int | None, detected: bool) -> dict:
    return {"center": [round(float(v), 3) for v in b[:3]], "size": [round(float(v), 3) for v in b[3:6]],
            "yaw": round(float(b[6]), 4), "velocity": [round(float(b[7]), 3), round(float(b[8]), 3), 0.0], "class": cls,
            "confidence": round(float(conf), 4), "track_id": track, "attributes": {} if detected else {"filled": True}}


def label_clip(fused: Sequence[dict | None], times: np.ndarray, poses: Sequence[np.ndarray | None], cameras: Sequence[str],
               sizes: Mapping[str, tuple[int, int]], classes: Mapping[str, list[str]], cfg) -> dict[str, Any]:
    """{"frames": {t: payload (without provenance)}, "dense": {t: arrays}, "tracks2d", "tracks3d", "tracked"} for every
    readable frame t of the clip."""
    T = len(fused)
    tracked = T > 1
    posed = all(p is not None for p in poses)
    has3d = posed and any(f is not None and "det3d" in f for f in fused)
    supervises = [h for h in ("det2d", "det3d") if h in classes and (h == "det2d" or has3d)]  # what the labels train
    payloads: dict[int, dict] = {t: {"cameras": {c: {"boxes2d": [], "lanes2d": []} for c in cameras}, "boxes3d": [],
                                     "supervises": supervises} for t in range(T) if fused[t] is not None}
    n2d = n3d = 0
    next_id = 0
    for n, cam in enumerate(cameras):
        if not fused or all(f is None or not f["det2d"] for f in fused):
            break
        if not tracked:  # one frame: the fused detections as they are
            for t in payloads:
                for b, s, lab in zip(*fused[t]["det2d"][n]):
                    bb = _clip_box(b, sizes[cam])
                    if bb is not None and s >= cfg.min_track_score:
                        payloads[t]["cameras"][cam]["boxes2d"].append(_box2d(bb, classes["det2d"][lab], s, None, True))
            continue
        for tr in tracks_2d(fused, times, n, cfg):
            n2d += 1
            for t, b, det in zip(tr["frames"], tr["boxes"], tr["detected"]):
                bb = _clip_box(b, sizes[cam])
                if t in payloads and bb is not None:
                    payloads[t]["cameras"][cam]["boxes2d"].append(_box2d(bb, classes["det2d"][tr["label"]], tr["confidence"],
                                                                         next_id, bool(det)))
            next_id += 1
    if has3d and tracked:
        for tr in tracks_3d(fused, times, poses, cfg):
            n3d += 1
            for t, b, det in zip(tr["frames"], tr["boxes"], tr["detected"]):
                if t in payloads:
                    ego = to_ego(b[None], poses[t])[0]
                    payloads[t]["boxes3d"].append(_box3d(ego, classes["det3d"][tr["label"]], tr["confidence"], next_id,
                                                         bool(det)))
            next_id += 1
    elif has3d:
        for t in payloads:
            for b, s, lab in zip(*fused[t]["det3d"]):
                if s >= cfg.min_track_score:
                    payloads[t]["boxes3d"].append(_box3d(b, classes["det3d"][lab], s, None, True))
    dense = {t: dense_arrays(fused[t]["dense"]) for t in payloads if fused[t]["dense"]}
    for t in payloads:
        if t in dense:
            payloads[t]["dense"] = {"heads": {h: {"agreement": round(float(a.mean()), 4)}
                                              for h, (_, a) in fused[t]["dense"].items()}}
    return {"frames": payloads, "dense": dense, "tracks2d": n2d, "tracks3d": n3d, "tracked": tracked, "has3d": has3d}
