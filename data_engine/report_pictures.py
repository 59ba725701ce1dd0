"""The engine report's pictures (data_engine/report.py, and the auto-labeller's preview.png): one camera image with
masks, truth and boxes drawn on it, the text panel beside a frame, a frame's tile, the contact sheet, the
signal histograms. Drawing on numpy RGB images (OpenCV); nothing here reads a catalog or writes a file, and
`read_views` only reads a frame's camera images from its fleet."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from data_engine.fleet import read_frame
from data_engine.signals import SIGNALS
from hydranet.viz import class_color, mosaic

CAM_W = 512  # contact sheet width of one camera image (pixels; 256 before issue 34); images are scaled to it
GRID_COLS = 3  # camera images per row of a frame's tile
PANEL_W = 460  # the panel right of a frame's cameras: title, the whole reason (wrapped), the legend
SEPARATOR = 4  # grey rows between two frames
TEXT_SCALE, LINE_H = 0.45, 18  # panel text: OpenCV font scale, pixels per line
MASK_ALPHA = 0.4  # opacity of the model's masks
OVERLAYS = {  # legend label -> colour (RGB) of what is drawn besides the model's boxes (those: their class's colour)
    "drivable (model)": (0, 220, 90), "lanes (model)": (255, 0, 255), "drivable (truth, outline)": (170, 255, 170),
    "lanes (truth)": (255, 220, 0), "box (truth)": (255, 255, 255)}
HIST_BINS = 24
_FONT = cv2.FONT_HERSHEY_SIMPLEX

MASK_HEADS = ("drivable", "lanes")  # the camera heads whose masks are drawn (and exported as Segmentation)


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
    out += [f"{k}: {fmt_value(v)}" for k, v in reason.items() if k not in ("strategy", "trigger", "score", "rank", "triggers",
                                                                      "trigger_scores")]
    scores = reason.get("trigger_scores") or {}
    fired = [f"{t} ({fmt_value(float(scores[t]))})" if t in scores else str(t) for t in reason.get("triggers") or []]
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


def fmt_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else "-"
    return str(v)
