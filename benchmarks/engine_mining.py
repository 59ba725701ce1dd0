"""Measure the data engine against the fleet's hidden truth: trigger precision and recall of rare
scenarios, and each mining strategy's enrichment over random selection, with intervals.

    python benchmarks/engine_mining.py --out out/bench_engine [--seeds 3] [--jobs 3] [--clips 120]
        [--train-clips 24] [--steps 150] [--members 3] [--rare 0.03] [--resamples 1000] [--production-cache DIR]

Per seed S (seeds 0..N-1, each a separate process with OMP_NUM_THREADS=1, --jobs at a time): a training
fleet and a separate evaluation fleet (configs/fleet.yaml rates, rare scenarios raised with --rare so a small
fleet holds some); --members models of configs/engine_tiny.yaml trained --steps steps on the training fleet
with different seeds (the first is the production: exported, shadow mode over the evaluation fleet, all
triggers); the offline signals of data_engine/uncertainty.py over the pool (the members' disagreement
`ensemble`, the production's flip TTA `tta`), added to the pool (`mining.add_offline`); then every strategy
of mining.STRATEGIES at a 10% budget (random: --repeats seeded draws). The fleet's hidden truth is read
through data_engine/evaluation.py (the code `hydranet engine triggers` and `report` use):
- rare-frame rate: share of the selected frames in rare-scenario clips;
- hard-frame rate, the informative error measure (evaluation.py `RunTruth.hardness`): among the frames the
  model detects on, the top quarter by error (1 - F1 of det2d), ties at the edge shared; a random
  selection's expected rate is 0.25, so "error vs random" is this rate / the pool's;
- also the raw mean 1 - F1 (saturated near 1 for a weak model) and drivable 1 - IoU (a dense-head error,
  from the same offline pass).
With --production-cache DIR the members are not trained: the production is the 60-CPU-minute recipe's model
(benchmarks/production_cache.py: trained once, cached under its recipe's hash), the second member its snapshot at
60% of the steps (a snapshot ensemble), and the pools are rendered at fleet.yaml's 160x96, the model's input size
(its BEV view transform is bound to that calibration).
Enrichment = a selection's rate / a random selection's expected rate (the pool's). Intervals: a two-level
bootstrap (seeds with replacement, and each seed's pool clips with replacement: a clip's frames move
together), 95%, seeded; the selections are fixed, the measurement is resampled.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from data_engine.intervals import fmt, hierarchical_draws, interval, run_seeds, verdict

RARE = ("cones_on_road", "debris_on_road", "unusual_vehicle", "night_pedestrian_crossing")
MEASURES = ("rare", "hard", "error", "drivable")


def worker(args) -> None:
    from data_engine.catalog import Catalog
    from data_engine.config import EngineConfig, MiningConfig
    from data_engine.evaluation import load_run_truth, trigger_markdown, trigger_rows
    from data_engine.mining import STRATEGIES, add_offline, load_pool, select
    from data_engine.shadow import run_shadow
    from data_engine.triggers import build_triggers, fire_all, run_table
    from data_engine.uncertainty import offline_signals, pool_frames
    from deploy.export import export_checkpoint
    from data_engine.fleet import FleetConfig, generate_fleet
    from hydranet.config import load_config
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    seed = args.worker_seed
    out = Path(args.out) / f"seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    prod = Path(args.production) if args.production else None
    size = [] if prod else ["sim.image_width=96", "sim.image_height=64"]  # a production: fleet.yaml's 160x96, its input
    t0 = time.time()
    if not prod and not (out / "train" / "dataset.json").exists():
        generate_fleet(out / "train", load_config(FleetConfig, "fleet", size), args.train_clips, 100 + seed, progress=False)
    if not (out / "fleet" / "dataset.json").exists():
        generate_fleet(out / "fleet", load_config(FleetConfig, "fleet", [*size, *(f"rare.{n}={args.rare}" for n in RARE)]),
                       args.clips, seed, progress=False)
    t_fleet = time.time() - t0
    members = [prod / "run", prod / "snapshot.pt"] if prod else []  # the cached production and its snapshot
    for k in range(0 if prod else args.members):
        run = out / f"member{k}"
        if not (run / "checkpoint.pt").exists():
            cfg = load_experiment("configs/engine_tiny.yaml", [f"data.root={out / 'train'}", f"steps={args.steps}",
                                                                f"checkpoint_every={args.steps}", "device=cpu", "num_workers=0",
                                                                f"seed={1000 * seed + k}"])
            train(cfg, run, progress=False, overwrite=run.exists())
        members.append(run)
    if prod:
        shutil.copy(prod / "model.onnx", out / "model.onnx")
    elif not (out / "model.onnx").exists():
        export_checkpoint(members[0], out / "model.onnx", out / "train", frames=2, verbose=False)
    t_train = time.time() - t0 - t_fleet
    cat_path = out / "catalog.db"
    t1 = time.time()
    st = run_shadow(out / "model.onnx", out / "fleet", cat_path, workers=1, progress=False)
    t_shadow = time.time() - t1
    triggers = build_triggers()
    run_id, hits = fire_all(cat_path, triggers)
    t2 = time.time()
    off = offline_signals(members, out / "fleet")
    t_offline = time.time() - t2
    with Catalog(cat_path) as cat:
        truth, why = load_run_truth(cat, run_id)
        table = run_table(cat, run_id)
        pool = load_pool(cat, run_id, "frame")
    if truth is None:
        raise SystemExit(f"no truth to measure against: {why}")
    _, to_fid = pool_frames(cat_path, run_id)
    rows = {to_fid[(str(c), str(d))]: i for i, (c, d) in enumerate(off["frame_ids"]) if (str(c), str(d)) in to_fid}
    add_offline(pool, rows, off["signals"])
    fids = [int(f) for f in pool["frame_id"]]
    hard = truth.hardness()
    drv = off["errors"].get("drivable")
    frames = {"frame_id": fids, "clip": [str(c) for c in pool["clip"]], "rare": [int(f in truth.any_rare) for f in fids],
              "hard": [hard.get(f) for f in fids], "error": [truth.errors[f] for f in fids],
              "drivable": [None if drv is None or f not in rows or not np.isfinite(drv[rows[f]]) else float(drv[rows[f]])
                           for f in fids]}
    budget = max(1, len(fids) // 10)
    sel = {}
    for s in STRATEGIES:
        sel[s] = []
        for k in range(args.repeats if s == "random" else 1):
            picks = select(pool, budget, s, EngineConfig(mining=MiningConfig(seed=k)))
            sel[s].append([int(pool["frame_id"][i]) for i, _ in picks])
    who = (f"the cached production {prod} and its snapshot" if prod else
           f"{args.members} members x {args.steps} steps on {args.train_clips} other clips")
    md = [f"# seed {seed}: {args.clips} clips, {len(fids)} frames, rare-scenario frames {sum(frames['rare'])}; {who}; shadow "
          f"{st['frames'] / max(t_shadow, 1e-9):.1f} frames/s", "", trigger_markdown(trigger_rows(triggers, hits, truth, table), truth)]
    (out / "engine_mining.md").write_text("\n".join(md) + "\n")
    secs = {"fleets": round(t_fleet, 1), "train+export": round(t_train, 1), "shadow": round(t_shadow, 1),
            "offline signals": round(t_offline, 1), "total": round(time.time() - t0, 1)}
    (out / "selections.json").write_text(json.dumps({"budget": budget, "frames": frames, "selections": sel, "seconds": secs}))


def spawn(args, seeds: list[int]) -> dict[int, float]:
    cmd = [sys.executable, __file__, "--out", str(args.out), "--clips", str(args.clips), "--train-clips", str(args.train_clips),
           "--steps", str(args.steps), "--members", str(args.members), "--rare", str(args.rare), "--repeats", str(args.repeats)]
    if args.production:
        cmd += ["--production", str(args.production)]
    return run_seeds(cmd, seeds, args.jobs, Path(args.out))


def rates(frames: dict, ids: list[int], weights: np.ndarray) -> dict[str, np.ndarray]:
    """Per measure, (resamples + 1,) rates of the frames `ids` under clip weights (resamples + 1, clips): row 0 the
    original (all weights 1). A frame without the measure (hard: not detected; drivable: nothing to score) is left out."""
    clip_ix = {c: i for i, c in enumerate(dict.fromkeys(frames["clip"]))}
    row = {f: i for i, f in enumerate(frames["frame_id"])}
    pick = np.array([row[f] for f in ids], np.int64)
    c = np.array([clip_ix[x] for x in frames["clip"]], np.int64)[pick]
    out = {}
    for m in MEASURES:
        v = np.array([np.nan if x is None else float(x) for x in frames[m]])[pick]
        ok = np.isfinite(v)
        w = weights[:, c[ok]]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[m] = (w * v[ok]).sum(1) / w.sum(1)
    return out


def summarize(args, seeds: list[int]) -> tuple[str, dict]:
    warnings.simplefilter("ignore", RuntimeWarning)  # a resample without a detected pick is NaN, left out of its interval
    data = {s: json.loads((Path(args.out) / f"seed{s}" / "selections.json").read_text()) for s in seeds}
    n_clips = {s: len(dict.fromkeys(data[s]["frames"]["clip"])) for s in seeds}
    seed_draw, clip_draws = hierarchical_draws(len(seeds), [n_clips[s] for s in seeds], args.resamples, args.boot_seed)
    weights = {s: np.vstack([np.ones(n_clips[s]), np.stack([np.bincount(d, minlength=n_clips[s]) for d in clip_draws[i]])])
               for i, s in enumerate(seeds)}  # (1 + resamples, clips)
    pool = {s: rates(data[s]["frames"], data[s]["frames"]["frame_id"], weights[s]) for s in seeds}
    strategies = list(data[seeds[0]]["selections"])
    per = {st: {s: [rates(data[s]["frames"], ids, weights[s]) for ids in data[s]["selections"][st]] for s in seeds}
           for st in strategies}
    figs: dict = {}

    def seed_mean(arr: np.ndarray) -> tuple[float, np.ndarray]:  # arr (seeds, 1 + resamples)
        with np.errstate(invalid="ignore"):
            b = np.array([np.nanmean(arr[seed_draw[r], 1 + r]) for r in range(args.resamples)])
        return float(np.nanmean(arr[:, 0])), b

    lines = [f"selections of {data[seeds[0]]['budget']} frames (10% of each seed's pool); mean over {len(seeds)} seeds, "
             "[95% over seeds and pool clips]; random = the pool's rate (a random selection's expectation); "
             f"the random strategy's own {args.repeats} draws are listed as a check", "",
             "| strategy | rare-frame rate | rare enrichment vs random | hard-frame rate | hard (error-rank) vs random | "
             "1 - F1 vs random | drivable 1 - IoU vs random |", "|---|---:|---:|---:|---:|---:|---:|"]
    base = {m: np.stack([pool[s][m] for s in seeds]) for m in MEASURES}
    for st in strategies:
        sel = {m: np.stack([np.nanmean([r[m] for r in per[st][s]], axis=0) for s in seeds]) for m in MEASURES}
        cells, f = [], {}
        for m in MEASURES:
            v, b = seed_mean(sel[m])
            v0, b0 = seed_mean(base[m])
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio, rb = v / v0 if v0 > 0 else float("nan"), np.where(b0 > 0, b / b0, np.nan)
            f[m] = {"rate": v, "rate_ci": interval(b), "ratio": ratio, "ratio_ci": interval(rb)}
        figs[st] = f
        cells = [fmt(f["rare"]["rate"], f["rare"]["rate_ci"]), fmt(f["rare"]["ratio"], f["rare"]["ratio_ci"], 2),
                 fmt(f["hard"]["rate"], f["hard"]["rate_ci"]), fmt(f["hard"]["ratio"], f["hard"]["ratio_ci"], 2),
                 fmt(f["error"]["ratio"], f["error"]["ratio_ci"], 2), fmt(f["drivable"]["ratio"], f["drivable"]["ratio_ci"], 2)]
        lines.append(f"| {st} | " + " | ".join(cells) + " |")
    lines += ["", "Targets: rare-frame enrichment >= 3x random's, hard-frame (error-rank) rate >= 1.5x random's; met only when "
              "the whole interval lies above the target, missed when below it", "",
              "| strategy | rare >= 3x | hard >= 1.5x |", "|---|---|---|"]
    for st in strategies:
        if st == "random":
            continue
        r, h = figs[st]["rare"]["ratio_ci"], figs[st]["hard"]["ratio_ci"]
        vr = verdict(*(r or (float("nan"),) * 2), target=3.0)
        vh = verdict(*(h or (float("nan"),) * 2), target=1.5)
        figs[st]["verdict"] = {"rare": vr, "hard": vh}
        lines.append(f"| {st} | {vr} ({fmt(figs[st]['rare']['ratio'], r, 2)}) | {vh} ({fmt(figs[st]['hard']['ratio'], h, 2)}) |")
    return "\n".join(lines), figs


def run(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    seeds = list(range(args.seeds))
    took = spawn(args, seeds)
    table, figs = summarize(args, seeds)
    secs = {s: json.loads((out / f"seed{s}" / "selections.json").read_text())["seconds"] for s in seeds}
    who = (f"production {args.production} (60-CPU-minute recipe) + its snapshot" if args.production else
           f"{args.members} members x {args.steps} steps on {args.train_clips} clips")
    head = [f"# engine mining: {args.seeds} seeds, {args.clips}-clip pools (rare {args.rare} per clip each), "
            f"{who}, {args.resamples} resamples", "",
            "seconds per seed (wall; worker stages): " + "; ".join(
                f"seed {s}: {took.get(s, float('nan')):.0f} ({', '.join(f'{k} {v:.0f}' for k, v in secs[s].items())})"
                for s in seeds), ""]
    text = "\n".join(head) + "\n" + table
    print(text)
    print("\ntrigger tables per seed: " + ", ".join(str(out / f"seed{s}" / "engine_mining.md") for s in seeds))
    (out / "engine_mining.md").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "figures": figs,
                                                  "seconds_wall": took, "seconds_worker": secs,
                                                  "total_seconds": round(time.time() - t0, 1)}, indent=1, default=str))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench_engine")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1, each a process")
    ap.add_argument("--jobs", type=int, default=min(3, os.cpu_count() or 1))
    ap.add_argument("--clips", type=int, default=120)
    ap.add_argument("--train-clips", type=int, default=24)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--members", type=int, default=3, help="ensemble members (the first is the production)")
    ap.add_argument("--production-cache", type=Path, default=None,
                    help="start from the 60-CPU-minute production cached here (benchmarks/production_cache.py; trained "
                         "first if absent): it and its snapshot are the members, --members/--steps/--train-clips unused")
    ap.add_argument("--production", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rare", type=float, default=0.03, help="probability per clip of each rare scenario")
    ap.add_argument("--repeats", type=int, default=5, help="random selections drawn (a check: random is the pool's rate)")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--boot-seed", type=int, default=0)
    ap.add_argument("--worker-seed", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.production_cache is not None and a.production is None:  # resolved once, in the parent
        from production_cache import RECIPE_60MIN, production, recipe  # benchmarks/, this script's folder

        a.production = str(production(a.production_cache, recipe(**RECIPE_60MIN)).resolve())
    worker(a) if a.worker_seed is not None else run(a)
