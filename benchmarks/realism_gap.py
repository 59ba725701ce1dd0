"""The realism gap: each head's metric on the sim's held-out scenes beside the same model on genuine frames (issue 32).

    python benchmarks/realism_gap.py --checkpoint RUN --out OUT [--sim-val DIR] [--kitti DIR] [--cityscapes DIR]
        [--tusimple DIR] [--culane DIR] [--nuscenes DIR] [--bdd100k DIR] [--split SOURCE=SPLIT ...] [--resamples 1000]
        [--seed 0]
        [--confidence 0.95] [--overwrite]

Any subset of the sources. Every source is scored by the project's own evaluation (`hydranet.evaluate`: the
readers, the cross-dataset class map, each head's metric, as `hydranet eval` scores it):

- **sim, all cameras**: the whole model (BEV heads too) on the sim's held-out scenes, as `hydranet eval` prints it;
- **sim, CAM_FRONT** and every **genuine source**: the checkpoint's camera heads on one front camera
  (`hydranet.checkpoint.model_for_cameras`, the same weights; the BEV heads need the model's whole rig, so a
  one-camera source cannot score them): the genuine frames are front-camera views, so this is the like-for-like
  sim figure, and the ratio real / sim is taken against it.

Each cell is the head's primary metric over the source's labelled frames with a seeded percentile bootstrap
over frames (`--resamples` draws of the frames with replacement, `numpy.random.default_rng([seed, 32])`; the
metric recomputed on each draw from the per-frame metric states that `evaluate(keep_states=True)` keeps, so an
AP is the AP of the resampled frames, not a mean of per-frame APs; the interval is `data_engine.intervals.interval`,
the gate's rule). det2d also gets car AP50 (`data_engine.intervals.ap50` of the car class alone, the issue's
target), lanes also the CULane-style lane F1 (hydranet/tasks/lanes.py, at the model's resolution). On KITTI
sources det2d also gets the KITTI benchmark's own 2D car AP|R40 for Easy, Moderate and Hard at its IoU 0.7 and at 0.5
(`hydranet.metrics.kitti`: the detections mapped back to the image's own pixels, `kitti_records`). On TuSimple
sources the lanes head also gets the benchmark's own accuracy, FP and FN
(`hydranet.metrics.tusimple`: the decoded lane mask read at the label's h_samples, per frame, means over frames).
The ratio table gives real / sim-CAM_FRONT per row with the interval of the ratio of independent draws.

Writes OUT/realism_gap.json (every cell, its draws' interval, the frames, the sources' folders and formats),
OUT/realism_gap.md (the tables) and OUT/<source>/metrics.json (the evaluation results, as `hydranet eval` writes
them); nothing outside OUT. An existing OUT is refused without --overwrite.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.experiment import FITS

GENUINE = ("kitti", "nuscenes", "bdd100k", "cityscapes", "tusimple", "culane")
FRONT = "CAM_FRONT"
BOOT_KEY = 32  # the issue number: the bootstrap's generator is default_rng([seed, BOOT_KEY])
CAR = "car"
KITTI_RESAMPLES = 200  # bootstrap draws of the KITTI benchmark's own AP cells (`kitti_cells`)


# -- intervals over frames -----------------------------------------------------------------------------
def frame_draws(n: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples, n) frame indices drawn with replacement, seeded."""
    return np.random.default_rng([seed, BOOT_KEY]).integers(0, n, (resamples, n)) if n else np.zeros((resamples, 0), int)


def bootstrap(frames: Sequence[Any], statistic: Callable[[list], float], resamples: int = 1000, seed: int = 0,
              confidence: float = 0.95) -> dict[str, Any]:
    """{"value", "low", "high", "frames", "draws"}: `statistic` over the per-frame items `frames` and its central
    `confidence` percentile interval over `resamples` bootstrap draws of the frames (low/high None when under
    half the draws are finite, e.g. one frame, or no frame at all)."""
    from data_engine.intervals import interval

    frames = list(frames)
    value = float(statistic(frames)) if frames else math.nan
    draws = np.array([statistic([frames[i] for i in idx]) for idx in frame_draws(len(frames), resamples, seed)],
                     np.float64) if len(frames) > 1 else np.full(resamples, np.nan)
    lo_hi = interval(draws, confidence) if len(frames) > 1 else None
    return {"value": value, "low": None if lo_hi is None else lo_hi[0], "high": None if lo_hi is None else lo_hi[1],
            "frames": len(frames), "draws": draws}


def ratio(real: Mapping[str, Any], sim: Mapping[str, Any], confidence: float = 0.95) -> dict[str, Any]:
    """real / sim of two bootstrapped cells, with the interval of the ratio of their (independent) draws."""
    from data_engine.intervals import ratio_interval

    v = real["value"] / sim["value"] if sim["value"] and math.isfinite(sim["value"]) else math.nan
    lo_hi = ratio_interval(real["draws"], sim["draws"], confidence)
    return {"value": v, "low": None if lo_hi is None else lo_hi[0], "high": None if lo_hi is None else lo_hi[1]}


# -- rows of a head -----------------------------------------------------------------------------------
def head_rows(name: str, task, classes: Sequence[str]) -> dict[str, Callable[[list], float]]:
    """{metric label: statistic over per-frame item lists} of a head: its primary metric recomputed from the
    frames' metric states (`Metric.merge_states` once per frame, then `compute_states`), for det2d car AP50 and for
    lanes the lane F1."""
    metric = task.metric()
    primary = task.primary_metric.name

    def primary_of(frames: list) -> float:
        v = metric.compute_states([s for f in frames for s in f]).get(primary, math.nan)
        return math.nan if v is None else float(v)

    rows = {primary: primary_of}
    if name == "lanes":
        rows["f1"] = lambda frames: float(metric.compute_states([s for f in frames for s in f])["f1"])
    if name == "det2d" and CAR in classes:
        from data_engine.intervals import ap50, class_states

        k = list(classes).index(CAR)
        rows["car AP50"] = lambda frames: ap50([class_states(metric.merge_states([s for f in frames for s in f]), k)])
    return rows


def frame_items(task, states: Sequence | None) -> list[list]:
    """Per labelled frame its items' metric states merged once (frames without the head's labels left out)."""
    metric = task.metric()
    out = []
    for frame in states or []:
        if frame is None:
            continue
        merged = metric.merge_states(frame)
        out.append(merged if isinstance(merged, list) else [merged])
    return out


# -- evaluation ---------------------------------------------------------------------------------------
def front_model(ckpt, cfg, where: str):
    """(model, cfg) of the checkpoint's camera heads on its front camera (or its first camera without one)."""
    from hydranet.checkpoint import model_cameras_of, model_for_cameras

    cams = model_cameras_of(cfg, json.loads(ckpt["meta"]))
    return model_for_cameras(ckpt, cfg, [FRONT if FRONT in cams else cams[0]], where)


def evaluate_source(model, cfg, ckpt, root: Path, fmt: str | None, split: str | None,
                    cameras: list[str] | None = None, fit: str | None = None) -> dict[str, Any]:
    """`hydranet.evaluate.evaluate` of `model` on `root` (keep_states), as `hydranet eval` reads the folder; on a
    TuSimple folder also "tusimple": per evaluated frame the benchmark's (accuracy, fp, fn) of the lanes head.
    `fit` (`hydranet.loader.fit_to`; default the run's data.fit): "camera" on a source without intrinsics
    (Cityscapes without camera.json) falls back to "crop", and a TuSimple folder is always stretched (the
    benchmark's own score reads the lanes back through the stretch); results["fit"] says which was used."""
    import torch

    from hydranet.evaluate import evaluation_frames, evaluate

    meta = json.loads(ckpt["meta"])
    frames = evaluation_frames(model, cfg, root, cameras=cameras, format=fmt, split=split,
                               model_classes=meta.get("classes"), fit=fit, meta=meta)
    tusimple = getattr(frames.data, "format", None) == "tusimple" and "lanes" in model.heads
    # TuSimple's own score reads the lanes back at the image's size through the stretch; no intrinsics: the aspect kept
    fallback = "stretch" if tusimple else "crop" if not np.isfinite(frames.data.rig.calibration()[0]).all() else None
    if frames.fit != "stretch" and fallback is not None and fallback != frames.fit:
        why = "its own score reads the lanes back through the stretch" if tusimple else "it has no intrinsics"
        print(f"[realism_gap] {root}: fit {fallback}, not {frames.fit}: {why}", file=sys.stderr, flush=True)
        frames = evaluation_frames(model, cfg, root, cameras=cameras, format=fmt, split=split,
                                   model_classes=meta.get("classes"), fit=fallback, meta=meta)
    kitti = getattr(frames.data, "format", None) == "kitti" and "det2d" in model.heads and frames.data.has_labels
    kept: list = []  # per evaluated image: TuSimple's decoded lane instances, or KITTI's decoded det2d boxes

    def keep(raw, batch):
        if tusimple:
            kept.extend(d["instances"].cpu().numpy() for d in model.heads["lanes"].decode(raw["lanes"]))
        else:
            kept.extend({k: v.cpu().numpy() for k, v in d.items()} for d in model.heads["det2d"].decode(raw["det2d"]))

    torch.manual_seed(cfg.seed)
    results = evaluate(model, frames, cfg.batch_size, "cpu", False, None, keep if tusimple or kitti else None,
                       keep_states=True)
    results.update({"data": str(root), "format": getattr(frames.data, "format", "sim"),
                    "split": getattr(frames.data, "split", None), "cameras": list(frames.data.rig.names),
                    "step": int(ckpt["step"]), "fit": frames.fit})
    if tusimple:
        results["tusimple"] = tusimple_scores(root, results.get("split"), results["frame_ids"], kept)
    if kitti:
        results["kitti"] = kitti_records(frames, meta.get("classes") or [], kept)
    return results


def kitti_records(frames, classes: Sequence[str], detections: Sequence[Mapping]) -> list[tuple[list, list]]:
    """Per evaluated KITTI frame (label_2 records, the model's 2D detections as KITTI records in the image's own
    pixels: `hydranet.metrics.kitti.detections_2d` through the fit that brought the frame to the model)."""
    from hydranet.loader import fit_windows
    from hydranet.metrics.kitti import detections_2d

    if len(detections) != len(frames):
        raise ValueError(f"{len(detections)} decoded det2d images for {len(frames)} evaluated KITTI frames")
    out = []
    for i, det in enumerate(detections):
        j = frames.frame_index(i)
        scales, offsets = fit_windows(frames.data[j], frames.image_hw, frames.fit, frames.camera_K)
        out.append((frames.data.kitti_labels(j),
                    detections_2d(det["boxes"], det["scores"], det["labels"], classes, scales[0], offsets[0])))
    return out


def kitti_cells(records: Sequence[tuple[list, list]], resamples: int, seed: int,
                confidence: float) -> dict[tuple[str, str], dict[str, Any]]:
    """{("det2d", "KITTI car AP|R40 <difficulty> @<IoU>"): cell}: the KITTI benchmark's own 2D car AP (40 recall
    positions, its Easy / Moderate / Hard, DontCare and Van as it treats them, `hydranet.metrics.kitti`) at its IoU
    0.7 and at 0.5, bootstrapped over frames as every cell but with at most KITTI_RESAMPLES draws (the official
    matching reruns at every recall threshold: about 0.1 s a draw on 20 frames)."""
    from hydranet.metrics.kitti import DIFFICULTIES, kitti_eval

    resamples = min(resamples, KITTI_RESAMPLES)
    cells = {}
    for iou in (0.7, 0.5):
        memo: dict[tuple, dict] = {}  # one draw's three difficulties from one evaluation: the draws repeat per cell

        def ap(frames: list, iou: float = iou, memo: dict = memo) -> dict:
            key = tuple(map(id, frames))
            if key not in memo:
                memo[key] = kitti_eval([f[0] for f in frames], [f[1] for f in frames], ("Car",), ("bbox",),
                                       min_overlap=iou)["Car"]["bbox"]
            return memo[key]

        for d in DIFFICULTIES:
            cells[("det2d", f"KITTI car AP|R40 {d} @{iou}")] = bootstrap(
                list(records), lambda frames, ap=ap, d=d: ap(frames)[d], resamples, seed, confidence)
    return cells


def tusimple_scores(root: Path, split: str | None, frame_ids: Sequence[Sequence[str]],
                    lanes: Sequence[np.ndarray]) -> list[tuple[float, float, float]]:
    """Per evaluated frame (its raw_file = frame_ids[i][1]) the TuSimple (accuracy, FP, FN) of its decoded lane
    instances read at the label's h_samples in the image's own size."""
    from hydranet.data.image import image_size
    from hydranet.data.tusimple import HEIGHT, WIDTH, label_files, read_records
    from hydranet.metrics.tusimple import lanes_at_rows, tusimple_accuracy

    if len(lanes) != len(frame_ids):
        raise ValueError(f"{len(lanes)} decoded lane maps for {len(frame_ids)} evaluated TuSimple frames")
    records = {r["raw_file"]: r for path in label_files(Path(root), split) for r in read_records(path)}
    out = []
    for (_, raw_file), inst in zip(frame_ids, lanes):
        rec = records[raw_file]
        size = image_size(Path(root) / raw_file) or (WIDTH, HEIGHT)
        out.append(tusimple_accuracy(lanes_at_rows(inst, rec["h_samples"], size), rec["lanes"], rec["h_samples"]))
    return out


# -- the table ------------------------------------------------------------------------------------------
def source_cells(results: Mapping[str, Any], tasks: Mapping[str, Any], classes: Sequence[str], resamples: int,
                 seed: int, confidence: float) -> dict[tuple[str, str], dict[str, Any]]:
    """{(head, metric): cell} of one evaluated source: a bootstrapped cell for every head with labelled frames,
    {"note": why} for a head the source has no labels for (or that its class map leaves out)."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    not_scored = set(results.get("not_scored", []))
    for head, task in tasks.items():
        rows = head_rows(head, task, classes)
        if head not in results["model"]:
            why = "BEV head: needs the whole rig" if task.space == "bev" else "not evaluated"
            cells.update({(head, m): {"note": why} for m in rows})
            continue
        labelled = results.get("labelled_frames", {}).get(head, 0)
        if head in not_scored or not labelled:
            cells.update({(head, m): {"note": "no labels"} for m in rows})
            continue
        states = results["states"].get(head)
        if states is None:
            cells.update({(head, m): {"note": "metric keeps no per-frame states"} for m in rows})
            continue
        items = frame_items(task, states)
        for m, stat in rows.items():
            cells[(head, m)] = bootstrap(items, stat, resamples, seed, confidence)
            if m == task.primary_metric.name:  # the bootstrap recomputes what evaluate printed: say so if not
                printed = results["model"][head].get(m)
                v = cells[(head, m)]["value"]
                if printed is not None and math.isfinite(v) and not math.isclose(v, printed, rel_tol=1e-6, abs_tol=1e-9):
                    raise ValueError(f"head '{head}': {m} from the frames' states {v} differs from evaluate's {printed}")
    if "kitti" in results:
        cells.update(kitti_cells(results["kitti"], resamples, seed, confidence))
    if "tusimple" in results:
        per = np.asarray(results["tusimple"], np.float64).reshape(-1, 3)
        for j, m in enumerate(("TuSimple accuracy", "TuSimple FP", "TuSimple FN")):
            cells[("lanes", m)] = bootstrap(list(per[:, j]), lambda v: float(np.mean(v)), resamples, seed, confidence)
    return cells


def gap_table(sources: Mapping[str, Mapping[tuple[str, str], dict]], reference: str | None,
              confidence: float = 0.95) -> dict[str, Any]:
    """{"rows": [[head, metric]], "sources": [names], "cells": {source: {"head/metric": cell}}, "ratios":
    {source: {"head/metric": real / reference}}} (ratios for every source but the sim ones, against `reference`)."""
    rows: list[tuple[str, str]] = []
    for cells in sources.values():
        rows += [r for r in cells if r not in rows]
    key = "/".join
    out = {"rows": [list(r) for r in rows], "sources": list(sources), "reference": reference,
           "cells": {s: {key(r): c for r, c in cells.items()} for s, cells in sources.items()}, "ratios": {}}
    if reference is not None and reference in sources:
        ref = sources[reference]
        for s, cells in sources.items():
            if s.startswith("sim"):
                continue
            out["ratios"][s] = {key(r): ratio(c, ref[r], confidence) for r, c in cells.items()
                                if "value" in c and r in ref and "value" in ref[r]}
    return out


def cell_text(c: Mapping[str, Any] | None, digits: int = 3) -> str:
    if c is None:
        return "-"
    if "note" in c:
        return c["note"]
    v = c["value"]
    if v is None or not math.isfinite(v):
        return f"n/a ({c.get('frames', 0)} fr.)" if "frames" in c else "n/a"
    ci = f" [{c['low']:.{digits}f}, {c['high']:.{digits}f}]" if c.get("low") is not None else " [no interval]"
    return f"{v:.{digits}f}{ci}" + (f" ({c['frames']} fr.)" if "frames" in c else "")


def markdown(table: Mapping[str, Any], titles: Mapping[str, str] | None = None) -> str:
    """The gap table and the ratio table as markdown."""
    titles = titles or {}
    srcs = table["sources"]
    head = "| head | metric | " + " | ".join(titles.get(s, s) for s in srcs) + " |"
    lines = [head, "|" + "---|" * (len(srcs) + 2)]
    for h, m in table["rows"]:
        lines.append(f"| {h} | {m} | " + " | ".join(cell_text(table["cells"][s].get(f"{h}/{m}")) for s in srcs) + " |")
    if table["ratios"]:
        gen = list(table["ratios"])
        ref = titles.get(table["reference"], table["reference"])
        lines += ["", f"real / sim ({ref}), with the interval of the ratio of independent draws:", "",
                  "| head | metric | " + " | ".join(titles.get(s, s) for s in gen) + " |", "|" + "---|" * (len(gen) + 2)]
        for h, m in table["rows"]:
            if not any(f"{h}/{m}" in table["ratios"][s] for s in gen):
                continue
            lines.append(f"| {h} | {m} | " + " | ".join(cell_text(table["ratios"][s].get(f"{h}/{m}"), 2) for s in gen)
                         + " |")
    return "\n".join(lines)


def plain(obj: Any) -> Any:
    """JSON-ready: draws dropped, NaN as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items() if k != "draws"}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return plain(obj.item())
    return obj


def check_out(out: Path, overwrite: bool) -> None:
    if out.exists():
        if not overwrite:
            raise SystemExit(f"--out {out} exists: pass --overwrite to replace it")
        shutil.rmtree(out)


def run(checkpoint: Path, out: Path, folders: Mapping[str, Path], splits: Mapping[str, str] | None = None,
        resamples: int = 1000, seed: int = 0, confidence: float = 0.95, progress: bool = True,
        fit: str | None = None) -> dict[str, Any]:
    """Evaluate every source of `folders` ({"sim": DIR, "kitti": DIR, ...}) and write OUT (module docstring); `fit`:
    how the genuine sources' frames reach the model's input size (`evaluate_source`; the sim's: the run's data.fit)."""
    from hydranet.checkpoint import config_from_checkpoint, load_model
    from hydranet.evaluate import plain_json

    splits = dict(splits or {})
    unknown = [s for s in folders if s not in ("sim",) + GENUINE]
    if unknown:
        raise ValueError(f"unknown source {unknown[0]!r}; known: sim, {', '.join(GENUINE)}")
    model, cfg, ckpt = load_model(checkpoint)
    classes = json.loads(ckpt["meta"]).get("classes") or []
    fmodel, fcfg = front_model(ckpt, config_from_checkpoint(ckpt), f"checkpoint {checkpoint}")
    out.mkdir(parents=True)
    runs: list[tuple[str, Any, Any, Path, str | None]] = []
    if "sim" in folders:
        runs += [("sim", model, cfg, folders["sim"], None), (f"sim {FRONT}", fmodel, fcfg, folders["sim"], None)]
    runs += [(s, fmodel, fcfg, folders[s], s) for s in GENUINE if s in folders]
    cells: dict[str, dict] = {}
    meta: dict[str, Any] = {}
    for name, m, c, root, fmt in runs:
        if progress:
            print(f"[realism_gap] {name}: {root}", file=sys.stderr, flush=True)
        cams = [FRONT] if name == f"sim {FRONT}" else None
        try:
            results = evaluate_source(m, c, ckpt, Path(root), fmt, splits.get(name.split()[0]), cams,
                                      None if fmt is None else fit)
        except Exception as e:  # a source the model cannot be scored on: one line in the table, not a crash
            from hydranet.data.reader import DatasetError
            from hydranet.experiment import ConfigError

            if not isinstance(e, (ValueError, DatasetError, ConfigError)):
                raise
            cells[name] = {(h, r): {"note": f"refused: {e}"} for h, t in model.heads.items()
                           for r in head_rows(h, t, classes)}
            meta[name] = {"data": str(root), "error": str(e)}
            continue
        folder = out / name.replace(" ", "_")
        folder.mkdir()
        (folder / "metrics.json").write_text(json.dumps(plain_json({k: v for k, v in results.items() if k not in ("states", "kitti")}),
                                                        indent=2) + "\n")
        tasks = dict(model.heads.items())
        cells[name] = source_cells(results, tasks, classes, resamples, seed, confidence)
        meta[name] = {k: results.get(k) for k in ("data", "format", "split", "cameras", "frames", "labelled_frames",
                                                   "class_map", "fit")}
    reference = f"sim {FRONT}" if f"sim {FRONT}" in cells else None
    table = gap_table(cells, reference, confidence)
    table.update({"checkpoint": str(checkpoint), "step": int(ckpt["step"]), "fit": fit or cfg.data.fit,
                  "resamples": resamples, "seed": seed,
                  "confidence": confidence, "bootstrap": "frames with replacement, numpy default_rng([seed, 32])",
                  "sources_meta": meta})
    titles = {"sim": "sim held-out, all cameras", f"sim {FRONT}": f"sim held-out, {FRONT}"}
    text = markdown(table, titles)
    (out / "realism_gap.json").write_text(json.dumps(plain(table), indent=2) + "\n")
    fits = ", ".join(f"{n} {m['fit']}" for n, m in meta.items() if m.get("fit"))
    (out / "realism_gap.md").write_text(f"checkpoint {checkpoint} (step {table['step']}); {resamples} bootstrap draws "
                                        f"over frames, seed {seed}, {confidence:.0%} intervals; fit: {fits}\n\n{text}\n")
    return {**table, "markdown": text}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, required=True, help="a run folder or its checkpoint.pt")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sim-val", type=Path, default=None, help="the sim's held-out scenes")
    for s in GENUINE:
        ap.add_argument(f"--{s}", type=Path, default=None, help=f"a {s} folder in its official layout")
    ap.add_argument("--split", action="append", default=[], metavar="SOURCE=SPLIT",
                    help="a source's split (e.g. cityscapes=val, tusimple=label_data_0313); default: the reader's")
    ap.add_argument("--fit", choices=FITS, default=None,
                    help="how a genuine frame reaches the model's input size (hydranet eval --fit; default the run's "
                         "data.fit); camera falls back to crop on a source without intrinsics")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    folders = {"sim": a.sim_val} if a.sim_val else {}
    folders.update({s: getattr(a, s) for s in GENUINE if getattr(a, s) is not None})
    if not folders:
        ap.error("give at least one of --sim-val, " + ", ".join(f"--{s}" for s in GENUINE))
    splits = {}
    for item in a.split:
        name, eq, value = item.partition("=")
        if not eq or name not in ("sim",) + GENUINE:
            ap.error(f"--split {item}: give SOURCE=SPLIT with SOURCE one of sim, {', '.join(GENUINE)}")
        splits[name] = value
    check_out(a.out, a.overwrite)
    table = run(a.checkpoint, a.out, folders, splits, a.resamples, a.seed, a.confidence, fit=a.fit)
    print(table["markdown"])
    print(f"wrote {a.out / 'realism_gap.md'} and {a.out / 'realism_gap.json'}")


if __name__ == "__main__":
    main()
