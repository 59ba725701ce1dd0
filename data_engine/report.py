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

CAM_W = 512  # contact sheet width of one camera image (pixels; 256 before issue 34); images are scaled to it
GRID_COLS = 3  # camera images per row of a frame's tile
PANEL_W = 460  # the panel right of a frame's cameras: title, the whole reason (wrapped), the legend
SEPARATOR = 4  # grey rows between two frames
TEXT_SCALE, LINE_H = 0.45, 18  # panel text: OpenCV font scale, pixels per line
BOX_SCORE = 0.3  # predicted 2D boxes drawn on the contact sheet: score at least this
MASK_ALPHA = 0.4  # opacity of the model's masks
OVERLAYS = {  # legend label -> colour (RGB) of what is drawn besides the model's boxes (those: their class's colour)
    "drivable (model)": (0, 220, 90), "lanes (model)": (255, 0, 255), "drivable (truth, outline)": (170, 255, 170),
    "lanes (truth)": (255, 220, 0), "box (truth)": (255, 255, 255)}
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


def _width(text: str, scale: float) -> int:
    return cv2.getTextSize(text, _FONT, scale, 1)[0][0]


def wrap(text: str, width_px: int, scale: float = TEXT_SCALE) -> list[str]:
    """`text` in lines no wider than `width_px` at `scale`, broken at spaces (a word wider than a line is cut): the
    whole text, never truncated."""
    lines, cur = [], ""
    for word in text.split():
        cand = f"{cur} {word}" if cur else word
        if _width(cand, scale) <= width_px:
            cur = cand
            continue
        if cur:
            lines.append(cur)
        while _width(word, scale) > width_px:
            k = max(1, max((i for i in range(1, len(word)) if _width(word[:i], scale) <= width_px), default=1))
            lines.append(word[:k])
            word = word[k:]
        cur = word
    return lines + ([cur] if cur else [])


def reason_text(reason: Mapping[str, Any]) -> list[str]:
    """A selected item's reason in full, one entry per fact: strategy (and trigger), score, the strategy's other
    numbers (distance, ...), every trigger that fired on it with its score."""
    head = "strategy: " + str(reason.get("strategy", "?")) + (f" / trigger {reason['trigger']}" if reason.get("trigger") else "")
    score = reason.get("score")
    out = [head, "score: " + ("-" if score is None or not math.isfinite(float(score)) else f"{float(score):.4g}")]
    out += [f"{k}: {_fmt(v)}" for k, v in reason.items() if k not in ("strategy", "trigger", "score", "rank", "triggers",
                                                                      "trigger_scores")]
    scores = reason.get("trigger_scores") or {}
    fired = [f"{t} ({_fmt(float(scores[t]))})" if t in scores else str(t) for t in reason.get("triggers") or []]
    return out + ["triggers fired: " + (", ".join(fired) if fired else "none")]


def overlay(img: np.ndarray, mask: np.ndarray, color: Sequence[int], alpha: float = MASK_ALPHA) -> np.ndarray:
    """`img` (H, W, 3) RGB with `color` blended in at `alpha` where `mask` (h, w) bool is set (resized, nearest, to
    the image: a mask of the model input covers the whole camera image); every other pixel unchanged."""
    m = np.asarray(mask, bool)
    if m.shape != img.shape[:2]:
        m = cv2.resize(m.astype(np.uint8), (img.shape[1], img.shape[0]), interpolation=cv2.INTER_NEAREST) > 0
    out = img.copy()
    out[m] = np.round(img[m] * (1 - alpha) + np.asarray(color, np.float64) * alpha).astype(np.uint8)
    return out


def camera_view(image: np.ndarray | None, error: str | None, camera: str,
                boxes: Sequence[tuple[Sequence[float], int, float]] = (), model_size: tuple[int, int] | None = None,
                masks: Mapping[str, np.ndarray] | None = None, truth: Mapping[str, Any] | None = None,
                truth_drivable: np.ndarray | None = None, classes: Sequence[str] = ()) -> tuple[np.ndarray, list[str]]:
    """One camera image scaled to CAM_W wide (RGB), and the legend labels of what is drawn on it: the model's masks
    ({"drivable"|"lanes": (h, w) bool of the model input}) as translucent fills; the truth's drivable outline, lane
    lines and boxes (camera pixels: `truth` {"boxes2d", "lanes2d"}, thin, white boxes named); the model's boxes
    [(x1, y1, x2, y2) model pixels, class, score] in their class colour, named with their score (the model input is
    the camera image resized, so a box scales by CAM_W / model width). An unreadable image is a dark tile with
    the whole error."""
    if image is None:
        tile = np.full((CAM_W * 2 // 3, CAM_W, 3), 40, np.uint8)
        _text(tile, "image unreadable:", (6, 40), 0.5, (255, 120, 120))
        for k, line in enumerate(wrap(error or "", CAM_W - 12)):
            _text(tile, line, (6, 62 + 18 * k), TEXT_SCALE, (255, 120, 120))
        _text(tile, camera, (CAM_W - _width(camera, TEXT_SCALE) - 6, 18), TEXT_SCALE, (200, 200, 200))
        return tile, []
    h = max(1, round(image.shape[0] * CAM_W / image.shape[1]))
    tile = cv2.resize(image, (CAM_W, h), interpolation=cv2.INTER_AREA if image.shape[1] > CAM_W else cv2.INTER_LINEAR)
    drawn = []
    for head in MASK_HEADS:
        if masks is not None and head in masks and np.any(masks[head]):
            tile = overlay(tile, masks[head], OVERLAYS[f"{head} (model)"])
            drawn.append(f"{head} (model)")
    k = CAM_W / image.shape[1]  # camera pixels -> sheet pixels
    if truth_drivable is not None and truth_drivable.any():
        edge = cv2.resize(truth_drivable.astype(np.uint8), (CAM_W, h), interpolation=cv2.INTER_NEAREST)
        contours, _ = cv2.findContours(edge, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(tile, contours, -1, OVERLAYS["drivable (truth, outline)"], 1, cv2.LINE_AA)
        drawn.append("drivable (truth, outline)")
    for lane in (truth or {}).get("lanes2d") or []:
        pts = np.round(np.asarray(lane["points"], np.float64).reshape(-1, 2) * k * 16).astype(np.int32)
        cv2.polylines(tile, [pts.reshape(-1, 1, 2)], False, OVERLAYS["lanes (truth)"], 1, cv2.LINE_AA, shift=4)
        drawn += [] if "lanes (truth)" in drawn else ["lanes (truth)"]
    for b in (truth or {}).get("boxes2d") or []:
        x0, y0, x1, y1 = (round(v * k) for v in b["bbox"])
        cv2.rectangle(tile, (x0, y0), (x1 - 1, y1 - 1), OVERLAYS["box (truth)"], 1)
        _text(tile, str(b["class"]), (x0 + 2, min(y1 - 3, h - 3)), 0.38, OVERLAYS["box (truth)"])
        drawn += [] if "box (truth)" in drawn else ["box (truth)"]
    if model_size is not None:
        sx, sy = CAM_W / model_size[1], h / model_size[0]
        for (x1, y1, x2, y2), cls, score in boxes:
            name = classes[int(cls)] if 0 <= int(cls) < len(classes) else f"class{int(cls)}"
            p0 = (round(x1 * sx), round(y1 * sy))
            cv2.rectangle(tile, p0, (round(x2 * sx), round(y2 * sy)), class_color(int(cls)), 2)
            _text(tile, f"{name} {float(score):.2f}", (p0[0] + 2, max(p0[1] - 4, 12)), 0.4, class_color(int(cls)))
            drawn += [] if name in drawn else [name]
    _text(tile, camera, (CAM_W - _width(camera, TEXT_SCALE) - 6, 18), TEXT_SCALE, (200, 200, 200))
    return tile, drawn


def frame_panel(title: str, reason: Mapping[str, Any] | Sequence[str], legend: Sequence[tuple[str, Sequence[int]]],
                height: int) -> tuple[np.ndarray, dict[str, Any]]:
    """The panel right of a frame's cameras (RGB, PANEL_W wide, at least `height` tall): the title, the whole reason
    (a mined item's reason, or the facts to write as a list of strings; wrapped), the legend (a colour swatch and a
    label each). Returns (panel, {"reason_lines", "reason_y", "legend": [{"label", "color", "y"}]}) with y the
    baseline of each line in the panel."""
    facts = reason_text(reason) if isinstance(reason, Mapping) else list(reason)
    lines = [ln for fact in facts for ln in wrap(fact, PANEL_W - 16)]
    H = max(height, 40 + LINE_H * len(lines) + 30 + LINE_H * len(legend) + 10)
    panel = np.full((H, PANEL_W, 3), 24, np.uint8)
    _text(panel, title, (8, 24), 0.6)
    ys, y = [], 24 + LINE_H + 6
    for ln in lines:
        _text(panel, ln, (8, y), TEXT_SCALE, (255, 210, 0) if not ys else (255, 255, 255))
        ys.append(y)
        y += LINE_H
    y += 12
    _text(panel, "legend", (8, y), TEXT_SCALE, (200, 200, 200))
    entries = []
    for label, color in legend:
        y += LINE_H
        cv2.rectangle(panel, (10, y - 11), (26, y + 1), tuple(int(c) for c in color), -1)
        _text(panel, label, (34, y), TEXT_SCALE)
        entries.append({"label": label, "color": [int(c) for c in color], "y": y})
    return panel, {"reason_lines": lines, "reason_y": ys, "legend": entries}


def frame_tile(views: Sequence[np.ndarray], panel: np.ndarray) -> np.ndarray:
    """One frame of the contact sheet (RGB): its camera views in rows of GRID_COLS, the panel on the right."""
    h = max(v.shape[0] for v in views)
    views = [np.pad(v, ((0, h - v.shape[0]), (0, 0), (0, 0))) for v in views]
    cols = min(GRID_COLS, len(views))
    views += [np.zeros_like(views[0])] * (-len(views) % cols)
    grid = np.concatenate([np.concatenate(views[r:r + cols], 1) for r in range(0, len(views), cols)], 0)
    H = max(grid.shape[0], panel.shape[0])
    return np.concatenate([np.pad(grid, ((0, H - grid.shape[0]), (0, 0), (0, 0))),
                           np.pad(panel, ((0, H - panel.shape[0]), (0, 0), (0, 0)), constant_values=24)], 1)


def contact_sheet(tiles: Sequence[np.ndarray], header: str) -> tuple[np.ndarray, list[int]]:
    """Frame tiles one under the other below a header strip (the header wrapped in full); returns (sheet RGB,
    the row where each tile starts)."""
    W = max(t.shape[1] for t in tiles)
    lines = wrap(header, W - 12, 0.5)
    strip = np.full((10 + 20 * len(lines), W, 3), 20, np.uint8)
    for k, ln in enumerate(lines):
        _text(strip, ln, (6, 22 + 20 * k), 0.5)
    rows, y = [], strip.shape[0]
    for t in tiles:
        rows.append(y)
        y += t.shape[0] + SEPARATOR
    sep = np.full((SEPARATOR, W, 3), 90, np.uint8)
    parts = [strip] + [p for t in tiles for p in (np.pad(t, ((0, 0), (0, W - t.shape[1]), (0, 0))), sep)]
    return np.concatenate(parts, 0), rows


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


def read_views(fleet: Path, clip: str, fdir: str, cams: Sequence[str]) -> dict[str, tuple[np.ndarray | None, str | None]]:
    """{camera: (its image RGB, None) or (None, why it cannot be read)} of one frame: a tile draws either."""
    images: dict[str, tuple[np.ndarray | None, str | None]] = {}
    for cam in cams:
        try:
            images[cam] = read_frame(fleet, clip, fdir, [cam])[0], None
        except ValueError as e:
            images[cam] = None, str(e)
    return images


def legend_entries(drawn: Sequence[str], classes: Sequence[str]) -> list[tuple[str, Sequence[int]]]:
    """(label, colour) of each thing `camera_view` drew: an overlay's colour, else its class's."""
    return [(lab, OVERLAYS.get(lab) or class_color(classes.index(lab) if lab in classes else int(lab[5:]))) for lab in drawn]


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
