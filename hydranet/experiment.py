"""The experiment config: what `hydranet train` reads (configs/*.yaml), as frozen dataclasses,
and the checks across its sections (docs: configs/tiny.yaml is the annotated example).

    cfg = load_experiment("configs/tiny.yaml", ["optim.lr=1e-3"])

`data.image_size` is the one place the model's input size lives: the model is built on the rig
resized to it (`hydranet.checkpoint.model_meta`), so the BEV view transform reads it from there,
and `input_divisor` says what it must be a multiple of.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hydranet.config import ConfigError, apply_overrides, from_dict, load_config
from hydranet.models import ModelConfig


@dataclass(frozen=True)
class DataConfig:
    root: str = "out/demo/sim"  # a generated dataset (docs/dataset_format.md)
    val_root: str | None = None  # held-out dataset for metrics at the end of training
    cameras: tuple[str, ...] | None = None  # None = every camera of the rig
    image_size: tuple[int, int] = (96, 160)  # (H, W) the network sees; multiples of input_divisor()
    on_bad_frame: Literal["raise", "skip"] = "raise"


@dataclass(frozen=True)
class AugmentConfig:
    photometric: bool = True
    geometric: bool = True
    scale_range: tuple[float, float] = (1.0, 1.25)  # random zoom, then crop back to image_size
    geometric_p: float = 0.5
    bev_rotation_deg: float = 0.0  # BEV models: random yaw of the ego frame in [-a, a] (hydranet/bev_augment.py)


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 2e-3
    weight_decay: float = 1e-4
    schedule: Literal["cosine", "onecycle", "constant"] = "cosine"
    warmup_steps: int = 20
    grad_clip: float = 10.0  # max global gradient norm; 0 = off


@dataclass(frozen=True)
class ExperimentConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    steps: int = 200
    batch_size: int = 2  # frames per process (each with every selected camera)
    checkpoint_every: int = 50
    log_every: int = 10
    amp: bool = True  # bf16 autocast on CUDA (no effect on CPU)
    seed: int = 0
    num_workers: int = 0
    device: str = "auto"  # auto | cpu | cuda


def input_divisor(neck_levels: int) -> int:
    """What every image side must be a multiple of: the stride of the coarsest neck level."""
    return 32 * 2 ** max(neck_levels - 3, 0)


def check_experiment(cfg: ExperimentConfig) -> None:
    """Checks across sections; ConfigError naming the key."""
    H, W = cfg.data.image_size
    div = input_divisor(cfg.model.neck_levels)
    if H % div or W % div or H <= 0 or W <= 0:
        raise ConfigError(f"config key 'data.image_size': {[H, W]} must be positive multiples of {div} "
                          f"(the stride of the coarsest of model.neck_levels={cfg.model.neck_levels} levels)")
    if cfg.data.cameras is not None and len(cfg.data.cameras) == 0:
        raise ConfigError("config key 'data.cameras': an empty list selects no camera; leave it null for every "
                          "camera of the rig or name the cameras")
    if cfg.device not in ("auto", "cpu", "cuda") and not cfg.device.startswith("cuda:"):
        raise ConfigError(f"config key 'device': {cfg.device!r} is not supported; choose auto, cpu or cuda")
    for key in ("steps", "batch_size", "checkpoint_every", "log_every"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"config key '{key}' must be >= 1, got {getattr(cfg, key)}")
    if cfg.num_workers < 0:
        raise ConfigError(f"config key 'num_workers' must be >= 0, got {cfg.num_workers}")


def load_experiment(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """A YAML experiment file (None: the defaults) with `a.b=v` overrides, checked."""
    cfg = load_config(ExperimentConfig, path, overrides)
    check_experiment(cfg)
    return cfg


def experiment_from_json(text: str, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """The experiment config stored as JSON (checkpoints, ONNX metadata), with overrides, checked."""
    data: dict[str, Any] = apply_overrides(json.loads(text), list(overrides))
    data.get("model", {}).get("bev", {}).pop("image_size", None)  # written before data.image_size was its one source
    cfg = from_dict(ExperimentConfig, data)
    check_experiment(cfg)
    return cfg
