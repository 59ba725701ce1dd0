"""Pictures people look at: camera mosaics with labels or predictions drawn on them, and the
bird's-eye view with boxes and velocity arrows. Pure numpy + OpenCV; images are RGB uint8.
"""
from __future__ import annotations

import math

import cv2
import numpy as np

from hydranet.geometry import box_corners

_PALETTE = np.array([
    (230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
    (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 190), (0, 128, 128), (170, 110, 40),
], np.uint8)
_LANE_COLORS = {"solid_white": (255, 255, 255), "dashed_white": (200, 200, 255), "solid_yellow": (255, 210, 0)}


def class_color(index: int) -> tuple[int, int, int]:
    return tuple(int(c) for c in _PALETTE[index % len(_PALETTE)])


def draw_camera(image: np.ndarray, labels: dict, classes: list[str], drivable: np.ndarray | None = None) -> np.ndarray:
    """One camera image with drivable area, lane lines and 2D boxes drawn on it.

    `labels`: {"boxes2d": [...], "lanes2d": [...]} as in docs/dataset_format.md (also the shape
    of decoded predictions, which may add a "score")."""
    img = image.copy()
    if drivable is not None:
        tint = np.zeros_like(img)
        tint[drivable] = (0, 200, 80)
        img = cv2.addWeighted(img, 1.0, tint, 0.35, 0)
    scale = max(1, round(img.shape[0] / 200))
    for lane in labels.get("lanes2d", []):
        pts = np.round(np.asarray(lane["points"]) * 16).astype(np.int32)
        cv2.polylines(img, [pts], False, _LANE_COLORS.get(lane.get("type"), (255, 255, 255)), scale, cv2.LINE_AA, shift=4)
    for b in labels.get("boxes2d", []):
        cls = b["class"]
        color = class_color(classes.index(cls) if cls in classes else 0)
        x0, y0, x1, y1 = (int(round(v)) for v in b["bbox"])
        cv2.rectangle(img, (x0, y0), (x1 - 1, y1 - 1), color, scale)
        attrs = b.get("attributes", {})
        text = attrs.get("sign_class") or attrs.get("light_state") or cls
        if "score" in b:
            text += f" {b['score']:.2f}"
        cv2.putText(img, text, (x0, max(y0 - 2, 8)), cv2.FONT_HERSHEY_PLAIN, 0.6 * scale, color, 1, cv2.LINE_AA)
    return img


def draw_bev(bev: np.ndarray | None, boxes3d: list[dict], classes: list[str], x_range, y_range,
             resolution: float, size: int = 400, gt_boxes3d: list[dict] | None = None) -> np.ndarray:
    """Top view, car going up: the BEV raster (drivable grey, lanes white) with 3D boxes and
    velocity arrows (1 s of motion). Ground truth, when given, is drawn as thin white outlines."""
    n_x = round((x_range[1] - x_range[0]) / resolution)
    n_y = round((y_range[1] - y_range[0]) / resolution)
    img = np.full((n_x, n_y, 3), 25, np.uint8)
    if bev is not None:
        img[bev[0] > 0] = (80, 80, 85)
        img[bev[1] > 0] = (230, 230, 230)
    img = cv2.resize(img, (size * n_y // n_x, size), interpolation=cv2.INTER_NEAREST)
    s = size / n_x / resolution  # pixels per metre

    def px(xy):
        return np.stack([(y_range[1] - xy[:, 1]) * s, (x_range[1] - xy[:, 0]) * s], 1)

    def draw(boxes, thin):
        for b in boxes:
            corners = box_corners(b["center"], b["size"], b["yaw"])[:4, :2]
            color = (255, 255, 255) if thin else class_color(classes.index(b["class"]) if b["class"] in classes else 0)
            pts = np.round(px(corners) * 16).astype(np.int32)
            cv2.polylines(img, [pts], True, color, 1, cv2.LINE_AA, shift=4)
            if not thin:
                c = np.asarray(b["center"][:2])[None]
                v = np.asarray(b.get("velocity", [0, 0])[:2])[None]
                if np.linalg.norm(v) > 0.2:
                    a, e = px(c)[0], px(c + v)[0]
                    cv2.arrowedLine(img, tuple(np.round(a).astype(int)), tuple(np.round(e).astype(int)), color, 1, cv2.LINE_AA, tipLength=0.3)

    if gt_boxes3d is not None:
        draw(gt_boxes3d, True)
    draw(boxes3d, False)
    ego = px(box_corners([0, 0, 0], [4.5, 1.9, 1.5], 0.0)[:4, :2])
    cv2.fillConvexPoly(img, np.round(ego * 16).astype(np.int32), (0, 200, 255), cv2.LINE_AA, shift=4)
    return img


def mosaic(tiles: list[np.ndarray], names: list[str], side: np.ndarray | None = None, cols: int | None = None) -> np.ndarray:
    """Camera tiles in a grid (names written on them) and an optional side panel (the BEV)."""
    cols = cols or math.ceil(len(tiles) / 2) if len(tiles) > 3 else len(tiles)
    h, w = tiles[0].shape[:2]
    rows = math.ceil(len(tiles) / cols)
    grid = np.zeros((rows * h, cols * w, 3), np.uint8)
    for i, (t, name) in enumerate(zip(tiles, names)):
        t = cv2.resize(t, (w, h)) if t.shape[:2] != (h, w) else t.copy()
        cv2.putText(t, name, (4, 12), cv2.FONT_HERSHEY_PLAIN, 0.8, (255, 255, 255), 1, cv2.LINE_AA)
        r, c = divmod(i, cols)
        grid[r * h:(r + 1) * h, c * w:(c + 1) * w] = t
    if side is None:
        return grid
    side = cv2.resize(side, (side.shape[1] * grid.shape[0] // side.shape[0], grid.shape[0]), interpolation=cv2.INTER_AREA)
    return np.concatenate([grid, side], 1)


def sample_preview(sample: dict, meta: dict) -> np.ndarray:
    """Mosaic of every camera of a dataset sample with its labels, plus the labelled BEV."""
    classes = meta["classes"]
    labels = sample["labels"]
    tiles = [draw_camera(sample["images"][i], labels["cameras"][name], classes,
                         sample["drivable"][i] if "drivable" in sample else None)
             for i, name in enumerate(sample["camera_names"])]
    b = meta["bev"]
    bev = draw_bev(sample.get("bev"), labels["boxes3d"], classes, b["x_range"], b["y_range"], b["resolution"],
                   size=max(2 * tiles[0].shape[0], 200))
    return mosaic(tiles, sample["camera_names"], bev)


def write_png(path, image_rgb: np.ndarray) -> None:
    if not cv2.imwrite(str(path), cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {path}; check the folder exists and is writable")
