"""benchmarks/video_mave.py: the velocity errors come from the frames' det3d states as `evaluate` computes them, and
the paired bootstrap of two identical arms gives a ratio of 1 with an interval holding it (undecided). Tiny: a
1-step BEV run with a 2-frame video queue on a 1-scene, 3-frame sim at 96x64."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.video_mave import frame_states, measure, report, velocity_errors

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    from hydranet.experiment import load_experiment
    from hydranet.train import train
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    root = tmp_path_factory.mktemp("video_mave")
    data = generate_dataset(root / "sim", SimConfig(image_width=96, image_height=64, frames_per_scene=3), scenes=1, seed=0,
                            progress=False)
    cfg = load_experiment(REPO / "configs" / "bev.yaml", [
        f"data.root={data}", "num_workers=0", "batch_size=1", "steps=1", "checkpoint_every=1", "optim.warmup_steps=1",
        "device=cpu", "data.image_size=[64,96]", "model.neck_width=16", "model.bev.channels=16",
        "model.bev.heights=[0.0,1.0]", "model.bev.video_frames=2", "model.bev.video_fuse_depth=1",
        "model.bev.encoder_depth=1", "model.tasks=[{name: det3d, options: {width: 16}}]"])
    train(cfg, root / "run", progress=False)
    return root / "run", data


def test_velocity_errors_are_the_evaluations_and_identical_arms_tie(run):
    from hydranet.evaluate import evaluate_checkpoint

    states = frame_states(*run)
    assert len(states) == 3
    mave, car = velocity_errors(list(states.values()))
    printed = evaluate_checkpoint(run[0], run[1], progress=False)["model"]["det3d"]["nuscenes/mAVE"]
    assert math.isclose(mave, printed, rel_tol=1e-9)
    res = measure([states, states], [states, states], resamples=50, seed=0)
    assert res["frames"] == 3 and res["stats"]["video"]["pooled"] == res["stats"]["single"]["pooled"]
    _, figures = report(res, 0.95)
    f = figures["mAVE (nuScenes, m/s)"]
    assert f["ratio"] == pytest.approx(1.0) and not f["verdict"].startswith(("met", "missed"))
