"""Decoders of every head's raw outputs, in numpy only: the one implementation used by the torch
tasks' `decode` (through `.cpu().numpy()`) and by the torch-free runtime in the car
(`deploy/runtime.py`). This module must not import torch (a test checks it in a fresh process).

A decoder is `DECODERS[kind](outputs, **params) -> list of per-item results`, `outputs` being the
head's raw outputs {name: numpy array with a leading batch axis}, `params` what the task records
in `Task.decoding()` (and the ONNX export in its metadata). Results hold numpy arrays. A head owns
its decoder through its numpy side (`hydranet.heads.HeadSpec.decode`); registering a head adds its
kind to `DECODERS`, so a new head needs no edit here.

- "centernet" (det2d, signs_lights): CenterNet peaks (Zhou et al., "Objects as Points", 2019):
  3x3 local maxima of the sigmoid heatmap, top-k, box from (dx, dy, log w, log h) in stride units,
  class-wise greedy NMS (as torchvision's `batched_nms`).
- "lanes": sigmoid > threshold, 8-connected components of at least min_area_frac of the image.
- "binary_mask" (drivable), "multi_mask" (bevmap): sigmoid > threshold.
- "depth": exp of log depth clamped to [min_depth, max_depth]. "normals": unit vectors (H, W, 3).
- "centerpoint" (det3d): CenterPoint peaks on the BEV grid (Yin et al., CVPR 2021) -> (K, 9) boxes
  x, y, z, l, w, h, yaw, vx, vy in the ego frame.

Outputs holding NaN or Inf are never decoded (`decode` raises `NonFiniteError` naming the output): a
NaN heatmap would decode to no boxes and NaN mask logits to a full mask, results that look valid.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


class NonFiniteError(ValueError):
    """Raw outputs holding NaN or Inf (a broken model: a non-finite weight, or an overflow)."""


def first_non_finite(outputs: Mapping[str, np.ndarray]) -> tuple[str, str, int] | None:
    """(name, "NaN" or "Inf", first item along the leading axis) of the first floating-point output
    holding a non-finite value, or None when all are finite. One `np.isfinite(...).all()` per output
    (about a memory pass); the item is looked up only for a bad output."""
    for name, a in outputs.items():
        a = np.asarray(a)
        if a.dtype.kind not in "fc" or np.isfinite(a).all():
            continue
        bad = ~np.isfinite(a.reshape(len(a), -1) if a.ndim else a.reshape(1, 1))
        item = int(np.flatnonzero(bad.any(1))[0])
        return name, ("NaN" if np.isnan(a).any() else "Inf"), item
    return None


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-clip(x, -80, 80))) in float32: the same float32 operations in place on one new
    buffer (bit-identical to the expression, without its temporaries)."""
    t = np.maximum(np.asarray(x, np.float32), np.float32(-80.0))  # np.clip(x, -80, 80), without its wrapper's cost
    np.minimum(t, np.float32(80.0), out=t)
    np.negative(t, out=t)
    np.exp(t, out=t)
    t += np.float32(1.0)
    return np.divide(np.float32(1.0), t, out=t)


# `sigmoid_above` computes the sigmoid only within _BAND of the threshold's logit, for thresholds in _BAND_T:
# there sigmoid(logit + _BAND / 2) - threshold > 2e-5, far above the float32 sigmoid's error (< 1e-6)
_BAND, _BAND_T = np.float32(0.05), (1e-3, 1.0 - 1e-3)


def sigmoid_above(x: np.ndarray, threshold: float) -> np.ndarray:
    """`sigmoid(x) > threshold` (bool, x's shape), the same decisions: logits far from the threshold's
    logit x0 are decided by their side of it (the sigmoid is monotonic, its float32 error tiny against
    the margin), those within _BAND of x0 by `sigmoid` itself; thresholds outside _BAND_T: `sigmoid`."""
    x = np.asarray(x, np.float32)
    if not _BAND_T[0] < threshold < _BAND_T[1]:
        return sigmoid(x) > threshold
    x0 = np.float32(np.log(threshold / (1.0 - threshold)))
    out = x > x0 + _BAND / 2
    near = x - x0
    near = np.flatnonzero(np.abs(near, out=near) <= _BAND)  # overlaps both sides: no logit falls between
    if near.size * 4 > x.size:  # most logits at the threshold (an untrained model): the sigmoid everywhere
        return sigmoid(x) > threshold
    if near.size:
        out.reshape(-1)[near] = sigmoid(x.reshape(-1)[near]) > threshold
    return out


def max_pool3x3(x: np.ndarray) -> np.ndarray:
    """3x3 max filter, stride 1, over the last two axes (padding never wins, as -inf padding):
    separable, a 1x3 then a 3x1 max over shifted slices (max is exact, so the result is the 3x3 one's)."""
    r = x.copy()
    np.maximum(r[..., :, 1:], x[..., :, :-1], out=r[..., :, 1:])
    np.maximum(r[..., :, :-1], x[..., :, 1:], out=r[..., :, :-1])
    out = r.copy()
    np.maximum(out[..., 1:, :], r[..., :-1, :], out=out[..., 1:, :])
    np.maximum(out[..., :-1, :], r[..., 1:, :], out=out[..., :-1, :])
    return out


def topk(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Largest k of a 1-D array, descending (ties: lower index first)."""
    k = min(k, values.size)
    if k <= 0:
        return values[:0], np.zeros(0, np.int64)
    part = np.argpartition(-values, k - 1)[:k] if k < values.size else np.arange(values.size)
    order = part[np.lexsort((part, -values[part]))]
    return values[order], order.astype(np.int64)


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of xyxy boxes a (M, 4) and b (K, 4) -> (M, K)."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    # overlap width and height (clipped at 0), one (M, K) plane each: the arithmetic of the (M, K, 2) form
    iw = np.minimum(a[:, None, 2], b[None, :, 2])
    iw -= np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3])
    ih -= np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.maximum(iw, 0, out=iw)
    inter *= np.maximum(ih, 0, out=ih)
    union = area_a[:, None] + area_b[None, :]
    union -= inter
    return np.divide(inter, np.maximum(union, 1e-12, out=union), out=union)


def nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy NMS: indices kept, by decreasing score; a box is dropped when its IoU with a kept,
    higher-scoring box is > iou_threshold (torchvision.ops.nms semantics)."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    if len(order) == 0:
        return np.zeros(0, np.int64)
    # greedy NMS as a fixed point: in score order, box j is kept iff no kept box before it overlaps it. That
    # recursion has one solution (the greedy one); iterating keep <- "no kept box before me overlaps me" from
    # all-kept reaches it after (longest suppression chain + 1) matrix steps instead of one Python step per box
    sup = np.triu(box_iou(boxes[order], boxes[order]) > iou_threshold, 1)  # sup[i, j]: i (higher score) hits j
    keep = np.ones(len(order), bool)
    while True:
        new = ~sup[keep].any(0)
        if np.array_equal(new, keep):
            return order[keep].astype(np.int64)
        keep = new


def batched_nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Class-wise NMS: boxes of different classes never suppress each other."""
    if len(boxes) == 0:
        return np.zeros(0, np.int64)
    offset = classes.astype(np.float64)[:, None] * (float(boxes.max()) + 1.0)
    return nms(boxes.astype(np.float64) + offset, scores, iou_threshold)


# -- decoders ------------------------------------------------------------------------------------
def _dense_peaks(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`topk` of one item's 3x3-peak scores over every cell (non-peaks 0): the plain CenterNet selection."""
    heat = sigmoid(logits)
    return topk(np.where(max_pool3x3(heat) == heat, heat, 0.0).reshape(-1), k)


def heatmap_peaks(logits: np.ndarray, score_threshold: float, max_detections: int):
    """CenterNet/CenterPoint peaks: per image of heatmap logits (B, C, H, W), the top
    `max_detections` 3x3 local maxima above `score_threshold` as (scores (K,) float32, classes (K,),
    rows (K,), cols (K,)).

    Fast path (a threshold in (0.001, 0.999)): only cells whose score passes the threshold
    (`sigmoid_above`) can be kept, so only their 3x3 neighbourhoods are scored (the same float32
    sigmoid per cell) and only those candidates ranked (descending, ties: lower index first). A tie
    across the k-th place is ranked by `topk` over every cell, as the plain selection does, so
    the result is always the plain one's (tests/test_runtime_fastpath.py)."""
    logits = np.asarray(logits, np.float32)
    B, C, H, W = logits.shape
    K = max(max_detections, 0)
    if not _BAND_T[0] < score_threshold < _BAND_T[1]:
        picked = [_dense_peaks(logits[b], max_detections) for b in range(B)]
    else:
        above = sigmoid_above(logits, score_threshold)
        cand = np.flatnonzero(above)  # flat (B, C, H, W) indices, ascending
        if len(cand) * 16 > logits.size:  # many candidates (an untrained model): the dense 3x3 max filter
            heat = sigmoid(logits)
            cand = np.flatnonzero((max_pool3x3(heat) == heat) & above)
            v = heat.reshape(-1)[cand]
        else:
            y, x = (cand // W) % H, cand % W
            base = cand - y * W - x  # the (b, c) plane's first cell
            # the 3x3 neighbourhood, coordinates clipped into the map: a clipped neighbour is a cell of the same
            # window (or the centre), so the window's maximum is the in-map one's (as -inf padding)
            ys = np.minimum(np.maximum(y[:, None] + np.array([-1, 0, 1]), 0), H - 1)
            xs = np.minimum(np.maximum(x[:, None] + np.array([-1, 0, 1]), 0), W - 1)
            nb = sigmoid(logits.reshape(-1)[(base[:, None, None] + ys[:, :, None] * W + xs[:, None, :]).reshape(-1, 9)])
            v = nb[:, 4]
            peak = v == nb.max(1)
            cand, v = cand[peak], v[peak]
        bounds = np.searchsorted(cand, np.arange(B + 1) * (C * H * W))
        picked = []
        for b in range(B):
            ix, vb = cand[bounds[b]:bounds[b + 1]] - b * C * H * W, v[bounds[b]:bounds[b + 1]]
            if 0 < K < len(vb):  # the k-th largest; everything at or above it, sorted
                kth = -np.partition(-vb, K - 1)[K - 1]
                above = vb >= kth
                if np.count_nonzero(above) > K:  # a tie across the k-th place (saturated scores): the plain
                    # selection's argpartition picks among the tied ones: its choice, kept as it was
                    picked.append(_dense_peaks(logits[b], K))
                    continue
                ix, vb = ix[above], vb[above]
            order = np.lexsort((ix, -vb))[:K]
            picked.append((vb[order], ix[order].astype(np.int64)))
    out = []
    for sc, ix in picked:
        keep = sc > score_threshold
        sc, ix = sc[keep].astype(np.float32), ix[keep]
        cls, cell = ix // (H * W), ix % (H * W)
        out.append((sc, cls, cell // W, cell % W))
    return out


def decode_centernet(outputs: Mapping[str, np.ndarray], stride: int, score_threshold: float, nms_iou: float,
                     max_detections: int) -> list[dict[str, np.ndarray]]:
    """heatmap (B, C, h, w) logits, box (B, 4, h, w) -> per image {"boxes" (K, 4) xyxy pixels float32,
    "scores" (K,) float32, "labels" (K,) int64}."""
    box = np.asarray(outputs["box"], np.float32)  # (B, 4, h, w)
    h, w = box.shape[-2:]
    results = []
    for b, (sc, cls, ys, xs) in enumerate(heatmap_peaks(outputs["heatmap"], score_threshold, max_detections)):
        dx, dy, lw, lh = box[b][:, ys, xs]  # each (K,)
        cx, cy = (xs + dx) * stride, (ys + dy) * stride
        bw, bh = np.exp(np.minimum(lw, 12)) * stride, np.exp(np.minimum(lh, 12)) * stride
        boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1).astype(np.float32).reshape(-1, 4)
        np.minimum(np.maximum(boxes, 0, out=boxes), np.array([w, h, w, h], np.float32) * stride, out=boxes)  # clip to the image
        k = batched_nms(boxes, sc, cls, nms_iou)
        results.append({"boxes": boxes[k], "scores": sc[k], "labels": cls[k].astype(np.int64)})
    return results


def decode_lanes(outputs: Mapping[str, np.ndarray], threshold: float, min_area_frac: float) -> list[dict[str, np.ndarray]]:
    """logits (B, 1, H, W) -> per image {"mask" (H, W) bool, "instances" (H, W) int32, 0 = background}."""
    import cv2  # the car-side runtime has OpenCV; imported here so numpy-only decoders need not

    masks = sigmoid(outputs["logits"])[:, 0] > threshold  # (B, H, W)
    results = []
    for m in masks:
        min_area = min_area_frac * m.size
        n, labels, stats, _ = cv2.connectedComponentsWithStats(m.astype(np.uint8), connectivity=8)
        lut = np.zeros(n, np.int32)
        keep = [i for i in range(1, n) if stats[i, cv2.CC_STAT_AREA] >= min_area]
        lut[keep] = np.arange(1, len(keep) + 1)
        inst = lut[labels]
        results.append({"mask": inst > 0, "instances": inst})
    return results


def decode_binary_mask(outputs: Mapping[str, np.ndarray], threshold: float) -> list[dict[str, np.ndarray]]:
    """logits (B, 1, H, W) -> per image {"mask" (H, W) bool}."""
    return [{"mask": m} for m in sigmoid(outputs["logits"])[:, 0] > threshold]


def decode_multi_mask(outputs: Mapping[str, np.ndarray], threshold: float) -> list[dict[str, np.ndarray]]:
    """logits (B, K, X, Y) -> per item {"mask" (K, X, Y) bool} (independent channels)."""
    return [{"mask": m} for m in sigmoid(outputs["logits"]) > threshold]


def decode_depth(outputs: Mapping[str, np.ndarray], min_depth: float, max_depth: float) -> list[dict[str, np.ndarray]]:
    """log-depth logits (B, 1, H, W) -> per image {"depth" (H, W) float32 metres}."""
    logd = np.minimum(np.asarray(outputs["logits"], np.float32)[:, 0], np.float32(np.log(max_depth)))
    np.exp(logd, out=logd)
    return [{"depth": d} for d in np.maximum(logd, np.float32(min_depth), out=logd)]


def decode_normals(outputs: Mapping[str, np.ndarray], eps: float = 1e-6) -> list[dict[str, np.ndarray]]:
    """raw vectors (B, 3, H, W) -> per image {"normals" (H, W, 3) float32 unit vectors}."""
    v = np.asarray(outputs["logits"], np.float32)
    a, b, c = v[:, 0], v[:, 1], v[:, 2]
    norm = a * a  # the channel sum of (v * v).sum(1), in its order: (a^2 + b^2) + c^2
    norm += b * b
    norm += c * c
    norm = np.maximum(np.sqrt(norm, out=norm), eps, out=norm)
    n = np.empty((v.shape[0], *v.shape[2:], 3), np.float32)  # divided straight into the (H, W, 3) layout
    for k in range(3):
        np.divide(v[:, k], norm, out=n[..., k])
    return [{"normals": x} for x in n]


def decode_centerpoint(outputs: Mapping[str, np.ndarray], x_range: tuple[float, float], y_range: tuple[float, float],
                       resolution: float, score_threshold: float, max_detections: int) -> list[dict[str, np.ndarray]]:
    """heatmap (B, K, X, Y) logits, offset (B, 2), height (B, 1), size (B, 3), rot (B, 2), vel (B, 2)
    -> per frame {"boxes" (K, 9) x, y, z, l, w, h, yaw, vx, vy (ego), "scores" (K,), "labels" (K,)}."""
    xmax, ymax = float(x_range[1]), float(y_range[1])
    get = {k: np.asarray(outputs[k], np.float32) for k in ("offset", "height", "size", "rot", "vel")}
    results = []
    for b, (sc, cls, r, c) in enumerate(heatmap_peaks(outputs["heatmap"], score_threshold, max_detections)):
        off, z = get["offset"][b][:, r, c], get["height"][b][0, r, c]
        size = np.exp(np.minimum(get["size"][b][:, r, c], 6))  # (3, K)
        sin, cos = get["rot"][b][:, r, c]
        vel = get["vel"][b][:, r, c]
        x = xmax - (r + off[0] + 0.5) * resolution
        y = ymax - (c + off[1] + 0.5) * resolution
        boxes = np.stack([x, y, z, size[0], size[1], size[2], np.arctan2(sin, cos), vel[0], vel[1]], 1)
        results.append({"boxes": boxes.astype(np.float32).reshape(-1, 9), "scores": sc, "labels": cls.astype(np.int64)})
    return results


# kind -> decoder: the built-in heads' kinds, and every kind a registered head brings
# (`hydranet.heads.register_head`: a head's `HeadSpec` owns its decoder; a new head adds its own here)
DECODERS: dict[str, Callable[..., list]] = {
    "centernet": decode_centernet, "lanes": decode_lanes, "binary_mask": decode_binary_mask,
    "multi_mask": decode_multi_mask, "depth": decode_depth, "normals": decode_normals,
    "centerpoint": decode_centerpoint,
}


def decode(kind: str, outputs: Mapping[str, np.ndarray], params: Mapping[str, Any], checked: bool = False) -> list:
    """Run the decoder `kind` on numpy outputs; an unknown kind raises naming the known ones, outputs
    holding NaN or Inf raise `NonFiniteError` naming the output (they are never decoded). `checked`:
    the caller has just checked these very arrays with `first_non_finite` (the runtime's `run`)."""
    if kind not in DECODERS:
        import hydranet.heads  # noqa: F401 - registers every head module and `hydranet.heads` entry point (their kinds)
    if kind not in DECODERS:
        raise ValueError(f"no decoder of kind '{kind}'; known kinds: {sorted(DECODERS)} (a head's kind is known once its "
                         "HeadSpec is registered: a module in hydranet/heads/ or a `hydranet.heads` entry point, "
                         "docs/adding_a_head.md)")
    return run_decoder(kind, DECODERS[kind], outputs, params, checked)


def run_decoder(kind: str, decoder: Callable[..., list], outputs: Mapping[str, np.ndarray], params: Mapping[str, Any],
                checked: bool = False) -> list:
    """`decoder(outputs, **params)` after the finiteness check of `decode` (a head's own decoder,
    registered or not: `hydranet.heads.HeadSpec.decode`)."""
    bad = None if checked else first_non_finite(outputs)
    if bad is not None:
        name, what, item = bad
        raise NonFiniteError(f"output '{name}' of a '{kind}' head holds {what} (item {item}): the model is broken (a "
                             "non-finite weight or an overflow) and its results would look valid but are not; they are "
                             "not decoded")
    return decoder(outputs, **params)
