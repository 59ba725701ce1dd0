"""Task registry: name -> builder `builder(meta, in_channels, **options) -> Task`.

`meta` is the dataset meta (dataset.json: `classes`, `sign_classes`, `light_states`, ...),
`in_channels` the neck width, `options` the task's constructor options from the config. Adding a
task is one new file in this package plus one `register_task` line below (see
docs/adding_a_head.md). Registering a task registers its numpy side (`Task.spec`, a
`hydranet.heads.HeadSpec`: decoder, label keys, blank labels, engine signals) with
`hydranet.heads.register_head`, from which every per-head tuple of the stack is derived.

Tasks that read the fused bird's-eye-view features (`space = "bev"`) are registered in
`BEV_TASKS` (`register_task(..., bev=True)`): their `in_channels` is the BEV feature width and
their meta carries the model's grid as meta["bev_grid"] (docs/bev.md). `TASKS` holds the camera
tasks; names are unique across both.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from hydranet.heads import HeadSpec, register_head
from hydranet.tasks.base import Metric, PrimaryMetric, Task
from hydranet.tasks.bevmap import BevMapTask
from hydranet.tasks.depth import DepthTask
from hydranet.tasks.det2d import Det2dTask
from hydranet.tasks.det3d import Det3dTask
from hydranet.tasks.drivable import DrivableTask
from hydranet.tasks.lanes import LanesTask
from hydranet.tasks.normals import NormalsTask
from hydranet.tasks.signs_lights import SignsLightsTask

TaskBuilder = Callable[..., Task]
TASKS: dict[str, TaskBuilder] = {}
BEV_TASKS: dict[str, TaskBuilder] = {}


def register_task(name: str, builder: TaskBuilder, bev: bool = False) -> None:
    """Register `builder(meta, in_channels, **options)` under `name` (in BEV_TASKS if `bev`); a
    duplicate name raises."""
    if name in TASKS or name in BEV_TASKS:
        raise ValueError(f"task '{name}' is already registered")
    spec = _spec_of(builder)
    if spec is not None:
        register_head(spec)
    (BEV_TASKS if bev else TASKS)[name] = builder


def _spec_of(builder: TaskBuilder) -> type[HeadSpec] | None:
    """The numpy side of a `Task.from_meta` builder's class (None for other builders)."""
    owner = getattr(builder, "__self__", None)
    return getattr(owner, "spec", None) if inspect.isclass(owner) else None


register_task("det2d", Det2dTask.from_meta)
register_task("lanes", LanesTask.from_meta)
register_task("drivable", DrivableTask.from_meta)
register_task("depth", DepthTask.from_meta)
register_task("normals", NormalsTask.from_meta)
register_task("signs_lights", SignsLightsTask.from_meta)
register_task("det3d", Det3dTask.from_meta, bev=True)
register_task("bevmap", BevMapTask.from_meta, bev=True)


def task_options(builder: TaskBuilder) -> list[str]:
    """Option names a builder accepts (its keyword parameters, or its class's constructor's)."""
    params = inspect.signature(builder).parameters
    names = [n for n, p in params.items() if p.kind == p.KEYWORD_ONLY or
             (p.kind == p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)]
    owner = getattr(builder, "__self__", None)
    for cls in owner.__mro__ if inspect.isclass(owner) else ():  # **options pass on to __init__, up the classes
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
        params = inspect.signature(cls.__init__).parameters
        names += [n for n, p in params.items() if p.default is not p.empty and n not in names]
    return names


def build_task(name: str, meta: Mapping, in_channels: int, options: Mapping[str, Any] | None = None) -> Task:
    """The task registered as `name`; unknown names and options raise ValueError listing the known ones."""
    known = {**TASKS, **BEV_TASKS}
    if name not in known:
        raise ValueError(f"unknown task '{name}'; known tasks: {sorted(known)}")
    builder, options = known[name], dict(options or {})
    allowed = task_options(builder)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"task '{name}': unknown option '{unknown[0]}'; allowed options: {allowed}")
    task = builder(meta, in_channels, **options)
    if task.name != name:
        raise ValueError(f"task registered as '{name}' builds a task named '{task.name}'; the names must agree")
    return task


__all__ = ["BEV_TASKS", "TASKS", "Metric", "PrimaryMetric", "Task", "build_task", "register_task", "task_options"]
