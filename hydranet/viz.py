"""Pictures people look at: camera mosaics with labels or predictions drawn on them, and the
bird's-eye view with boxes and velocity arrows. Pure numpy + OpenCV; images are RGB uint8.
"""
from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from hydranet.geometry import box_corners
from hydranet.io import atomic_write_bytes

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


class BevCanvas:
    """A top view to draw on, car going up: rows = -x (ahead first), columns = -y (left first).
    `image` (size, size * Y / X, 3) RGB uint8; metres map to pixels through `px`."""

    def __init__(self, x_range, y_range, resolution: float, size: int = 400):
        self.x_range, self.y_range, self.resolution = tuple(x_range), tuple(y_range), float(resolution)
        self.n_x = round((x_range[1] - x_range[0]) / resolution)
        self.n_y = round((y_range[1] - y_range[0]) / resolution)
        self.image = np.full((size, size * self.n_y // self.n_x, 3), 25, np.uint8)
        self.scale = size / self.n_x / resolution  # pixels per metre

    def px(self, xy: np.ndarray) -> np.ndarray:
        """(M, 2) ego metres -> (M, 2) pixel (column, row)."""
        return np.stack([(self.y_range[1] - xy[:, 1]) * self.scale, (self.x_range[1] - xy[:, 0]) * self.scale], 1)

    def paint(self, mask: np.ndarray, color: tuple[int, int, int]) -> None:
        """Colour the cells of a (X, Y) mask on this canvas's grid."""
        big = cv2.resize(mask.astype(np.uint8), self.image.shape[1::-1], interpolation=cv2.INTER_NEAREST) > 0
        self.image[big] = color

    def raster(self, bev: np.ndarray | None) -> None:
        """The dataset's BEV raster (3, X, Y): drivable grey, lanes white."""
        if bev is not None:
            self.paint(bev[0] > 0, (80, 80, 85))
            self.paint(bev[1] > 0, (230, 230, 230))

    def boxes(self, boxes3d: list[dict], classes: list[str], outline: bool = False) -> None:
        """3D boxes ({"center", "size", "yaw", "velocity", "class"}) with 1 s velocity arrows;
        `outline`: thin white outlines (ground truth under predictions)."""
        for b in boxes3d:
            corners = box_corners(b["center"], b["size"], b["yaw"])[:4, :2]
            color = (255, 255, 255) if outline else class_color(classes.index(b["class"]) if b["class"] in classes else 0)
            cv2.polylines(self.image, [np.round(self.px(corners) * 16).astype(np.int32)], True, color, 1, cv2.LINE_AA, shift=4)
            v = np.asarray(b.get("velocity", [0, 0])[:2])[None]
            if not outline and np.linalg.norm(v) > 0.2:
                c = np.asarray(b["center"][:2])[None]
                a, e = self.px(c)[0], self.px(c + v)[0]
                cv2.arrowedLine(self.image, tuple(np.round(a).astype(int)), tuple(np.round(e).astype(int)), color, 1,
                                cv2.LINE_AA, tipLength=0.3)

    def inside(self, boxes3d: list[dict]) -> list[dict]:
        """The boxes whose centre lies on this canvas."""
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        return [b for b in boxes3d if x0 <= b["center"][0] < x1 and y0 <= b["center"][1] < y1]

    def ego(self) -> np.ndarray:
        """Draw the ego car; returns the image."""
        car = self.px(box_corners([0, 0, 0], [4.5, 1.9, 1.5], 0.0)[:4, :2])
        cv2.fillConvexPoly(self.image, np.round(car * 16).astype(np.int32), (0, 200, 255), cv2.LINE_AA, shift=4)
        return self.image


def draw_bev(bev: np.ndarray | None, boxes3d: list[dict], classes: list[str], x_range, y_range,
             resolution: float, size: int = 400) -> np.ndarray:
    """Top view of a dataset frame: the BEV raster with its 3D boxes and velocity arrows."""
    canvas = BevCanvas(x_range, y_range, resolution, size)
    canvas.raster(bev)
    canvas.boxes(boxes3d, classes)
    return canvas.ego()


def depth_rgb(depth: np.ndarray, max_depth: float = 80.0) -> np.ndarray:
    """(H, W) metres -> RGB, log scale, near = warm; 0 (no surface) black."""
    d = np.clip(np.log1p(np.maximum(depth, 0)) / math.log1p(max_depth), 0, 1)
    rgb = cv2.cvtColor(cv2.applyColorMap((255 - d * 255).astype(np.uint8), cv2.COLORMAP_TURBO), cv2.COLOR_BGR2RGB)
    rgb[depth <= 0] = 0
    return rgb


def normals_rgb(n: np.ndarray) -> np.ndarray:
    """(H, W, 3) unit normals -> RGB; zero normals (no surface) black."""
    return np.clip((n + 1.0) * 127.5, 0, 255).astype(np.uint8) * (np.abs(n).sum(-1, keepdims=True) > 0)


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


def prediction_picture(model, sample: dict, pred: dict, meta: dict, bev_size: int = 256) -> np.ndarray:
    """RGB mosaic, one row per camera: ground truth | prediction, where every camera head draws
    its result on the prediction image and may add panels (`Task.draw`); a model with BEV heads
    adds the bird's-eye view on the right: dataset truth | every BEV head's drawing on the
    model's grid. `sample`: the frame at the model size; `pred`: the model's "predict" output
    for it (batch of one)."""
    classes = list(meta["classes"])
    heads = model.heads
    tiles, names = [], []
    for i, cam in enumerate(sample["camera_names"]):
        truth = {k: sample[k][i] for k in ("depth", "normals", "drivable") if k in sample}
        truth.update(image=sample["images"][i], labels=sample["labels"]["cameras"][cam])
        canvas = sample["images"][i].copy()
        extra: list[tuple[str, np.ndarray]] = []
        for name, task in heads.items():
            if task.space == "image" and name in pred:
                extra += task.draw(canvas, pred[name][i], truth)
        tiles += [draw_camera(sample["images"][i], truth["labels"], classes, truth.get("drivable")), canvas]
        tiles += [img for _, img in extra]
        names += [f"{cam} truth", f"{cam} prediction"] + [label for label, _ in extra]
    side = None
    bev_heads = [name for name, task in heads.items() if task.space == "bev" and name in pred]
    if bev_heads:
        b, g = meta["bev"], model.fusion.grid
        truth = BevCanvas(b["x_range"], b["y_range"], b["resolution"], bev_size)
        truth.raster(sample.get("bev"))
        truth.boxes([x for x in sample["labels"]["boxes3d"] if x.get("num_pixels", 1) > 0], classes)
        predicted = BevCanvas(g.x_range, g.y_range, g.resolution, bev_size)
        for name in bev_heads:
            heads[name].draw(predicted, pred[name][0], {"labels": sample["labels"], "bev": sample.get("bev")})
        panels = []
        for canvas, text in ((truth, "BEV truth"), (predicted, "BEV prediction")):
            img = canvas.ego()
            cv2.putText(img, text, (4, 12), cv2.FONT_HERSHEY_PLAIN, 0.8, (255, 255, 255), 1, cv2.LINE_AA)
            panels.append(img)
        panels[1] = cv2.resize(panels[1], (panels[1].shape[1] * bev_size // panels[1].shape[0], bev_size))
        side = np.concatenate([panels[0], np.full((bev_size, 4, 3), 255, np.uint8), panels[1]], 1)
    return mosaic(tiles, names, side, cols=len(tiles) // len(sample["camera_names"]))


def write_png(path, image_rgb: np.ndarray) -> None:
    """`image_rgb` (H, W, 3) uint8 as a PNG at `path` (its folder made), written whole or not at all."""
    ok, png = cv2.imencode(".png", cv2.cvtColor(image_rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise OSError(f"could not encode {path} as PNG")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, png.tobytes())
