"""The runtime's fast decoders (issue 26.4) give exactly the results of the straightforward ones they
replaced: a reference copy of those is kept here (`Ref`) and both decode the same random and real
outputs; every array must be equal in dtype, shape and value (the runtime's outputs are the data
engine's signals). Real outputs: tests/golden/runtime_raw_demo.npz, camera 0 of the demo model's
(configs/tiny.yaml, 600 steps) det2d and signs_lights heads on a sim frame, stored as float16."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hydranet import decoding

GOLDEN = Path(__file__).resolve().parent / "golden" / "runtime_raw_demo.npz"


class Ref:
    """hydranet.decoding as it was before the fast path (commit 08b5dfd), the functions that changed."""

    @staticmethod
    def sigmoid(x):
        x = np.asarray(x, np.float32)
        return (1.0 / (1.0 + np.exp(-np.clip(x, -80.0, 80.0)))).astype(np.float32)

    @staticmethod
    def max_pool3x3(x):
        pad = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(1, 1), (1, 1)], constant_values=-np.inf)
        h, w = x.shape[-2:]
        out = pad[..., 0:h, 0:w]
        for i in range(3):
            for j in range(3):
                out = np.maximum(out, pad[..., i:i + h, j:j + w])
        return out

    @staticmethod
    def box_iou(a, b):
        area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
        area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        lt = np.maximum(a[:, None, :2], b[None, :, :2])
        rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
        wh = np.clip(rb - lt, 0, None)
        inter = wh[..., 0] * wh[..., 1]
        return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-12)

    @staticmethod
    def nms(boxes, scores, iou_threshold):
        order = np.lexsort((np.arange(len(scores)), -scores))
        keep = []
        suppressed = np.zeros(len(scores), bool)
        iou = Ref.box_iou(boxes, boxes) if len(boxes) else np.zeros((0, 0))
        for i in order:
            if suppressed[i]:
                continue
            keep.append(i)
            suppressed |= iou[i] > iou_threshold
        return np.asarray(keep, np.int64)

    @staticmethod
    def batched_nms(boxes, scores, classes, iou_threshold):
        if len(boxes) == 0:
            return np.zeros(0, np.int64)
        offset = classes.astype(np.float64)[:, None] * (float(boxes.max()) + 1.0)
        return Ref.nms(boxes.astype(np.float64) + offset, scores, iou_threshold)

    @staticmethod
    def heatmap_peaks(logits, score_threshold, max_detections):
        heat = Ref.sigmoid(logits)
        B, C, H, W = heat.shape
        peaks = np.where(Ref.max_pool3x3(heat) == heat, heat, 0.0).reshape(B, -1)
        out = []
        for b in range(B):
            sc, ix = decoding.topk(peaks[b], max_detections)
            keep = sc > score_threshold
            sc, ix = sc[keep].astype(np.float32), ix[keep]
            cls, cell = ix // (H * W), ix % (H * W)
            out.append((sc, cls, cell // W, cell % W))
        return out

    @staticmethod
    def decode_centernet(outputs, stride, score_threshold, nms_iou, max_detections):
        box = np.asarray(outputs["box"], np.float32)
        h, w = box.shape[-2:]
        results = []
        for b, (sc, cls, ys, xs) in enumerate(Ref.heatmap_peaks(outputs["heatmap"], score_threshold, max_detections)):
            dx, dy, lw, lh = box[b][:, ys, xs]
            cx, cy = (xs + dx) * stride, (ys + dy) * stride
            bw, bh = np.exp(np.minimum(lw, 12)) * stride, np.exp(np.minimum(lh, 12)) * stride
            boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1).astype(np.float32).reshape(-1, 4)
            boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, w * stride)
            boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, h * stride)
            k = Ref.batched_nms(boxes, sc, cls, nms_iou)
            results.append({"boxes": boxes[k], "scores": sc[k], "labels": cls[k].astype(np.int64)})
        return results

    @staticmethod
    def decode_lanes(outputs, threshold, min_area_frac):
        import cv2

        masks = Ref.sigmoid(outputs["logits"])[:, 0] > threshold
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

    @staticmethod
    def decode_binary_mask(outputs, threshold):
        return [{"mask": m} for m in Ref.sigmoid(outputs["logits"])[:, 0] > threshold]

    @staticmethod
    def decode_multi_mask(outputs, threshold):
        return [{"mask": m} for m in Ref.sigmoid(outputs["logits"]) > threshold]

    @staticmethod
    def decode_depth(outputs, min_depth, max_depth):
        logd = np.minimum(np.asarray(outputs["logits"], np.float32)[:, 0], np.float32(np.log(max_depth)))
        return [{"depth": np.maximum(np.exp(d), np.float32(min_depth)).astype(np.float32)} for d in logd]

    @staticmethod
    def decode_normals(outputs, eps=1e-6):
        v = np.asarray(outputs["logits"], np.float32)
        n = v / np.maximum(np.sqrt((v * v).sum(1, keepdims=True)), eps)
        return [{"normals": np.ascontiguousarray(x.transpose(1, 2, 0))} for x in n]


def same(got, ref) -> None:
    """Equal structure, and every array equal in dtype, shape and value."""
    assert type(got) is type(ref)
    if isinstance(ref, dict):
        assert got.keys() == ref.keys()
        for k in ref:
            same(got[k], ref[k])
    elif isinstance(ref, (list, tuple)):
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            same(g, r)
    else:
        assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, ref.dtype, got.shape, ref.shape)
        np.testing.assert_array_equal(got, ref)


def heatmaps(rng, n=8):
    """Random heatmap logits from dull to sharp (the sharp ones saturate to 1.0: many exact ties), each
    dense (most cells above the usual thresholds: the 3x3 max filter path) and sparse (a trained
    model's few hot cells, at the border too: the neighbourhood path)."""
    for i in range(n):
        yield (rng.normal(-2, 3, (2, 5, 12, 20)) * (0.5 + i)).astype(np.float32)
        sparse = rng.normal(-8, 1.5, (2, 5, 12, 20))
        hot = rng.uniform(size=sparse.shape) < 0.04
        sparse[hot] = rng.normal(1, 3, hot.sum()) * (0.5 + i)
        sparse[:, :, 0, 0] = 4.0  # a corner peak, and its equal neighbour (a plateau: both are 3x3 maxima)
        sparse[:, :, 0, 1] = 4.0
        yield sparse.astype(np.float32)


def test_sigmoid_and_max_pool_are_bit_identical():
    rng = np.random.default_rng(0)
    for x in heatmaps(rng):
        same(decoding.sigmoid(x), Ref.sigmoid(x))
        same(decoding.max_pool3x3(x), Ref.max_pool3x3(x))
    x64 = rng.normal(0, 50, (3, 7, 9))
    same(decoding.sigmoid(x64), Ref.sigmoid(x64))
    same(decoding.max_pool3x3(x64), Ref.max_pool3x3(x64))
    one = rng.normal(size=(1, 1, 1, 1)).astype(np.float32)  # a 1x1 map: its own maximum
    same(decoding.max_pool3x3(one), Ref.max_pool3x3(one))


def test_sigmoid_above_decides_as_the_sigmoid():
    rng = np.random.default_rng(4)
    for t in (0.0005, 0.001, 0.0011, 0.05, 0.3, 0.5, 0.7, 0.9, 0.998, 0.9995, -1.0, 1.0):
        x0 = np.log(t / (1 - t)) if 0 < t < 1 else 0.0
        sweep = x0 + np.linspace(-0.2, 0.2, 35996)
        # 800 consecutive float32 values around the threshold's logit and each band edge
        edges = np.array([x0 + d for d in (-0.05, -0.025, 0.0, 0.025, 0.05)], np.float32).view(np.int32)
        steps = (edges[:, None] + np.arange(-400, 400)).astype(np.int32).view(np.float32).ravel()
        x = np.concatenate([sweep, steps, rng.normal(x0, 3, 20000), rng.normal(0, 40, 20000), [-1e30, -100.0, 100.0, 1e30]])
        x = x.astype(np.float32).reshape(4, 10, -1)
        same(decoding.sigmoid_above(x, t), Ref.sigmoid(x) > t)
        same(decoding.sigmoid_above(x.astype(np.float64), t), Ref.sigmoid(x.astype(np.float64)) > t)


def test_mask_decoders_equal():
    rng = np.random.default_rng(5)
    for scale in (0.3, 2.0, 20.0):
        logits = {"logits": (rng.normal(0, 1, (2, 1, 48, 80)) * scale).astype(np.float32)}
        for t in (0.5, 0.3, 0.9995):
            same(decoding.decode_lanes(logits, t, 0.0002), Ref.decode_lanes(logits, t, 0.0002))
            same(decoding.decode_binary_mask(logits, t), Ref.decode_binary_mask(logits, t))
        multi = {"logits": (rng.normal(0, 1, (2, 4, 20, 20)) * scale).astype(np.float32)}
        same(decoding.decode_multi_mask(multi, 0.5), Ref.decode_multi_mask(multi, 0.5))


@pytest.mark.parametrize("threshold", [0.05, 0.3, 0.5, 0.9, 0.99, 0.9995, 0.0005, -1.0])
@pytest.mark.parametrize("k", [0, 1, 7, 100, 100000])
def test_heatmap_peaks_equal_the_full_top_k(threshold, k):
    rng = np.random.default_rng(1)
    for x in heatmaps(rng):
        same(decoding.heatmap_peaks(x, threshold, k), Ref.heatmap_peaks(x, threshold, k))


def test_nms_equals_the_greedy_loop():
    rng = np.random.default_rng(2)
    for _ in range(400):
        n = int(rng.integers(0, 80))
        b = rng.uniform(0, 100, (n, 4))
        b[:, 2:] = b[:, :2] + rng.uniform(-2, rng.uniform(5, 80), (n, 2))  # some degenerate (zero or negative area)
        sc = rng.uniform(size=n).astype(np.float32)
        if rng.uniform() < 0.3:
            sc = np.round(sc, 1)  # tied scores
        cl = rng.integers(0, 3, n)
        thr = float(rng.choice([0.0, 0.1, 0.5, 0.6, 0.9, 1.0]))
        same(decoding.nms(b, sc, thr), Ref.nms(b, sc, thr))
        same(decoding.batched_nms(b.astype(np.float32), sc, cl, thr), Ref.batched_nms(b.astype(np.float32), sc, cl, thr))
        same(decoding.box_iou(b, b[: n // 2]), Ref.box_iou(b, b[: n // 2]))


def test_a_suppression_chain_longer_than_one_step():
    # each box overlaps the next one only: greedy keeps 0, 2, 4, ... (1 is suppressed, so 2 survives)
    b = np.array([[i * 6.0, 0, i * 6.0 + 10, 10] for i in range(9)])
    sc = np.linspace(1, 0.1, 9).astype(np.float32)
    same(decoding.nms(b, sc, 0.2), Ref.nms(b, sc, 0.2))
    assert decoding.nms(b, sc, 0.2).tolist() == [0, 2, 4, 6, 8]


def test_centernet_depth_normals_equal_on_random_outputs():
    rng = np.random.default_rng(3)
    for x in heatmaps(rng):
        out = {"heatmap": x, "box": rng.normal(0, 1, (2, 4, 12, 20)).astype(np.float32)}
        for iou in (0.1, 0.6):
            for k in (5, 100):
                same(decoding.decode_centernet(out, 4, 0.05, iou, k), Ref.decode_centernet(out, 4, 0.05, iou, k))
    logits = {"logits": rng.normal(0, 4, (2, 1, 24, 40)).astype(np.float32)}
    same(decoding.decode_depth(logits, 0.1, 100.0), Ref.decode_depth(logits, 0.1, 100.0))
    vec = {"logits": rng.normal(0, 1, (2, 3, 24, 40)).astype(np.float32)}
    vec["logits"][0, :, 0, 0] = 0.0  # a zero vector: the eps branch
    same(decoding.decode_normals(vec), Ref.decode_normals(vec))


@pytest.mark.parametrize("head,nc", [("det2d", 13), ("signs_lights", 10)])
def test_centernet_equal_on_the_demo_models_real_outputs(head, nc):
    raw = np.load(GOLDEN)
    out = {"heatmap": raw[f"{head}.heatmap"].astype(np.float32), "box": raw[f"{head}.box"].astype(np.float32)}
    assert out["heatmap"].shape[1] == nc
    got = decoding.decode_centernet(out, 4, 0.05, 0.6, 100)
    assert len(got[0]["scores"]) > 0  # the frame has detections
    same(got, Ref.decode_centernet(out, 4, 0.05, 0.6, 100))
    for sharpen in (2.0, 8.0):  # a more confident model: saturated, tied scores
        hot = dict(out, heatmap=out["heatmap"] * sharpen)
        for k in (5, 20, 100):
            same(decoding.decode_centernet(hot, 4, 0.05, 0.6, k), Ref.decode_centernet(hot, 4, 0.05, 0.6, k))
