"""Two-stage training of one HydraNet: the trunk first, on the camera heads' cheap steps, then every head.

A step of the whole HydraNet (six cameras, a 3-frame clip, the view transform, the video queue, eight
heads) costs about three times a step of its camera heads on two cameras of single frames, and the
camera heads' dense supervision (depth, drivable area, lanes, normals) is what makes the trunk's
features worth lifting into the bird's-eye view (BEVDepth, Li et al., AAAI 2023: BEV detection learns
far faster from image features trained with depth). So stage 1 trains the backbone, the neck and the
camera heads on `cameras` (single frames, no fusion); stage 2 builds the full model from the config and
starts it from stage 1's checkpoint (`init_from`, the partial load: the fusion and the BEV heads are
the missing keys), and trains all heads together on every camera. The result is one network, one
checkpoint (the run folder); stage 1's run stays inside it (RUN/trunk).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from hydranet.config import SHIPPED_CONFIGS
from hydranet.experiment import ExperimentConfig
from hydranet.models.hydranet import HydraNet
from hydranet.tasks import BEV_TASKS

TRUNK_CAMERAS = ("CAM_FRONT", "CAM_BACK")
TRUNK_DIR = "trunk"  # stage 1's run, inside the run folder
RECIPE = SHIPPED_CONFIGS / "full.yaml"  # the one HydraNet `make demo` trains (package data: works from a wheel)
TRUNK_STEPS = 800  # its trunk stage: the camera heads on TRUNK_CAMERAS, single frames
# The trunk stage's step: the config's batch at twice its learning rate. Camera-only steps on single frames
# tolerate the higher rate that collapses the fused BEV model (docs/benchmarks.md, "Round 3": 800 steps of batch 2
# at 0.006 against 400 of batch 4 at 0.003, the same images: det2d 0.030 -> 0.060 after the trunk stage)
TRUNK_LR_SCALE = 2.0


def recipe_experiment(data: str | Path, val: str | Path, seed: int = 0, steps: int | None = None,
                      config: str | Path = RECIPE, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """The demo's experiment on `data` with held-out `val`, training seed `seed`, `steps` steps (None: the
    config's), then `overrides` (KEY=VALUE, as `--set`); train it with `train_two_stage(cfg, run, TRUNK_STEPS)`."""
    from hydranet.experiment import load_experiment

    return load_experiment(config, [f"data.root={data}", f"data.val_root={val}", f"seed={seed}"]
                           + ([f"steps={steps}", f"checkpoint_every={steps}"] if steps else []) + list(overrides))


def trunk_stage(cfg: ExperimentConfig, steps: int, cameras: tuple[str, ...] | None = TRUNK_CAMERAS,
                batch_size: int | None = None, lr_scale: float = TRUNK_LR_SCALE) -> ExperimentConfig:
    """Stage 1 of `cfg`: its camera heads only (no fusion, single frames) on `cameras` (None: the config's),
    `steps` steps, batch `batch_size` (default: the config's), learning rate the config's times `lr_scale`.
    Raises when `cfg` has no camera head."""
    tasks = tuple(t for t in cfg.model.tasks if t.name not in BEV_TASKS)
    if not tasks:
        raise ValueError("a trunk stage trains the camera heads, and model.tasks has none; train without it")
    model = dataclasses.replace(cfg.model, tasks=tasks)
    data = dataclasses.replace(cfg.data, cameras=tuple(cameras) if cameras else cfg.data.cameras)
    optim = dataclasses.replace(cfg.optim, lr=cfg.optim.lr * lr_scale, lr_mult={})  # lr_mult: stage 2's fine-tune
    return dataclasses.replace(cfg, model=model, data=data, optim=optim, steps=steps,
                               batch_size=batch_size or cfg.batch_size, checkpoint_every=steps, init_from=None)


def train_two_stage(cfg: ExperimentConfig, out: str | Path, trunk_steps: int, progress: bool = True,
                    cameras: tuple[str, ...] | None = TRUNK_CAMERAS, overwrite: bool = False,
                    trunk_batch: int | None = None, **train_args) -> HydraNet:
    """Stage 1 (`trunk_stage`, `trunk_steps` steps on `cameras` at batch `trunk_batch`, default the config's)
    into out/trunk, then `cfg` from it into the run folder `out`; returns the trained model. `trunk_steps` 0
    trains `cfg` alone. `train_args` go to the second stage's `hydranet.train.train` (e.g. on_step)."""
    from hydranet.train import train

    out = Path(out)
    if trunk_steps <= 0:
        return train(cfg, out, progress=progress, overwrite=overwrite, **train_args)
    if cfg.init_from is not None:
        raise ValueError(f"config key 'init_from' ({cfg.init_from}) and a trunk stage both start the run; give one")
    train(trunk_stage(cfg, trunk_steps, cameras, trunk_batch), out / TRUNK_DIR, progress=progress, overwrite=overwrite)
    return train(cfg, out, progress=progress, overwrite=overwrite, init_from=out / TRUNK_DIR, **train_args)
