"""Time-to-accuracy of the one HydraNet (as DAWNBench and MLPerf time-to-train): training seconds on this
machine to reach each head's target on the sim's held-out scenes, over training seeds, with a learning
curve per head.

    python benchmarks/time_to_accuracy.py --out out/bench_tta [--seeds 3] [--steps 400] [--trunk-steps 800]
        [--snapshots 4] [--scenes 16] [--val-scenes 4] [--targets demo|60min] [--threads 2] [--overwrite]

The data is the demo's (sim seed 0: `--scenes` training scenes and `--val-scenes` held-out scenes of other
seeds, six cameras at 320x192, 6 frames at 2 Hz), generated once under --out/data. Per training seed the
recipe of `make demo` runs in this process, seeds one after another, with `--threads` torch threads:
`hydranet.curriculum.train_two_stage` of configs/full.yaml (the trunk stage, then every head). A copy of
the run's checkpoint is kept at `--snapshots` evenly spaced steps of the second stage; each is evaluated after
training (evaluation is not counted). The clock is wall seconds of training (trunk stage included) at
`--threads` threads: on a quiet 2-core machine with --threads 2, that is the machine's CPU time.

Prints per seed and head the primary metric at every snapshot, the seconds to reach the head's target
(first snapshot at or past it; "not reached" with the best figure otherwise), and the median [min, max]
over seeds; writes results.json and one learning-curve PNG per head (metric against seconds, one line per
seed, the baseline and the target drawn) under --out. Nothing is written outside --out; an existing --out
is refused without --overwrite.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import time
from pathlib import Path

from hydranet.curriculum import TRUNK_STEPS

# per head: (target kind, value). "abs": the primary metric reaches value; "over": the baseline + value
# (lower-is-better heads: the baseline - value); "beat": beats the baseline by the demo's margin
TARGETS = {
    "demo": {"det2d": ("abs", 0.15), "signs_lights": ("over", 0.10), "lanes": ("beat", 0.01), "drivable": ("beat", 0.01),
             "depth": ("beat", 0.01), "normals": ("beat", 0.5), "det3d": ("abs", 0.10), "bevmap": ("over", 0.05)},
    "60min": {"det2d": ("abs", 0.35), "signs_lights": ("over", 0.10), "lanes": ("beat", 0.01), "drivable": ("beat", 0.01),
              "depth": ("beat", 0.01), "normals": ("beat", 0.5), "det3d": ("abs", 0.25), "bevmap": ("abs", 0.60)},
}


def target_value(kind: str, value: float, baseline: float | None, higher: bool) -> float | None:
    """The figure a head must reach (None: its baseline is undefined and the target is relative to it)."""
    if kind == "abs":
        return value
    if baseline is None:
        return None
    return baseline + value if higher else baseline - value


def reached(metric: float | None, target: float | None, higher: bool) -> bool:
    if metric is None or target is None:
        return False
    return metric >= target if higher else metric <= target


def number(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def make_data(out: Path, scenes: int, val_scenes: int, sim_set: list[str]) -> tuple[Path, Path]:
    """The demo's training scenes (DEMO_TRAIN_SIM with the `sim_set` overrides) and its held-out scenes (DEMO_SIM)."""
    from sim.generate import generate_demo_split

    return generate_demo_split(out, scenes, val_scenes, sim_set=sim_set, progress=False)


def run_seed(seed: int, data: Path, val: Path, out: Path, steps: int, trunk_steps: int, snapshots: int) -> dict:
    """Train one seed with snapshots; returns {"points": [{"step", "seconds", "results"}], "trunk_seconds"}."""
    import dataclasses

    from hydranet.curriculum import recipe_experiment, train_two_stage
    from hydranet.evaluate import evaluate_checkpoint

    marks = sorted({max(1, round(steps * (i + 1) / snapshots)) for i in range(snapshots)})
    cfg = dataclasses.replace(recipe_experiment(data, val, seed, steps), checkpoint_every=math.gcd(*marks))
    clock = {"t0": time.perf_counter(), "stage2": None, "taken": {}}
    run = out / "run"

    def on_step(step: int, losses: dict) -> None:  # called before the step's checkpoint is written
        if clock["stage2"] is None:
            clock["stage2"] = time.perf_counter()
        for m in [m for m in marks if m < step and m not in clock["taken"]]:  # step m's checkpoint: written
            t = time.perf_counter()
            shutil.copy(run / "checkpoint.pt", out / f"step{m}.pt")
            clock["taken"][m] = t - clock["t0"]
            clock["t0"] += time.perf_counter() - t  # the copy is not training time

    train_two_stage(cfg, run, trunk_steps, progress=False, on_step=on_step)
    clock["taken"][marks[-1]] = time.perf_counter() - clock["t0"]
    shutil.copy(run / "checkpoint.pt", out / f"step{marks[-1]}.pt")
    points = []
    for m in marks:
        ckpt_dir = out / f"eval{m}"
        ckpt_dir.mkdir()
        shutil.copy(out / f"step{m}.pt", ckpt_dir / "checkpoint.pt")
        results = evaluate_checkpoint(ckpt_dir, val, ckpt_dir / "metrics.json", progress=False)
        points.append({"step": m, "seconds": clock["taken"][m], "results": {
            k: results[k] for k in ("primary", "model", "baseline", "higher_is_better")}})
        print(f"[tta] seed {seed} step {m} at {clock['taken'][m]:.0f} s: " + ", ".join(
            f"{h} {fmt(number(results['model'][h][results['primary'][h]]))}" for h in results["primary"]),
              flush=True)
    trunk = (clock["stage2"] - clock["t0"]) if clock["stage2"] else 0.0
    return {"points": points, "trunk_seconds": trunk}


def summarize(per_seed: dict[int, dict], targets: dict) -> dict:
    """Per head: the seconds to target in each seed (None: not reached), the best figure and the target."""
    heads = per_seed[min(per_seed)]["points"][0]["results"]["primary"]
    out = {}
    for head, metric in heads.items():
        kind, value = targets.get(head, ("beat", 0.01))
        rows = {}
        for seed, res in per_seed.items():
            first = res["points"][0]["results"]
            higher = bool(first["higher_is_better"][head])
            base = number(first["baseline"][head][metric])
            goal = target_value(kind, value, base, higher)
            curve = [(p["seconds"], number(p["results"]["model"][head][metric])) for p in res["points"]]
            hit = next((s for s, m in curve if reached(m, goal, higher)), None)
            defined = [m for _, m in curve if m is not None]
            best = (max(defined) if higher else min(defined)) if defined else None
            rows[seed] = {"seconds_to_target": hit, "best": best, "final": curve[-1][1], "target": goal,
                          "baseline": base, "curve": curve}
        out[head] = {"metric": metric, "higher_is_better": higher, "seeds": rows}
    return out


def spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.4g} [{min(values):.4g}, {max(values):.4g}]"


def format_summary(summary: dict) -> str:
    lines = ["head          metric          target   final median [min, max]        seconds to target per seed"]
    for head, s in summary.items():
        seeds = s["seeds"]
        goal = next(iter(seeds.values()))["target"]
        finals = [r["final"] for r in seeds.values() if r["final"] is not None]
        hits = ", ".join(f"{r['seconds_to_target']:.0f}" if r["seconds_to_target"] is not None else
                         f"not reached (best {r['best']:.3f})" if r["best"] is not None else "n/a" for r in seeds.values())
        lines.append(f"{head:<13} {s['metric']:<15} {('n/a' if goal is None else f'{goal:.3f}'):<8} "
                     f"{spread(finals):<30} {hits}")
    return "\n".join(lines)


def draw_curves(summary: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for head, s in summary.items():
        fig, ax = plt.subplots(figsize=(5, 3.2), dpi=100)
        for seed, r in s["seeds"].items():
            pts = [(t, m) for t, m in r["curve"] if m is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", label=f"seed {seed}")
        r0 = next(iter(s["seeds"].values()))
        if r0["baseline"] is not None:
            ax.axhline(r0["baseline"], color="grey", linestyle="--", label="baseline")
        if r0["target"] is not None:
            ax.axhline(r0["target"], color="red", linestyle=":", label="target")
        ax.set_xlabel("training seconds (wall, threads as run)")
        ax.set_ylabel(f"{s['metric']} ({'higher' if s['higher_is_better'] else 'lower'} is better)")
        ax.set_title(head)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"curve_{head}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=None, help="steps of the full model (default: the config's)")
    ap.add_argument("--trunk-steps", type=int, default=TRUNK_STEPS, help=f"trunk stage steps (the demo's {TRUNK_STEPS}; 0: none)")
    ap.add_argument("--snapshots", type=int, default=4)
    ap.add_argument("--scenes", type=int, default=16)
    ap.add_argument("--val-scenes", type=int, default=4)
    ap.add_argument("--targets", choices=sorted(TARGETS), default="demo")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sim-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a sim config override of the demo's training scenes (DEMO_TRAIN_SIM; repeatable); the "
                         "held-out scenes stay DEMO_SIM")
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    if a.seeds < 1 or a.snapshots < 1 or a.threads < 1:
        ap.error("--seeds, --snapshots and --threads must be >= 1")
    if a.out.exists():
        if not a.overwrite:
            raise SystemExit(f"--out {a.out} exists: pass --overwrite to replace it")
        shutil.rmtree(a.out)
    a.out.mkdir(parents=True)
    import torch

    from hydranet.curriculum import RECIPE
    from hydranet.experiment import load_experiment

    torch.set_num_threads(a.threads)
    steps = a.steps or load_experiment(RECIPE, []).steps
    data, val = make_data(a.out / "data", a.scenes, a.val_scenes, a.sim_set)
    per_seed = {}
    for seed in range(a.seeds):
        per_seed[seed] = run_seed(seed, data, val, a.out / f"seed{seed}", steps, a.trunk_steps, a.snapshots)
    summary = summarize(per_seed, TARGETS[a.targets])
    print(f"\ntime to accuracy, {a.seeds} seeds, {a.trunk_steps} trunk steps + {steps} steps, {a.threads} threads, "
          f"targets '{a.targets}'")
    print(format_summary(summary))
    curves = draw_curves(summary, a.out)
    (a.out / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()},
                                                    "summary": summary, "per_seed": per_seed}, indent=1))
    print(f"wrote {a.out / 'results.json'} and {len(curves)} curves ({curves[0].name}, ...)")
    return summary


if __name__ == "__main__":
    main()
