"""Evaluation and pictures of a trained checkpoint.

`evaluate_checkpoint(C, D)` runs every head over dataset D (no augmentation, the checkpoint's
cameras and image size), computes each head's metric and, over the same frames, a trivial
baseline per head, so a table shows what training bought:

| head          | baseline                                                              |
|---------------|-----------------------------------------------------------------------|
| det2d         | the empty detection set                                               |
| signs_lights  | the ground-truth boxes, each given the most frequent sign class / light state |
| lanes         | no lane pixels (the per-pixel majority)                               |
| drivable      | the per-pixel majority mask of the evaluated frames                   |
| depth         | the mean depth of the evaluated frames, everywhere                    |
| normals       | the mean normal of the evaluated frames, everywhere                   |

Baselines use statistics of the evaluated set itself, which favours them (an oracle constant).
`prediction_picture` draws predictions next to ground truth for all cameras of a frame.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from hydranet.loader import Collate, TrainingFrames
from hydranet.models import HydraNet
from hydranet.tasks import to_device
from hydranet.viz import draw_camera, mosaic

# the metric each head is judged by, and whether higher is better
PRIMARY: dict[str, tuple[str, bool]] = {
    "det2d": ("mAP50", True), "signs_lights": ("accuracy", True), "lanes": ("pixel_iou", True),
    "drivable": ("iou", True), "depth": ("abs_rel", False), "normals": ("mean_angle_deg", False)}
BASELINE_NAMES = {
    "det2d": "empty detections", "signs_lights": "GT boxes, majority class", "lanes": "no lanes",
    "drivable": "per-pixel majority", "depth": "mean depth", "normals": "mean normal"}


def _frames_for(model: HydraNet, cfg, data: str | Path) -> TrainingFrames:
    from hydranet.data import SimDataset

    ds = SimDataset(data, cameras=list(cfg.data.cameras) if cfg.data.cameras else None,
                    on_bad_frame=cfg.data.on_bad_frame)
    return TrainingFrames(ds, dict(model.heads.items()), cfg.data.image_size, None, cfg.seed)


@torch.no_grad()
def evaluate(model: HydraNet, frames: TrainingFrames, batch_size: int = 2, device: str | torch.device = "cpu",
             progress: bool = False, coco_dir: str | Path | None = None) -> dict[str, Any]:
    """{"model": {task: metrics}, "baseline": {task: metrics}, "baseline_kind", "primary", "beats_baseline"}."""
    model.eval().to(device)
    loader = torch.utils.data.DataLoader(frames, batch_size=batch_size, shuffle=False, collate_fn=Collate(model.heads))
    metrics = {n: t.metric() for n, t in model.heads.items()}
    kept: list[dict] = []
    it = loader
    if progress:
        from tqdm import tqdm

        it = tqdm(loader, desc="eval", unit="batch", dynamic_ncols=True)
    for batch in it:
        decoded = model(to_device(batch, device), "predict")
        for n, m in metrics.items():
            m.update(decoded[n], batch["targets"][n])
        kept.append(batch["targets"])
    results = {n: m.compute() for n, m in metrics.items()}
    if coco_dir is not None and "det2d" in metrics:
        Path(coco_dir).mkdir(parents=True, exist_ok=True)
        metrics["det2d"].write_json(Path(coco_dir) / "det2d_gt.json", Path(coco_dir) / "det2d_predictions.json")
    base = baselines(model, kept)
    primary, beats = {}, {}
    for n in model.heads:
        if n in PRIMARY and n in base:
            key, higher = PRIMARY[n]
            primary[n] = key
            m, b = results[n].get(key, math.nan), base[n].get(key, math.nan)
            b_cmp = 0.0 if (higher and math.isnan(b)) else b
            beats[n] = bool(not math.isnan(m) and (m > b_cmp if higher else m < b_cmp))
    return {"model": results, "baseline": base, "baseline_kind": {n: BASELINE_NAMES[n] for n in base},
            "primary": primary, "beats_baseline": beats, "frames": len(frames)}


def baselines(model: HydraNet, targets: list[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Trivial predictions (see the module docstring) scored by each head's own metric."""
    heads = model.heads
    out: dict[str, dict[str, float]] = {}
    if "depth" in heads:
        mx = heads["depth"].max_depth
        vals = [t["depth"]["depth"] for t in targets]
        s = sum(float(v[(v > 0) & (v <= mx)].double().sum()) for v in vals)
        c = sum(int(((v > 0) & (v <= mx)).sum()) for v in vals)
        mean = s / max(c, 1)
        m = heads["depth"].metric()
        for t in targets:
            d = t["depth"]["depth"]
            m.update([{"depth": torch.full(d.shape[-2:], mean)} for _ in range(len(d))], t["depth"])
        out["depth"] = m.compute()
    if "normals" in heads:
        tot = sum(t["normals"]["normals"].double().sum(dim=(0, 2, 3)) for t in targets)
        mean = (tot / tot.norm().clamp(min=1e-9)).float()
        m = heads["normals"].metric()
        for t in targets:
            n = t["normals"]["normals"]
            m.update([{"normals": mean.expand(*n.shape[-2:], 3)} for _ in range(len(n))], t["normals"])
        out["normals"] = m.compute()
    if "drivable" in heads:
        frac = sum(t["drivable"]["mask"].double().sum(0) for t in targets) / sum(len(t["drivable"]["mask"]) for t in targets)
        majority = frac[0] > 0.5  # (H, W)
        m = heads["drivable"].metric()
        for t in targets:
            m.update([{"mask": majority} for _ in range(len(t["drivable"]["mask"]))], t["drivable"])
        out["drivable"] = m.compute()
    if "lanes" in heads:
        m = heads["lanes"].metric()
        for t in targets:
            hw = t["lanes"]["mask"].shape[-2:]
            empty = {"mask": torch.zeros(hw, dtype=torch.bool), "instances": torch.zeros(hw, dtype=torch.int32)}
            m.update([empty for _ in range(len(t["lanes"]["mask"]))], t["lanes"])
        out["lanes"] = m.compute()
    if "det2d" in heads:
        m = heads["det2d"].metric()
        for t in targets:
            n = len(t["det2d"]["gt_boxes"])
            m.update([{"boxes": torch.zeros(0, 4), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.long)}
                      for _ in range(n)], t["det2d"])
        out["det2d"] = m.compute()
    if "signs_lights" in heads:
        task = heads["signs_lights"]
        counts = np.zeros(len(task.classes), np.int64)
        for t in targets:
            for gl in t["signs_lights"]["gt_labels"]:
                counts += np.bincount(np.asarray(gl, np.int64).reshape(-1), minlength=len(task.classes))
        kind = [c.split(":", 1)[0] for c in task.classes]
        best = {k: max((i for i in range(len(kind)) if kind[i] == k), key=lambda i: counts[i]) for k in set(kind)}
        m = task.metric()
        for t in targets:
            dec = []
            for gb, gl in zip(t["signs_lights"]["gt_boxes"], t["signs_lights"]["gt_labels"]):
                labels = torch.tensor([best[kind[int(l)]] for l in gl.reshape(-1)], dtype=torch.long)
                dec.append({"boxes": gb.reshape(-1, 4).float(), "scores": torch.ones(len(labels)), "labels": labels})
            m.update(dec, t["signs_lights"])
        out["signs_lights"] = m.compute()
    return out


def format_table(results: Mapping[str, Any]) -> str:
    """Every head's metrics, model against baseline; the primary metric marked with '*'."""
    rows = [("head", "metric", "model", "baseline", "")]
    for task, ms in results["model"].items():
        base = results["baseline"].get(task, {})
        for k, v in ms.items():
            mark = ""
            if results["primary"].get(task) == k:
                mark = "* beats baseline" if results["beats_baseline"].get(task) else "* DOES NOT beat baseline"
            b = base.get(k)
            rows.append((task, k, f"{v:.4f}", "-" if b is None else f"{b:.4f}", mark))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    kinds = ", ".join(f"{k}: {v}" for k, v in results.get("baseline_kind", {}).items())
    return "\n".join(lines) + f"\nbaselines ({kinds}); * = the head's primary metric"


def _plain(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def evaluate_checkpoint(checkpoint: str | Path, data: str | Path, out: str | Path | None = None,
                        save_predictions: str | Path | None = None, progress: bool = True) -> dict[str, Any]:
    """Load a checkpoint, evaluate it on `data`, write metrics JSON to `out`; returns the results."""
    from hydranet.train import config_from_checkpoint, load_checkpoint, model_from_checkpoint

    ckpt = load_checkpoint(checkpoint)
    cfg = config_from_checkpoint(ckpt)
    model = model_from_checkpoint(ckpt, cfg)
    device = "cuda" if cfg.device != "cpu" and torch.cuda.is_available() else "cpu"
    frames = _frames_for(model, cfg, data)
    results = evaluate(model, frames, cfg.batch_size, device, progress, save_predictions)
    results.update({"checkpoint": str(checkpoint), "data": str(data), "step": int(ckpt["step"])})
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(_plain(results), indent=2) + "\n")
    return results


# -- pictures --------------------------------------------------------------------------------
def _depth_rgb(depth: np.ndarray, max_depth: float = 80.0) -> np.ndarray:
    """(H, W) metres -> RGB, log scale, near = warm; 0 (no surface) black."""
    d = np.clip(np.log1p(np.maximum(depth, 0)) / math.log1p(max_depth), 0, 1)
    rgb = cv2.cvtColor(cv2.applyColorMap((255 - d * 255).astype(np.uint8), cv2.COLORMAP_TURBO), cv2.COLOR_BGR2RGB)
    rgb[depth <= 0] = 0
    return rgb


def _normals_rgb(n: np.ndarray) -> np.ndarray:
    return np.clip((n + 1.0) * 127.5, 0, 255).astype(np.uint8) * (np.abs(n).sum(-1, keepdims=True) > 0)


@torch.no_grad()
def prediction_picture(model: HydraNet, frames: TrainingFrames, index: int = 0) -> np.ndarray:
    """RGB mosaic, one row per camera: ground truth | prediction (boxes, lanes, drivable) and,
    for the heads present, depth and normals ground truth | prediction."""
    model.eval()
    device = next(model.parameters()).device
    sample = frames.prepare(index)
    batch = Collate(model.heads)([frames[index]])
    pred = model(to_device(batch, device), "predict")
    classes = list(frames.data.classes)
    tiles, names = [], []
    for i, cam in enumerate(sample["camera_names"]):
        img = sample["images"][i]
        gt = sample["labels"]["cameras"][cam]
        row = [draw_camera(img, gt, classes, sample["drivable"][i] if "drivable" in pred else None)]
        boxes = []
        for task in ("det2d", "signs_lights"):
            if task in pred:
                p, names_ = pred[task][i], model.heads[task].classes
                for b, s, l in zip(p["boxes"].cpu().tolist(), p["scores"].cpu().tolist(), p["labels"].cpu().tolist()):
                    if s >= 0.3:
                        boxes.append({"bbox": b, "class": names_[l], "score": s})
        drivable = pred["drivable"][i]["mask"].cpu().numpy() if "drivable" in pred else None
        pimg = img.copy()
        if "lanes" in pred:
            pimg[pred["lanes"][i]["mask"].cpu().numpy()] = (255, 255, 255)
        row.append(draw_camera(pimg, {"boxes2d": boxes}, classes, drivable))
        labels = [f"{cam} truth", f"{cam} prediction"]
        if "depth" in pred:
            row += [_depth_rgb(sample["depth"][i]), _depth_rgb(pred["depth"][i]["depth"].cpu().numpy())]
            labels += ["depth truth", "depth prediction"]
        if "normals" in pred:
            row += [_normals_rgb(sample["normals"][i]), _normals_rgb(pred["normals"][i]["normals"].cpu().numpy())]
            labels += ["normals truth", "normals prediction"]
        tiles += row
        names += labels
    return mosaic(tiles, names, cols=len(tiles) // len(sample["camera_names"]))


def viz_checkpoint(checkpoint: str | Path, data: str | Path, out: str | Path, frame: int = 0) -> Path:
    """Write the prediction picture of frame `frame` of `data` to PNG `out`."""
    from hydranet.train import config_from_checkpoint, load_checkpoint, model_from_checkpoint
    from hydranet.viz import write_png

    ckpt = load_checkpoint(checkpoint)
    cfg = config_from_checkpoint(ckpt)
    model = model_from_checkpoint(ckpt, cfg)
    frames = _frames_for(model, cfg, data)
    if not 0 <= frame < len(frames):
        raise ValueError(f"--frame {frame} is outside the dataset's {len(frames)} frames")
    write_png(out, prediction_picture(model, frames, frame))
    return Path(out)
