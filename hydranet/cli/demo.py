"""The demo `make demo` runs, end to end on the built-in sim:

generate a dataset and its preview, train the one HydraNet (configs/full.yaml: all six cameras
through one shared trunk; the six camera heads on every camera, the view transform and a 3-frame
video queue into the bird's-eye view, det3d with velocity and bevmap on the fused grid), evaluate it
on held-out scenes against trivial baselines (the nuScenes metrics for det3d), draw the cameras and
the BEV next to ground truth, export one ONNX graph with its video state and parity check, quantize
it to INT8, measure the per-head drop and print the latency table (torch eager, ONNX Runtime fp32
and int8)."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from hydranet.curriculum import TRUNK_STEPS, recipe_experiment, train_two_stage
from hydranet.data import SimDataset
from hydranet.evaluate import evaluate_checkpoint, format_table, viz_checkpoint
from hydranet.viz import sample_preview, write_png
from sim.generate import generate_demo_split


def _stage(name: str, t0: float) -> float:
    now = time.perf_counter()
    print(f"[demo] {name} took {now - t0:.1f} s")
    return now


def demo_data(out: Path, scenes: int = 16, val_scenes: int = 4, seed: int = 0) -> tuple[Path, Path]:
    """The demo's sim dataset (DEMO_TRAIN_SIM) and its held-out scenes (DEMO_SIM) under `out`
    (`sim.generate.generate_demo_split`, one render process per CPU up to 2: the same bytes, about 1.4x faster on 2 cores),
    and the preview."""
    data, val = generate_demo_split(out, scenes, val_scenes, seed, workers=min(2, os.cpu_count() or 1))
    ds = SimDataset(data)
    print(f"generated {len(ds)} frames x {len(ds.rig)} cameras (+ {len(SimDataset(val))} held-out frames) -> {data}")
    write_png(out / "preview.png", sample_preview(ds[3], ds.meta))
    print(f"wrote {out / 'preview.png'}")
    return data, val


def train_eval(out: Path, data: Path, val: Path, steps: int | None = None, train_seed: int = 0,
               progress: bool = True, trunk_steps: int = TRUNK_STEPS) -> dict:
    """Train the one HydraNet (`hydranet.curriculum.recipe_experiment`: configs/full.yaml, its trunk first trained
    `trunk_steps` steps with the camera heads) into out/run with training seed `train_seed`, evaluate it on `val`
    (out/metrics.json; out/predictions: det2d COCO JSON, det3d nuScenes submission) and print the table; returns the results."""
    run = out / "run"
    if run.exists():
        shutil.rmtree(run)
    t0 = time.perf_counter()
    cfg = recipe_experiment(data, val, train_seed, steps)
    train_two_stage(cfg, run, trunk_steps, progress=progress)
    t0 = _stage(f"train ({trunk_steps} trunk steps of the camera heads on 2 cameras, then {cfg.steps} steps of "
                "configs/full.yaml: 8 heads on one trunk, 6 cameras, video queue of 3)", t0)
    results = evaluate_checkpoint(run, val, out / "metrics.json", out / "predictions", progress=False)
    print(format_table(results))
    _stage("evaluate", t0)
    return results


def run_demo(out: Path, scenes: int = 16, val_scenes: int = 4, seed: int = 0, steps: int | None = None,
             train_seed: int = 0) -> dict:
    """`seed`: the data's (sim world) seed (DEMO_SIM: many short scenes); `train_seed`: the training seed (`hydranet demo
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


# -- the demo's engine round (after the HydraNet is trained and exported) -----------------------------------
# one round of the loop with the demo's model as production, on a small fleet rendered at the demo's image
# size: fleet (6 clips x 4 frames, six cameras) -> shadow mode with the exported model -> the trigger table ->
# mine 8 frames (hybrid) and their contact sheet -> oracle labels -> retrain 20 steps on the demo set plus
# the labels -> export -> gate on the frozen suites (8 slices) -> promote or reject
# (20 retrain steps: the round shows the loop, not a better model; each step is ~1.2 s of the demo's 10 minutes;
# the gate's intervals from 200 resamples, not 1000: the bootstrap of 1000 was ~10 s of the round)
DEMO_SETS = ("loop.fleet_clips=6", "loop.budget=8", "loop.fleet_set=[sim.image_width=320,sim.image_height=192]",
             "retrain.steps=20", "suites.clips=1", "suites.frames=2", "gate.resamples=200")


def engine_round(out: Path, production: Path) -> dict:
    """Run the round into out (a fresh folder); print the trigger table, the mined selection and the gate table."""
    from data_engine.config import EngineConfig
    from data_engine.gate import format_gate
    from data_engine.loop import Loop
    from hydranet.config import load_config

    t0 = time.perf_counter()
    cfg = load_config(EngineConfig, "engine", list(DEMO_SETS))
    [summary] = Loop(out, cfg, production, progress=False, log=lambda line: None).run(1)
    rdir = out / "rounds" / "r000"
    report = (rdir / "report" / "report.md").read_text().split("\n## ")
    print("\n\n".join("## " + section.strip() for section in report[1:3]))  # the mined frames and the trigger table
    gate = json.loads((rdir / "gate" / "gate.json").read_text())
    # the gate: every head's aggregate over the suites and every (slice, head) that failed
    print(format_gate({**gate, "rows": [r for r in gate["rows"] if r["slice"] == "aggregate" or r["verdict"] == "fail"]}))
    print(summary["line"])
    print(f"wrote {rdir / 'report' / 'contact_sheet.png'}, {rdir / 'gate' / 'gate.md'} and the catalog {out / 'catalog.sqlite'}")
    print(f"[demo] engine round took {time.perf_counter() - t0:.1f} s")
    return summary
