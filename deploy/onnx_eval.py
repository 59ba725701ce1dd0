"""Evaluate an exported (fp32 or int8) ONNX model with the very metrics of the checkpoint.

    hydranet eval --checkpoint model.int8.onnx --data out/demo/sim_val [--reference runs/tiny]

The task objects (targets, metrics, baselines) are rebuilt from the config and dataset meta the
export stored in the model's metadata; predictions come from the torch-free runtime
(`deploy.runtime.HydraRuntime`: ONNX Runtime + `hydranet.decoding`), so `hydranet.evaluate.evaluate`
runs unchanged and the metric drop of quantization is measured per head, not guessed.
"""
from __future__ import annotations

import json
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

    def __init__(self, model_path: str | Path, threads: int | None = None):
        super().__init__()
        from hydranet.config import from_dict
        from hydranet.models import build_model
        from hydranet.train import ExperimentConfig

        self.runtime = HydraRuntime(model_path, threads=threads)
        md = self.runtime.meta
        if "config" not in md or "meta" not in md:
            raise ValueError(f"{model_path} lacks hydranet.config / hydranet.meta metadata; re-export it with `hydranet export`")
        self.cfg = from_dict(ExperimentConfig, md["config"])
        built = build_model(self.cfg.model, md["meta"])
        self.heads = built.heads
        self.fusion = built.fusion  # evaluate() reads fusion.video.frames to stream the video state

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
        rt.reset()  # the caller carries the video state (batch prev_bev / ego_motion), as for the torch model
        feeds = rt.feeds(np.ascontiguousarray(x))
        if rt.state_spec and batch.get("prev_bev") is not None:
            feeds["prev_bev"] = np.ascontiguousarray(batch["prev_bev"].cpu().numpy(), np.float32)
            feeds["ego_motion"] = np.ascontiguousarray(batch["ego_motion"].cpu().numpy(), np.float32).reshape(-1, 4, 4)
        raw = rt.run(feeds)
        out: dict[str, Any] = {task: [{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in r.items()} for r in results]
                               for task, results in rt.decode(raw).items()}
        if rt.state_spec:
            out["bev_state"] = {"bev_queue": torch.from_numpy(raw[rt.state_spec["output"]])}
        return out


def evaluate_onnx(model_path: str | Path, data: str | Path, out: str | Path | None = None, batch_size: int | None = None,
                  progress: bool = True, save_predictions: str | Path | None = None) -> dict[str, Any]:
    """`evaluate_checkpoint` for an ONNX model: same frames, same metrics, same baselines."""
    from hydranet.data import SimDataset
    from hydranet.evaluate import _plain, evaluate
    from hydranet.loader import TrainingFrames

    model = OnnxPredictor(model_path)
    cfg, rt = model.cfg, model.runtime
    ds = SimDataset(data, cameras=rt.camera_names, on_bad_frame=cfg.data.on_bad_frame)
    frames = TrainingFrames(ds, dict(model.heads.items()), rt.image_size, None, cfg.seed)
    bs = batch_size or (cfg.batch_size if rt.batch_fixed is None else rt.batch_fixed)
    if rt.batch_fixed is not None and len(frames) % rt.batch_fixed:
        raise ValueError(f"{model_path} has a fixed batch of {rt.batch_fixed} but {data} has {len(frames)} frames; "
                         "export with --dynamic-batch to evaluate")
    results = evaluate(model, frames, bs, "cpu", progress, save_predictions)
    results.update({"model_file": str(model_path), "data": str(data),
                    "quantization": rt.meta.get("quantization"), "step": (rt.meta.get("source") or {}).get("step")})
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(_plain(results), indent=2) + "\n")
    return results


def evaluate_any(model: str | Path, data: str | Path, out: str | Path | None = None, progress: bool = True,
                 save_predictions: str | Path | None = None) -> dict[str, Any]:
    """A checkpoint (run folder or .pt) or an .onnx model, evaluated the same way."""
    if str(model).endswith(".onnx"):
        return evaluate_onnx(model, data, out, progress=progress, save_predictions=save_predictions)
    from hydranet.evaluate import evaluate_checkpoint

    return evaluate_checkpoint(model, data, out, save_predictions, progress=progress)


def primary_drop(reference: Mapping[str, Any], results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per head: its primary metric in both results and the drop (positive = worse) in points (x100) for
    ratios in [0, 1], in the metric's own unit for degrees and metres."""
    from hydranet.evaluate import PRIMARY

    primary = {"det3d": ("mAP", True), "bevmap": ("mIoU", True), **PRIMARY}
    rows = []
    for head, metrics in results["model"].items():
        if head not in primary or head not in reference["model"]:
            continue
        key, higher = primary[head]
        a, b = reference["model"][head].get(key, math.nan), metrics.get(key, math.nan)
        drop = (a - b) if higher else (b - a)
        scale = 1.0 if key.endswith("_deg") or key in ("rmse", "mATE") else 100.0  # degrees / metres stay as they are
        rows.append({"head": head, "metric": key, "reference": a, "model": b, "drop_points": scale * drop})
    return rows


def format_drop(rows, ref_name: str, name: str) -> str:
    lines = [f"| head | metric | {ref_name} | {name} | drop (points) |", "|---|---|---|---|---|"]
    lines += [f"| {r['head']} | {r['metric']} | {r['reference']:.4f} | {r['model']:.4f} | {r['drop_points']:+.2f} |"
              for r in rows]
    return "\n".join(lines)
