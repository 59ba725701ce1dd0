"""Model configuration: frozen dataclasses mapped from the `model:` section of a YAML config.

    model:
      backbone: tiny              # a key of hydranet.models.backbones.BACKBONES
      weights_path: null          # local state-dict file for the backbone (no downloads)
      neck_width: 64
      neck_repeats: 2
      neck_levels: 3              # 3 = P3-P5, 5 = P3-P7
      balancer: fixed             # fixed | uncertainty | pcgrad
      tasks:
        - {name: det2d, weight: 1.0, options: {out_stride: 4}}
        - {name: depth, weight: 0.5}
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskConfig:
    """One task: its registry name, its loss weight in the balancer, its constructor options."""

    name: str
    weight: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)


ALL_TASKS = ("det2d", "lanes", "drivable", "depth", "normals", "signs_lights")


@dataclass(frozen=True)
class ModelConfig:
    backbone: str = "tiny"
    weights_path: str | None = None
    neck_width: int = 64
    neck_repeats: int = 2
    neck_levels: int = 3
    balancer: str = "fixed"
    tasks: tuple[TaskConfig, ...] = tuple(TaskConfig(n) for n in ALL_TASKS)
