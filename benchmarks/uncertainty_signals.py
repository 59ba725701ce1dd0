"""Which offline uncertainty signals rank a pool's frames by the production model's error?

    python benchmarks/uncertainty_signals.py --models RUN0 RUN1 [RUN2 ...] --out out/bench_unc [--pool FLEET]
        [--clips 12] [--fleet-seed 900] [--budget 0.25] [--resamples 1000]

The first model is the production model; the others join it in the ensemble (data_engine/uncertainty.py).
The pool is a sim fleet (--pool, else --clips clips of configs/fleet.yaml at 96x64 drawn with --fleet-seed,
a seed none of the models trained on). Every frame gets the ensemble's and the flip TTA's columns and the
production model's per-frame errors, from its per-frame metric states: drivable 1 - IoU and depth AbsRel
(dense-head errors, informative for a weak model whose detection error is saturated). Printed per signal and
error: Spearman's rho with its 95% bootstrap interval over clips, and the mean error of the top --budget share
of frames by the signal divided by the pool's mean (the enrichment a miner using it would get), with its
interval. Writes results.json under --out.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SIZE = ["sim.image_width=96", "sim.image_height=64"]


def pool(out: Path, clips: int, seed: int) -> Path:
    from data_engine.fleet import FleetConfig, generate_fleet
    from hydranet.config import load_config

    if not (out / "dataset.json").exists():
        generate_fleet(out, load_config(FleetConfig, "fleet", SIZE), clips, seed, progress=False)
    return out


def enrichment(signal: np.ndarray, error: np.ndarray, clips: list[str], share: float, resamples: int,
               seed: int = 0) -> tuple[float, float, float]:
    """(mean error of the top `share` of frames by `signal` / the mean error, 95% interval over clips)."""
    def ratio(idx: np.ndarray) -> float:
        s, e = signal[idx], error[idx]
        ok = np.isfinite(s) & np.isfinite(e)
        s, e = s[ok], e[ok]
        k = max(int(round(share * len(e))), 1)
        top = np.argsort(-s, kind="stable")[:k]
        return float(e[top].mean() / e.mean()) if e.mean() > 0 else float("nan")

    groups: dict[str, list[int]] = {}
    for i, c in enumerate(clips):
        groups.setdefault(c, []).append(i)
    idx = list(groups.values())
    rng = np.random.default_rng(seed)
    vals = np.array([ratio(np.concatenate([idx[k] for k in rng.integers(0, len(idx), len(idx))]))
                     for _ in range(resamples)])
    vals = vals[np.isfinite(vals)]
    lo, hi = np.quantile(vals, [0.025, 0.975])
    return ratio(np.arange(len(signal))), float(lo), float(hi)


def main() -> None:
    from data_engine.uncertainty import offline_signals, spearman_interval

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", required=True, help="checkpoints or run folders; the first is production")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--pool", type=Path, default=None)
    p.add_argument("--clips", type=int, default=12)
    p.add_argument("--fleet-seed", type=int, default=900)
    p.add_argument("--budget", type=float, default=0.25, help="share of the pool a miner takes")
    p.add_argument("--resamples", type=int, default=1000)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    data = args.pool or pool(args.out / "pool", args.clips, args.fleet_seed)
    t1 = time.time()
    r = offline_signals(args.models, data, progress=False)
    t2 = time.time()
    clips = r["clips"]
    rows = []
    for err_name, err in r["errors"].items():
        for sig_name, sig in r["signals"].items():
            rho, lo, hi = spearman_interval(sig, err, clips, args.resamples)
            en, elo, ehi = enrichment(np.asarray(sig), np.asarray(err), clips, args.budget, args.resamples)
            rows.append({"error": err_name, "signal": sig_name, "spearman": rho, "spearman_ci": [lo, hi],
                         "enrichment": en, "enrichment_ci": [elo, ehi]})
    print(f"pool {data}: {len(clips)} frames in {len(set(clips))} clips; {r['members']} ensemble members; "
          f"signals in {t2 - t1:.0f} s (pool {t1 - t0:.0f} s)\n")
    print(f"| error | signal | Spearman rho [95% over clips] | top {args.budget:.0%} error / mean [95%] |")
    print("|---|---|---:|---:|")
    for row in rows:
        print(f"| {row['error']} | {row['signal']} | {row['spearman']:+.3f} [{row['spearman_ci'][0]:+.3f}, "
              f"{row['spearman_ci'][1]:+.3f}] | {row['enrichment']:.2f}x [{row['enrichment_ci'][0]:.2f}, "
              f"{row['enrichment_ci'][1]:.2f}] |")
    out = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "frames": len(clips),
           "clips": len(set(clips)), "rows": rows, "seconds": {"pool": round(t1 - t0, 1), "signals": round(t2 - t1, 1)},
           "mean_error": {k: float(np.nanmean(v)) for k, v in r["errors"].items()}}
    (args.out / "results.json").write_text(json.dumps(out, indent=1))
    print(f"\nwrote {args.out / 'results.json'}")


if __name__ == "__main__":
    main()
