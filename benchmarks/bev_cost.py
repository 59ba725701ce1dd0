"""Cost of BEV fusion and BEV heads on top of the camera heads: latency of the full model (camera
heads + view transform + video queue + det3d + bevmap) against camera heads only, with either
view transform (lut: projection tables; lss: depth distributions, 49 bins).

    python benchmarks/bev_cost.py [--iters 20] [--size 96 160]

nuscenes6 rig (6 cameras) at the given size, tiny backbone, eval mode, forward "tensor" (what
deploy exports), batch 1, median of `iters` timed runs after warm-up, torch threads as set.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from hydranet.models import ModelConfig, TaskConfig, build_model
from hydranet.models.config import BevConfig
from hydranet.rig import load_rig

CAMERA_TASKS = ("det2d", "lanes", "drivable", "depth")


def latency(model, batch, iters: int) -> float:
    with torch.no_grad():
        for _ in range(3):
            model(batch, "tensor")
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            model(batch, "tensor")
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--size", type=int, nargs=2, default=(96, 160), metavar=("H", "W"))
    args = ap.parse_args()
    H, W = args.size
    rig = load_rig("nuscenes6").resized(W, H)
    meta = {"classes": ["car", "truck", "bus", "pedestrian", "cyclist", "traffic_cone", "debris",
                        "construction_vehicle", "traffic_sign", "traffic_light"],
            "semantic_classes": ["sky", "road", "lane_marking", "crosswalk"],
            "bev": {"x_range": [-50, 50], "y_range": [-50, 50], "resolution": 0.5}, "rig": rig.to_dict()}
    bev = BevConfig(downsample=4, heights=(0.0, 0.8, 1.6), channels=32, video_frames=3, video_fuse_depth=3)  # as configs/bev.yaml
    cam = ModelConfig(backbone="tiny", neck_width=64, tasks=tuple(TaskConfig(t) for t in CAMERA_TASKS), bev=bev)
    full = dataclasses.replace(cam, tasks=cam.tasks + (TaskConfig("det3d", options={"width": 32}),
                                                       TaskConfig("bevmap", options={"width": 32})))
    torch.manual_seed(0)
    images = torch.rand(1, len(rig), 3, H, W)
    lss = dataclasses.replace(full, bev=dataclasses.replace(bev, method="lss"))
    rows = []
    for name, cfg in (("camera heads only", cam), ("camera heads + fusion (lut) + BEV heads", full),
                      ("camera heads + fusion (lss) + BEV heads", lss)):
        model = build_model(cfg, meta).eval()
        batch = {"images": images}
        if model.fusion is not None:
            v = model.fusion.video
            batch["prev_bev"] = torch.zeros(1, v.frames - 1, v.channels, *v.grid.shape)
            batch["ego_motion"] = torch.eye(4)[None]
        params = sum(p.numel() for p in model.parameters()) / 1e6
        rows.append((name, latency(model, batch, args.iters), params))
    print(f"nuscenes6, 6 cameras at {H}x{W}, BEV grid 50x50 (2 m cells), video queue 3 (fuse 3 layers), "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'model':40s} {'ms/frame':>9s} {'params M':>9s} {'ratio':>6s}")
    for name, ms, p in rows:
        print(f"{name:40s} {ms:9.1f} {p:9.2f} {ms / rows[0][1]:6.3f}")
    print("ratio = latency / camera heads only")


if __name__ == "__main__":
    main()
