"""Checkpoints: atomic save, weights-only load, and the model a checkpoint holds.

A checkpoint (RUN/checkpoint.pt) holds the weights, optimizer, scheduler, step, RNG states, the
resolved experiment config (JSON) and the dataset meta the model was built from (JSON), all as
tensors and plain types, so it loads with `torch.load(weights_only=True)`: a pickle payload in a
foreign file cannot run code. It is written to a temp file and renamed, so a crash (or a full
disk) never leaves a half-written checkpoint, and a checkpoint with NaN or Inf weights is refused
at load time, naming the tensor.
"""
from __future__ import annotations

import errno
import json
import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hydranet.experiment import ExperimentConfig, experiment_from_json
from hydranet.models import HydraNet, build_model
from hydranet.io import CHECKPOINT, atomic_path, checkpoint_file

__all__ = ["CHECKPOINT", "check_finite_weights", "config_from_checkpoint", "format_init_report", "group_by_module",
           "load_checkpoint", "load_init_weights", "load_model", "meta_for_rig", "model_cameras_of", "model_for_rig",
           "model_from_checkpoint", "model_meta", "rng_state", "save_checkpoint", "set_rng_state"]


def rng_state(model: HydraNet) -> dict[str, Any]:
    """Python, numpy, torch (and CUDA, balancer) RNG states as tensors and plain types."""
    np_state = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    gen = getattr(model.balancer, "generator", None)
    if isinstance(gen, torch.Generator):
        state["balancer"] = gen.get_state()
    return state


def set_rng_state(state: Mapping[str, Any], model: HydraNet) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], np.asarray(n[1], np.uint32), *n[2:]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    gen = getattr(model.balancer, "generator", None)
    if "balancer" in state and isinstance(gen, torch.Generator):
        gen.set_state(state["balancer"])


def save_checkpoint(path: Path, state: Mapping[str, Any]) -> None:
    """torch.save to PATH.tmp-<pid>, then rename: a crash never leaves a half-written checkpoint;
    a failed write (full disk) removes its temp file and says so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(path) as tmp:
            torch.save(dict(state), tmp)
    except BaseException as e:
        if isinstance(e, OSError) or (isinstance(e, RuntimeError) and "write" in str(e).lower()):
            why = "the disk is full" if getattr(e, "errno", None) == errno.ENOSPC or "ENOSPC" in str(e) else str(e)
            raise OSError(f"could not write checkpoint {path}: {why}; the previous checkpoint (if any) is intact") from None
        raise


def check_finite_weights(weights: Mapping[str, torch.Tensor], where: str) -> None:
    """ValueError naming the first floating tensor holding NaN or Inf."""
    for name, t in weights.items():
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise ValueError(f"{where}: weight '{name}' has {bad} non-finite value(s) (NaN/Inf); this model is broken, "
                             "use an earlier checkpoint")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint file (or RUN_DIR/checkpoint.pt), read with weights_only=True; weights checked finite."""
    path = checkpoint_file(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist; give a file written by `hydranet train` or its run folder")
    if not os.access(path, os.R_OK):
        raise PermissionError(f"checkpoint {path}: permission denied; make it readable")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"checkpoint {path} could not be read ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                         "it is corrupt or not written by `hydranet train`") from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"checkpoint {path} holds a {type(ckpt).__name__}, not a `hydranet train` checkpoint")
    missing = [k for k in ("model", "config", "meta", "step") if k not in ckpt]
    if missing:
        raise ValueError(f"checkpoint {path} lacks {missing}; it was not written by `hydranet train`")
    check_finite_weights(ckpt["model"], f"checkpoint {path}")
    if isinstance(ckpt.get("ema"), dict):  # a weight-averaged run: its trained weights, what a resume loads
        check_finite_weights(ckpt["ema"].get("raw", {}), f"checkpoint {path} (its trained weights under 'ema')")
    return ckpt


def config_from_checkpoint(ckpt: Mapping[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    return experiment_from_json(ckpt["config"], overrides)


def model_from_checkpoint(ckpt: Mapping[str, Any], cfg: ExperimentConfig | None = None) -> HydraNet:
    """The trained model of a checkpoint; weights that do not fit raise ValueError listing the keys."""
    cfg = cfg or config_from_checkpoint(ckpt)
    model = build_model(cfg.model, json.loads(ckpt["meta"]))
    model.load_weights(ckpt["model"])
    return model


def load_model(checkpoint: str | Path) -> tuple[HydraNet, ExperimentConfig, dict[str, Any]]:
    """(model, config, checkpoint dict) of a checkpoint file or run folder."""
    ckpt = load_checkpoint(checkpoint)
    cfg = config_from_checkpoint(ckpt)
    return model_from_checkpoint(ckpt, cfg), cfg, ckpt


INIT_WHERE = "config key 'init_from' (--init)"


def module_of(key: str) -> str:
    """The top-level module a state-dict key belongs to: 'heads.det3d' for heads.det3d.*, else its first name."""
    parts = key.split(".")
    return ".".join(parts[:2]) if parts[0] == "heads" and len(parts) > 2 else parts[0]


def group_by_module(keys: list[str]) -> dict[str, int]:
    """{top-level module: number of keys}, in the order the modules first appear."""
    groups: dict[str, int] = {}
    for k in keys:
        groups[module_of(k)] = groups.get(module_of(k), 0) + 1
    return groups


def load_init_weights(model: HydraNet, path: str | Path) -> dict[str, Any]:
    """Start a run from checkpoint `path` (config key `init_from`, `hydranet train --init`): a partial
    load, as mmengine's `load_from` and torchvision's `weights=`. Every key whose name and shape match
    is loaded; the model's keys the checkpoint lacks keep their initialization (missing: a new head,
    the BEV fusion), the checkpoint's keys the model lacks are ignored (unexpected: a dropped head).
    The same architecture is the case where both are empty. A key of another shape is a one-line
    ValueError naming it and both shapes, as is a checkpoint that shares no key with the model (an
    unrelated model is not an init); both raise before any weight is loaded.

    Returns what to record (checkpoint key `init_from`, `format_init_report` prints it): {"path",
    "sha256", "step"} of the checkpoint file and the "matched", "missing", "unexpected" key counts with
    their "<kind>_modules" {top-level module: count}."""
    from hydranet.io import file_sha256
    from hydranet.models.state_dict import load_state_dict_checked

    file = checkpoint_file(path)
    try:
        ckpt = load_checkpoint(file)
    except (OSError, ValueError) as e:
        raise type(e)(f"{INIT_WHERE}: {e}") from None
    where = f"{INIT_WHERE}: checkpoint {file}"
    theirs, ours = json.loads(ckpt["config"])["model"].get("finest_stride", 8), model.neck.strides[0]
    if theirs != ours:  # the neck's levels are indexed from the finest: they would not line up
        raise ValueError(f"{where} was trained with model.finest_stride {theirs}, this model's is {ours}: their pyramid "
                         f"levels do not line up; train with --set model.finest_stride={theirs} or start without it")
    state, own = ckpt["model"], model.state_dict()
    matched = [k for k in own if k in state and tuple(state[k].shape) == tuple(own[k].shape)]
    mismatched = [k for k in own if k in state and k not in matched]
    if not matched and not mismatched:
        theirs = ", ".join(group_by_module(list(state))) or "none"
        raise ValueError(f"{where} shares no weight with this model (none of its {len(state)} keys, modules {theirs}, "
                         f"is one of the model's {len(own)}); it is not an init for this model: give a checkpoint of a "
                         "model with the same trunk (model.backbone, model.neck_*) or start without it")
    report = load_state_dict_checked(model, state, where=where, partial=True, refuse_mismatch=True)
    record: dict[str, Any] = {"path": str(file.resolve()), "sha256": file_sha256(file), "step": int(ckpt["step"]),
                              "matched": len(matched)}
    for kind in ("missing", "unexpected"):
        record[kind] = len(report[kind])
        record[f"{kind}_modules"] = group_by_module(report[kind])
    record["matched_modules"] = group_by_module(matched)
    return record


def format_init_report(record: Mapping[str, Any]) -> str:
    """The summary `hydranet train --init` prints: matched, missing and unexpected keys by module."""
    def groups(kind: str) -> str:
        g = record.get(f"{kind}_modules") or {}
        return ", ".join(f"{m} ({n})" for m, n in g.items())

    total = record["matched"] + record["missing"]
    lines = [f"init from {record['path']} (step {record['step']}): {record['matched']} of the model's {total} "
             f"tensors loaded" + ("" if record["missing"] or record["unexpected"] else " (the same architecture)"),
             f"  matched    {record['matched']:5d}  {groups('matched')}"]
    if record["missing"] or record["unexpected"]:
        lines.append(f"  missing    {record['missing']:5d}  kept at their initialization"
                     + (f": {groups('missing')}" if record["missing"] else ""))
        lines.append(f"  unexpected {record['unexpected']:5d}  in the checkpoint, ignored"
                     + (f": {groups('unexpected')}" if record["unexpected"] else ""))
    return "\n".join(lines)


def model_meta(cfg: ExperimentConfig, ds) -> dict[str, Any]:
    """The dataset meta a model is built from: its rig is the selected cameras resized to
    data.image_size (what the network sees), so the BEV view transform's build-time table (and
    an export) match the training input. `source_rig` keeps the cameras' own calibration, so a
    deployed model accepts images at the cameras' native size too."""
    H, W = cfg.data.image_size
    return {**ds.meta, "rig": ds.rig.resized(W, H, cfg.data.fit).to_dict(), "source_rig": ds.rig.to_dict()}


def model_cameras_of(cfg: ExperimentConfig, meta: Mapping[str, Any]) -> list[str]:
    """The model's camera names in its input order (meta["rig"] narrowed to data.cameras, as export does)."""
    from hydranet.rig import rig_from_dict

    names = rig_from_dict(meta["rig"], "checkpoint meta rig").names
    return list(cfg.data.cameras) if cfg.data.cameras else names


def meta_for_rig(cfg: ExperimentConfig, meta: Mapping[str, Any], rig, where: str) -> dict[str, Any]:
    """The model's dataset meta with `rig` (a hydranet.rig.Rig, read from `where`) in place of the training
    rig: the model's cameras by name, in the model's order, resized to data.image_size (the input size stays
    the model's: intrinsics scale with the image, as `model_meta` does for training); `source_rig` keeps
    those cameras at their own sizes. A camera of the model missing from `rig` is a RigError naming it."""
    from hydranet.rig import RigError

    names = model_cameras_of(cfg, meta)
    missing = [n for n in names if n not in rig.names]
    if missing:
        raise RigError(f"{where} (rig {rig.name}, cameras {rig.names}) lacks camera {missing[0]} of the model "
                       f"(cameras {names}); give a rig with every camera the model was trained on")
    sub = rig.select(names)
    H, W = cfg.data.image_size
    return {**meta, "rig": sub.resized(W, H, cfg.data.fit).to_dict(), "source_rig": sub.to_dict()}


def model_for_cameras(ckpt: Mapping[str, Any], cfg: ExperimentConfig, cameras: Sequence[str],
                      where: str) -> tuple[HydraNet, ExperimentConfig]:
    """(model, config) of a checkpoint's camera heads on a subset of its cameras, e.g. a six-camera HydraNet's heads on
    a one-camera dashcam: the fusion and the BEV heads dropped (they read every camera), data.cameras narrowed to
    `cameras` (export narrows the rig with it), the kept weights loaded as they are. ValueError naming a camera the
    model lacks, or a model without camera heads."""
    import dataclasses

    from hydranet.tasks import BEV_TASKS

    known = model_cameras_of(cfg, json.loads(ckpt["meta"]))
    unknown = [c for c in cameras if c not in known]
    if unknown or not cameras or len(set(cameras)) != len(cameras):
        raise ValueError(f"--cameras {' '.join(cameras) or '(none)'}: give distinct cameras of {where}'s model "
                         f"({', '.join(known)})" + (f"; it has no camera {unknown[0]!r}" if unknown else ""))
    tasks = tuple(t for t in cfg.model.tasks if t.name not in BEV_TASKS)
    if not tasks:
        raise ValueError(f"--cameras: {where} has no camera head (only {[t.name for t in cfg.model.tasks]}); its BEV heads "
                         "need every camera")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, tasks=tasks),
                              data=dataclasses.replace(cfg.data, cameras=tuple(cameras)))
    model = build_model(cfg.model, json.loads(ckpt["meta"]))
    kept = model.state_dict()
    model.load_weights({k: v for k, v in ckpt["model"].items() if k in kept})  # every kept tensor: refused if one is missing
    return model, cfg


def model_for_rig(ckpt: Mapping[str, Any], cfg: ExperimentConfig, rig, where: str) -> tuple[HydraNet, dict[str, Any]]:
    """(model, meta) of a checkpoint bound to another rig: the model built from `meta_for_rig` (its BEV view
    transform's tables, which are not weights, computed from the new calibration) with the checkpoint's weights,
    loaded as they are (every parameter and running statistic equal). A camera-only model gets no table."""
    meta = meta_for_rig(cfg, json.loads(ckpt["meta"]), rig, where)
    model = build_model(cfg.model, meta)
    model.load_weights(ckpt["model"])
    return model, meta
