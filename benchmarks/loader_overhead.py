"""Loader overhead: the input pipeline is not the bottleneck. Training step time with the real
loader (LabelledFrames + DataLoader with the config's num_workers, augmentation on) against the
same training steps fed from pre-loaded tensors (the very same batches, materialized in memory
first); same model, config and initial weights.

Run by hand, not in CI:

    .venv/bin/python benchmarks/loader_overhead.py [--config configs/tiny.yaml] [--steps 40] [--warmup 5]

A sim dataset (demo settings: 320x192, 10 frames a scene, 3 scenes, seed 0) is generated into
--data (default out/bench/sim) unless it exists. The training step is train.py's: forward in
"loss" mode, model.backward, gradient clipping, AdamW + scheduler step. Step time = wall time of
one loop iteration, fetching the batch included; the first --warmup steps of each run (worker
start-up, allocator warm-up) are left out. The phases run pre-loaded, real loader, pre-loaded
again, and the pre-loaded figure is the mean of both, so drift in the load of a shared machine
falls on both sides. Extra --set KEY=VALUE overrides go to the config (e.g. --set num_workers=2).

Prints one table; the last line is the ratio real loader / pre-loaded (target <= 1.05x).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from hydranet.data import SimDataset
from hydranet.loader import Collate, StepBatchSampler
from hydranet.models import build_model
from hydranet.loader import to_device
from hydranet.experiment import load_experiment
from hydranet.train import build_training_data, make_optimizer, make_scheduler, setup_distributed

REPO = Path(__file__).resolve().parents[1]


def ensure_sim(path: Path, scenes: int, seed: int) -> Path:
    """A generated dataset at `path` (demo settings), made only if missing."""
    if not (path / "dataset.json").is_file():
        from sim.config import SimConfig
        from sim.generate import generate_dataset

        generate_dataset(path, SimConfig(frames_per_scene=10, image_width=320, image_height=192), scenes, seed)
    return path


def run_steps(cfg, meta: dict, batches, device: torch.device, total: int) -> list[float]:
    """Per-step wall times of `total` training steps over the iterable `batches`."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, meta).to(device)
    optimizer = make_optimizer(cfg.optim, model)
    scheduler = make_scheduler(cfg.optim, optimizer, total)
    model.train()
    times: list[float] = []
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    it = iter(batches)
    t0 = time.perf_counter()
    for _ in range(total):
        batch = to_device(next(it), device)
        losses = model(batch, "loss")
        optimizer.zero_grad(set_to_none=True)
        model.backward(losses)
        if cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        scheduler.step()
        sync()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "configs" / "tiny.yaml"))
    ap.add_argument("--data", default=str(REPO / "out" / "bench" / "sim"), help="sim dataset (generated if missing)")
    ap.add_argument("--scenes", type=int, default=3, help="scenes to generate when --data is missing")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per phase")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps at the start of each phase")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    args = ap.parse_args()

    data = ensure_sim(Path(args.data), args.scenes, 0)
    total = args.warmup + args.steps
    cfg = load_experiment(args.config, [f"data.root={data}", f"steps={total}", *args.set])
    device = setup_distributed(cfg.device).device
    ds_meta = SimDataset(data, cameras=list(cfg.data.cameras) if cfg.data.cameras else None, channels=()).meta
    probe = build_model(cfg.model, ds_meta)  # its heads build the targets; timed models are built in run_steps
    frames = build_training_data(cfg, probe)  # augmentation on (cfg.augment)

    def real_loader():
        sampler = StepBatchSampler(len(frames), cfg.batch_size, cfg.seed, total)
        return torch.utils.data.DataLoader(frames, batch_sampler=sampler, collate_fn=Collate(probe.heads),
                                           num_workers=cfg.num_workers, persistent_workers=False,
                                           generator=torch.Generator().manual_seed(cfg.seed))

    t0 = time.perf_counter()
    preloaded = list(real_loader())  # the same batches, materialized once
    t_materialize = time.perf_counter() - t0
    pre_a = run_steps(cfg, ds_meta, preloaded, device, total)[args.warmup:]
    real = run_steps(cfg, ds_meta, real_loader(), device, total)[args.warmup:]
    pre_b = run_steps(cfg, ds_meta, preloaded, device, total)[args.warmup:]

    def stats(ts):
        return 1e3 * float(np.mean(ts)), 1e3 * float(np.median(ts)), 1e3 * float(np.max(ts))

    pa, pb, rl = stats(pre_a), stats(pre_b), stats(real)
    pre_mean, pre_med = (pa[0] + pb[0]) / 2, (pa[1] + pb[1]) / 2
    H, W = cfg.data.image_size
    ncam = len(cfg.data.cameras) if cfg.data.cameras else len(frames.data.rig)
    print(f"torch {torch.__version__}, {device}, threads {torch.get_num_threads()}; {Path(args.config).name}: "
          f"backbone {cfg.model.backbone}, {len(cfg.model.tasks)} heads, batch {cfg.batch_size} x {ncam} cameras "
          f"at {H}x{W}, num_workers {cfg.num_workers}, augmentation photometric={cfg.augment.photometric} "
          f"geometric={cfg.augment.geometric}; {len(frames)} frames in {data}")
    print(f"materializing {total} batches with the loader alone took {t_materialize:.1f} s "
          f"({1e3 * t_materialize / total:.0f} ms/batch)")
    hdr = f"{'input':>24} | {'steps':>5} | {'mean ms/step':>12} | {'median ms/step':>14} | {'max ms/step':>11}"
    print(hdr)
    print("-" * len(hdr))
    for name, s, n in (("pre-loaded (1st)", pa, len(pre_a)), ("real loader", rl, len(real)),
                       ("pre-loaded (2nd)", pb, len(pre_b))):
        print(f"{name:>24} | {n:>5} | {s[0]:>12.1f} | {s[1]:>14.1f} | {s[2]:>11.1f}")
    print(f"ratio real loader / pre-loaded, median step: {rl[1] / pre_med:.3f}x")
    print(f"ratio real loader / pre-loaded, mean step: {rl[0] / pre_mean:.3f}x (target <= 1.05x)")


if __name__ == "__main__":
    main()
