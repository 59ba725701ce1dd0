"""Model configuration: frozen dataclasses mapped from the `model:` section of a YAML config.

    model:
      backbone: tiny              # a key of hydranet.models.backbones.BACKBONES
      weights_path: null          # local state-dict file for the backbone (no downloads)
      neck_width: 64
      neck_repeats: 2
      neck_levels: 3              # 3 = up to P5, 5 = up to P7 (from P3, or P2 with finest_stride 4)
      finest_stride: 8            # 4: the backbone's stride-4 level P2 joins the pyramid (every camera head reads it)
      balancer: fixed             # fixed | uncertainty | pcgrad
      tasks:
        - {name: det2d, weight: 1.0, options: {out_stride: 4}}
        - {name: depth, weight: 0.5}
        - {name: det3d}             # a BEV task: builds the fusion (view transform + video), docs/bev.md
      bev:                          # read only when a BEV task (det3d, bevmap) is configured
        downsample: 4               # cells = dataset bev resolution * downsample (0.5 m * 4 = 2 m)
        video_frames: 3             # current + 2 past frames; 1 = single frame
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


@dataclass(frozen=True)
class BevConfig:
    """The BEV grid, the view transform and the video module (docs/bev.md).

    x_range/y_range/resolution: the grid in ego metres; None = the dataset's meta["bev"] extent
    with its resolution times `downsample`. heights: ego z (m) of the points each cell is projected
    at (method "lut"). depth_bins: [min, max, step] metres and z_range: [min, max] ego z of the
    frustum points kept (method "lss"). The input size is the model rig's (meta["rig"], resized to
    data.image_size by training). video_frames: queue length including the current frame (1 = no video
    module); video_fuse_depth: 3x3 conv layers
    that fuse the current and the aligned past maps; history_grad: whether training differentiates the
    past frames' trunk passes (False: BEVDet4D's no-grad adjacent frames, HydraNet.clip_features)."""

    x_range: tuple[float, float] | None = None
    y_range: tuple[float, float] | None = None
    resolution: float | None = None
    downsample: int = 4
    heights: tuple[float, ...] = (0.0, 0.6, 1.2, 1.8)
    channels: int = 64
    method: str = "lut"  # lut (Fast-BEV projection tables) | lss (Lift-Splat-Shoot depth distributions)
    depth_bins: tuple[float, float, float] = (1.0, 50.0, 1.0)
    z_range: tuple[float, float] = (-1.0, 4.0)
    depth_weight: float = 0.0  # lss: weight of the depth supervision by the camera depth maps (BEVDepth); 0 = off
    encoder_depth: int = 2
    video_frames: int = 1
    video_fuse_depth: int = 1  # 3x3 conv layers fusing the aligned queue
    history_grad: bool = False  # True: a training clip's past frames are differentiated through the trunk too


@dataclass(frozen=True)
class ModelConfig:
    backbone: str = "tiny"
    weights_path: str | None = None
    neck_width: int = 64
    neck_repeats: int = 2
    neck_levels: int = 3
    finest_stride: int = 8  # 4: the pyramid starts at P2 (stride 4), where small objects still span cells
    balancer: str = "fixed"
    tasks: tuple[TaskConfig, ...] = field(default_factory=lambda: camera_tasks())  # every registered camera task
    bev: BevConfig = field(default_factory=BevConfig)


def camera_tasks() -> tuple[TaskConfig, ...]:
    """A TaskConfig for every registered camera task (the default model.tasks)."""
    from hydranet.tasks import TASKS

    return tuple(TaskConfig(name) for name in TASKS)
