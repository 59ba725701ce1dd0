"""Video module vs single frame: mAVE and NDS of det3d after equal training steps on the same data.

    python benchmarks/bev_video.py [--steps 2000] [--scenes 24] [--val-scenes 6] [--frame-rate 2] [--method lut]

Generates one sim training set and one held-out set (other seed) at `--frame-rate` Hz (2 =
nuScenes keyframes: a car at 8 m/s moves 4 m, two 2 m cells, between frames; at 10 Hz it moves
a fifth of a cell and the motion is below what 64x96 images resolve), trains configs/bev.yaml twice
at tiny size, identical but for model.bev.video_frames (3 = current + 2 past BEV maps warped by
the ego motion, 1 = single frame), and evaluates both with `hydranet eval` (streaming the queue
frame by frame; nuScenes metrics from hydranet.metrics). Prints a table and the mAVE / NDS ratios.
"""
from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import torch  # noqa: F401  (torch/torchvision before the sim's EGL context)
import torchvision  # noqa: F401

from hydranet.evaluate import evaluate_checkpoint
from hydranet.train import load_experiment, train
from sim.config import SimConfig
from sim.generate import generate_dataset

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--scenes", type=int, default=24)
    ap.add_argument("--val-scenes", type=int, default=6)
    ap.add_argument("--frame-rate", type=float, default=2.0, help="sim frames per second")
    ap.add_argument("--method", default="lut", choices=["lut", "lss"], help="view transform")
    ap.add_argument("--out", type=Path, default=Path("out/bench_bev_video"))
    args = ap.parse_args()
    sim = SimConfig(image_width=96, image_height=64, frames_per_scene=8, bev_range=32.0, frame_rate_hz=args.frame_rate)
    train_root, val_root = args.out / "sim", args.out / "sim_val"
    if not (train_root / "dataset.json").is_file():
        shutil.rmtree(train_root, ignore_errors=True)
        generate_dataset(train_root, sim, args.scenes, seed=0, progress=False)
    if not (val_root / "dataset.json").is_file():
        shutil.rmtree(val_root, ignore_errors=True)
        generate_dataset(val_root, sim, args.val_scenes, seed=1000, progress=False)
    common = [f"data.root={train_root}", "data.cameras=[CAM_FRONT,CAM_BACK,CAM_FRONT_LEFT,CAM_FRONT_RIGHT]",
              "data.image_size=[64,96]", f"steps={args.steps}", f"checkpoint_every={args.steps}", "batch_size=2",
              "num_workers=0", "optim.warmup_steps=5", "augment.photometric=false", "model.neck_width=16",
              "model.bev.downsample=4", "model.bev.channels=32", "model.bev.heights=[0.0,1.0]", f"model.bev.method={args.method}",
              "model.tasks=[{name: det3d, options: {width: 32}}, {name: bevmap, weight: 0.5, options: {width: 16}}]"]
    rows = {}
    for name, frames in (("video (video_frames 3)", 3), ("single frame (video_frames 1)", 1)):
        run = args.out / f"run_t{frames}"
        shutil.rmtree(run, ignore_errors=True)
        cfg = load_experiment(REPO / "configs" / "bev.yaml", common + [f"model.bev.video_frames={frames}"])
        t0 = time.perf_counter()
        train(cfg, run, progress=False)
        t_train = time.perf_counter() - t0
        res = evaluate_checkpoint(run, val_root, run / "metrics.json", progress=False)
        d = res["model"]["det3d"]
        rows[name] = (d["nuscenes/mAVE"], d["nuscenes/NDS"], d["nuscenes/mAP"], d["nuscenes/mATE"], t_train)
    print(f"{args.method} view transform, {args.steps} steps x batch 2 on {args.scenes} scenes at {args.frame_rate:g} Hz, "
          f"eval on {args.val_scenes} held-out scenes ({8 * args.val_scenes} frames)")
    print(f"{'model':32s} {'mAVE':>7s} {'NDS':>7s} {'mAP':>7s} {'mATE':>7s} {'train s':>8s}")
    for name, (ave, nds, mAP, ate, t) in rows.items():
        print(f"{name:32s} {ave:7.4f} {nds:7.4f} {mAP:7.4f} {ate:7.4f} {t:8.1f}")
    (v, s) = list(rows.values())
    print(f"mAVE video / single = {v[0] / s[0]:.3f} (< 1: the video module lowers the velocity error)")
    print(f"NDS  video / single = {v[1] / max(s[1], 1e-9):.3f}")


if __name__ == "__main__":
    main()
