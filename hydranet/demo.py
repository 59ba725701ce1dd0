"""The demo `make demo` runs: generate a sim dataset and its preview, train the tiny config
(configs/tiny.yaml), evaluate on a held-out generated set against trivial baselines, and draw
predictions next to ground truth."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

# hydranet.train imports torchvision, which must be loaded before the sim opens its EGL context
from hydranet.data import SimDataset
from hydranet.evaluate import evaluate_checkpoint, format_table, viz_checkpoint
from hydranet.train import load_experiment, train
from hydranet.viz import sample_preview, write_png
from sim.config import SimConfig
from sim.generate import generate_dataset

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


def run_demo(out: Path, scenes: int = 4, seed: int = 0, steps: int | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    data, val = out / "sim", out / "sim_val"
    for d in (data, val):
        if d.exists():
            shutil.rmtree(d)
    t0 = time.perf_counter()
    sim_cfg = SimConfig(frames_per_scene=10, image_width=320, image_height=192)
    generate_dataset(data, sim_cfg, scenes, seed)
    generate_dataset(val, sim_cfg, 1, seed + 1000, progress=False)  # held out: other seed, other scene
    ds = SimDataset(data)
    print(f"generated {len(ds)} frames x {len(ds.rig)} cameras (+ {len(SimDataset(val))} held-out frames) "
          f"in {time.perf_counter() - t0:.1f} s -> {data}")
    preview = out / "preview.png"
    write_png(preview, sample_preview(ds[5], ds.meta))
    print(f"wrote {preview}")

    t0 = time.perf_counter()
    run = out / "run"
    if run.exists():
        shutil.rmtree(run)
    overrides = [f"data.root={data}", f"data.val_root={val}"] + ([f"steps={steps}"] if steps else [])
    cfg = load_experiment(TINY, overrides)
    train(cfg, run)
    print(f"trained {cfg.steps} steps of configs/tiny.yaml in {time.perf_counter() - t0:.1f} s -> {run}")

    t0 = time.perf_counter()
    results = evaluate_checkpoint(run, val, out / "metrics.json", out / "predictions", progress=False)
    print(format_table(results))
    print(f"evaluated in {time.perf_counter() - t0:.1f} s -> {out / 'metrics.json'}")
    picture = viz_checkpoint(run, val, out / "predictions.png")
    print(f"wrote {picture}")
    print(f"demo done in {time.perf_counter() - t_start:.1f} s")
    return results
