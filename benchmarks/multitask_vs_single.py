"""Multi-task against single-task accuracy per head at equal training steps (the "implicit
regularization" claim: a shared trunk trained on every task is as good or better per head).

Run by hand, not in CI (about 10+ minutes on 2 CPU cores):

    .venv/bin/python benchmarks/multitask_vs_single.py [--config configs/tiny.yaml] [--steps 150]

Trains the config once with all its heads and once per head alone (the same steps, batches,
seed, optimizer and schedule; each single-task model is its own backbone + neck + one head), then
evaluates every model with hydranet.evaluate on a held-out generated set (another seed, another
scene) and prints, per head, the primary metric of the multi-task model next to the single-task
model's and the trivial baseline's. Sim datasets (demo settings: 320x192, 10 frames a scene) are
generated into --data (3 scenes, seed 0) and --val (1 scene, seed 1000) unless they exist. Extra
--set KEY=VALUE overrides go to the config. Run folders go to --out (default out/bench/mt_vs_st).

Prints one table; the last lines say, per head, whether multi-task beats single-task.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path


from hydranet.config import add_override_option
from hydranet.data import SimDataset
from hydranet.evaluate import evaluate, format_table
from hydranet.loader import LabelledFrames
from hydranet.models import TaskConfig
from hydranet.experiment import load_experiment
from hydranet.train import train

REPO = Path(__file__).resolve().parents[1]


def ensure_sim(path: Path, scenes: int, seed: int) -> Path:
    """A generated dataset at `path` (demo settings), made only if missing."""
    if not (path / "dataset.json").is_file():
        from sim.config import SimConfig
        from sim.generate import generate_dataset

        generate_dataset(path, SimConfig(frames_per_scene=10, image_width=320, image_height=192), scenes, seed)
    return path


def train_and_eval(cfg, tasks: tuple[TaskConfig, ...], run: Path, val: Path) -> tuple[dict, float]:
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, tasks=tasks))
    t0 = time.perf_counter()
    model = train(cfg, run, progress=False)
    seconds = time.perf_counter() - t0
    ds = SimDataset(val, cameras=list(cfg.data.cameras) if cfg.data.cameras else None, on_bad_frame=cfg.data.on_bad_frame)
    frames = LabelledFrames(ds, dict(model.heads.items()), cfg.data.image_size, None, cfg.seed)
    device = next(model.parameters()).device
    return evaluate(model, frames, cfg.batch_size, device), seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "configs" / "tiny.yaml"))
    ap.add_argument("--steps", type=int, default=150, help="training steps of every model")
    ap.add_argument("--data", default=str(REPO / "out" / "bench" / "sim"), help="training set (generated if missing)")
    ap.add_argument("--scenes", type=int, default=3, help="scenes to generate when --data is missing")
    ap.add_argument("--val", default=str(REPO / "out" / "bench" / "sim_val"), help="held-out set (generated if missing)")
    ap.add_argument("--out", default=str(REPO / "out" / "bench" / "mt_vs_st"), help="run folders")
    add_override_option(ap, "config override")
    args = ap.parse_args()

    data = ensure_sim(Path(args.data), args.scenes, 0)
    val = ensure_sim(Path(args.val), 1, 1000)
    cfg = load_experiment(args.config, [f"data.root={data}", f"steps={args.steps}", f"checkpoint_every={args.steps}",
                                        *args.set])
    out = Path(args.out)
    heads = [t.name for t in cfg.model.tasks]
    multi, t_multi = train_and_eval(cfg, cfg.model.tasks, out / "all", val)
    print(f"multi-task ({len(heads)} heads), {args.steps} steps, {t_multi:.0f} s; held-out metrics:")
    print(format_table(multi))
    single, t_single = {}, {}
    for t in cfg.model.tasks:
        single[t.name], t_single[t.name] = train_and_eval(cfg, (t,), out / t.name, val)
    results = {"multi": multi, "single": single, "steps": args.steps}
    (out / "results.json").write_text(json.dumps(results, indent=2, default=lambda o: None) + "\n")

    H, W = cfg.data.image_size
    ncam = len(cfg.data.cameras) if cfg.data.cameras else len(SimDataset(data, channels=()).rig)
    print(f"\n{Path(args.config).name}: backbone {cfg.model.backbone}, batch {cfg.batch_size} x {ncam} cameras at "
          f"{H}x{W}, {args.steps} steps each, train {len(SimDataset(data, channels=()))} frames ({data}), "
          f"held-out {multi['frames']} frames ({val}); train time multi {t_multi:.0f} s, "
          f"singles {sum(t_single.values()):.0f} s in all")
    hdr = (f"{'head':>13} | {'metric':>15} | {'multi-task':>10} | {'single-task':>11} | {'baseline':>8} | "
           f"{'better':>6} | {'multi/single':>12}")
    print(hdr)
    print("-" * len(hdr))
    verdict = []
    for h in heads:
        key, higher = multi["primary"][h], multi["higher_is_better"][h]  # the task's primary metric
        m, s = multi["model"][h].get(key, math.nan), single[h]["model"][h].get(key, math.nan)
        b = multi["baseline"].get(h, {}).get(key, math.nan)
        better = "-" if math.isnan(m) or math.isnan(s) or m == s else ("multi" if (m > s) == higher else "single")
        ratio = m / s if s and not math.isnan(s) else math.nan
        print(f"{h:>13} | {key + (' ^' if higher else ' v'):>15} | {m:>10.4f} | {s:>11.4f} | {b:>8.4f} | {better:>6} | "
              f"{ratio:>11.2f}x")
        verdict.append(f"{h} {better}")
    print("(^ higher is better, v lower is better; baseline: the trivial prediction of hydranet.evaluate)")
    wins = sum(v.endswith("multi") for v in verdict)
    print(f"multi-task better on {wins}/{len(heads)} heads at {args.steps} steps: " + ", ".join(verdict))


if __name__ == "__main__":
    main()
