"""Multi-task cost: the shared-backbone claim. Latency and parameters of HydraNet with all six
camera heads (det2d, signs_lights, lanes, drivable, depth, normals) against the det2d-only model
and against the sum of the six single-task models (each its own backbone + neck + one head).

Run by hand, not in CI:

    .venv/bin/python benchmarks/multitask_cost.py [--runs 10] [--warmup 2] [--device cpu]

Latency: one frame of the 6-camera rig (batch (1, 6, 3, H, W)), torch eager fp32, no grad, mode
"tensor" (the raw head outputs, what deploy exports; no decoding), median over --runs timed runs
after --warmup untimed ones. The models are timed interleaved (round r times every model once)
so load from other processes on a shared machine hits all of them alike. The single-task sum is
the sum of the six single-task medians. Rows: backbone x input size (192x320, the sim rig at the
benchmark resolution, and 96x160, configs/tiny.yaml's image_size). Necks: `tiny` uses
configs/tiny.yaml's (width 64, 2 repeats, 3 levels); `regnet_x_400mf` width 128, 3 repeats,
3 levels (configs/regnet.yaml's width and repeats; 5 levels need H, W divisible by 128).

Prints one table; the last lines are the ratios all-heads / sum-of-singles (target <= 0.30x)
and all-heads / det2d-only (target <= 1.3x).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from hydranet.models import ModelConfig, TaskConfig, build_model
from hydranet.tasks import TASKS

HEADS = ("det2d", "signs_lights", "lanes", "drivable", "depth", "normals")
NECKS = {"tiny": dict(neck_width=64, neck_repeats=2, neck_levels=3),
         "regnet_x_400mf": dict(neck_width=128, neck_repeats=3, neck_levels=3)}
SIZES = ((192, 320), (96, 160))
CAMERAS = 6


def sim_meta() -> dict:
    """The generated dataset's meta (class lists, rig) without rendering anything."""
    from sim.config import SimConfig
    from sim.generate import dataset_meta, sim_rig

    cfg = SimConfig(image_width=320, image_height=192)
    return dataset_meta(cfg, sim_rig(cfg), 0)


def params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def time_models(models: dict[str, torch.nn.Module], hw: tuple[int, int], runs: int, warmup: int,
                device: torch.device) -> dict[str, float]:
    """Median seconds per forward of each model on one 6-camera frame, timed interleaved."""
    g = torch.Generator().manual_seed(0)
    batch = {"images": torch.rand(1, CAMERAS, 3, *hw, generator=g).to(device)}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for m in models.values():
        m.eval().to(device)
        for _ in range(warmup):
            m(batch, "tensor")
    sync()
    times: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(runs):
        for k, m in models.items():
            sync()
            t0 = time.perf_counter()
            m(batch, "tensor")
            sync()
            times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def measure(backbone: str, hw: tuple[int, int], meta: dict, runs: int, warmup: int, device: torch.device) -> dict:
    torch.manual_seed(0)
    neck = NECKS[backbone]
    models = {"all": build_model(ModelConfig(backbone=backbone, tasks=tuple(TaskConfig(h) for h in HEADS), **neck), meta)}
    for h in HEADS:
        models[h] = build_model(ModelConfig(backbone=backbone, tasks=(TaskConfig(h),), **neck), meta)
    lat = time_models(models, hw, runs, warmup, device)
    return {"backbone": backbone, "size": f"{hw[0]}x{hw[1]}",
            "all_ms": 1e3 * lat["all"], "det_ms": 1e3 * lat["det2d"],
            "sum_ms": 1e3 * sum(lat[h] for h in HEADS),
            "single_ms": {h: 1e3 * lat[h] for h in HEADS},
            "all_p": params(models["all"]), "det_p": params(models["det2d"]),
            "sum_p": sum(params(models[h]) for h in HEADS),
            "trunk_p": params(models["all"].backbone) + params(models["all"].neck)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="timed forward passes per model (median)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed forward passes per model first")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--backbones", nargs="+", default=["regnet_x_400mf", "tiny"], choices=sorted(NECKS))
    args = ap.parse_args()
    assert set(HEADS) == set(TASKS), "a camera head was added: update HEADS"
    device = torch.device(args.device)
    meta = sim_meta()
    rows = [measure(b, hw, meta, args.runs, args.warmup, device) for b in args.backbones for hw in SIZES]

    print(f"torch {torch.__version__}, {device}, eager fp32, no grad, 1 frame x {CAMERAS} cameras, "
          f"median of {args.runs} runs after {args.warmup} warm-up, threads {torch.get_num_threads()}")
    print("single-task latency (ms): " + "; ".join(
        f"{r['backbone']} {r['size']}: " + ", ".join(f"{h} {v:.1f}" for h, v in r["single_ms"].items()) for r in rows))
    hdr = (f"{'backbone':>14} | {'input':>7} | {'all heads ms':>12} | {'det2d-only ms':>13} | {'sum singles ms':>14} | "
           f"{'all/sum':>7} | {'all/det':>7} | {'all heads params':>16} | {'det2d params':>12} | {'sum params':>10} | "
           f"{'p all/sum':>9} | {'p all/det':>9}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['backbone']:>14} | {r['size']:>7} | {r['all_ms']:>12.1f} | {r['det_ms']:>13.1f} | {r['sum_ms']:>14.1f} | "
              f"{r['all_ms'] / r['sum_ms']:>6.2f}x | {r['all_ms'] / r['det_ms']:>6.2f}x | {r['all_p']:>16,} | "
              f"{r['det_p']:>12,} | {r['sum_p']:>10,} | {r['all_p'] / r['sum_p']:>8.2f}x | {r['all_p'] / r['det_p']:>8.2f}x")
    for r in rows:
        tag = f"{r['backbone']} {r['size']}"
        print(f"ratio latency all-heads / sum-of-singles, {tag}: {r['all_ms'] / r['sum_ms']:.2f}x (target <= 0.30x); "
              f"all-heads / det2d-only: {r['all_ms'] / r['det_ms']:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
