"""The demo's metric figures over several training seeds: median [min, max].

    python benchmarks/demo_seeds.py --seeds 3 --out out/bench_demo_seeds [--first-seed F] [--jobs N] [--overwrite]
        [--steps N] [--trunk-steps 800] [--trunk-cameras all] [--trunk-batch N] [--set KEY=VALUE ...]
        [--sim-set KEY=VALUE ...] [--config NAME --rig RIG]

Training is seeded and bit-identical on one machine, not across machines (another CPU's float kernels
round differently, and 600 small-batch steps amplify it), so one `make demo` run's figures are one draw.
This runs what `make demo` trains and evaluates (`sim.config.DEMO_TRAIN_SIM` and `DEMO_SIM`, and
`hydranet.curriculum.recipe_experiment`: the sim dataset of the demo, generated once with its data seed 0 under
--out/data; then per training seed the one HydraNet of
configs/full.yaml, its trunk stage first: six camera heads and det3d with velocity and bevmap on the
fused BEV grid with its 3-frame video queue; `--config` trains another config instead, `--rig` renders both
splits from another rig, e.g. `--config dashcam --rig dashcam --trunk-steps 0`, docs/benchmarks.md "The dashcam
recipe") for
training seeds 0..N-1 (F..F+N-1 with --first-seed F), each in its own process with OMP_NUM_THREADS=1 and
torch threads 1, --jobs at a time (default: all at once). The export, INT8 and latency stages of the demo
are left out (they do not train). Prints one table: every metric the demo prints for the model, median [min, max] over seeds
(baselines depend on the data only), how many seeds beat the baseline on each head's primary metric,
and each seed's wall time. Writes results.json (per-seed metrics, the aggregate and the wall times) and
each seed's log and metrics under --out/seed<i>/. Nothing is written outside --out; an existing --out is
refused without --overwrite.

A metric the demo prints as n/a (undefined: nothing to score, e.g. no matched sign) is counted as
undefined in that seed; any other non-finite value is refused.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from hydranet.curriculum import RECIPE, TRUNK_CAMERAS, TRUNK_STEPS

STAGE = "hydranet"  # the demo's one trained model: configs/full.yaml


def collect(stage: str, results: Mapping) -> dict[str, dict]:
    """One evaluation's model and baseline metrics as {"stage/head/metric": {...}}; NaN (the demo's n/a:
    nothing to score) becomes None. `primary` marks the head's primary metric, `beats` whether it beat
    the baseline there."""
    rows = {}
    for task, ms in results["model"].items():
        base = results["baseline"].get(task, {})
        for k, v in ms.items():
            b = base.get(k)
            rows[f"{stage}/{task}/{k}"] = {
                "model": None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v),
                "baseline": None if b is None or (isinstance(b, float) and math.isnan(b)) else float(b),
                "primary": results["primary"].get(task) == k,
                "beats": bool(results["beats_baseline"].get(task)) if results["primary"].get(task) == k else None}
    return rows


def spread(values: Mapping[int, float | None], name: str) -> dict:
    """Median, min and max over the seeds where the metric is defined (None: undefined in that seed).
    A non-finite value is refused: it is a bug, not a figure."""
    for seed, v in values.items():
        if v is not None and not math.isfinite(v):
            raise ValueError(f"metric {name} is {v} for seed {seed}: a non-finite value is not a figure "
                             "(an undefined metric is None, printed n/a)")
    defined = [v for v in values.values() if v is not None]
    if not defined:
        return {"median": None, "min": None, "max": None, "defined": 0, "seeds": len(values)}
    return {"median": statistics.median(defined), "min": min(defined), "max": max(defined),
            "defined": len(defined), "seeds": len(values)}


def aggregate(per_seed: Mapping[int, Mapping[str, Mapping]]) -> dict[str, dict]:
    """{seed: collect(...) rows} -> {metric: {"model": spread, "baseline": spread, "primary", "beats": k}}.
    Every seed must report the same metrics."""
    if not per_seed:
        raise ValueError("no seed to aggregate")
    names = list(next(iter(per_seed.values())))
    for seed, rows in per_seed.items():
        if set(rows) != set(names):
            raise ValueError(f"seed {seed} reports other metrics: {sorted(set(rows) ^ set(names))}")
    out = {}
    for n in names:
        rows = {s: per_seed[s][n] for s in per_seed}
        primary = any(r.get("primary") for r in rows.values())
        out[n] = {"model": spread({s: r["model"] for s, r in rows.items()}, n),
                  "baseline": spread({s: r.get("baseline") for s, r in rows.items()}, f"{n} (baseline)"),
                  "primary": primary,
                  "beats": sum(bool(r.get("beats")) for r in rows.values()) if primary else None}
    return out


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def spread_text(s: Mapping) -> str:
    if s["defined"] == 0:
        return "n/a"
    if s["min"] == s["max"]:
        text = _num(s["median"])
    else:
        text = f"{_num(s['median'])} [{_num(s['min'])}, {_num(s['max'])}]"
    return text if s["defined"] == s["seeds"] else f"{text} ({s['defined']} of {s['seeds']} seeds defined)"


def format_table(agg: Mapping[str, Mapping], walls: Mapping[int, Mapping[str, float]] | None = None) -> str:
    rows = [("model", "head", "metric", "median [min, max]", "baseline", "")]
    for n, a in agg.items():
        stage, task, metric = n.split("/", 2)
        mark = f"* beats baseline in {a['beats']} of {a['model']['seeds']} seeds" if a["primary"] else ""
        rows.append((stage, task, metric, spread_text(a["model"]), spread_text(a["baseline"]), mark))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    if walls:
        lines.append("")
        lines.append("seed  train+eval (s)  process wall (s)")
        for seed, w in sorted(walls.items()):
            lines.append(f"{seed:<4}  {w['train_eval']:<14.1f}  {w['wall']:.1f}")
    return "\n".join(lines)


def check_out(out: Path, overwrite: bool) -> None:
    if out.exists():
        if not overwrite:
            raise SystemExit(f"--out {out} exists: pass --overwrite to replace it")
        shutil.rmtree(out)


def trunk_cameras_of(flag: str) -> tuple[str, ...] | None:
    """--trunk-cameras as train_two_stage takes it: '' the demo's TRUNK_CAMERAS, 'all' None (every camera)."""
    return TRUNK_CAMERAS if not flag else None if flag == "all" else tuple(flag.split(","))


def check_recipe(ap: argparse.ArgumentParser, config: str, rig: str, overrides: list[str], sim_set: list[str],
                 trunk_steps: int, trunk_cameras: str) -> None:
    """--config with --set, --rig and the trunk stage's cameras read as the seeds will read them, before anything is
    written: a one-line error naming the flag otherwise (e.g. --trunk-steps on a rig without CAM_BACK)."""
    from hydranet.experiment import load_experiment
    from hydranet.rig import load_rig

    if rig and any(o.split("=", 1)[0].strip() == "rig" for o in sim_set):
        ap.error("--rig and --sim-set rig=... both name the rig; give --rig alone (it renders both splits)")
    try:
        cfg = load_experiment(config or RECIPE, overrides)
    except ValueError as e:
        ap.error(f"--config {config or 'full'} with --set {overrides}: {e}")
    try:
        cameras = load_rig(rig or "nuscenes6").select(cfg.data.cameras)
        if trunk_steps > 0:
            cameras.select(trunk_cameras_of(trunk_cameras))
    except (ValueError, OSError) as e:
        ap.error(f"--rig {rig or 'nuscenes6'}: {e}" + (" (the trunk stage's cameras: --trunk-cameras, or --trunk-steps 0 "
                                                      "for a model without BEV heads)" if trunk_steps > 0 else ""))


def worker(seed: int, data: Path, val: Path, out: Path, steps: int, trunk_steps: int, overrides: list[str],
           trunk_cameras: str = "", trunk_batch: int = 0, config: str = "") -> None:
    """One training seed in this process: the demo's training and evaluation; writes out/result.json."""
    import torch

    from hydranet.curriculum import recipe_experiment, train_two_stage
    from hydranet.evaluate import evaluate_checkpoint

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    cfg = recipe_experiment(data, val, seed, steps or None, config=config or RECIPE, overrides=overrides)
    train_two_stage(cfg, out / "run", trunk_steps, progress=False, overwrite=True, cameras=trunk_cameras_of(trunk_cameras),
                    trunk_batch=trunk_batch or None)
    rows = collect(STAGE, evaluate_checkpoint(out / "run", val, out / "metrics.json", out / "predictions", progress=False))
    t1 = time.perf_counter()
    (out / "result.json").write_text(json.dumps({"seed": seed, "metrics": rows,
                                                 "wall": {"train_eval": t1 - t0}}, indent=1))


def run_seeds(out: Path, seeds: list[int], jobs: int, data: Path, val: Path, steps: int, trunk_steps: int,
              overrides: list[str], trunk_cameras: str = "", trunk_batch: int = 0, config: str = "") -> dict:
    """Each seed in its own process (OMP_NUM_THREADS=1), `jobs` at a time; returns {seed: result}."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    pending, running, done = list(seeds), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            s = pending.pop(0)
            d = out / f"seed{s}"
            d.mkdir(parents=True)
            log = open(d / "log.txt", "w")
            cmd = [sys.executable, __file__, "_worker", "--seed", str(s), "--data", str(data), "--val", str(val),
                   "--out", str(d), "--steps", str(steps), "--trunk-steps", str(trunk_steps),
                   "--trunk-cameras", trunk_cameras, "--trunk-batch", str(trunk_batch), "--config", config]
            cmd += [f"--set={o}" for o in overrides]
            running[s] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log,
                          time.perf_counter())
            print(f"[demo_seeds] seed {s} started (log {d / 'log.txt'})", flush=True)
        time.sleep(1.0)
        for s, (p, log, t0) in list(running.items()):
            if p.poll() is None:
                continue
            log.close()
            del running[s]
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                for q, qlog, _ in running.values():
                    q.kill()
                    qlog.close()
                raise RuntimeError(f"seed {s} failed (exit {p.returncode}): see {out / f'seed{s}' / 'log.txt'}")
            res = json.loads((out / f"seed{s}" / "result.json").read_text())
            res["wall"]["wall"] = wall
            done[s] = res
            print(f"[demo_seeds] seed {s} done in {wall:.1f} s", flush=True)
    return done


def main(argv: list[str] | None = None) -> dict | None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:
        w = argparse.ArgumentParser()
        for k in ("--data", "--val", "--out"):
            w.add_argument(k, type=Path, required=True)
        for k in ("--seed", "--steps", "--trunk-steps", "--trunk-batch"):
            w.add_argument(k, type=int, required=True)
        w.add_argument("--trunk-cameras", required=True)
        w.add_argument("--config", required=True)
        w.add_argument("--set", action="append", default=[])
        a = w.parse_args(argv[1:])
        worker(a.seed, a.data, a.val, a.out, a.steps, a.trunk_steps, a.set, a.trunk_cameras, a.trunk_batch, a.config)
        return None
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="training seeds 0..N-1 (from --first-seed)")
    ap.add_argument("--first-seed", type=int, default=0, help="the first training seed: seeds F..F+N-1 (other seeds than "
                    "a table's, the same recipe)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=None, help="seed processes at a time (default: all)")
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--steps", type=int, default=0, help="training steps of the whole model (0: the config's, as the demo)")
    ap.add_argument("--trunk-steps", type=int, default=TRUNK_STEPS, help=f"trunk stage steps (the demo's {TRUNK_STEPS}; 0 skips it)")
    ap.add_argument("--trunk-cameras", default="", help="the trunk stage's cameras, comma-separated, or 'all' "
                    f"(default: the demo's {','.join(TRUNK_CAMERAS)})")
    ap.add_argument("--trunk-batch", type=int, default=0, help="the trunk stage's batch (0: the config's, as the demo)")
    ap.add_argument("--config", default="", help="another training config than the demo's configs/full.yaml (a shipped name "
                    "or a YAML file; e.g. dashcam with --trunk-steps 0 --rig dashcam: a one-camera model has no trunk stage)")
    ap.add_argument("--rig", default="", help="render the training and held-out scenes from this rig (a preset name or "
                    "calibration YAML) instead of the demo's nuscenes6")
    ap.add_argument("--scenes", type=int, default=16)
    ap.add_argument("--val-scenes", type=int, default=4)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override on top of the demo's recipe (repeatable), as `hydranet train --set`")
    ap.add_argument("--sim-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a sim config override of the demo's training scenes (DEMO_TRAIN_SIM; repeatable), as `hydranet sim "
                         "generate --set`; the held-out scenes stay the demo's (DEMO_SIM), a randomization ablation's reference")
    a = ap.parse_args(argv)
    if a.seeds < 1 or (a.jobs is not None and a.jobs < 1) or a.first_seed < 0:
        ap.error("--seeds and --jobs must be >= 1, --first-seed >= 0")
    check_recipe(ap, a.config, a.rig, a.set, a.sim_set, a.trunk_steps, a.trunk_cameras)
    check_out(a.out, a.overwrite)
    a.out.mkdir(parents=True)
    out = a.out.resolve()

    from sim.generate import generate_demo_split

    t0 = time.perf_counter()
    # --sim-set changes the training scenes alone; the held-out scenes are the demo's own (from --rig's cameras)
    data, val = generate_demo_split(out / "data", a.scenes, a.val_scenes, sim_set=a.sim_set, rig=a.rig or None)
    gen = time.perf_counter() - t0
    seeds = list(range(a.first_seed, a.first_seed + a.seeds))
    t1 = time.perf_counter()
    done = run_seeds(out, seeds, a.jobs or a.seeds, data, val, a.steps, a.trunk_steps, a.set, a.trunk_cameras, a.trunk_batch,
                     a.config)
    total = time.perf_counter() - t1
    agg = aggregate({s: done[s]["metrics"] for s in seeds})
    walls = {s: done[s]["wall"] for s in seeds}
    print(f"\ndemo metrics over training seeds {seeds} ({a.trunk_steps} trunk steps, then {a.steps or 'the config'} steps; data "
          f"generated once in {gen:.1f} s; {len(seeds)} seed processes, {a.jobs or a.seeds} at a time, "
          f"OMP_NUM_THREADS=1, {total:.1f} s wall for all)")
    print(format_table(agg, walls))
    result = {"command": "python benchmarks/demo_seeds.py " + " ".join(argv), "seeds": seeds, "steps": a.steps,
              "trunk_steps": a.trunk_steps, "config": a.config or "full", "rig": a.rig or "nuscenes6",
              "overrides": a.set, "sim_overrides": a.sim_set,
              "jobs": a.jobs or a.seeds, "generate_s": gen, "seeds_wall_s": total,
              "aggregate": agg, "per_seed": {str(s): done[s] for s in seeds}}
    (out / "results.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {out / 'results.json'}")
    return result


if __name__ == "__main__":
    main()
