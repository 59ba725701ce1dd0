"""Shared fixtures of the engine tests: a tiny fleet (3 clips x 3 frames, 96x64, nuscenes6) and a
2-step configs/engine_tiny.yaml model exported to ONNX (camera heads + det3d + video queue)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_fleet(out: Path, clips: int = 3, frames: int = 3, seed: int = 1, extra: tuple[str, ...] = ()) -> Path:
    from hydranet.cli import main

    assert main(["engine", "fleet", "--out", str(out), "--clips", str(clips), "--seed", str(seed), "--quiet",
                 "--set", f"sim.frames_per_scene={frames}", "--set", "sim.image_width=96", "--set", "sim.image_height=64",
                 *extra]) == 0
    return out


def train_tiny(data: Path, run: Path, seed: int = 0) -> Path:
    """A 2-step configs/engine_tiny.yaml production run on the fleet or dataset `data`."""
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    train(load_experiment(REPO / "configs" / "engine_tiny.yaml",
                          [f"data.root={data}", "steps=2", "checkpoint_every=2", "batch_size=1", "optim.warmup_steps=1",
                           "device=cpu", f"seed={seed}"]), run, progress=False)
    return run


def make_model(root: Path, data: Path, name: str = "model.onnx", seed: int = 0) -> Path:
    from deploy.export import export_checkpoint

    run = train_tiny(data, root / f"run_{Path(name).stem}", seed)
    export_checkpoint(run, root / name, data, frames=2, verbose=False)
    return root / name
