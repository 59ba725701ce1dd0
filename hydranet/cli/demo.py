"""The demo `make demo` runs, end to end on the built-in sim:

generate a dataset and its preview, train the one HydraNet (configs/full.yaml: all six cameras
through one shared trunk; the six camera heads on every camera, the view transform and a 3-frame
video queue into the bird's-eye view, det3d with velocity and bevmap on the fused grid), evaluate it
on held-out scenes against trivial baselines (the nuScenes metrics for det3d), draw the cameras and
the BEV next to ground truth, export one ONNX graph with its video state and parity check, quantize
it to INT8, measure the per-head drop and print the latency table (torch eager, ONNX Runtime fp32
and int8)."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from hydranet.config import SHIPPED_CONFIGS
from hydranet.data import SimDataset
from hydranet.evaluate import evaluate_checkpoint, format_table, viz_checkpoint
from hydranet.experiment import load_experiment
from hydranet.curriculum import train_two_stage
from hydranet.viz import sample_preview, write_png
from sim.config import SimConfig
from sim.generate import generate_dataset

HYDRANET = SHIPPED_CONFIGS / "full.yaml"  # package data: works from a wheel


def _stage(name: str, t0: float) -> float:
    now = time.perf_counter()
    print(f"[demo] {name} took {now - t0:.1f} s")
    return now


def demo_data(out: Path, scenes: int = 16, val_scenes: int = 4, seed: int = 0) -> tuple[Path, Path]:
    """The demo's sim dataset and its held-out scenes (other seeds) under `out`, and the preview."""
    data, val = out / "sim", out / "sim_val"
    for d in (data, val):
        if d.exists():
            shutil.rmtree(d)
    sim_cfg = SimConfig(frames_per_scene=6, image_width=320, image_height=192, frame_rate_hz=2.0)
    generate_dataset(data, sim_cfg, scenes, seed)
    generate_dataset(val, sim_cfg, val_scenes, seed + 1000, progress=False)  # held out: other seeds
    ds = SimDataset(data)
    print(f"generated {len(ds)} frames x {len(ds.rig)} cameras (+ {len(SimDataset(val))} held-out frames) -> {data}")
    write_png(out / "preview.png", sample_preview(ds[3], ds.meta))
    print(f"wrote {out / 'preview.png'}")
    return data, val


TRUNK_STEPS = 400  # the trunk stage (hydranet.curriculum): the camera heads on 2 cameras, single frames


def train_eval(out: Path, data: Path, val: Path, steps: int | None = None, train_seed: int = 0,
               progress: bool = True, trunk_steps: int = TRUNK_STEPS) -> dict:
    """Train the one HydraNet (configs/full.yaml: six cameras, every camera head and the fused BEV heads on
    one trunk, a 3-frame video queue; its trunk first trained `trunk_steps` steps with the camera heads,
    `hydranet.curriculum`) into out/run with training seed `train_seed`, evaluate it on `val`
    (out/metrics.json; out/predictions: det2d COCO JSON, det3d nuScenes submission) and print the table; returns the results."""
    run = out / "run"
    if run.exists():
        shutil.rmtree(run)
    t0 = time.perf_counter()
    cfg = load_experiment(HYDRANET, [f"data.root={data}", f"data.val_root={val}", f"seed={train_seed}"]
                          + ([f"steps={steps}", f"checkpoint_every={steps}"] if steps else []))
    train_two_stage(cfg, run, trunk_steps, progress=progress)
    t0 = _stage(f"train ({trunk_steps} trunk steps of the camera heads on 2 cameras, then {cfg.steps} steps of "
                "configs/full.yaml: 8 heads on one trunk, 6 cameras, video queue of 3)", t0)
    results = evaluate_checkpoint(run, val, out / "metrics.json", out / "predictions", progress=False)
    print(format_table(results))
    _stage("evaluate", t0)
    return results


def run_demo(out: Path, scenes: int = 16, val_scenes: int = 4, seed: int = 0, steps: int | None = None,
             train_seed: int = 0) -> dict:
    """Many short scenes (6 frames each, 2 Hz like nuScenes keyframes) rather than few long ones: frames of a
    scene are alike. `seed`: the data's (sim world) seed; `train_seed`: the training seed (`hydranet demo
    --seed`). `steps`: training steps (default: the config's)."""
    from deploy.bench import run_bench
    from deploy.export import export_checkpoint
    from deploy.onnx_eval import evaluate_onnx, format_drop, primary_drop
    from deploy.quantize import QuantizeConfig, quantize_model

    out.mkdir(parents=True, exist_ok=True)
    t_start = t0 = time.perf_counter()
    run, deploy = out / "run", out / "deploy"
    for d in (deploy, out / "bev"):  # out/bev: the BEV model of earlier demos (one HydraNet now)
        if d.exists():
            shutil.rmtree(d)
    data, val = demo_data(out, scenes, val_scenes, seed)
    t0 = _stage("generate", t0)

    results = train_eval(out, data, val, steps, train_seed)
    t0 = time.perf_counter()
    print(f"wrote {out / 'metrics.json'}, {out / 'predictions' / 'nuscenes_results.json'} (nuScenes submission format) and "
          f"{viz_checkpoint(run, val, out / 'predictions.png', frame=5)}")
    t0 = _stage("picture", t0)

    deploy.mkdir()
    fp32, int8 = deploy / "model.onnx", deploy / "model.int8.onnx"
    export_checkpoint(run, fp32, val)  # one graph: every head and the video state, parity checked
    quantize_model(fp32, data, int8, QuantizeConfig(calibration_frames=16))
    drop = primary_drop(results, evaluate_onnx(int8, val, deploy / "metrics.int8.json", progress=False))
    print(format_drop(drop, "checkpoint", "ORT int8"))
    t0 = _stage("export, parity, quantize, int8 eval", t0)

    run_bench(run, deploy / "bench", val, runs=20, warmup=3, int8_model=int8)
    _stage("latency", t0)
    print(f"demo done in {time.perf_counter() - t_start:.1f} s")
    return results
