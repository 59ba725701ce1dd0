"""`hydranet engine report`: what a shadow run and a selection look like, as pictures and tables.

    hydranet engine report --catalog CAT --out DIR [--selection NAME|FILE] [--run N] [--camera NAME] [--overwrite]

DIR holds:
- contact_sheet.png: per selected frame (best rank first) every camera of the frame side by side (the
  model's cameras first, then any other camera of the fleet; `camera` shows one alone) with the model's
  confident 2D boxes (score >= 0.3) drawn in their class colour, and its rank, clip/frame, the reason it
  was selected (strategy / trigger) and its score;
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
import math
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from data_engine.catalog import Catalog
from data_engine.evaluation import RunTruth, load_run_truth, trigger_markdown, trigger_rows, truth_summary
from data_engine.fleet import read_frame
from data_engine.signals import SIGNALS
from hydranet.io import replace_folder
from hydranet.viz import class_color, mosaic, write_png

TILE_W = 256  # contact sheet width of one camera image (pixels); images are scaled to it
SHEET_CAMERAS = 6  # camera images per contact-sheet row: frames per row = max(1, SHEET_CAMERAS // cameras)
BOX_SCORE = 0.3  # predicted 2D boxes drawn on the contact sheet: score at least this
HIST_BINS = 24
_FONT = cv2.FONT_HERSHEY_SIMPLEX


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
    from data_engine.labels import read_selection

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
MASK_HEADS = ("drivable", "lanes")  # the camera heads whose masks are drawn (and exported as Segmentation)


def mask_predictor(model: str | Path, fleet: Path) -> tuple[Callable[[list[np.ndarray]], dict] | None, str]:
    """(predict, "") or (None, why not): predict(images: the model's cameras' (H, W, 3) RGB images of one frame) ->
    {head: [(h, w) bool per model camera]} of the model's drivable and lanes heads. The catalog keeps no masks (too
    big per frame), so the frame is run again through the torch-free runtime, as shadow mode ran it (the camera
    heads read the frame alone: no video state)."""
    from data_engine.fleet import Fleet
    from data_engine.shadow import load_runtime
    from deploy.runtime import DeployError

    try:
        rt = load_runtime(str(model))
        rt.allow_sizes(Fleet(fleet).cameras)  # the fleet's camera sizes, resized to the model's as shadow mode does
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


# -- pictures ----------------------------------------------------------------------------------------
def _text(img: np.ndarray, text: str, org: tuple[int, int], scale: float = 0.42, color=(255, 255, 255)) -> None:
    for dx, dy in ((-1, 0), (1, 0), (0, -1), (0, 1)):  # a dark outline: readable on any image (a thicker stroke
        cv2.putText(img, text, (org[0] + dx, org[1] + dy), _FONT, scale, (0, 0, 0), 1, cv2.LINE_AA)  # would space wider)
    cv2.putText(img, text, org, _FONT, scale, color, 1, cv2.LINE_AA)


def reason_lines(reason: Mapping[str, Any]) -> list[str]:
    """Two short lines of a selected item's reason: "strategy / trigger" and "score ... fired ..."."""
    head = str(reason.get("strategy", "?")) + (f" / {reason['trigger']}" if reason.get("trigger") else "")
    score = reason.get("score")
    tail = "score " + ("-" if score is None or not math.isfinite(float(score)) else f"{float(score):.4g}")
    others = [t for t in reason.get("triggers") or [] if t != reason.get("trigger")]
    if others:
        tail += " fired " + ",".join(others)
    return [head, tail]


def camera_tile(image: np.ndarray | None, error: str | None, camera: str, boxes: Sequence[tuple[Sequence[float], int]] = (),
                model_size: tuple[int, int] | None = None) -> np.ndarray:
    """One camera image scaled to TILE_W wide (RGB) with `boxes` [(x1, y1, x2, y2) in model pixels,
    class index] drawn in `class_color(class)` (the model input is the camera image resized, so a box
    scales by tile / model size) and the camera's name; an unreadable image is a dark tile that says so."""
    if image is None:
        tile = np.full((TILE_W * 2 // 3, TILE_W, 3), 40, np.uint8)
        for k, chunk in enumerate([error[i:i + 38] for i in range(0, min(len(error or ""), 152), 38)]):
            _text(tile, chunk, (4, 56 + 14 * k), 0.35, (255, 120, 120))
        _text(tile, "image unreadable:", (4, 40), 0.4, (255, 120, 120))
    else:
        h = max(1, round(image.shape[0] * TILE_W / image.shape[1]))
        tile = cv2.resize(image, (TILE_W, h), interpolation=cv2.INTER_LINEAR)
        if model_size is not None:
            sx, sy = TILE_W / model_size[1], h / model_size[0]
            for (x1, y1, x2, y2), cls in boxes:
                cv2.rectangle(tile, (round(x1 * sx), round(y1 * sy)), (round(x2 * sx), round(y2 * sy)), class_color(int(cls)), 2)
    _text(tile, camera, (TILE_W - 7 * len(camera) - 4, 14), 0.35, (200, 200, 200))
    return tile


def frame_tile(cameras: Sequence[np.ndarray], title: str, reason: Mapping[str, Any]) -> np.ndarray:
    """One contact-sheet tile (RGB): the frame's camera tiles side by side, the title on the first and
    the reason and score in a strip along the bottom."""
    h = max(t.shape[0] for t in cameras)
    tile = np.concatenate([np.pad(t, ((0, h - t.shape[0]), (0, 0), (0, 0))) for t in cameras], 1)
    lines = reason_lines(reason)
    H, W = tile.shape[:2]
    cv2.rectangle(tile, (0, H - 34), (W - 1, H - 1), (0, 0, 0), -1)
    _text(tile, lines[0][:40 * len(cameras)], (4, H - 20), 0.4, (255, 210, 0))
    _text(tile, lines[1][:40 * len(cameras)], (4, H - 6), 0.4)
    _text(tile, title, (4, 14), 0.4)
    return tile


def contact_sheet(tiles: Sequence[np.ndarray], header: str, cols: int = 6) -> np.ndarray:
    """Tiles (frames) in a grid of `cols` columns under a header strip (RGB)."""
    h = max(t.shape[0] for t in tiles)
    tiles = [np.pad(t, ((0, h - t.shape[0]), (0, 0), (0, 0))) for t in tiles]
    cols = min(cols, len(tiles))
    rows = math.ceil(len(tiles) / cols)
    tiles = tiles + [np.zeros_like(tiles[0])] * (rows * cols - len(tiles))
    grid = np.concatenate([np.concatenate(tiles[r * cols:(r + 1) * cols], 1) for r in range(rows)], 0)  # (mosaic() takes
    # cols only for more than 3 tiles)
    strip = np.full((24, grid.shape[1], 3), 20, np.uint8)
    _text(strip, header[: grid.shape[1] // 8], (6, 17), 0.45)
    return np.concatenate([strip, grid], 0)


def histogram_panel(name: str, values: np.ndarray, selected: np.ndarray, w: int = 260, h: int = 150) -> np.ndarray:
    """A histogram of `values` (grey) with the `selected` values' counts (orange) on the same bins (RGB)."""
    img = np.full((h, w, 3), 255, np.uint8)
    v, s = values[np.isfinite(values)], selected[np.isfinite(selected)]
    lo, hi = float(v.min()), float(v.max())
    if hi <= lo:
        hi = lo + 1.0
    edges = np.linspace(lo, hi, HIST_BINS + 1)
    c_all, _ = np.histogram(v, edges)
    c_sel, _ = np.histogram(np.clip(s, lo, hi), edges)
    top, left, bottom, right = 22, 6, h - 20, w - 6
    scale = (bottom - top) / max(int(c_all.max()), 1)
    bw = (right - left) / HIST_BINS
    for k in range(HIST_BINS):
        x0, x1 = int(left + k * bw), int(left + (k + 1) * bw) - 1
        cv2.rectangle(img, (x0, bottom - int(c_all[k] * scale)), (x1, bottom), (170, 170, 170), -1)
        if c_sel[k]:
            cv2.rectangle(img, (x0 + 1, bottom - max(1, int(c_sel[k] * scale))), (x1 - 1, bottom), (245, 130, 48), -1)
    cv2.line(img, (left, bottom), (right, bottom), (0, 0, 0), 1)
    cv2.putText(img, f"{name} (n={len(v)}, sel={len(s)})", (left, 15), _FONT, 0.38, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(img, f"{lo:.3g}", (left, h - 6), _FONT, 0.35, (0, 0, 0), 1, cv2.LINE_AA)
    cv2.putText(img, f"{hi:.3g}", (right - 8 * len(f"{hi:.3g}"), h - 6), _FONT, 0.35, (0, 0, 0), 1, cv2.LINE_AA)
    return img


def signal_histograms(table: Mapping[str, np.ndarray], selected_ids: Sequence[int], cols: int = 4) -> tuple[np.ndarray | None, list[str]]:
    """(the histogram sheet (RGB) or None, the signals without a finite value)."""
    sel = np.isin(table["frame_id"], np.asarray(list(selected_ids), np.int64))
    panels, empty = [], []
    for s in SIGNALS:
        v = np.asarray(table[s], np.float64)
        if not np.isfinite(v).any():
            empty.append(s)
            continue
        panels.append(histogram_panel(s, v, v[sel]))
    if not panels:
        return None, empty
    cols = min(cols, len(panels))
    panels += [np.full_like(panels[0], 255)] * (-len(panels) % cols)  # white, not black, where the grid has no panel
    return mosaic(panels, [""] * len(panels), cols=cols), empty


def _model_size(model: str | Path) -> tuple[int, int] | None:
    """The model's input (H, W), which its boxes are in; None when its file cannot be read (no boxes drawn)."""
    from deploy.metadata import MetadataError, read_metadata

    try:
        return tuple(int(v) for v in read_metadata(model)["rig"]["image_size"])
    except (OSError, MetadataError, ValueError, KeyError, TypeError):
        return None


# -- markdown ----------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else "-"
    return str(v)


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
                 _fmt(r.get("score")), ", ".join(r.get("triggers") or []) or "-"]
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
        lines.append(f"| {s} | {int(ok.sum())} | {_fmt(float(v[ok].mean()))} | {_fmt(float(np.percentile(v[ok], 95)))} | "
                     f"{_fmt(float(v[ok].max()))} | {_fmt(float(vs.mean()) if len(vs) else None)} |")
    return "\n".join(lines)


# -- the report --------------------------------------------------------------------------------------
def write_report(catalog: str | Path, out: str | Path, selection: str | Path | None = None, run: int | None = None,
                 cfg=None, camera: str | None = None, max_frames: int = 48, overwrite: bool = False) -> dict[str, Any]:
    """Write DIR/{contact_sheet.png, signals.png, report.md}; returns {"out", "run", "selection", "items",
    "shown", "triggers" (TriggerRow list), "truth" (RunTruth or None)}."""
    from data_engine.config import EngineConfig
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
        n_corrupt = cat.db.execute("SELECT count(*) FROM signals WHERE run_id = ? AND status != 'ok'", (run_id,)).fetchone()[0]
        names = {int(f): (str(c), int(i)) for f, c, i in zip(table["frame_id"], table["clip"], table["idx"])}
        missing = [it["frame_id"] for it in items if it["frame_id"] not in names]
        if missing:
            raise ReportError(f"selection {name!r} frame id {missing[0]} is not an ok frame of shadow run {run_id} in {cat.path}; "
                              "give --run of the run it was mined from")
        meta, fleet_cams = cat.db.execute("SELECT m.meta, fl.cameras FROM shadow_runs r JOIN models m ON r.model_id = m.id "
                                          "JOIN fleets fl ON r.fleet_id = fl.id WHERE r.id = ?", (run_id,)).fetchone()
        cams = json.loads(meta)["rig"]
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
    model_size = _model_size(info["model"])
    tiles = []
    for it in shown:
        clip, idx = names[it["frame_id"]]
        det2d = (preds.get(it["frame_id"]) or {}).get("det2d") or []
        cam_tiles = []
        for cam in shown_cams:
            try:
                img, err = read_frame(Path(info["fleet"]), clip, dirs[it["frame_id"]], [cam])[0], None
            except ValueError as e:
                img, err = None, str(e)
            k = cams.index(cam) if cam in cams else len(det2d)
            p = det2d[k] if k < len(det2d) else {"boxes": [], "scores": [], "labels": []}
            boxes = [(b, c) for b, s, c in zip(p["boxes"], p["scores"], p["labels"]) if s >= BOX_SCORE]
            cam_tiles.append(camera_tile(img, err, cam, boxes, model_size))
        tiles.append(frame_tile(cam_tiles, f"#{it['rank']} {clip}/{idx:06d}", it["reason"]))
    sel_ids = [it["frame_id"] for it in items]
    strategy = sel_row[0] if sel_row else "file"
    camera = ", ".join(shown_cams) if len(shown_cams) <= 2 else f"all {len(shown_cams)}"
    header = (f"selection {name} ({strategy}, {len(items)} items{'' if len(shown) == len(items) else f', first {len(shown)}'}) "
              f"- shadow run {run_id} - cameras {camera}" + ("" if model_size else " - no boxes (model unreadable)"))
    hist, empty = signal_histograms(table, sel_ids)

    md = [f"# Data engine report: {Path(catalog).name}", "",
          f"- shadow run {run_id}: model `{info['model']}`, fleet `{info['fleet']}`; {len(table['frame_id'])} ok frames, "
          f"{n_corrupt} corrupt",
          f"- selection `{name}`: " + (f"strategy {sel_row[0]}, unit {sel_row[1]}, budget {sel_row[2]}, " if sel_row else "from a file, ")
          + f"{len(items)} items", "",
          "## Mined frames", "", f"![contact sheet](contact_sheet.png) (cameras {camera}, boxes: det2d score >= {BOX_SCORE}, "
          + (f"all {len(items)} items)" if len(shown) == len(items) else f"the first {len(shown)} of {len(items)} by rank)"), "",
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
        md += ["", "Without a value in this run (head absent, no --candidate, or no history): " + ", ".join(empty) + "."]

    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if tiles:
            write_png(tmp / "contact_sheet.png", contact_sheet(tiles, header, cols=max(1, SHEET_CAMERAS // len(shown_cams))))
        if hist is not None:
            write_png(tmp / "signals.png", hist)
        (tmp / "report.md").write_text("\n".join(md) + "\n")
        replace_folder(tmp, out)  # --overwrite: the old report goes only once the new one is complete
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out": out, "run": run_id, "selection": name, "items": len(items), "shown": len(shown), "triggers": rows,
            "truth": truth}
