"""`hydranet engine report`: what a shadow run and a selection look like, as pictures and tables.

    hydranet engine report --catalog CAT --out DIR [--selection NAME|FILE] [--run N] [--camera NAME] [--overwrite]

DIR holds:
- contact_sheet.png: one selected frame under the other (best rank first): its cameras at CAM_W = 512 px
  wide, up to 3 a row (the model's cameras first, then any other camera of the fleet; `camera` shows one
  alone), with the model's confident 2D boxes (score >= 0.3) in their class colour, named with their score,
  its drivable and lane masks as translucent fills (run again: `mask_predictor`), and the fleet's truth where
  it has one, else the frame's accepted label (white boxes with their class, the drivable outline, the lane
  lines); on the right a panel with rank, clip/frame, the whole reason it was mined (wrapped, never cut:
  strategy, trigger, score, every trigger fired with its score) and a legend of what is drawn on it;
- contact_sheet.json: the same per frame (reason lines, legend entries with their colours, and where each is
  drawn on the sheet);
- signals.png: a histogram per signal column over the run's frames (grey), the selected frames'
  counts on top (orange);
- report.md: the run, the selection, the trigger table (trigger, version, frames fired, the share of
  the run it fires on, DEGENERATE and why where that is more than half, and where the fleet keeps its
  truth: rare-scenario and hard-frame precision with base rate and lift, and recall of each rare
  scenario, data_engine/evaluation.py), the selected items, and per-signal summaries.

The triggers are fired in memory over the run with the engine config (the same hits `hydranet engine
triggers` stores; nothing is written to the catalog). DIR is written into DIR.tmp-<pid> and renamed:
an existing DIR is refused without `overwrite`, and a crash never leaves a half-written report.
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from data_engine.catalog import Catalog
from data_engine.evaluation import RunTruth, load_run_truth, trigger_markdown, trigger_rows, truth_summary
from data_engine.report_pictures import (CAM_W, GRID_COLS, MASK_HEADS, fmt_value, camera_view,
                                         contact_sheet, frame_panel, frame_tile, legend_entries, read_views,
                                         signal_histograms)
from data_engine.signals import SIGNALS
from hydranet.io import replace_folder
from hydranet.viz import write_png

BOX_SCORE = 0.3  # predicted 2D boxes drawn on the contact sheet: score at least this


class ReportError(ValueError):
    """A report that cannot be written as asked; one line saying what to do."""


# -- selection ---------------------------------------------------------------------------------------
def resolve_selection(cat: Catalog, selection: str | Path | None, run: int | None) -> tuple[str, int, list[dict[str, Any]]]:
    """(name, run id, items [{"rank", "frame_id", "reason"}]) of a selection named in the catalog, a
    selection.json file, or (None) the newest selection of the run."""
    if selection is not None and (str(selection).endswith(".json") or Path(selection).is_file()):
        return _selection_file(cat, Path(selection), run)
    if selection is None:
        run_id = cat.latest_run(run)
        row = cat.db.execute("SELECT name FROM selections WHERE run_id = ? ORDER BY created DESC, id DESC LIMIT 1",
                             (run_id,)).fetchone()
        if row is None:
            raise ReportError(f"catalog {cat.path} holds no selection of shadow run {run_id}; mine one with `hydranet engine "
                              f"mine --catalog {cat.path} --budget N` or give --selection NAME|FILE")
        selection = row[0]
    row = cat.db.execute("SELECT id, run_id FROM selections WHERE name = ?", (str(selection),)).fetchone()
    if row is None:
        known = [r[0] for r in cat.db.execute("SELECT name FROM selections ORDER BY id")]
        raise ReportError(f"selection {selection!r} is not in catalog {cat.path}; known: {known or 'none'} (or give a "
                          "selection.json file)")
    sid, sel_run = row
    run_id = cat.latest_run(run if run is not None else sel_run)
    items = [{"rank": r, "frame_id": f, "reason": json.loads(reason or "{}")} for r, f, reason in cat.db.execute(
        "SELECT rank, frame_id, reason FROM selection_items WHERE selection_id = ? ORDER BY rank", (sid,))]
    return str(selection), run_id, items


def _selection_file(cat: Catalog, path: Path, run: int | None) -> tuple[str, int, list[dict[str, Any]]]:
    from data_engine.label_queue import read_selection

    name, raw, sel = read_selection(path)
    file_run = (sel.get("run") or {}).get("run_id") if isinstance(sel.get("run"), dict) else None
    run_id = cat.latest_run(run if run is not None else file_run)
    items = []
    for k, it in enumerate(raw):
        fid = it.get("frame_id")
        if fid is None:  # {"clip", "frame"}: looked up in the run's fleet
            row = cat.db.execute("SELECT f.id FROM frames f JOIN clips c ON f.clip_id = c.id JOIN shadow_runs r ON "
                                 "c.fleet_id = r.fleet_id WHERE r.id = ? AND c.name = ? AND f.idx = ?",
                                 (run_id, str(it["clip"]), int(it["frame"]))).fetchone()
            if row is None:
                raise ReportError(f"selection {path} item {k}: frame {it['clip']}/{it['frame']} is not in the fleet of shadow "
                                  f"run {run_id} of {cat.path}; give --run of the run it was mined from")
            fid = row[0]
        reason = it.get("reason") if isinstance(it.get("reason"), dict) else {"strategy": f"file {path.name}", "score": None}
        items.append({"rank": int(it.get("rank", k)), "frame_id": int(fid), "reason": reason})
    return name, run_id, items


# -- what is drawn besides the image: masks and truth (the FiftyOne export reads them too) ----------


def mask_predictor(model: str | Path, fleet: Path) -> tuple[Callable[[list[np.ndarray]], dict] | None, str]:
    """(predict, "") or (None, why not): predict(images: the model's cameras' (H, W, 3) RGB images of one frame) ->
    {head: [(h, w) bool per model camera]} of the model's drivable and lanes heads. The catalog keeps no masks (too
    big per frame), so the frame is run again through the torch-free runtime, as shadow mode ran it (the camera
    heads read the frame alone: no video state)."""
    from data_engine.fleet import Fleet
    from data_engine.shadow import runtime_for_fleet
    from deploy.runtime import DeployError

    try:  # as shadow mode ran it: the fleet's camera sizes resized to the model's, on the model's cameras it has
        rt, _ = runtime_for_fleet(str(model), Fleet(fleet))
    except (OSError, ValueError, DeployError) as e:  # FleetError is a ValueError
        return None, f"model {model} or fleet {fleet} cannot be read ({str(e)[:120]})"
    heads = [h for h in MASK_HEADS if h in rt.heads]
    if not heads:
        return None, f"model {model} has no {' or '.join(MASK_HEADS)} head"

    def predict(images: list[np.ndarray]) -> dict[str, list[np.ndarray]]:
        decoded = rt.decode(rt.run(rt.feeds(rt.preprocess(images))), checked=True)
        return {h: [np.asarray(r["mask"], bool) for r in decoded[h]] for h in heads}
    return predict, ""


def fleet_truth(root: Path, clip: str, fdir: str) -> dict[str, Any] | None:
    """The fleet's own labels of a frame (labels.json: {"cameras": {cam: {"boxes2d", "lanes2d"}}, ...}): a sim
    fleet's file, a labelled dataset's through its recorded fleet; None where the fleet has none (videos, images).
    ValueError naming the file when it exists but cannot be read."""
    from data_engine.fleet import RECORDED_FILE, recorded_fleet
    from hydranet.io import frame_path, read_json

    if (root / RECORDED_FILE).is_file():
        return recorded_fleet(root).truth(clip, fdir)
    path = frame_path(root, clip, fdir, "labels.json", where=f"fleet {root}")
    if not path.exists():
        return None
    truth = read_json(path, "the fleet's labels", ValueError, "regenerate the fleet")
    if not isinstance(truth, dict) or not isinstance(truth.get("cameras"), dict):
        raise ValueError(f"{path}: no 'cameras' object; regenerate the fleet")
    return truth


def truth_drivable(root: Path, clip: str, fdir: str, camera: str, semantic_classes: Sequence[str]) -> np.ndarray | None:
    """(H, W) bool drivable truth of a sim fleet's camera (CAMERA.semantic.png in DRIVABLE_CLASSES, as the reader
    derives it), or None where the frame has no semantic file (a recorded fleet, a frame without pixel labels)."""
    from hydranet.data.sim_reader import DRIVABLE_CLASSES
    from hydranet.io import frame_path

    path = frame_path(root, clip, fdir, f"{camera}.semantic.png", where=f"fleet {root}")
    if not path.exists():
        return None
    sem = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)  # (H, W) uint8 class index
    if sem is None or sem.ndim != 2:
        raise ValueError(f"{path}: not a readable one-channel PNG; regenerate the fleet")
    return np.isin(sem, [semantic_classes.index(c) for c in DRIVABLE_CLASSES if c in semantic_classes])


def lane_mask(lanes2d: Sequence[Mapping[str, Any]], hw: tuple[int, int]) -> np.ndarray:
    """(H, W) bool: the truth's lane polylines ({"points": [[u, v], ...]}, camera pixels) drawn 1% of the height wide."""
    img = np.zeros(hw, np.uint8)
    width = max(1, round(hw[0] / 100))
    for lane in lanes2d:
        pts = np.round(np.asarray(lane["points"], np.float64).reshape(-1, 2)).astype(np.int32)
        cv2.polylines(img, [pts.reshape(-1, 1, 2)], False, 1, width)
    return img.astype(bool)


def _model_info(model: str | Path) -> tuple[tuple[int, int] | None, list[str]]:
    """(the model's input (H, W), which its boxes are in, its det2d class names); (None, []) when its file cannot
    be read (no boxes drawn)."""
    from deploy.metadata import MetadataError, ModelRig, read_metadata

    try:
        md = read_metadata(model)
        return ModelRig.from_metadata(md, str(model)).image_size, list((md["heads"].get("det2d") or {}).get("classes") or [])
    except (OSError, MetadataError, ValueError, KeyError, TypeError, AttributeError):
        return None, []


def _frame_truth(fleet: Path, clip: str, fdir: str, accepted: Mapping[str, Any] | None, cams: Sequence[str],
                 semantic: Sequence[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """({camera: {"boxes2d", "lanes2d"}} of the fleet's labels of a frame, else of its accepted label ({} without
    either), {camera: (H, W) drivable truth} of a sim fleet); ReportError naming a truth file that cannot be read."""
    try:
        labels = fleet_truth(fleet, clip, fdir) or accepted or {}
        drivable = {c: truth_drivable(fleet, clip, fdir, c, semantic) for c in cams} if semantic else {}
    except ValueError as e:
        raise ReportError(f"frame {clip}/{fdir} of fleet {fleet}: {e}") from None
    return dict(labels.get("cameras") or {}), {c: m for c, m in drivable.items() if m is not None}


def _frame_picture(fleet: Path, clip: str, fdir: str, cams: Sequence[str], shown_cams: Sequence[str], det2d: Sequence[Mapping],
                   model_size, classes: Sequence[str], predict, truth: Mapping[str, Any],
                   drivable: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], list[str]]:
    """(one view per shown camera, the legend labels drawn on any) of a selected frame: its images read from the
    fleet, the model's masks where `predict` (mask_predictor) and every model camera's image are there."""
    images = read_views(fleet, clip, fdir, list(dict.fromkeys([*shown_cams, *(cams if predict is not None else [])])))
    masks: dict[str, dict[str, np.ndarray]] = {}
    if predict is not None and all(images[c][0] is not None for c in cams):
        for head, per_cam in predict([images[c][0] for c in cams]).items():
            for c, m in zip(cams, per_cam):
                masks.setdefault(c, {})[head] = m
    views, drawn = [], []
    for cam in shown_cams:
        k = cams.index(cam) if cam in cams else len(det2d)
        p = det2d[k] if k < len(det2d) else {"boxes": [], "scores": [], "labels": []}
        boxes = [(b, c, sc) for b, sc, c in zip(p["boxes"], p["scores"], p["labels"]) if sc >= BOX_SCORE]
        view, labels = camera_view(*images[cam], cam, boxes, model_size, masks.get(cam), truth.get(cam), drivable.get(cam),
                                   classes)
        views.append(view)
        drawn += [lab for lab in labels if lab not in drawn]
    return views, drawn


# -- markdown ----------------------------------------------------------------------------------------
def items_markdown(items: Sequence[Mapping[str, Any]], names: Mapping[int, tuple[str, int]], truth: RunTruth | None) -> str:
    head = ["rank", "frame id", "clip/frame", "strategy", "trigger", "score", "triggers fired"]
    if truth is not None:
        head += ["rare scenario", "model error"]
    align = ["---:", "---:", "---", "---", "---", "---:", "---"] + (["---", "---:"] if truth is not None else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for it in items:
        f, r = int(it["frame_id"]), it["reason"]
        clip, idx = names.get(f, ("?", -1))
        cells = [str(it["rank"]), str(f), f"{clip}/{idx:06d}", str(r.get("strategy", "?")), str(r.get("trigger") or "-"),
                 fmt_value(r.get("score")), ", ".join(r.get("triggers") or []) or "-"]
        if truth is not None:
            rare = [s for s in truth.scenarios if f in truth.rare[s]]
            cells += [", ".join(rare) or "-", f"{truth.errors[f]:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def signals_markdown(table: Mapping[str, np.ndarray], selected_ids: Sequence[int]) -> str:
    sel = np.isin(table["frame_id"], np.asarray(list(selected_ids), np.int64))
    lines = ["| signal | frames with a value | mean | p95 | max | selected mean |", "|---|---:|---:|---:|---:|---:|"]
    for s in SIGNALS:
        v = np.asarray(table[s], np.float64)
        ok = np.isfinite(v)
        if not ok.any():
            continue
        vs = v[sel & ok]
        lines.append(f"| {s} | {int(ok.sum())} | {fmt_value(float(v[ok].mean()))} | {fmt_value(float(np.percentile(v[ok], 95)))} | "
                     f"{fmt_value(float(v[ok].max()))} | {fmt_value(float(vs.mean()) if len(vs) else None)} |")
    return "\n".join(lines)


# -- the report --------------------------------------------------------------------------------------
def write_report(catalog: str | Path, out: str | Path, selection: str | Path | None = None, run: int | None = None,
                 cfg=None, camera: str | None = None, max_frames: int = 48, overwrite: bool = False) -> dict[str, Any]:
    """Write DIR/{contact_sheet.png, signals.png, report.md}; returns {"out", "run", "selection", "items",
    "shown", "triggers" (TriggerRow list), "truth" (RunTruth or None)}."""
    from data_engine.config import EngineConfig
    from data_engine.fleet import Fleet
    from data_engine.labels import accepted_labels
    from data_engine.triggers import build_triggers, run_table

    out = Path(out)
    if max_frames < 1:
        raise ReportError(f"--max-frames must be at least 1, got {max_frames}")
    if out.exists() and not overwrite:
        raise ReportError(f"report folder {out} exists; give another --out or pass --overwrite to replace it")
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} is a file; give a folder path")
    cfg = cfg or EngineConfig()
    triggers = build_triggers(cfg.trigger_params() or None)
    with Catalog(catalog) as cat:
        name, run_id, items = resolve_selection(cat, selection, run)
        info = cat.run_info(run_id)
        table = run_table(cat, run_id)  # + embeddings (novelty's input)
        n_corrupt = len(cat.rows(run_id, ["frame_id"], exclude="ok")["frame_id"])
        names = {int(f): (str(c), int(i)) for f, c, i in zip(table["frame_id"], table["clip"], table["idx"])}
        missing = [it["frame_id"] for it in items if it["frame_id"] not in names]
        if missing:
            raise ReportError(f"selection {name!r} frame id {missing[0]} is not an ok frame of shadow run {run_id} in {cat.path}; "
                              "give --run of the run it was mined from")
        cams = cat.run_model(run_id)[1]
        fleet_cams = cat.db.execute("SELECT fl.cameras FROM shadow_runs r JOIN fleets fl ON r.fleet_id = fl.id WHERE r.id = ?",
                                    (run_id,)).fetchone()[0]
        every = cams + [c for c in json.loads(fleet_cams or "[]") if c not in cams]  # the model's first, then the fleet's others
        if camera is not None and camera not in every:
            raise ReportError(f"--camera {camera} is not a camera of the run's model or fleet; choose one of {every}")
        shown_cams = [camera] if camera is not None else every
        dirs = dict(cat.db.execute("SELECT f.id, f.dir FROM frames f JOIN clips c ON f.clip_id = c.id JOIN shadow_runs r "
                                   "ON c.fleet_id = r.fleet_id WHERE r.id = ?", (run_id,)).fetchall())
        sel_row = cat.db.execute("SELECT strategy, unit, budget FROM selections WHERE name = ?", (name,)).fetchone()
        hits = {t.name: t.fire(table) for t in triggers}  # in memory: the same hits `engine triggers` stores
        truth, why = load_run_truth(cat, run_id)
    rows = trigger_rows(triggers, hits, truth, table)

    shown = items[:max_frames]
    with Catalog(catalog) as cat:
        preds = cat.predictions(run_id, [it["frame_id"] for it in shown])
        accepted = accepted_labels(cat)
    model_size, classes = _model_info(info["model"])
    fleet = Path(info["fleet"])
    predict, no_masks = mask_predictor(info["model"], fleet)
    try:
        semantic = list(Fleet(fleet).meta.get("semantic_classes") or [])
    except ValueError:  # a fleet gone or moved: every image says so on its tile
        semantic = []
    tiles, layout = [], []
    for it in shown:
        fid = it["frame_id"]
        clip, idx = names[fid]
        labels, drivable = _frame_truth(fleet, clip, dirs[fid], accepted.get(fid), shown_cams, semantic)
        views, drawn = _frame_picture(fleet, clip, dirs[fid], cams, shown_cams, (preds.get(fid) or {}).get("det2d") or [],
                                      model_size, classes, predict, labels, drivable)
        legend = legend_entries(drawn, classes)
        panel, text = frame_panel(f"#{it['rank']} {clip}/{idx:06d}", it["reason"], legend, max(v.shape[0] for v in views))
        tiles.append(frame_tile(views, panel))
        grid_w = min(GRID_COLS, len(views)) * CAM_W
        layout.append({"rank": it["rank"], "frame_id": fid, "clip": clip, "frame": idx, "height": tiles[-1].shape[0],
                       "panel_x": grid_w, "cameras": shown_cams, **text})
    sel_ids = [it["frame_id"] for it in items]
    strategy = sel_row[0] if sel_row else "file"
    camera = ", ".join(shown_cams) if len(shown_cams) <= 2 else f"all {len(shown_cams)}"
    header = (f"selection {name} ({strategy}, {len(items)} items{'' if len(shown) == len(items) else f', first {len(shown)}'}) "
              f"- shadow run {run_id} - cameras {camera}" + ("" if model_size else " - no boxes (model unreadable)")
              + (f" - no masks: {no_masks}" if predict is None else ""))
    hist, empty = signal_histograms(table, sel_ids)

    md = [f"# Data engine report: {Path(catalog).name}", "",
          f"- shadow run {run_id}: model `{info['model']}`, fleet `{info['fleet']}`; {len(table['frame_id'])} ok frames, "
          f"{n_corrupt} corrupt",
          f"- selection `{name}`: " + (f"strategy {sel_row[0]}, unit {sel_row[1]}, budget {sel_row[2]}, " if sel_row else "from a file, ")
          + f"{len(items)} items", "",
          "## Mined frames", "", f"![contact sheet](contact_sheet.png) (cameras {camera}, boxes: det2d score >= {BOX_SCORE}, "
          + (f"all {len(items)} items)" if len(shown) == len(items) else f"the first {len(shown)} of {len(items)} by rank)"),
          "", "Each frame: its cameras, the model's boxes (class colour, name and score) and drivable and lane masks "
          "(translucent), the fleet's truth where it has one (or the accepted label): white boxes with their class, "
          "the drivable outline, the lane lines; on the right the whole reason it was mined and the legend "
          "(contact_sheet.json: the same per frame, with where each line is drawn).", "",
          items_markdown(items, names, truth), "",
          "## Triggers", "", "Fired in memory over the run with the engine config (the hits `hydranet engine triggers` stores); how to "
          "read the table: docs/data_engine.md, Triggers.",
          truth_summary(truth) if truth is not None else f"No precision/recall: {why}.", "",
          trigger_markdown(rows, truth), "",
          "## Signals", ""]
    md += (["![signal histograms](signals.png) (grey: all ok frames; orange: the selected ones)", ""] if hist is not None
           else ["No signal has a value in this run.", ""])
    md += [signals_markdown(table, sel_ids)]
    if empty:
        md += ["", "Without a value in this run (head absent, no --candidate-onnx, or no history): " + ", ".join(empty) + "."]

    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if tiles:
            sheet, rows = contact_sheet(tiles, header)
            write_png(tmp / "contact_sheet.png", sheet)
            (tmp / "contact_sheet.json").write_text(json.dumps({"header": header, "camera_width": CAM_W, "frames": [
                {**f, "y": y} for f, y in zip(layout, rows)]}, indent=1) + "\n")
        if hist is not None:
            write_png(tmp / "signals.png", hist)
        (tmp / "report.md").write_text("\n".join(md) + "\n")
        replace_folder(tmp, out)  # --overwrite: the old report goes only once the new one is complete
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out": out, "run": run_id, "selection": name, "items": len(items), "shown": len(shown), "triggers": rows,
            "truth": truth}
