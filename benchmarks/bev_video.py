"""Video module vs single frame: mAVE and NDS of det3d after equal training steps on the same data.

    python benchmarks/bev_video.py [--steps 3000] [--scenes 96] [--val-scenes 6] [--frame-rate 2] [--method lut]

Generates one sim training set and one held-out set (other seed) at `--frame-rate` Hz (2 =
nuScenes keyframes: a car at 8 m/s moves 4 m, two 2 m cells, between frames; at 10 Hz it moves
a fifth of a cell and the motion is below what 64x96 images resolve), trains configs/bev.yaml twice
at tiny size, identical but for model.bev.video_frames (3 = current + 2 past BEV maps warped by
the ego motion, 1 = single frame), and evaluates both with `hydranet eval` (streaming the queue
frame by frame; nuScenes metrics from hydranet.metrics). Prints a table and the mAVE / NDS ratios.

nuScenes mAVE is measured on true positives only (centre within 2 m), so with the few matches
of a CPU-sized model it rests on few boxes. The table adds a diagnostic that does not depend on
detection: the velocity error read at the true centre cells of every true box (the det3d
targets' mask), for all boxes and for moving ones (> 0.5 m/s), next to the error of predicting
zero velocity.
"""
from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import numpy as np

from hydranet.config import add_override_option
from hydranet.evaluate import evaluate_checkpoint
from hydranet.experiment import load_experiment
from hydranet.train import train
from sim.config import SimConfig
from sim.generate import generate_dataset

REPO = Path(__file__).resolve().parents[1]


class CentreVelocityError:
    """`evaluate(on_outputs=...)` probe: |predicted - true| velocity (m/s, L2 over vx, vy) read from
    the det3d vel map (B, 2, X, Y) at the true centre cells (where a class's target heatmap peaks at 1, (B, X, Y))."""

    def __init__(self):
        self.errors: list[np.ndarray] = []
        self.speeds: list[np.ndarray] = []

    def __call__(self, raw: dict, batch: dict) -> None:
        t = batch["targets"]["det3d"]
        mask = (t["heatmap"] == 1).any(1)  # (B, X, Y) the centre cells
        pred = raw["det3d"]["vel"].float().permute(0, 2, 3, 1)[mask.to(raw["det3d"]["vel"].device)].cpu()  # (M, 2)
        true = t["vel"].permute(0, 2, 3, 1)[mask]  # (M, 2)
        self.errors.append((pred - true).norm(dim=1).numpy())
        self.speeds.append(true.norm(dim=1).numpy())

    def summary(self) -> dict[str, float]:
        e, v = np.concatenate(self.errors), np.concatenate(self.speeds)
        moving = v > 0.5
        return {"all": float(e.mean()), "moving": float(e[moving].mean()), "zero_all": float(v.mean()),
                "zero_moving": float(v[moving].mean()), "boxes": int(len(e)), "moving_boxes": int(moving.sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--scenes", type=int, default=96)
    ap.add_argument("--val-scenes", type=int, default=6)
    ap.add_argument("--frame-rate", type=float, default=2.0, help="sim frames per second")
    ap.add_argument("--method", default="lut", choices=["lut", "lss"], help="view transform")
    ap.add_argument("--frames", default="3,1", help="video lengths to train, compared first against last")
    ap.add_argument("--reuse", action="store_true", help="evaluate runs already trained in --out instead of retraining")
    ap.add_argument("--cameras", default="CAM_FRONT,CAM_BACK,CAM_FRONT_LEFT,CAM_FRONT_RIGHT",
                    help="comma-separated camera names, or all (the rig's six)")
    add_override_option(ap, "extra config overrides for both runs")
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
    cameras = "null" if args.cameras == "all" else f"[{args.cameras}]"
    common = [f"data.root={train_root}", f"data.cameras={cameras}",
              "data.image_size=[64,96]", f"steps={args.steps}", f"checkpoint_every={args.steps}", "batch_size=2",
              "num_workers=0", "optim.warmup_steps=5", "augment.photometric=false", "model.neck_width=16",
              "model.bev.downsample=4", "model.bev.channels=32", "model.bev.heights=[0.0,1.0]", f"model.bev.method={args.method}",
              "model.tasks=[{name: det3d, options: {width: 32}}, {name: bevmap, weight: 0.5, options: {width: 16}}]", *args.set]
    rows, box_errors = {}, {}
    for frames in (int(f) for f in args.frames.split(",")):
        name = f"video (video_frames {frames})" if frames > 1 else "single frame (video_frames 1)"
        run = args.out / f"run_t{frames}"
        if args.reuse and (run / "train_seconds.txt").is_file():  # trained by an earlier call: evaluate only
            t_train = float((run / "train_seconds.txt").read_text())
        else:
            shutil.rmtree(run, ignore_errors=True)
            cfg = load_experiment(REPO / "configs" / "bev.yaml", common + [f"model.bev.video_frames={frames}"])
            t0 = time.perf_counter()
            train(cfg, run, progress=False)
            t_train = time.perf_counter() - t0
            (run / "train_seconds.txt").write_text(f"{t_train:.1f}")
        probe = CentreVelocityError()
        res = evaluate_checkpoint(run, val_root, run / "metrics.json", progress=False, on_outputs=probe)
        d, c = res["model"]["det3d"], probe.summary()
        rows[name] = (d["nuscenes/mAVE"], d["nuscenes/NDS"], d["nuscenes/mAP"], d["nuscenes/mATE"], c["all"], c["moving"],
                      t_train)
        box_errors[name] = np.concatenate(probe.errors)
    print(f"{args.method} view transform, cameras {args.cameras}, {args.steps} steps x batch 2 on {args.scenes} scenes at "
          f"{args.frame_rate:g} Hz, eval on {args.val_scenes} held-out scenes ({8 * args.val_scenes} frames)")
    print(f"{'model':32s} {'mAVE':>7s} {'NDS':>7s} {'mAP':>7s} {'mATE':>7s} {'vel@gt':>7s} {'moving':>7s} {'train s':>8s}")
    for name, (ave, nds, mAP, ate, ce, cm, t) in rows.items():
        print(f"{name:32s} {ave:7.4f} {nds:7.4f} {mAP:7.4f} {ate:7.4f} {ce:7.3f} {cm:7.3f} {t:8.1f}")
    print(f"{'zero velocity':32s} {'':7s} {'':7s} {'':7s} {'':7s} {c['zero_all']:7.3f} {c['zero_moving']:7.3f}")
    print(f"vel@gt: m/s error at the true centres of {c['boxes']} true boxes ({c['moving_boxes']} moving > 0.5 m/s)")
    if len(rows) < 2:
        return
    values = list(rows.values())
    v, s = values[0], values[-1]  # the first --frames entry against the last
    print(f"mAVE   video / single = {v[0] / s[0]:.3f} (< 1: the video module lowers the velocity error)")
    e_v, e_s = box_errors[list(rows)[0]], box_errors[list(rows)[-1]]  # the same boxes in the same order
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(e_v), (2000, len(e_v)))  # paired bootstrap over boxes
    lo, hi = np.percentile(e_v[picks].mean(1) / e_s[picks].mean(1), [2.5, 97.5])
    print(f"vel@gt video / single = {v[4] / s[4]:.3f} (paired bootstrap over boxes, 95%: {lo:.3f}..{hi:.3f}), "
          f"moving boxes {v[5] / s[5]:.3f}; video closer on {(e_v < e_s).mean():.0%} of the boxes")
    print(f"NDS    video / single = {v[1] / max(s[1], 1e-9):.3f}")


if __name__ == "__main__":
    main()
