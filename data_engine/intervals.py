"""Intervals and power for the engine's benchmarks (benchmarks/label_efficiency.py, engine_mining.py): issue 25.

Everything is seeded and deterministic (numpy's PCG64 from a fixed seed sequence). The percentile interval
is the gate's (`data_engine.gate._interval`: the central `confidence` quantiles of the finite resamples,
none when under half are finite) and clip grouping is the gate's (`_clip_groups`).

- `hierarchical_draws`: a two-level bootstrap, seeds with replacement, and inside every resample the clips
  of each suite (or pool) with replacement; the same draws serve every strategy (paired).
- `required_clips`: the power calculation. To see a true delta `delta` of a clip-level mean with a two-sided
  interval at `confidence` excluding 0 with probability `power`, a paired design needs
      n = ceil(((z_(1 - alpha/2) + z_power) * sd_delta / delta) ** 2),   alpha = 1 - confidence,
  where sd_delta is the standard deviation over clips of the per-clip difference between the two models
  (normal approximation of the clip mean; z from the standard normal). Without a pair to measure it on,
  sd_delta = sqrt(2) * sd_clip (two models' per-clip values uncorrelated: an upper bound when they are
  positively correlated, as two models on the same clips are).
- `ap50` / `class_states`: COCO mAP50 (IoU 0.5 only, pycocotools' 101-point interpolation, equal to
  `hydranet.tasks.det2d.coco_map_states`'s "mAP50") from merged det2d states, for all classes or one class.
"""
from __future__ import annotations

from pathlib import Path

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from data_engine.config import GateRule
from data_engine.gate import _clip_groups, _interval

RECALLS = np.linspace(0.0, 1.0, 101)


def interval(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """The central `confidence` percentile interval of the finite values (the gate's rule)."""
    return _interval(GateRule(confidence=confidence), np.asarray(values, np.float64))


def clip_groups(clips: Sequence[str]) -> list[list[int]]:
    """Item indices of each clip, clips in order of first appearance (the gate's)."""
    return _clip_groups(clips)


def hierarchical_draws(n_seeds: int, clips_per_group: Sequence[int], resamples: int, seed: int = 0
                       ) -> tuple[np.ndarray, list[np.ndarray]]:
    """(seed draws (resamples, n_seeds), per group its clip draws (resamples, n_clips)): seeds with replacement,
    and inside each resample each group's clips (suite or pool) with replacement. Seed draws come first from
    the generator, so adding groups does not change them."""
    rng = np.random.default_rng([seed, 25])
    seeds = rng.integers(0, n_seeds, (resamples, n_seeds))
    return seeds, [rng.integers(0, n, (resamples, n)) for n in clips_per_group]


def bootstrap_mean(values: Sequence[float], resamples: int = 1000, seed: int = 0, confidence: float = 0.95
                   ) -> tuple[float, float, float]:
    """(mean, low, high) of a bootstrap of the mean of `values` (e.g. one figure per seed)."""
    v = np.asarray(values, np.float64)
    draws = np.random.default_rng([seed, 26]).integers(0, len(v), (resamples, len(v)))
    lo, hi = interval(v[draws].mean(1), confidence) or (math.nan, math.nan)
    return float(v.mean()), lo, hi


def z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def required_clips(sd_delta: float, delta: float = 0.01, confidence: float = 0.95, power: float = 0.8) -> int:
    """Clips whose mean paired difference has a `confidence` interval excluding 0 with probability `power`
    when the true difference is `delta` (module docstring formula)."""
    if not (sd_delta >= 0 and delta > 0):
        raise ValueError(f"need sd_delta >= 0 and delta > 0, got {sd_delta}, {delta}")
    return max(2, math.ceil(((z(1 - (1 - confidence) / 2) + z(power)) * sd_delta / delta) ** 2 - 1e-9))


def detectable_delta(sd_delta: float, n: int, confidence: float = 0.95, power: float = 0.8) -> float:
    """The smallest true difference `n` clips detect with that power (the formula solved for delta)."""
    return (z(1 - (1 - confidence) / 2) + z(power)) * sd_delta / math.sqrt(max(n, 1))


def verdict(low: float, high: float, target: float = 0.0) -> str:
    """'met' when the whole interval lies above `target`, 'missed' when below, else 'undecided (a tie is inside)'."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "undecided (no interval)"
    return "met" if low > target else "missed" if high < target else f"undecided (the interval holds {target:g})"


# -- det2d mAP50 from states ------------------------------------------------------------------------------
def merge(states: Sequence[Mapping[str, Any] | None], num_classes: int) -> dict[str, np.ndarray]:
    """Image states (`coco_image_state`) as one: arrays concatenated, npig summed (as `CocoMetric.merge_states`)."""
    states = [s for s in states if s is not None]
    out = {k: np.concatenate([np.asarray(s[k], np.float64 if k == "score" else np.int64) for s in states])
           if states else np.zeros(0, np.float64 if k == "score" else np.int64) for k in ("label", "score", "tp", "ignored")}
    out["npig"] = np.sum([np.asarray(s["npig"], np.int64) for s in states], axis=0) if states else np.zeros(num_classes, np.int64)
    return out


def class_states(state: Mapping[str, Any], k: int) -> dict[str, np.ndarray]:
    """A merged state restricted to class k (its detections, its ground-truth count): its mAP50 is class k's AP50."""
    keep = np.asarray(state["label"]) == k
    npig = np.zeros_like(np.asarray(state["npig"]))
    npig[k] = np.asarray(state["npig"])[k]
    return {**{n: np.asarray(state[n])[keep] for n in ("label", "score", "tp", "ignored")}, "npig": npig}


def ap50(states: Sequence[Mapping[str, Any]]) -> float:
    """COCO mAP50 over merged states (NaN without a ground-truth box, 0 without a detection)."""
    npig = np.sum([np.asarray(s["npig"]) for s in states], axis=0)
    if not np.asarray(npig).sum():
        return math.nan
    label = np.concatenate([np.asarray(s["label"], np.int64) for s in states])
    score = np.concatenate([np.asarray(s["score"], np.float64) for s in states])
    tp = np.concatenate([np.asarray(s["tp"], np.int64) for s in states]) & 1
    ig = np.concatenate([np.asarray(s["ignored"], np.int64) for s in states]) & 1
    aps = []
    for k in np.flatnonzero(npig):
        sel = np.flatnonzero(label == k)
        sel = sel[np.argsort(-score[sel], kind="mergesort")]
        t, i = tp[sel] == 1, ig[sel] == 1
        tpc, fpc = np.cumsum(t & ~i).astype(float), np.cumsum(~t & ~i).astype(float)
        rc, pr = tpc / npig[k], tpc / (fpc + tpc + np.spacing(1))
        pr = np.maximum.accumulate(pr[::-1])[::-1] if len(pr) else pr
        inds = np.searchsorted(rc, RECALLS, side="left")
        q = np.zeros(len(RECALLS))
        ok = inds < len(pr)
        q[ok] = pr[inds[ok]]
        aps.append(q.mean())
    return float(np.mean(aps))


def ratio_interval(num: np.ndarray, den: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of resampled ratios num / den (a resample with den <= 0 is NaN)."""
    num, den = np.asarray(num, np.float64), np.asarray(den, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return interval(r, confidence)


def fmt(v: float, lo_hi: tuple[float, float] | None, digits: int = 3, sign: bool = False) -> str:
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    if not math.isfinite(v):
        return "n/a"
    return f.format(v) + (f" [{f.format(lo_hi[0])}, {f.format(lo_hi[1])}]" if lo_hi else " [no interval]")


def run_seeds(cmd: list[str], seeds: list[int], jobs: int, out: Path) -> dict[int, float]:
    """Run `cmd + ["--worker-seed", S]` for every seed as its own process (OMP_NUM_THREADS=1 each), `jobs` at a time,
    logging to out/seedS/log.txt; wall seconds per seed. SystemExit naming the log when a seed fails."""
    import os
    import subprocess
    import time

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    todo, running, took = list(seeds), {}, {}
    while todo or running:
        while todo and len(running) < jobs:
            s = todo.pop(0)
            (Path(out) / f"seed{s}").mkdir(parents=True, exist_ok=True)
            log = open(Path(out) / f"seed{s}" / "log.txt", "a")
            running[s] = (subprocess.Popen(cmd + ["--worker-seed", str(s)], env=env, stdout=log, stderr=subprocess.STDOUT),
                          time.time(), log)
        time.sleep(1.0)
        for s, (p, t, log) in list(running.items()):
            if p.poll() is not None:
                log.close()
                took[s] = round(time.time() - t, 1)
                del running[s]
                if p.returncode:
                    raise SystemExit(f"seed {s} failed (exit {p.returncode}); see {Path(out) / f'seed{s}' / 'log.txt'}")
                print(f"seed {s}: {took[s]:.0f} s wall", flush=True)
    return took
