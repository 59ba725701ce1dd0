"""The demo `make demo` runs, end to end on the built-in sim:

generate a dataset and its preview, train the tiny config (configs/tiny.yaml: the camera heads),
evaluate on held-out scenes against trivial baselines, draw predictions next to ground truth,
export one ONNX graph with its parity check, quantize it to INT8, measure the per-head drop and
print the latency table (torch eager, ONNX Runtime fp32 and int8); then fuse all six cameras into
the bird's-eye view (configs/bev.yaml: view transform, 3-frame video queue, det3d with velocity,
bevmap), evaluate it with the nuScenes metrics, draw the BEV and export it with its video state."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from hydranet.config import SHIPPED_CONFIGS
from hydranet.data import SimDataset
from hydranet.evaluate import evaluate_checkpoint, format_table, viz_checkpoint
from hydranet.experiment import load_experiment
from hydranet.train import train
from hydranet.viz import sample_preview, write_png
from sim.config import SimConfig
from sim.generate import generate_dataset

TINY, BEV = SHIPPED_CONFIGS / "tiny.yaml", SHIPPED_CONFIGS / "bev.yaml"  # package data: works from a wheel


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


def train_eval_camera(out: Path, data: Path, val: Path, steps: int | None = 600, train_seed: int = 0,
                      progress: bool = True) -> dict:
    """Train configs/tiny.yaml (the camera heads) into out/run with training seed `train_seed`, evaluate
    it on `val` (out/metrics.json, out/predictions) and print the table; returns the results."""
    run = out / "run"
    if run.exists():
        shutil.rmtree(run)
    t0 = time.perf_counter()
    cfg = load_experiment(TINY, [f"data.root={data}", f"data.val_root={val}", f"seed={train_seed}"]
                          + ([f"steps={steps}"] if steps else []))
    train(cfg, run, progress=progress)
    t0 = _stage(f"train ({cfg.steps} steps of configs/tiny.yaml)", t0)
    results = evaluate_checkpoint(run, val, out / "metrics.json", out / "predictions", progress=False)
    print(format_table(results))
    _stage("evaluate", t0)
    return results


def train_eval_bev(out: Path, data: Path, val: Path, bev_steps: int | None = 200, train_seed: int = 0,
                   progress: bool = True) -> dict:
    """Train configs/bev.yaml (6 cameras, video queue of 3, det3d with velocity, bevmap) into out/run with
    training seed `train_seed`, evaluate it with the nuScenes metrics (out/metrics.json) and print the
    table; returns the results."""
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    cfg = load_experiment(BEV, [f"data.root={data}", f"data.val_root={val}", "data.image_size=[96,160]",
                                f"seed={train_seed}"]
                          + ([f"steps={bev_steps}", f"checkpoint_every={bev_steps}"] if bev_steps else []))
    train(cfg, out / "run", progress=progress)
    t0 = _stage(f"BEV train ({cfg.steps} steps of configs/bev.yaml, 6 cameras, video queue of 3)", t0)
    results = evaluate_checkpoint(out / "run", val, out / "metrics.json", progress=False)
    print(format_table(results))
    return results


def run_demo(out: Path, scenes: int = 16, val_scenes: int = 4, seed: int = 0, steps: int | None = 600,
             bev_steps: int | None = 200) -> dict:
    """Many short scenes (6 frames each, 2 Hz like nuScenes keyframes) rather than few long ones:
    frames of a scene are alike. bev_steps 0 skips the BEV stage."""
    from deploy.bench import run_bench
    from deploy.export import export_checkpoint
    from deploy.onnx_eval import evaluate_onnx, format_drop, primary_drop
    from deploy.quantize import QuantizeConfig, quantize_model

    out.mkdir(parents=True, exist_ok=True)
    t_start = t0 = time.perf_counter()
    run, deploy, bev = out / "run", out / "deploy", out / "bev"
    for d in (deploy, bev):
        if d.exists():
            shutil.rmtree(d)
    data, val = demo_data(out, scenes, val_scenes, seed)
    t0 = _stage("generate", t0)

    results = train_eval_camera(out, data, val, steps)
    t0 = time.perf_counter()
    print(f"wrote {out / 'metrics.json'} and {viz_checkpoint(run, val, out / 'predictions.png')}")
    t0 = _stage("picture", t0)

    deploy.mkdir()
    fp32, int8 = deploy / "model.onnx", deploy / "model.int8.onnx"
    export_checkpoint(run, fp32, val)
    quantize_model(fp32, data, int8, QuantizeConfig(calibration_frames=16))
    drop = primary_drop(results, evaluate_onnx(int8, val, deploy / "metrics.int8.json", progress=False))
    print(format_drop(drop, "checkpoint", "ORT int8"))
    t0 = _stage("export, parity, quantize, int8 eval", t0)

    run_bench(run, deploy / "bench", val, runs=20, warmup=3, int8_model=int8)
    t0 = _stage("latency", t0)

    if bev_steps != 0:
        train_eval_bev(bev, data, val, bev_steps)
        t0 = time.perf_counter()
        print(f"wrote {bev / 'metrics.json'}, {bev / 'nuscenes_results.json'} (nuScenes submission format) and "
              f"{viz_checkpoint(bev / 'run', val, bev / 'predictions.png', frame=5)}")
        export_checkpoint(bev / "run", bev / "model.onnx", val)
        _stage("BEV evaluate, picture, export with parity", t0)
    print(f"demo done in {time.perf_counter() - t_start:.1f} s")
    return results
