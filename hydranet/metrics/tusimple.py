"""The TuSimple lane benchmark's own score on lane points: accuracy, FP and FN (numpy only).

The rule of the benchmark's evaluation (github.com/TuSimple/tusimple-benchmark, evaluate/lane.py), written
here from its description: a lane is its x at each row of `h_samples` (x < 0: no point). Each ground-truth
lane takes the prediction with the largest fraction of rows within 20 px / cos(the lane's angle) of it (a
row where both have no point counts as within); the lane is found when that fraction reaches 0.85. Per frame:
accuracy = the mean of those fractions, FP = unmatched predictions / predictions, FN = missed lanes / lanes;
with more than 4 lanes the worst fraction is left out and one miss forgiven; more than lanes + 2 predictions
score (0, 0, 1). The benchmark's figures are the means over frames.

    acc, fp, fn = tusimple_accuracy(pred_xs, gt_xs, h_samples)
    pred_xs = lanes_at_rows(instances, h_samples, (1280, 720))   # a decoded lane mask -> TuSimple lanes
"""
from __future__ import annotations

import math

import numpy as np

PIXEL_THRESH, POINT_THRESH = 20.0, 0.85


def lane_angle(xs: np.ndarray, ys: np.ndarray) -> float:
    """The lane's angle from vertical: arctan of the least-squares slope dx/dy over its points (0 for < 2)."""
    ok = xs >= 0
    if ok.sum() < 2:
        return 0.0
    return float(np.arctan(np.polyfit(ys[ok], xs[ok], 1)[0]))


def tusimple_accuracy(pred, gt, h_samples) -> tuple[float, float, float]:
    """(accuracy, FP rate, FN rate) of one frame (module docstring); `pred`, `gt`: lists of lanes, each an x
    per row of `h_samples`, as in the label files."""
    ys = np.asarray(h_samples, np.float64)
    P = [np.asarray(p, np.float64) for p in pred]
    if any(len(p) != len(ys) for p in P):
        raise ValueError(f"a predicted lane has not {len(ys)} points (one per h_sample)")
    if len(P) > len(gt) + 2:
        return 0.0, 0.0, 1.0
    P = [np.where(p >= 0, p, -100.0) for p in P]
    accs, found = [], 0
    for g in gt:
        g = np.asarray(g, np.float64)
        thresh = PIXEL_THRESH / math.cos(lane_angle(g, ys))
        g = np.where(g >= 0, g, -100.0)
        best = max((float(np.mean(np.abs(p - g) < thresh)) for p in P), default=0.0)
        accs.append(best)
        found += best >= POINT_THRESH
    missed = len(gt) - found
    if len(gt) > 4 and missed > 0:
        missed -= 1
    total = sum(accs) - (min(accs) if len(gt) > 4 else 0.0)
    return (total / max(min(4.0, len(gt)), 1.0), (len(P) - found) / len(P) if P else 0.0,
            missed / max(min(len(gt), 4.0), 1.0))


def lanes_at_rows(instances: np.ndarray, h_samples, size: tuple[int, int]) -> list[list[float]]:
    """A decoded lane instance map (H, W) int (0 = background, k = lane k; the lanes head's decode) at any
    resolution -> TuSimple lanes in a `size` = (width, height) image: per lane, at each h_sample row the
    mean x of its pixels in the mask row that row falls in (pixel centres kept), -2 where it has none."""
    H, W = instances.shape
    sx, sy = W / size[0], H / size[1]
    out = []
    for k in np.unique(instances[instances > 0]).tolist():
        xs = []
        for y in h_samples:
            r = min(max(int(math.floor(sy * (y + 0.5))), 0), H - 1)
            cols = np.flatnonzero(instances[r] == k)
            xs.append(float((cols.mean() + 0.5) / sx - 0.5) if len(cols) else -2.0)
        out.append(xs)
    return out
