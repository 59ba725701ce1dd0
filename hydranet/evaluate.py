"""Evaluation of a trained model: every head's metric against the trivial baseline it must beat.

`evaluate(model, frames)` runs the model over a dataset's frames in scene order (a model with the
video module frame by frame, its BEV queue carried within each scene, as in the car:
`hydranet.stream`), feeds every head's metric, and scores each head's `baseline` over the same
targets, so a table shows what training bought. It is a plain loop over `model.heads`: what a
head is judged by (`primary_metric`), its baseline and its picture (`draw`) belong to the task
(hydranet/tasks/), so a new head is evaluated without a change here (docs/adding_a_head.md).
Baselines use statistics of the evaluated set itself, which favours them (an oracle constant); a
head beats its baseline only by more than its primary metric's margin.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from hydranet.checkpoint import load_model
from hydranet.data.sources import cross_mapped, open_data
from hydranet.io import atomic_write_text
from hydranet.config import ConfigError
from hydranet.loader import LabelledFrames, camera_intrinsics
from hydranet.models.partial import supervised_targets, supervised_update
from hydranet.rig import rig_from_dict
from hydranet.stream import predict_stream


def evaluation_frames(model, cfg, data: str | Path, cameras: list[str] | None = None,
                      image_size: tuple[int, int] | None = None, format: str | None = None,
                      split: str | None = None, version: str | None = None,
                      model_classes: list[str] | None = None, fit: str | None = None,
                      meta: Mapping[str, Any] | None = None,
                      camera_K: Mapping[str, Any] | None = None) -> LabelledFrames:
    """The frames of dataset `data` (any format: `hydranet.data.sources.open_data`; data.root or a
    source of the config is read with its format/split/version/cameras) as the model sees them:
    its image size, its heads' targets, no augmentation. A camera-only model evaluates every
    camera of a dataset that lacks the config's cameras; a head needing calibration on an
    uncalibrated dataset (BDD100K) is a ConfigError. A dataset of another taxonomy (a sim-trained
    model on BDD100K, a nuScenes-trained one on the sim) is read through the cross-dataset class
    map (`hydranet.data.sources.cross_mapped`: classes renamed to the model's, those without a
    counterpart dropped, heads whose label names have none unscored); `model_classes`: the model's
    class list (its checkpoint meta), else its heads'. `fit` (default data.fit): how a frame of another
    size reaches the image size (`hydranet.loader.fit_to`); "camera" resamples each camera to the model's
    camera of that name: `camera_K` ({name: K at the image size}), else from `meta["rig"]` (a checkpoint's meta;
    ConfigError without either)."""
    from hydranet.data.reader import DatasetError
    from hydranet.experiment import check_heads

    try:
        ds = open_data(cfg.data, data, format, split, version, cameras)
    except DatasetError as e:
        wrong_cameras = "unknown camera" in str(e) or "has one camera" in str(e)
        if cameras is not None or getattr(model, "fusion", None) is not None or not wrong_cameras:
            raise
        ds = open_data(cfg.data, data, format, split, version, all_cameras=True)
    check_heads(list(model.heads), [getattr(ds, "format", "sim")], bev_only=True, where=f"the format of {data}")
    ds = cross_mapped(ds, dict(model.heads.items()), model_classes)
    fit = fit or cfg.data.fit
    hw = image_size or cfg.data.image_size
    if fit == "camera" and camera_K is None:
        if not meta or "rig" not in meta:
            raise ConfigError("data.fit=camera needs the model's rig (a checkpoint's meta); use data.fit=crop or stretch")
        camera_K = camera_intrinsics(rig_from_dict(meta["rig"], "checkpoint meta rig"), hw)
    return LabelledFrames(ds, dict(model.heads.items()), hw, None, cfg.seed, fit=fit, camera_K=camera_K)


def evaluate(model, frames: LabelledFrames, batch_size: int = 2, device: str | torch.device = "cpu",
             progress: bool = False, predictions_dir: str | Path | None = None,
             on_outputs: Callable[[dict, dict], None] | None = None, keep_states: bool = False) -> dict[str, Any]:
    """{"model": {head: metrics}, "baseline": {head: metrics}, "baseline_kind": {head: name},
    "primary": {head: metric name}, "higher_is_better", "margin", "beats_baseline": {head: bool},
    "frames", "labelled_frames": {head: frames with its labels}, "skipped", "predictions": [files]}.

    `frames`: single frames (clip_length 1). `predictions_dir`: each head's metric writes what it
    evaluated there in its exchange format (det2d COCO JSON, det3d nuScenes submission).
    `on_outputs(raw, batch)`: every batch's raw head outputs (mode "tensor") and the batch, for
    diagnostics beyond the heads' metrics (torch models only).

    `keep_states`: also "frame_ids" ([scene, frame dir] per evaluated frame, in order) and "states":
    {head: per frame the list of its items' metric states (`Metric.states`: a camera head's images,
    a BEV head's frame), None where the frame has no labels of the head; or None for a head whose
    metric keeps no states}, from which `metric_of_states` recomputes a head's metrics on any subset
    of frames without running the model again (the data engine's gate bootstraps over clips with them)."""
    from hydranet.models import HydraNet

    if on_outputs is not None and not isinstance(model, HydraNet):
        raise ValueError(f"evaluate(on_outputs=...) needs a torch HydraNet (raw outputs), not a {type(model).__name__}")
    model.eval().to(device)
    heads = model.heads
    metrics = {name: task.metric() for name, task in heads.items()}
    kept: dict[str, list] = {name: [] for name in heads}
    labelled = {name: 0 for name in heads}  # frames with the head's labels (a source without them scores nothing)
    per_frame: dict[str, list | None] = {name: [] for name in heads}  # keep_states: per frame its items' states
    it = predict_stream(model, frames, batch_size, device, on_outputs=on_outputs)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc="eval", unit="batch", dynamic_ncols=True)
    for batch, decoded in it:
        for name, metric in metrics.items():
            seen = len(metric.states() or []) if keep_states and per_frame[name] is not None else 0
            supervised_update(metric, decoded[name], batch["targets"][name])  # frames without its labels: not scored
            mask = batch["targets"][name].get("supervised")
            if keep_states and per_frame[name] is not None:
                per_frame[name] = _frame_states(metric, seen, len(decoded[name]), len(batch["images"]), mask,
                                                per_frame[name])
            labelled[name] += len(decoded[name]) if mask is None else int(torch.as_tensor(mask).sum())
            t = supervised_targets(batch["targets"][name], len(decoded[name]))
            if t is not None:
                kept[name].append(t)
    results = {name: m.compute() for name, m in metrics.items()}
    base = {name: task.baseline(kept[name]) if kept[name] else {} for name, task in heads.items()}
    written: list[str] = []
    if predictions_dir is not None:
        Path(predictions_dir).mkdir(parents=True, exist_ok=True)
        written = [str(p) for m in metrics.values() for p in m.write_predictions(predictions_dir)]
    for name, ms in results.items():
        bad = [k for k, v in ms.items() if isinstance(v, float) and math.isinf(v)]
        if bad:
            raise ValueError(f"head '{name}': metric '{bad[0]}' is infinite; the model's outputs are not finite")
    primary = {name: task.primary_metric for name, task in heads.items()}
    skipped = list(getattr(frames.data, "skipped", []))
    out = {"model": results, "baseline": base, "baseline_kind": {n: t.baseline_name for n, t in heads.items()},
            "primary": {n: p.name for n, p in primary.items()},
            "higher_is_better": {n: p.higher_is_better for n, p in primary.items()},
            "margin": {n: p.margin for n, p in primary.items()},
            "beats_baseline": {n: p.beats(results[n].get(p.name, math.nan), base[n].get(p.name, math.nan))
                               for n, p in primary.items()},
            "frames": len(frames) - len(skipped), "labelled_frames": labelled, "skipped": skipped,
            "predictions": written}
    if keep_states:
        out["states"] = per_frame
        out["frame_ids"] = _frame_ids(frames, skipped)
        bad = [h for h, st in per_frame.items() if st is not None and len(st) != len(out["frame_ids"])]
        if bad:
            raise ValueError(f"head '{bad[0]}': {len(per_frame[bad[0]])} frames of metric states, "
                             f"{len(out['frame_ids'])} frames evaluated")
    cross = getattr(frames.data, "cross_map", None)
    if cross:  # another taxonomy: say how classes were mapped, and leave out the heads with no counterpart
        out["class_map"] = cross
        gone = [h for h in cross["unscored"] if h in heads]
        if gone:
            out = {k: ({h: v for h, v in val.items() if h not in gone} if k != "labelled_frames" and
                       isinstance(val, Mapping) and set(gone) & set(val) else val) for k, val in out.items()}
            out["not_scored"] = gone
    return out


def _frame_states(metric, seen: int, rows: int, batch_frames: int, mask, kept: list) -> list | None:
    """`kept` extended by this batch's frames: per frame the list of the items `metric` added (its
    `rows` // `batch_frames` rows of each supervised frame), None for a frame without the head's labels;
    None when the metric keeps no states."""
    states = metric.states()
    if states is None:
        return None
    new = states[seen:]
    per = rows // max(batch_frames, 1)
    supervised = [True] * batch_frames if mask is None else [bool(v) for v in torch.as_tensor(mask).reshape(-1)]
    k = 0
    for ok in supervised:
        kept.append(list(new[k:k + per]) if ok else None)
        k += per if ok else 0
    if k != len(new):
        raise ValueError(f"metric {type(metric).__name__} added {len(new)} states for {sum(supervised)} labelled "
                         f"frames of {per} items each")
    return kept


def _frame_ids(frames: LabelledFrames, skipped: Sequence[str]) -> list[list[str]]:
    """[scene, frame dir] of every evaluated frame, in the order `predict_stream` scores them (bad
    frames, data.on_bad_frame=skip, left out)."""
    data = frames.data
    is_bad = getattr(data, "is_bad", None)
    out = []
    for i in range(len(frames)):
        j = frames.frame_index(i)
        if is_bad is not None and is_bad(j):
            continue
        out.append([str(x) for x in data.frame_ids[j][:2]])
    return out


def metric_of_states(task, states: Sequence) -> dict[str, float]:
    """A head's metrics over per-frame states (`evaluate(keep_states=True)`["states"][head], any subset
    of frames, repeats allowed): its task's `Metric.compute_states` over the frames' items."""
    items = [s for frame in states if frame is not None for s in frame]
    return task.metric().compute_states(items)


def metric_text(v: float | None) -> str:
    """A metric for a table: "n/a" where it is undefined (NaN: nothing to score, e.g. no matched sign)."""
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.4f}"


def format_table(results: Mapping[str, Any]) -> str:
    """Every head's metrics, model against baseline; the primary metric marked with '*'."""
    rows = [("head", "metric", "model", "baseline", "")]
    # a head no evaluated frame has labels for (lanes on Cityscapes, det2d on TuSimple): a note, not a metric row
    unlabelled = [t for t in results["model"] if results.get("labelled_frames", {}).get(t) == 0
                  and t not in results.get("not_scored", [])]
    for task, ms in results["model"].items():
        if task in unlabelled:
            continue
        base = results["baseline"].get(task, {})
        for k, v in ms.items():
            mark = ""
            if results["primary"].get(task) == k:
                margin = results.get("margin", {}).get(task, 0.0)
                mark = (f"* beats baseline by > {margin:g}" if results["beats_baseline"].get(task)
                        else f"* DOES NOT beat baseline by > {margin:g}")
            b = base.get(k)
            rows.append((task, k, metric_text(v), "-" if b is None else metric_text(b), mark))
    unscored = results.get("class_map", {}).get("unscored", {})
    for task in list(results.get("not_scored", [])) + unlabelled:
        why = f"not scored: {unscored[task]}" if task in unscored else "not scored: no frame of this dataset has its labels"
        rows.append((task, "-", "n/a", "n/a", why))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    kinds = ", ".join(f"{k}: {v}" for k, v in results.get("baseline_kind", {}).items())
    text = "\n".join(lines) + f"\nbaselines ({kinds}); * = the head's primary metric; n/a = undefined (nothing to score)"
    cm = results.get("class_map")
    if cm:
        text += "\n" + class_map_text(cm)
    if results.get("skipped"):
        text += (f"\nSKIPPED {len(results['skipped'])} bad frame(s) (data.on_bad_frame=skip), not scored: "
                 f"{', '.join(results['skipped'][:3])}{' ...' if len(results['skipped']) > 3 else ''}")
    return text


def class_map_text(cm: Mapping[str, Any]) -> str:
    """The cross-dataset class map of an evaluation (docs/datasets.md) in one line."""
    parts = [f"renamed {', '.join(f'{a} -> {b}' for a, b in cm['renamed'].items())}"] if cm.get("renamed") else []
    gone = [f"dataset {', '.join(cm['dropped'])}"] if cm.get("dropped") else []
    gone += [f"model {', '.join(cm['model_only'])}"] if cm.get("model_only") else []
    parts += [f"left out of the metric (no counterpart): {'; '.join(gone)}"] if gone else []
    return f"class map ({cm.get('format')} dataset onto the model's classes, docs/datasets.md): " + \
        ("; ".join(parts) or "same classes")


def format_sources_table(results: Mapping[str, Any]) -> str:
    """One table per source (`evaluate_sources`), each headed by its name, format, split and frames."""
    parts = []
    for name, r in results["sources"].items():
        what = ", ".join(str(x) for x in (r.get("format"), r.get("version"), r.get("split") and f"split {r['split']}")
                         if x)
        parts.append(f"== source {name} ({what}; {r['data']}; {r['frames']} frames) ==\n{format_table(r)}")
    return "\n\n".join(parts)


def plain_json(obj: Any) -> Any:
    """Results as JSON: NaN (a metric with nothing to score) becomes null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {k: plain_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain_json(v) for v in obj]
    return obj


def write_results(results: Mapping[str, Any], out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(out, json.dumps(plain_json(results), indent=2) + "\n")  # never half-written


def evaluate_checkpoint(checkpoint: str | Path, data: str | Path | Sequence[str | Path] | None,
                        out: str | Path | None = None, save_predictions: str | Path | None = None,
                        progress: bool = True, on_outputs: Callable[[dict, dict], None] | None = None,
                        format: str | None = None, split: str | None = None,
                        version: str | None = None, keep_states: bool = False, fit: str | None = None,
                        loaded: tuple | None = None) -> dict[str, Any]:
    """Load a checkpoint, evaluate it on `data`, write metrics JSON to `out`; returns the results.
    `loaded`: what `load_model(checkpoint)` gave, to evaluate one model on many folders without loading it each time.
    `keep_states`: per-frame metric states in the results (`evaluate`; one folder only). `fit`: how a frame
    reaches the model's input size (default the run's data.fit; `hydranet.loader.fit_to`).
    The heads' prediction files (det2d COCO JSON, det3d nuScenes submission) go to
    `save_predictions` (default: the folder of `out`); results["predictions"] lists them.

    `data` one folder: flat results. Several folders, or None on a run with `data.sources`:
    every dataset evaluated on its own (`evaluate_sources`): {"sources": {name: results}, ...}."""
    many = data is None or not isinstance(data, (str, Path))
    if many and data is not None and len(data) == 1:
        data, many = data[0], False
    model, cfg, ckpt = loaded if loaded is not None else load_model(checkpoint)
    if many:
        if data is None and not cfg.data.sources:
            data, many = cfg.data.root, False
        else:
            return evaluate_sources((model, cfg, ckpt), checkpoint, data, out, save_predictions, progress, on_outputs,
                                    format, split, version, fit)
    if save_predictions is None and out is not None:
        save_predictions = Path(out).parent
    results = _evaluate_loaded(model, cfg, ckpt, checkpoint, data, save_predictions, progress, on_outputs, format,
                               split, version, keep_states, fit)
    if out is not None:
        write_results(results, out)
    return results


def _evaluate_loaded(model, cfg, ckpt, checkpoint, data, save_predictions, progress, on_outputs, format=None,
                     split=None, version=None, keep_states=False, fit=None) -> dict[str, Any]:
    device = "cuda" if cfg.device != "cpu" and torch.cuda.is_available() else "cpu"
    model, cfg, note = narrowed_to_data(model, cfg, ckpt, checkpoint, data, format, split, version)
    meta = json.loads(ckpt["meta"])
    frames = evaluation_frames(model, cfg, data, cameras=list(cfg.data.cameras) if note else None, format=format,
                               split=split, version=version, model_classes=meta.get("classes"), fit=fit, meta=meta)
    if model.fusion is not None:
        check_calibration(rig_from_dict(json.loads(ckpt["meta"])["rig"], "checkpoint meta rig"), frames, str(data))
    results = evaluate(model, frames, cfg.batch_size, device, progress, save_predictions, on_outputs, keep_states)
    results.update({"checkpoint": str(checkpoint), "data": str(data), "step": int(ckpt["step"]),
                    "format": getattr(frames.data, "format", "sim"), "split": getattr(frames.data, "split", None),
                    "version": getattr(frames.data, "version", None), "cameras": list(frames.data.rig.names)})
    if note:
        results["note"] = note
    return results


def narrowed_to_data(model, cfg, ckpt, checkpoint, data, format=None, split=None, version=None) -> tuple[Any, Any, str]:
    """(model, cfg, note): a BEV model's camera heads alone on the model's cameras that dataset `data` has, when it
    has some but not all of them (genuine KITTI or Cityscapes: one CAM_FRONT) and the model has camera heads
    (`model_for_cameras`: the same weights; data.cameras narrowed), with the line saying which BEV heads are left
    out; else the model unchanged and no note (a dataset that cannot be opened says why in `evaluation_frames`)."""
    from hydranet.checkpoint import model_cameras_of, model_for_cameras
    from hydranet.data.reader import DatasetError
    from hydranet.rig import camera_subset, camera_subset_line
    from hydranet.tasks import BEV_TASKS

    if model.fusion is None:
        return model, cfg, ""
    try:
        names = open_data(cfg.data, data, format, split, version, channels=("images",), all_cameras=True).rig.names
    except (DatasetError, ValueError, OSError):
        return model, cfg, ""
    cams = model_cameras_of(cfg, json.loads(ckpt["meta"]))
    present = camera_subset(cams, names)
    if present is None or all(h in BEV_TASKS for h in model.heads):
        return model, cfg, ""  # check_calibration says what is wrong
    sub, sub_cfg = model_for_cameras(ckpt, cfg, present, f"checkpoint {checkpoint}")
    skipped = [h for h in model.heads if h not in sub.heads]
    return sub, sub_cfg, camera_subset_line(str(checkpoint), skipped, cams, list(sub.heads), present)


def scored_only(results: Mapping[str, Any]) -> dict[str, Any]:
    """Results without the heads no evaluated frame has labels for (listed in "not_scored"): on a
    dataset that cannot supervise a head its metric is not a number worth printing (0 or NaN)."""
    gone = [h for h, n in results.get("labelled_frames", {}).items() if n == 0]
    out = {k: ({h: v for h, v in val.items() if h not in gone} if isinstance(val, Mapping) and set(gone) & set(val)
               else val) for k, val in results.items()}
    out["not_scored"] = gone
    return out


def source_names(cfg, roots: Sequence[str | Path]) -> list[str]:
    """A name per evaluated folder: its data.sources entry's (name, else "<format><index>" with the
    detected format, as training names it), else the folder's own name; repeats get "-2", "-3", ..."""
    from hydranet.data.formats import detect_format
    from hydranet.data.sources import same_path

    names: list[str] = []
    for root in roots:
        i = next((i for i, s in enumerate(cfg.data.sources) if same_path(root, s.root)), None)
        if i is not None:
            src = cfg.data.sources[i]
            name = src.name or f"{src.format if src.format != 'auto' else detect_format(root)}{i}"
        else:
            name = Path(root).name or str(root)
        base, k = name, 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        names.append(name)
    return names


def evaluate_sources(loaded, checkpoint: str | Path, data: Sequence[str | Path] | None = None,
                     out: str | Path | None = None, save_predictions: str | Path | None = None, progress: bool = True,
                     on_outputs: Callable[[dict, dict], None] | None = None, format: str | None = None,
                     split: str | None = None, version: str | None = None, fit: str | None = None) -> dict[str, Any]:
    """Every dataset evaluated on its own, as `evaluate_checkpoint(checkpoint, root)` would
    (each read with its data.sources settings), scored only on the heads it has labels for:
    {"sources": {name: results (`scored_only`)}, "checkpoint", "step", "data": [roots],
    "predictions": [files]}. `loaded` = load_model(checkpoint) (or None). Each source's
    prediction files go to `<save_predictions>/<name>/`."""
    if format is not None or split is not None or version is not None:
        raise ValueError("--format/--split/--version apply to one dataset; with several, each is read with its "
                         "data.sources settings (or give one --data)")
    model, cfg, ckpt = loaded if loaded is not None else load_model(checkpoint)
    roots = [s.root for s in cfg.data.sources] if data is None else list(data)
    if not roots:
        raise ValueError(f"{checkpoint}: the run has no data.sources; pass --data with the datasets to evaluate")
    if save_predictions is None and out is not None:
        save_predictions = Path(out).parent
    names = source_names(cfg, roots)
    per = [_evaluate_loaded(model, cfg, ckpt, checkpoint, root, None if save_predictions is None else
                            Path(save_predictions) / name, progress, on_outputs, fit=fit)
           for root, name in zip(roots, names)]
    results = {"sources": {n: scored_only(r) for n, r in zip(names, per)}, "checkpoint": str(checkpoint),
               "step": int(ckpt["step"]), "data": [str(r) for r in roots],
               "predictions": [p for r in per for p in r["predictions"]]}
    if out is not None:
        write_results(results, out)
    return results


def check_calibration(model_rig, frames: LabelledFrames, where: str, tol_px: float = 0.5, tol_m: float = 0.01,
                      tol_rot: float = 0.01) -> None:
    """A BEV model is trained for its rig (`model_rig`, at the model's input size): refuse a dataset
    whose cameras, at that size, differ by more than `tol_px` in K, `tol_m` in position or `tol_rot`
    in a rotation-matrix entry (its view transform would put features in the wrong cells)."""
    import numpy as np

    H, W = frames.image_hw
    K, T, names = frames.data.rig.resized(W, H, frames.fit).calibration()
    K0, T0, names0 = model_rig.calibration()
    if names != names0:
        raise ValueError(f"{where}: cameras {names}, the BEV model was trained on {names0}; evaluate on data of its rig")
    D, D0 = frames.data.rig.distortion(), model_rig.distortion()
    for n, name in enumerate(names):
        if not np.allclose(D[n], D0[n], atol=1e-6):
            raise ValueError(f"{where}: camera {name}'s lens model {D[n].tolist()} differs from the BEV model's "
                             f"{D0[n].tolist()}; its view transform would project wrongly: evaluate on data of the model's rig")
    for n, name in enumerate(names):
        dk, dt = np.abs(K[n] - K0[n]).max(), np.abs(T[n][:3, 3] - T0[n][:3, 3]).max()
        dr = np.abs(T[n][:3, :3] - T0[n][:3, :3]).max()
        if dk > tol_px or dt > tol_m or dr > tol_rot:
            raise ValueError(f"{where}: camera {name}'s calibration differs from the BEV model's (K by {dk:.3g} px, "
                             f"position by {dt:.3g} m, rotation by {dr:.3g}); its view transform would project wrongly: "
                             "evaluate on data of the model's rig")


def viz_checkpoint(checkpoint: str | Path, data: str | Path, out: str | Path, frame: int = 0) -> Path:
    """Write the prediction picture (`hydranet.viz.prediction_picture`) of frame `frame` of `data` to PNG `out`."""
    from hydranet.stream import predict_frame
    from hydranet.viz import prediction_picture, write_png

    out = Path(out)
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {out}: the picture is written as PNG; give a file name ending in .png")
    model, cfg, ckpt = load_model(checkpoint)
    model, cfg, note = narrowed_to_data(model, cfg, ckpt, checkpoint, data)  # some of its cameras: the camera heads
    frames = evaluation_frames(model, cfg, data, cameras=list(cfg.data.cameras) if note else None,
                               meta=json.loads(ckpt["meta"]))
    if model.fusion is not None:  # a BEV picture of another rig's data would put its features in the wrong cells
        check_calibration(rig_from_dict(json.loads(ckpt["meta"])["rig"], "checkpoint meta rig"), frames, str(data))
    if note:
        print(note)
    if not 0 <= frame < len(frames):
        raise ValueError(f"--frame {frame} is outside the dataset's {len(frames)} frames")
    sample, pred = predict_frame(model, frames, frame)
    write_png(out, prediction_picture(model, sample, pred, frames.data.meta))
    return out
