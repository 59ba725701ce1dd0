"""Loader overhead: the input pipeline is not the bottleneck. Training step time with the real
loader (LabelledFrames + DataLoader with the config's num_workers, augmentation on) against the
same training steps fed from pre-loaded tensors (the very same batches, materialized in memory
first); same model, config and initial weights. Measured for the sim reader and for a real-format
reader (nuScenes at its real 1600x900 camera size, with the map expansion), one after the other.

Run by hand, not in CI:

    .venv/bin/python benchmarks/loader_overhead.py [--format sim|nuscenes|both] [--config configs/tiny.yaml] \
        [--rounds 8] [--block 8]

- sim: a dataset with the demo settings (320x192, 10 frames a scene, 3 scenes, seed 0) is generated
  into --data (default out/bench/sim) unless it exists.
- nuscenes: a nuScenes folder at --nuscenes (default out/bench/nuscenes1600) unless it exists:
  sim scenes rendered at 1600x900 (nuScenes' camera size, 2 Hz keyframes) and written by the test
  fixture writers (tests/dataset_fixtures.py: write_nuscenes = the official tables with the JPEGs,
  write_nuscenes_map = the map expansion of each scene's world), so the reader decodes 1600x900
  JPEGs, derives 2D boxes and rasterizes the map for every frame, as on the real dataset.
Both runs train the same heads, `--tasks` (default det2d, lanes, drivable: what both formats
supervise) on the config's cameras and data.image_size. The loader keeps decoded frames at the
model size (LabelledFrames, 1024 MB a process): a small set is decoded once; `--cache-mb 0`
decodes every frame every time, as on a dataset larger than the cache (all of nuScenes).

The training step is train.py's: forward in "loss" mode, model.backward, gradient clipping,
AdamW + scheduler step. Step time = wall time of one loop iteration, fetching the batch
included. One model trains on both inputs in interleaved blocks (--rounds x (--block steps from
the pre-loaded batches, then --block steps from the real loader, which runs all along), so the
load of a shared machine falls on both sides alike; the first 2 x num_workers steps of every
real-loader block are left out (the batches its workers prefetched meanwhile), as are --warmup
steps of each input before the first round. The ratio is the median over rounds of (median real
step / median pre-loaded step) of the round. Extra --set KEY=VALUE overrides go to the config
(e.g. --set num_workers=2).

Prints one table per format; its last line is the ratio real loader / pre-loaded (target <= 1.05x).
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import time
from pathlib import Path

import numpy as np
import torch

from hydranet.config import add_override_option
from hydranet.data.sources import open_sources
from hydranet.bevgrid import BevGrid
from hydranet.loader import Augmenter, Collate, LabelledFrames, StepBatchSampler
from hydranet.models import build_model
from hydranet.loader import to_device
from hydranet.experiment import load_experiment
from hydranet.train import make_optimizer, make_scheduler, setup_distributed

REPO = Path(__file__).resolve().parents[1]


def ensure_sim(path: Path, scenes: int, seed: int) -> Path:
    """A generated dataset at `path` (demo settings), made only if missing."""
    if not (path / "dataset.json").is_file():
        from sim.config import SimConfig
        from sim.generate import generate_dataset

        generate_dataset(path, SimConfig(frames_per_scene=10, image_width=320, image_height=192), scenes, seed)
    return path


def fixture_writers():
    """tests/dataset_fixtures.py, the writers the reader tests use (loaded from its file: tests/ is
    not a package)."""
    spec = importlib.util.spec_from_file_location("dataset_fixtures", REPO / "tests" / "dataset_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ensure_nuscenes(path: Path, scenes: int, frames: int, seed: int) -> Path:
    """A nuScenes v1.0-mini folder with 1600x900 cameras and the map expansion at `path`, made
    only if missing (the sim dataset it is written from is kept next to it)."""
    if not any(path.glob("*/sample.json")):
        from sim.config import SimConfig

        fx = fixture_writers()
        sim = path.with_name(path.name + "-sim")
        if not (sim / "dataset.json").is_file():
            cfg = SimConfig(frames_per_scene=frames, image_width=1600, image_height=900, frame_rate_hz=2.0)
            fx.make_sim(sim, cfg, scenes, seed)
        fx.write_nuscenes(sim, path)
        fx.write_nuscenes_map(sim, path)
    return path


class Stepper:
    """train.py's training step on one model; `step(batches)` times fetching + one step."""

    def __init__(self, cfg, meta: dict, device: torch.device, total: int):
        torch.manual_seed(cfg.seed)
        self.cfg, self.device = cfg, device
        self.model = build_model(cfg.model, meta).to(device)
        self.optimizer = make_optimizer(cfg.optim, self.model)
        self.scheduler = make_scheduler(cfg.optim, self.optimizer, total)
        self.model.train()
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.cpu: list[float] = []

    def step(self, batches) -> float:
        t0, c0 = time.perf_counter(), time.process_time()
        batch = to_device(next(batches), self.device)
        losses = self.model(batch, "loss")
        self.optimizer.zero_grad(set_to_none=True)
        self.model.backward(losses)
        if self.cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.sync()
        self.cpu.append(time.process_time() - c0)  # CPU seconds of this process (all its threads)
        return time.perf_counter() - t0


def measure(cfg, name: str, rounds: int, block: int, warmup: int, cache_mb: int) -> float:
    """Print the table of one dataset; return the ratio real loader / pre-loaded (median over rounds)."""
    skip = 2 * cfg.num_workers  # a real block's first steps get the batches prefetched meanwhile
    n_real = warmup + rounds * block
    device = setup_distributed(cfg.device).device
    data = open_sources(cfg.data)[0].dataset
    probe = build_model(cfg.model, data.meta)  # its heads build the targets
    # as build_training_data, with the decoded-frame cache of `cache_mb`
    grid = BevGrid.from_meta(data.meta) if probe.fusion is not None and "bev" in data.meta else None
    aug = Augmenter.from_config(cfg.augment, probe.fusion is not None, grid)

    def labelled():  # a fresh one for each use: the decoded-frame cache is per instance and process
        return LabelledFrames(data, probe.target_builders(), cfg.data.image_size, aug if aug.active else None, cfg.seed,
                              clip_length=probe.video_frames, cache_mb=cache_mb)
    frames = labelled()
    collate = Collate(probe.heads)

    def loader(steps: int):
        sampler = StepBatchSampler(len(frames), cfg.batch_size, cfg.seed, steps)
        return torch.utils.data.DataLoader(labelled(), batch_sampler=sampler, collate_fn=collate,
                                           num_workers=cfg.num_workers, persistent_workers=False,
                                           generator=torch.Generator().manual_seed(cfg.seed))

    t0, c0 = time.perf_counter(), time.process_time()
    preloaded = [collate([frames[i] for i in b]) for b in StepBatchSampler(len(frames), cfg.batch_size, cfg.seed, n_real)]
    t_materialize, cpu_load = time.perf_counter() - t0, time.process_time() - c0  # in this process: its CPU time
    stepper = Stepper(cfg, data.meta, device, 2 * n_real)
    pre_it, real_it = itertools.cycle(preloaded), iter(loader(n_real))
    for _ in range(warmup):
        stepper.step(pre_it)
        stepper.step(real_it)
    pre, real, ratios = [], [], []
    pre_cpu = []
    for _ in range(rounds):
        p = [stepper.step(pre_it) for _ in range(block)]
        pre_cpu += stepper.cpu[-block:]
        r = [stepper.step(real_it) for _ in range(block)][skip:]
        pre += p
        real += r
        ratios.append(float(np.median(r) / np.median(p)))

    def stats(ts):
        return 1e3 * float(np.mean(ts)), 1e3 * float(np.median(ts)), 1e3 * float(np.max(ts))

    H, W = cfg.data.image_size
    cams = data.rig.cameras
    print(f"\n== {name}: {len(frames)} frames in {cfg.data.root}, cameras {cams[0].width}x{cams[0].height} "
          f"resized to {H}x{W}")
    print(f"torch {torch.__version__}, {device}, threads {torch.get_num_threads()}: backbone {cfg.model.backbone}, "
          f"heads {[t.name for t in cfg.model.tasks]}, batch {cfg.batch_size} x {len(cams)} cameras, "
          f"num_workers {cfg.num_workers}, augmentation photometric={cfg.augment.photometric} "
          f"geometric={cfg.augment.geometric}; decoded-frame cache {cache_mb} MB; {rounds} rounds of {block} + "
          f"{block} steps")
    load_ms, step_ms = 1e3 * cpu_load / n_real, 1e3 * float(np.median(pre_cpu))
    print(f"the loader alone, in one process: {1e3 * t_materialize / n_real:.0f} ms/batch wall, {load_ms:.0f} ms/batch CPU; "
          f"a pre-loaded training step: {step_ms:.0f} ms CPU (median)")
    print(f"CPU-bound estimate (loader and training share saturated cores): (loader + step) / step CPU = "
          f"{(load_ms + step_ms) / step_ms:.3f}x")
    hdr = f"{'input':>12} | {'steps':>5} | {'mean ms/step':>12} | {'median ms/step':>14} | {'max ms/step':>11}"
    print(hdr)
    print("-" * len(hdr))
    for label, ts in (("pre-loaded", pre), ("real loader", real)):
        st = stats(ts)
        print(f"{label:>12} | {len(ts):>5} | {st[0]:>12.1f} | {st[1]:>14.1f} | {st[2]:>11.1f}")
    print("per-round ratios: " + " ".join(f"{r:.2f}" for r in ratios))
    ratio = float(np.median(ratios))
    print(f"ratio real loader / pre-loaded (median over rounds): {ratio:.3f}x (target <= 1.05x)")
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", choices=("sim", "nuscenes", "both"), default="both")
    ap.add_argument("--config", default=str(REPO / "configs" / "tiny.yaml"))
    ap.add_argument("--data", default=str(REPO / "out" / "bench" / "sim"), help="sim dataset (generated if missing)")
    ap.add_argument("--nuscenes", default=str(REPO / "out" / "bench" / "nuscenes1600"),
                    help="nuScenes folder (written if missing)")
    ap.add_argument("--scenes", type=int, default=3, help="scenes to generate when --data is missing")
    ap.add_argument("--nuscenes-scenes", type=int, default=2, help="scenes to write when --nuscenes is missing")
    ap.add_argument("--nuscenes-frames", type=int, default=8, help="keyframes a scene when --nuscenes is missing")
    ap.add_argument("--tasks", default="det2d,lanes,drivable", help="heads trained on every format (comma-separated)")
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds (pre-loaded block, real-loader block)")
    ap.add_argument("--block", type=int, default=8, help="steps of each input a round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps of each input before the rounds")
    ap.add_argument("--cache-mb", type=int, default=1024,
                    help="LabelledFrames' decoded-frame cache per process (1024 as in training; 0: every frame "
                         "decoded every time, as on a dataset larger than the cache)")
    add_override_option(ap, "config override")
    args = ap.parse_args()

    total = 2 * (args.warmup + args.rounds * args.block)
    tasks = json.dumps([{"name": t} for t in args.tasks.split(",") if t])
    ratios = {}
    for fmt in (("sim", "nuscenes") if args.format == "both" else (args.format,)):
        root = ensure_sim(Path(args.data), args.scenes, 0) if fmt == "sim" else \
            ensure_nuscenes(Path(args.nuscenes), args.nuscenes_scenes, args.nuscenes_frames, 0)
        cfg = load_experiment(args.config, [f"data.root={root}", f"steps={total}", f"model.tasks={tasks}", *args.set])
        ratios[fmt] = measure(cfg, fmt, args.rounds, args.block, args.warmup, args.cache_mb)
    if len(ratios) > 1:
        print("\nreal loader / pre-loaded: " + ", ".join(f"{k} {v:.3f}x" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
