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
| det3d         | the empty detection set                                               |
| bevmap        | the per-cell majority map of the evaluated frames                     |

Baselines use statistics of the evaluated set itself, which favours them (an oracle constant).
`prediction_picture` draws predictions next to ground truth for all cameras of a frame, and the
bird's-eye view (true and predicted 3D boxes with velocity arrows, the BEV map) for BEV models.

BEV models (docs/bev.md): a model with the video module is evaluated as it runs in the car, frame
by frame in scene order, feeding back its BEV queue (`prev_bev`, `ego_motion`; reset at every new
scene), so every frame is scored. `det3d` also gets the nuScenes metrics ("nuscenes/mAP",
"nuscenes/NDS", "nuscenes/mATE".."nuscenes/mAAE": hydranet.metrics.evaluate_boxes on GT built from
the labels as the nuScenes export filters them, hydranet/nuscenes_results.py) and its predictions
can be written as a nuScenes submission file (`results_json`) whose sample tokens are those of
`export_nuscenes` of the same dataset, for `hydranet eval-nuscenes`.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch

from hydranet.loader import Collate, TrainingFrames
from hydranet.models import HydraNet
from hydranet.models.video import relative_motion
from hydranet.tasks import to_device
from hydranet.viz import draw_bev, draw_camera, mosaic

# the metric each head is judged by, and whether higher is better
PRIMARY: dict[str, tuple[str, bool]] = {
    "det2d": ("mAP50", True), "signs_lights": ("accuracy", True), "lanes": ("pixel_iou", True),
    "drivable": ("iou", True), "depth": ("abs_rel", False), "normals": ("mean_angle_deg", False),
    "det3d": ("nuscenes/NDS", True), "bevmap": ("mIoU", True)}
BASELINE_NAMES = {
    "det2d": "empty detections", "signs_lights": "GT boxes, majority class", "lanes": "no lanes",
    "drivable": "per-pixel majority", "depth": "mean depth", "normals": "mean normal",
    "det3d": "empty detections", "bevmap": "per-cell majority"}


def _frames_for(model: HydraNet, cfg, data: str | Path) -> TrainingFrames:
    from hydranet.data import SimDataset

    ds = SimDataset(data, cameras=list(cfg.data.cameras) if cfg.data.cameras else None,
                    on_bad_frame=cfg.data.on_bad_frame)
    return TrainingFrames(ds, dict(model.heads.items()), cfg.data.image_size, None, cfg.seed)


def _video_frames(model: HydraNet) -> int:
    video = getattr(model.fusion, "video", None)
    return int(video.frames) if video is not None else 1


def _nuscenes_summary(metrics) -> dict[str, float]:
    out = {"nuscenes/mAP": float(metrics.mean_ap), "nuscenes/NDS": float(metrics.nd_score)}
    short = {"trans_err": "mATE", "scale_err": "mASE", "orient_err": "mAOE", "vel_err": "mAVE", "attr_err": "mAAE"}
    out.update({f"nuscenes/{short[k]}": float(v) for k, v in metrics.tp_errors.items()})
    return out


@torch.no_grad()
def evaluate(model: HydraNet, frames: TrainingFrames, batch_size: int = 2, device: str | torch.device = "cpu",
             progress: bool = False, coco_dir: str | Path | None = None,
             results_json: str | Path | None = None,
             on_outputs: Callable[[dict, dict], None] | None = None) -> dict[str, Any]:
    """{"model": {task: metrics}, "baseline": {task: metrics}, "baseline_kind", "primary", "beats_baseline"}.

    `frames`: single frames (clip_length 1); a model with the video module runs them in order, one
    at a time, feeding its BEV queue back within each scene. `results_json`: write det3d
    predictions there in the nuScenes submission format (hydranet/nuscenes_results.py).
    `on_outputs(raw, batch)`: called with every batch's raw head outputs (mode "tensor") and the
    batch (its targets included), for diagnostics beyond the heads' metrics (torch models only)."""
    from hydranet.data import SimDataset
    from hydranet.metrics import DetectionConfig, evaluate_boxes
    from hydranet.nuscenes_results import (frame_eval_boxes, frame_results, result_eval_boxes, sample_token,
                                           write_results)

    if frames.clip_length != 1:
        raise ValueError("evaluate() takes single frames (TrainingFrames clip_length=1); the video queue is fed "
                         "frame by frame")
    if on_outputs is not None and not isinstance(model, HydraNet):
        raise ValueError(f"evaluate(on_outputs=...) needs a torch HydraNet (raw outputs), not a {type(model).__name__}")
    model.eval().to(device)
    video = _video_frames(model) > 1
    loader = torch.utils.data.DataLoader(frames, batch_size=1 if video else batch_size, shuffle=False,
                                         collate_fn=Collate(model.heads))
    metrics = {n: t.metric() for n, t in model.heads.items()}
    kept: list[dict] = []
    det3d = model.heads["det3d"] if "det3d" in model.heads else None
    labels_ds = SimDataset(frames.data.root, channels=()) if det3d is not None else None
    nus_cfg = DetectionConfig()
    submission: dict[str, list] = {}
    nus_gt: dict[str, list] = {}
    nus_pred: dict[str, list] = {}
    it = loader
    if progress:
        from tqdm import tqdm

        it = tqdm(loader, desc="eval", unit="batch", dynamic_ncols=True)
    pos, state, prev_pose, prev_scene = 0, None, None, None
    for batch in it:
        idx = [frames.frame_index(pos + b) for b in range(len(batch["images"]))]
        pos += len(idx)
        if video:  # stream: the queue of the previous frame of the same scene
            scene = frames.data.frame_ids[idx[0]][0]
            if state is not None and scene == prev_scene:
                batch["prev_bev"], batch["ego_motion"] = state, relative_motion(prev_pose, batch["ego2world"])
            prev_scene, prev_pose = scene, batch["ego2world"]
        if on_outputs is None:  # an OnnxPredictor (deploy) stands in for the model here: "predict" only
            decoded = model(to_device(batch, device), "predict")
        else:  # the raw outputs for the probe, then the decoding of mode "predict"
            raw = model(to_device(batch, device), "tensor")
            bev_state = raw.pop("bev_state", None)
            on_outputs(raw, batch)
            decoded = {**model.decode(raw), **({"bev_state": bev_state} if bev_state is not None else {})}
        if video:
            state = decoded["bev_state"]["bev_queue"].cpu()
        for n, m in metrics.items():
            m.update(decoded[n], batch["targets"][n])
        if det3d is not None:
            for b, i in enumerate(idx):
                lab = labels_ds.load(i)
                tok = sample_token(*labels_ds.frame_ids[i])
                d = decoded["det3d"][b]
                entries = frame_results(d["boxes"].cpu().numpy(), d["scores"].cpu().numpy(), d["labels"].cpu().numpy(),
                                        det3d.classes, lab["ego2world"], tok)
                submission[tok] = entries
                nus_pred[tok] = result_eval_boxes(entries, lab["ego2world"], nus_cfg)
                nus_gt[tok] = frame_eval_boxes(lab["labels"], lab["ego2world"], tok, nus_cfg)
        kept.append(batch["targets"])
    results = {n: m.compute() for n, m in metrics.items()}
    nus_baseline = None
    if det3d is not None:
        results["det3d"].update(_nuscenes_summary(evaluate_boxes(nus_gt, nus_pred, nus_cfg)[0]))
        nus_baseline = _nuscenes_summary(evaluate_boxes(nus_gt, {t: [] for t in nus_gt}, nus_cfg)[0])
        if results_json is not None:
            write_results(results_json, submission)
    if coco_dir is not None and "det2d" in metrics:
        Path(coco_dir).mkdir(parents=True, exist_ok=True)
        metrics["det2d"].write_json(Path(coco_dir) / "det2d_gt.json", Path(coco_dir) / "det2d_predictions.json")
    base = baselines(model, kept)
    if nus_baseline is not None:
        base["det3d"].update(nus_baseline)
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


def _no_detections(task, targets: list[Mapping[str, Any]], box_dim: int) -> dict[str, float]:
    """The metric of a detection task that detects nothing (the trivial detection baseline)."""
    m = task.metric()
    empty = {"boxes": torch.zeros(0, box_dim), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.long)}
    for t in targets:
        m.update([empty] * len(t[task.name]["gt_boxes"]), t[task.name])
    return m.compute()


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
        out["det2d"] = _no_detections(heads["det2d"], targets, box_dim=4)
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
    if "det3d" in heads:
        out["det3d"] = _no_detections(heads["det3d"], targets, box_dim=9)
    if "bevmap" in heads:
        frac = sum(t["bevmap"]["mask"].double().sum(0) for t in targets) / sum(len(t["bevmap"]["mask"]) for t in targets)
        majority = frac > 0.5  # (K, X, Y)
        m = heads["bevmap"].metric()
        for t in targets:
            m.update([{"mask": majority} for _ in range(len(t["bevmap"]["mask"]))], t["bevmap"])
        out["bevmap"] = m.compute()
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
                        save_predictions: str | Path | None = None, progress: bool = True,
                        results_json: str | Path | None = None,
                        on_outputs: Callable[[dict, dict], None] | None = None) -> dict[str, Any]:
    """Load a checkpoint, evaluate it on `data`, write metrics JSON to `out`; returns the results.
    A model with det3d writes its nuScenes submission file to `results_json` (default: next to
    `out`, nuscenes_results.json); its path is results["nuscenes_results"]."""
    from hydranet.train import config_from_checkpoint, load_checkpoint, model_from_checkpoint

    ckpt = load_checkpoint(checkpoint)
    cfg = config_from_checkpoint(ckpt)
    model = model_from_checkpoint(ckpt, cfg)
    device = "cuda" if cfg.device != "cpu" and torch.cuda.is_available() else "cpu"
    frames = _frames_for(model, cfg, data)
    if results_json is None and out is not None and "det3d" in model.heads:
        results_json = Path(out).parent / "nuscenes_results.json"
    results = evaluate(model, frames, cfg.batch_size, device, progress, save_predictions, results_json, on_outputs)
    results.update({"checkpoint": str(checkpoint), "data": str(data), "step": int(ckpt["step"])})
    if results_json is not None and "det3d" in model.heads:
        results["nuscenes_results"] = str(results_json)
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
def predict_frame(model: HydraNet, frames: TrainingFrames, index: int) -> tuple[dict, dict]:
    """(sample, decoded predictions) of dataset frame `index` (no augmentation). A model with the
    video module first runs the up to T-1 earlier frames of the same scene, as in the car."""
    model.eval()
    device = next(model.parameters()).device
    single = TrainingFrames(frames.data, frames.tasks, frames.image_hw)
    s, f = frames.data._frames[index]
    first = max(index - f, index - _video_frames(model) + 1)
    state, prev_pose, pred = None, None, None
    for i in range(first, index + 1):
        batch = Collate(model.heads)([single[i]])
        if state is not None:
            batch["prev_bev"], batch["ego_motion"] = state, relative_motion(prev_pose, batch["ego2world"])
        pred = model(to_device(batch, device), "predict")
        state, prev_pose = (pred["bev_state"]["bev_queue"] if "bev_state" in pred else None), batch["ego2world"]
    return single.prepare(index), pred


def _bev_boxes(boxes: np.ndarray, labels: np.ndarray, classes: list[str], scores: np.ndarray | None = None,
               min_score: float = 0.3) -> list[dict]:
    out = []
    for k, b in enumerate(np.asarray(boxes).reshape(-1, 9)):
        if scores is not None and scores[k] < min_score:
            continue
        out.append({"center": b[:3].tolist(), "size": b[3:6].tolist(), "yaw": float(b[6]),
                    "velocity": [float(b[7]), float(b[8]), 0.0], "class": classes[int(labels[k])]})
    return out


def bev_picture(model: HydraNet, sample: dict, pred: dict, meta: dict, size: int = 256) -> np.ndarray | None:
    """Two BEV panels side by side: truth (dataset raster, true boxes with velocity arrows) |
    prediction (predicted BEV map, predicted boxes with arrows, true boxes as white outlines).
    None for a model without BEV heads."""
    if "det3d" not in pred and "bevmap" not in pred:
        return None
    head = model.heads["det3d"] if "det3d" in model.heads else model.heads["bevmap"]
    g = head.grid
    classes = list(model.heads["det3d"].classes) if "det3d" in model.heads else list(meta["classes"])
    gt = [b for b in sample["labels"]["boxes3d"] if b["class"] in classes and b.get("num_pixels", 1) > 0]
    b = meta["bev"]
    truth = draw_bev(sample.get("bev"), gt, classes, b["x_range"], b["y_range"], b["resolution"], size=size)
    predicted_map = None
    if "bevmap" in pred:
        chans = model.heads["bevmap"].channels
        mask = pred["bevmap"][0]["mask"].cpu().numpy()  # (K, X, Y)
        predicted_map = np.zeros((2, *mask.shape[1:]), np.uint8)
        for k, name in enumerate(("drivable", "lanes")):
            if name in chans:
                predicted_map[k] = mask[chans.index(name)] * 255
    boxes = []
    if "det3d" in pred:
        d = pred["det3d"][0]
        boxes = _bev_boxes(d["boxes"].cpu().numpy(), d["labels"].cpu().numpy(), classes, d["scores"].cpu().numpy())
    gt_model = [x for x in gt if g.x_range[0] <= x["center"][0] < g.x_range[1] and g.y_range[0] <= x["center"][1] < g.y_range[1]]
    predicted = draw_bev(predicted_map, boxes, classes, g.x_range, g.y_range, g.resolution, size=size, gt_boxes3d=gt_model)
    for img, text in ((truth, "BEV truth"), (predicted, "BEV prediction")):
        cv2.putText(img, text, (4, 12), cv2.FONT_HERSHEY_PLAIN, 0.8, (255, 255, 255), 1, cv2.LINE_AA)
    return np.concatenate([truth, np.full((truth.shape[0], 4, 3), 255, np.uint8), predicted], 1)


@torch.no_grad()
def prediction_picture(model: HydraNet, frames: TrainingFrames, index: int = 0) -> np.ndarray:
    """RGB mosaic, one row per camera: ground truth | prediction (boxes, lanes, drivable) and,
    for the heads present, depth and normals ground truth | prediction; BEV models add the
    bird's-eye view on the right (`bev_picture`). `index` is a dataset frame index."""
    sample, pred = predict_frame(model, frames, index)
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
    side = bev_picture(model, sample, pred, frames.data.meta)
    return mosaic(tiles, names, side, cols=len(tiles) // len(sample["camera_names"]))


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
