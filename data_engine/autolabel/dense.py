"""Dense heads from an ensemble: the mean of the members' (and flipped views') maps, with per-pixel agreement.

Each view gives, per head, a map in the model's output layout: drivable and lanes probabilities (N, H, W)
(sigmoid of the logits), depth in metres (N, H, W), unit normals (N, H, W, 3), the BEV map's class
probabilities (1, K, X, Y). A flipped view's camera maps are flipped back along W (normals: x negated too).

- binary heads (drivable, lanes, bevmap): the mean probability; agreement = the share of views whose mask
  (p > 0.5) equals the mean's mask at that pixel;
- depth: the geometric mean (mean of log depth); agreement = the share of views within 10% of it;
- normals: the normalized mean vector; agreement = the share of views within 15 degrees of it.

Agreement is 1 where every view agrees, and at least 1 / views; a frame's per-head confidence is its mean.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hydranet.decoding import sigmoid
from hydranet.geometry import mirror_normals

DENSE_HEADS = ("drivable", "lanes", "depth", "normals", "bevmap")
CAMERA_DENSE = ("drivable", "lanes", "depth", "normals")  # heads whose maps live in the camera image (flip applies)


def head_maps(raw: Mapping[str, np.ndarray], decoded: Mapping[str, list], heads: Sequence[str]) -> dict[str, np.ndarray]:
    """{head: map} of one frame for the dense heads among `heads`, from a runtime's raw outputs ("<head>.<key>")
    and decoded results (camera heads: N items)."""
    out = {}
    for h in heads:
        if h in ("drivable", "lanes"):
            out[h] = sigmoid(np.asarray(raw[f"{h}.logits"], np.float32))[:, 0]  # (N, H, W)
        elif h == "bevmap":
            out[h] = sigmoid(np.asarray(raw["bevmap.logits"], np.float32))  # (1, K, X, Y)
        elif h == "depth":
            out[h] = np.stack([d["depth"] for d in decoded["depth"]])  # (N, H, W) m
        elif h == "normals":
            out[h] = np.stack([d["normals"] for d in decoded["normals"]])  # (N, H, W, 3)
    return out


def flip_back(maps: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A flipped view's camera maps in the original image (BEV maps are not flipped views: dropped)."""
    out = {}
    for h, m in maps.items():
        if h == "normals":
            out[h] = mirror_normals(m)  # (N, H, W, 3)
        elif h in CAMERA_DENSE:
            out[h] = m[..., ::-1].copy()
    return out


def fuse_dense(views: Sequence[Mapping[str, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{head: (mean map, agreement map in [0, 1])} over the views that hold the head."""
    out = {}
    for h in DENSE_HEADS:
        stack = [np.asarray(v[h], np.float64) for v in views if h in v]
        if not stack:
            continue
        s = np.stack(stack)  # (V, ...)
        if h == "depth":
            logd = np.log(np.maximum(s, 1e-3))
            mean = logd.mean(0)
            agree = (np.abs(logd - mean) < np.log(1.1)).mean(0)
            out[h] = (np.exp(mean), agree)
        elif h == "normals":
            mean = s.mean(0)
            mean /= np.maximum(np.linalg.norm(mean, axis=-1, keepdims=True), 1e-9)
            agree = ((s * mean).sum(-1) >= np.cos(np.radians(15))).mean(0)
            out[h] = (mean, agree)
        else:
            mean = s.mean(0)
            agree = ((s > 0.5) == (mean > 0.5)).mean(0)
            out[h] = (mean, agree)
    return out


def dense_arrays(fused: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """What is saved per frame: "<head>" the mean as float16, "<head>_agreement" as uint8 (0-255)."""
    out = {}
    for h, (mean, agree) in fused.items():
        out[h] = mean.astype(np.float16)
        out[f"{h}_agreement"] = np.round(agree * 255).astype(np.uint8)
    return out
