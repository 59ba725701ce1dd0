"""Measure the data engine against the fleet's hidden truth: trigger precision and recall of rare
scenarios, and each mining strategy's enrichment over random selection.

    python benchmarks/engine_mining.py --out out/bench_engine [--clips 120] [--train-clips 24] [--steps 150]

Steps: a training fleet and a separate evaluation fleet (configs/fleet.yaml rates, rare scenarios
raised with --rare so a small fleet holds some), configs/engine_tiny.yaml trained briefly and
exported, shadow mode over the evaluation fleet, all triggers, then every strategy at a 10% budget.
The fleet's hidden truth (DIR/truth/scenarios.json and the labels) is read through
data_engine/evaluation.py, the same code `hydranet engine triggers` and `hydranet engine report` use:
- per-frame model error = 1 - F1 of the stored det2d predictions (score >= 0.3) against the labels'
  2D boxes (IoU >= 0.5, class-agnostic), over the model's cameras;
- trigger precision, base rate and lift on two measures (rare-scenario clips; hard frames = the top
  quarter by error among the frames the model detects on, ties shared), the share of the run each
  fires on and DEGENERATE where that is more than half; recall of a rare scenario = share of that
  scenario's frames the trigger fired on (docs/data_engine.md, Triggers);
- enrichment = rare-frame rate (and mean error) of a selection / that of the random selection.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from hydranet.cli import main


def run(args) -> None:
    from data_engine.catalog import Catalog
    from data_engine.evaluation import load_run_truth, trigger_markdown, trigger_rows
    from data_engine.config import EngineConfig, MiningConfig
    from data_engine.mining import STRATEGIES, mine
    from data_engine.shadow import run_shadow
    from data_engine.triggers import build_triggers, fire_all, run_table
    from deploy.export import export_checkpoint
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size = ["--set", "sim.image_width=96", "--set", "sim.image_height=64"]
    t0 = time.time()
    if not (out / "train").exists():
        main(["engine", "fleet", "--out", str(out / "train"), "--clips", str(args.train_clips), "--seed", "100", "--quiet", *size])
    if not (out / "fleet").exists():
        main(["engine", "fleet", "--out", str(out / "fleet"), "--clips", str(args.clips), "--seed", str(args.seed), "--quiet",
              *size, *[a for n in ("cones_on_road", "debris_on_road", "unusual_vehicle", "night_pedestrian_crossing")
                       for a in ("--set", f"rare.{n}={args.rare}")]])
    t_fleet = time.time() - t0
    if not (out / "model.onnx").exists():
        cfg = load_experiment("configs/engine_tiny.yaml", [f"data.root={out / 'train'}", f"steps={args.steps}",
                                                            f"checkpoint_every={args.steps}", "device=cpu", "num_workers=0"])
        train(cfg, out / "run", progress=False)
        export_checkpoint(out / "run", out / "model.onnx", out / "train", frames=2, verbose=False)
    t1 = time.time()
    cat_path = out / "catalog.db"
    st = run_shadow(out / "model.onnx", out / "fleet", cat_path, workers=args.workers, progress=False)
    t_shadow = time.time() - t1
    triggers = build_triggers()
    run_id, hits = fire_all(cat_path, triggers)
    with Catalog(cat_path) as cat:
        truth, why = load_run_truth(cat, run_id)
        table = run_table(cat, run_id)
    if truth is None:
        raise SystemExit(f"no truth to measure against: {why}")
    fids = sorted(truth.errors)
    any_rare = truth.any_rare
    lines = [f"# engine mining benchmark (seed {args.seed})", "",
             f"fleet: {args.clips} clips, {len(fids)} frames, rare-scenario frames {len(any_rare)} "
             f"({100 * len(any_rare) / len(fids):.1f}%); model: configs/engine_tiny.yaml, {args.steps} steps on "
             f"{args.train_clips} other clips; " + (f"shadow {st['frames'] / max(t_shadow, 1e-9):.1f} frames/s ({args.workers} "
             f"worker(s)); fleet render {t_fleet:.0f} s" if st["frames"] else "fleet, model and catalog reused from --out"), "",
             trigger_markdown(trigger_rows(triggers, hits, truth, table), truth)]
    budget = max(1, len(fids) // 10)
    lines += ["", f"selections of {budget} frames (10%), mean over {args.repeats} random seeds for random:", "",
              "| strategy | rare-frame rate | enrichment vs random | mean error | error vs random |", "|---|---:|---:|---:|---:|"]
    res = {}
    for s in STRATEGIES:
        rates, errs = [], []
        for k in range(args.repeats if s == "random" else 1):
            sel = mine(cat_path, budget, s, EngineConfig(mining=MiningConfig(seed=k)), name=f"bench-{s}-{k}")
            ids = [it["frame_id"] for it in sel["items"]]
            rates.append(truth.rare_rate(ids))
            errs.append(truth.mean_error(ids))
        res[s] = (float(np.mean(rates)), float(np.mean(errs)))
    for s, (rate, e) in res.items():
        r0, e0 = res["random"]
        lines.append(f"| {s} | {rate:.3f} | {rate / r0 if r0 else float('nan'):.2f}x | {e:.3f} | {e / e0 if e0 else float('nan'):.2f}x |")
    text = "\n".join(lines)
    print(text)
    (out / "engine_mining.md").write_text(text + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench_engine")
    ap.add_argument("--clips", type=int, default=120)
    ap.add_argument("--train-clips", type=int, default=24)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rare", type=float, default=0.03, help="probability per clip of each rare scenario")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5, help="random selections averaged")
    run(ap.parse_args())
