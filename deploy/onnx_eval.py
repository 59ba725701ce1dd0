"""Evaluate an exported (fp32 or int8) ONNX model with the very metrics of the checkpoint.

    hydranet eval --onnx model.int8.onnx --data out/demo/sim_val [--reference runs/tiny]

The task objects (targets, metrics, baselines) are rebuilt from the config and dataset meta the
export stored in the model's metadata; predictions come from the torch-free runtime
(`deploy.runtime.HydraRuntime`: ONNX Runtime + `hydranet.decoding`), so `hydranet.evaluate.evaluate`
runs unchanged and the metric drop of quantization is measured per head, not guessed.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from deploy.runtime import HydraRuntime


class OnnxPredictor(nn.Module):
    """Stands in for a HydraNet in `hydranet.evaluate.evaluate`: `.heads` are the tasks rebuilt from
    the metadata (for targets and metrics; their weights are unused), `forward(batch, "predict")`
    runs the ONNX model."""

    def __init__(self, model_path: str | Path, threads: int | None = None, cameras: list[str] | None = None):
        super().__init__()
        from hydranet.config import from_dict
        from hydranet.experiment import ExperimentConfig
        from hydranet.models import build_model

        self.runtime = HydraRuntime(model_path, threads=threads, cameras=cameras)  # cameras: its camera heads there alone
        md = self.runtime.meta
        if "config" not in md or "meta" not in md:
            raise ValueError(f"{model_path} lacks hydranet.config / hydranet.meta metadata; re-export it with `hydranet export`")
        self.cfg = from_dict(ExperimentConfig, md["config"])
        heads = build_model(self.cfg.model, md["meta"]).heads
        self.heads = nn.ModuleDict({k: v for k, v in heads.items() if k in self.runtime.heads})
        self.video_frames = int((md.get("bev") or {}).get("video_frames", 1)) if self.runtime.runs_bev else 1

    def forward(self, batch: Mapping[str, Any], mode: str = "predict") -> dict[str, list]:
        if mode != "predict":
            raise ValueError(f"an ONNX model only predicts; mode '{mode}' needs the checkpoint")
        images = batch["images"]  # (B, N, 3, H, W) float in [0, 1] (Collate) or uint8
        x = images.cpu().numpy()
        rt = self.runtime
        if rt.input_dtype == "uint8" and x.dtype != np.uint8:
            x = np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8)
        elif rt.input_dtype == "float32":
            x = x.astype(np.float32) / (255.0 if x.dtype == np.uint8 else 1.0)
        prev = batch.get("prev_bev")  # the caller (hydranet.stream) carries the video state
        motion = batch.get("ego_motion")
        raw = rt.run(rt.feeds(np.ascontiguousarray(x), None if prev is None else prev.cpu().numpy(),
                              None if motion is None else motion.cpu().numpy()))
        out: dict[str, Any] = {task: [{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in r.items()} for r in results]
                               for task, results in rt.decode(raw).items()}
        if rt.state_spec:
            out["bev_state"] = {"bev_queue": torch.from_numpy(rt.state_output(raw))}
        return out


def evaluate_onnx(model_path: str | Path, data: str | Path, out: str | Path | None = None, batch_size: int | None = None,
                  progress: bool = True, save_predictions: str | Path | None = None,
                  fit: str | None = None) -> dict[str, Any]:
    """`evaluate_checkpoint` for an ONNX model: same frames, same metrics, same baselines (`fit`: how a frame
    reaches the input size, default the exported run's data.fit, as its runtime does)."""
    from hydranet.evaluate import evaluate, evaluation_frames, write_results

    model = OnnxPredictor(model_path)
    cameras = _cameras_in(model, data)
    if cameras is not None:  # a dataset with some of the model's cameras: its camera heads there (BEV heads not run)
        model = OnnxPredictor(model_path, cameras=cameras)
    cfg, rt = model.cfg, model.runtime
    frames = evaluation_frames(model, cfg, data, cameras=rt.camera_names, image_size=rt.image_size, fit=fit,
                               camera_K=dict(zip(rt.rig.names, rt.rig.K)))
    bs = batch_size or (cfg.batch_size if rt.batch_fixed is None else rt.batch_fixed)
    if rt.batch_fixed is not None and (len(frames) % rt.batch_fixed or (model.video_frames > 1 and rt.batch_fixed != 1)):
        raise ValueError(f"{model_path} has a fixed batch of {rt.batch_fixed} but {data} has {len(frames)} frames; "
                         "export with --dynamic-batch to evaluate")
    results = evaluate(model, frames, bs, "cpu", progress, save_predictions)
    if rt.slots is not None:  # the cameras run and the BEV heads left out, said in one line
        results.update({"cameras": list(rt.camera_names), "skipped_heads": rt.skipped_heads, "note": rt.subset_line()})
    results.update({"model_file": str(model_path), "data": str(data),
                    "quantization": rt.meta.get("quantization"), "step": (rt.meta.get("source") or {}).get("step")})
    if out is not None:
        write_results(results, out)
    return results


def _cameras_in(model: OnnxPredictor, data: str | Path) -> list[str] | None:
    """The model's cameras that dataset `data` has when it lacks some of them (None: it has them all, or none: the
    reader's own error then names the camera)."""
    from hydranet.data.reader import DatasetError
    from hydranet.data.sources import open_data
    from hydranet.rig import camera_subset

    try:
        names = open_data(model.cfg.data, data, channels=("images",), all_cameras=True).rig.names
    except DatasetError:
        return None
    return camera_subset(model.runtime.camera_names, names)  # None: the reader's error stands


def evaluate_any(model: str | Path, data: str | Path, out: str | Path | None = None, progress: bool = True,
                 save_predictions: str | Path | None = None, fit: str | None = None) -> dict[str, Any]:
    """A checkpoint (run folder or .pt) or an .onnx model, evaluated the same way; `fit`: how a frame reaches the
    model's input size (`hydranet.loader.fit_to`; default the run's data.fit)."""
    if str(model).endswith(".onnx"):
        return evaluate_onnx(model, data, out, progress=progress, save_predictions=save_predictions, fit=fit)
    from hydranet.evaluate import evaluate_checkpoint

    return evaluate_checkpoint(model, data, out, save_predictions, progress=progress, fit=fit)


def primary_drop(reference: Mapping[str, Any], results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per head: its primary metric (as `evaluate` reports it) in both results and the drop
    (positive = worse) in points (x100) for ratios in [0, 1], in the metric's own unit for degrees
    and metres."""
    rows = []
    for head, key in results["primary"].items():
        if head not in reference["model"]:
            continue
        higher = results["higher_is_better"][head]
        a, b = reference["model"][head].get(key, math.nan), results["model"][head].get(key, math.nan)
        drop = (a - b) if higher else (b - a)
        scale = 1.0 if key.endswith("_deg") or key in ("rmse", "mATE") else 100.0  # degrees / metres stay as they are
        rows.append({"head": head, "metric": key, "reference": a, "model": b, "drop_points": scale * drop})
    return rows


def _cell(v: float | None, fmt: str = ".4f") -> str:
    return "n/a" if v is None or not math.isfinite(v) else format(v, fmt)  # n/a: undefined (nothing to score)


def format_drop(rows, ref_name: str, name: str) -> str:
    lines = [f"| head | metric | {ref_name} | {name} | drop (points) |", "|---|---|---|---|---|"]
    lines += [f"| {r['head']} | {r['metric']} | {_cell(r['reference'])} | {_cell(r['model'])} | {_cell(r['drop_points'], '+.2f')} |"
              for r in rows]
    return "\n".join(lines)
