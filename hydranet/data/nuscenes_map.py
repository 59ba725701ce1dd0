"""The nuScenes map expansion (v1.3 JSON) rasterized into each sample: BEV grid and cameras.

    m = MapExpansion(root / "maps/expansion/boston-seaport.json", "boston-seaport")
    local = LocalMap(m, ego2world)                         # the map around one sample, ego frame
    bev = bev_raster(local, grid, boxes, classes)          # (3, X, Y) uint8
    drivable = camera_drivable(local, ego2cam, K, W, H)    # (H, W) bool
    lanes2d = camera_lanes(local, ego2cam, K, W, H)        # [{"points", "type", "lane_id"}]

Caesar et al., "nuScenes: A multimodal dataset for autonomous driving", CVPR 2020; the map
expansion's layout is the one nuscenes-devkit's `NuScenesMap` reads: geometric layers `node`
({token, x, y}, metres in the location's global frame, the frame of ego_pose), `line`
({token, node_tokens}) and `polygon` ({token, exterior_node_tokens, holes: [{node_tokens}]}),
and semantic layers pointing at them; read here: `drivable_area` ({token, polygon_tokens}),
`lane_divider` and `road_divider` ({token, line_token, ...}).

What is drawn (docs/datasets.md):
- BEV (`bev.png` convention of docs/dataset_format.md, the sample's ego frame): channel 0 the
  drivable-area polygons (holes cut out), channel 1 the lane_divider and road_divider lines 1 cell
  wide, channel 2 the 3D boxes' footprints (class index + 1). Drawn as the sim draws its raster
  (OpenCV, 1/16-cell sub-pixel vertices, pixel centres inside).
- Cameras: the same polygons and lines laid on flat ground (world z = 0, where nuScenes' ego
  poses lie), cut to CAMERA_RANGE metres around the ego and at NEAR metres in front of the
  camera, then projected through the calibration (pinhole, so straight edges stay straight and the
  projection of the cut polygon is exact). `drivable` per camera is not occlusion-aware (a car on
  the road is drivable under it); `lanes2d` are the divider lines' visible-in-image runs (a line
  leaving and re-entering the image is two polylines with one lane_id).
numpy + OpenCV only (no shapely, no torch).
"""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from hydranet.bevgrid import BevGrid
from hydranet.data.reader import NEAR, DatasetError
from hydranet.geometry import transform_points
from hydranet.io import read_json

MIN_VERSION = (1, 3)
LINE_LAYERS = ("lane_divider", "road_divider")  # -> lanes2d/lanes3d "type"
REQUIRED = ("node", "line", "polygon", "drivable_area") + LINE_LAYERS
CAMERA_RANGE = 100.0  # metres around the ego (square in ego x/y) drawn into the cameras
_SHIFT = 4  # OpenCV sub-pixel bits: vertices in 1/16 pixel
_FOOT = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, -1.0], [-1.0, 1.0]])  # a box's bottom face, as geometry.box_corners
FIX = "download 'Map expansion' (v1.3) from nuscenes.org and unzip it into the dataroot's maps/ folder"


def _version(v) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(v).split("."))
    except ValueError:
        return (0,)


class MapExpansion:
    """One location's map: drivable-area polygons and divider lines in global x/y (metres), with
    bounding boxes for culling. Bad files raise one DatasetError line naming the file and record."""

    def __init__(self, path, location: str):
        self.path, self.location = Path(path), location
        js = read_json(self.path, error=DatasetError, fix=FIX)
        if not isinstance(js, dict):
            raise DatasetError(f"{self.path}: not a map expansion (a JSON object with layers {list(REQUIRED)}); {FIX}",
                               self.path)
        version = js.get("version", "1.0")  # the devkit reads a file without "version" as 1.0
        if _version(version) < MIN_VERSION:
            raise DatasetError(f"{self.path}: map expansion version {version} is outdated (this reader needs "
                               f">= {'.'.join(map(str, MIN_VERSION))}); {FIX}", self.path)
        for layer in REQUIRED:
            if not isinstance(js.get(layer), list):
                raise DatasetError(f"{self.path}: layer '{layer}' is missing or not a list; {FIX}", self.path)
        try:
            nodes = {n["token"]: (float(n["x"]), float(n["y"])) for n in js["node"]}
        except (KeyError, TypeError, ValueError):
            raise DatasetError(f"{self.path}: layer 'node' has a record without token/x/y numbers; {FIX}", self.path) from None
        self.version = str(version)

        def points(tokens, what: str) -> np.ndarray:
            try:
                return np.asarray([nodes[t] for t in tokens], np.float64).reshape(-1, 2)
            except KeyError as e:
                raise DatasetError(f"{self.path}: {what} names node {e.args[0]!r}, which layer 'node' lacks; {FIX}",
                                   self.path) from None

        polygons = {p.get("token"): p for p in js["polygon"] if isinstance(p, dict)}
        self.drivable: list[tuple[np.ndarray, list[np.ndarray]]] = []  # (exterior (P, 2), holes [(Q, 2)])
        for rec in js["drivable_area"]:
            for ptok in rec.get("polygon_tokens", []):
                poly = polygons.get(ptok)
                if poly is None:
                    raise DatasetError(f"{self.path}: drivable_area record {rec.get('token')!r} names polygon {ptok!r}, "
                                       f"which layer 'polygon' lacks; {FIX}", self.path)
                ext = points(poly.get("exterior_node_tokens", []), f"polygon {ptok!r}")
                holes = [points(h.get("node_tokens", []), f"polygon {ptok!r} (a hole)") for h in poly.get("holes", [])]
                if len(ext) >= 3:
                    self.drivable.append((ext, [h for h in holes if len(h) >= 3]))
        lines = {ln.get("token"): ln for ln in js["line"] if isinstance(ln, dict)}
        self.lines: list[tuple[str, np.ndarray]] = []  # (layer, (P, 2))
        for layer in LINE_LAYERS:
            for rec in js[layer]:
                line = lines.get(rec.get("line_token"))
                if line is None:
                    raise DatasetError(f"{self.path}: {layer} record {rec.get('token')!r} names line "
                                       f"{rec.get('line_token')!r}, which layer 'line' lacks; {FIX}", self.path)
                pts = points(line.get("node_tokens", []), f"line {rec.get('line_token')!r}")
                if len(pts) >= 2:  # the devkit skips lines without nodes too
                    self.lines.append((layer, pts))
        self._poly_box = _boxes([e for e, _ in self.drivable])  # (K, 4) x0, y0, x1, y1
        self._hole_box = [_boxes(holes) for _, holes in self.drivable]  # per polygon (H, 4)
        self._line_box = _boxes([p for _, p in self.lines])
        all_pts = [e for e, _ in self.drivable] + [p for _, p in self.lines]
        self.extent = _boxes([np.concatenate(all_pts)])[0] if all_pts else np.zeros(4)

    def near(self, xy, radius: float) -> tuple[list[tuple[np.ndarray, list[np.ndarray]]], list[tuple[int, str, np.ndarray]]]:
        """Drivable polygons (holes culled too) and (index, layer, points) lines whose bounding box
        meets the square of half-size `radius` around global `xy`."""
        x, y = float(xy[0]), float(xy[1])
        q = np.array([x - radius, y - radius, x + radius, y + radius])

        def hit(b):
            return (b[:, 0] <= q[2]) & (b[:, 2] >= q[0]) & (b[:, 1] <= q[3]) & (b[:, 3] >= q[1])

        polys = []
        for k in np.flatnonzero(hit(self._poly_box)):
            ext, holes = self.drivable[k]
            polys.append((ext, [holes[j] for j in np.flatnonzero(hit(self._hole_box[k]))]))
        lines = [(int(k), *self.lines[k]) for k in np.flatnonzero(hit(self._line_box))]
        return polys, lines

    def on_drivable(self, xy) -> bool:
        """Whether the global point `xy` lies on the drivable area (in an exterior, in none of its holes)."""
        polys, _ = self.near(xy, 0.0)
        return any(_inside(ext, xy) and not any(_inside(h, xy) for h in holes) for ext, holes in polys)


def _boxes(polys: list[np.ndarray]) -> np.ndarray:
    if not polys:
        return np.zeros((0, 4))
    return np.stack([np.concatenate([p.min(0), p.max(0)]) for p in polys])  # (K, 4)


def _inside(poly: np.ndarray, p) -> bool:
    """Even-odd point-in-polygon test of point p (2,) against polygon (P, 2)."""
    x, y = poly[:, 0], poly[:, 1]
    x2, y2 = np.roll(x, -1), np.roll(y, -1)
    cross = (y > p[1]) != (y2 > p[1])
    with np.errstate(divide="ignore", invalid="ignore"):
        xi = x + (p[1] - y) * (x2 - x) / (y2 - y)
    return bool(np.count_nonzero(cross & (p[0] < xi)) % 2)


# -- clipping (vectorized Sutherland-Hodgman for polygons, Liang-Barsky-style for segments) ---
def clip_polygon(P: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Polygon P (V, D) cut to the half-space d >= 0 (d: (V,) signed distance of each vertex, linear
    in position). Keeps vertex order; a concave polygon may gain zero-area bridges along the cut."""
    if len(P) == 0 or (d >= 0).all():
        return P
    Q, dq = np.roll(P, -1, 0), np.roll(d, -1)
    ina, inb = d >= 0, dq >= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(ina != inb, d / (d - dq), 0.0)
    cut = P + t[:, None] * (Q - P)  # (V, D) where the edge crosses the boundary
    out = np.stack([cut, Q], 1)  # (V, 2, D): per edge a -> b: [crossing point, b]
    keep = np.stack([ina != inb, inb], 1)  # (V, 2)
    return out[keep]


def _rect_distances(P: np.ndarray, half: float) -> list[np.ndarray]:
    return [half - P[:, 0], P[:, 0] + half, half - P[:, 1], P[:, 1] + half]


def clip_to_square(P: np.ndarray, half: float) -> np.ndarray:
    """Polygon P (V, D >= 2) cut to |x| <= half and |y| <= half."""
    if len(P) == 0 or np.abs(P[:, :2]).max() <= half:
        return P
    for axis, sign in ((0, 1), (0, -1), (1, 1), (1, -1)):
        if len(P) == 0:
            break
        P = clip_polygon(P, half - sign * P[:, axis])
    return P


def clip_segments(A: np.ndarray, B: np.ndarray, dA: list[np.ndarray], dB: list[np.ndarray]):
    """Segments A -> B (S, D) cut to the half-spaces d >= 0 (per half-space the signed distances
    of the start and end points). Returns (t0, t1) (S,): the kept part is A + t (B - A) for t in
    [t0, t1], empty when t0 >= t1."""
    t0, t1 = np.zeros(len(A)), np.ones(len(A))
    for da, db in zip(dA, dB):
        with np.errstate(divide="ignore", invalid="ignore"):
            t = da / (da - db)
        t0 = np.where((da < 0) & (db >= 0), np.maximum(t0, t), t0)
        t1 = np.where((da >= 0) & (db < 0), np.minimum(t1, t), t1)
        out = (da < 0) & (db < 0)
        t0, t1 = np.where(out, 1.0, t0), np.where(out, 0.0, t1)
    return t0, t1


def _runs(P0: np.ndarray, P1: np.ndarray, line: np.ndarray, kept: np.ndarray, whole_start: np.ndarray,
          whole_end: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(line, polyline (K, D)) runs of the kept segments P0 -> P1 (S, D): a segment continues the
    previous one when both belong to one line, the previous keeps its end and this one its start."""
    idx = np.flatnonzero(kept)
    if len(idx) == 0:
        return []
    a, b = idx[:-1], idx[1:]
    joined = (b == a + 1) & (line[b] == line[a]) & whole_end[a] & whole_start[b]  # (K-1,)
    starts = np.r_[0, np.flatnonzero(~joined) + 1]
    ends = np.r_[starts[1:], len(idx)]
    return [(int(line[idx[i]]), np.concatenate([P0[idx[i:i + 1]], P1[idx[i:j]]])) for i, j in zip(starts, ends)]


def _ground(xy: np.ndarray) -> np.ndarray:
    return np.concatenate([xy, np.zeros((len(xy), 1))], 1)  # (P, 3) on world z = 0


class LocalMap:
    """A location's map around one sample, in the sample's ego frame, cut to the square |x|, |y| <=
    `reach` m: drivable polygons [(exterior (V, 3), [holes (V, 3)])] and the divider lines as
    segments A -> B (S, 3) kept for t in [t0, t1], `line` (S,) the map line of each segment;
    `layer[k]` is map line k's layer. Built once a sample, projected into every camera."""

    def __init__(self, m: MapExpansion, ego2world: np.ndarray, reach: float = CAMERA_RANGE):
        world2ego = np.linalg.inv(ego2world)
        polys, lines = m.near(ego2world[:2, 3], reach * np.sqrt(2))

        def ego(p: np.ndarray) -> np.ndarray:
            return clip_to_square(transform_points(world2ego, _ground(p)), reach)  # (V, 3)

        self.reach = reach
        self.polygons = []
        for ext, holes in polys:
            e = ego(ext)
            if len(e) >= 3:
                self.polygons.append((e, [h for h in map(ego, holes) if len(h) >= 3]))
        self.layer = {k: layer for k, layer, _ in lines}
        if lines:
            pts = transform_points(world2ego, _ground(np.concatenate([p for _, _, p in lines])))  # (P, 3) all lines
            owner = np.concatenate([np.full(len(p), k) for k, _, p in lines])  # (P,) map line of each point
            seg = np.flatnonzero(owner[:-1] == owner[1:])  # segments within one line
            self.A, self.B, self.line = pts[seg], pts[seg + 1], owner[seg]  # (S, 3), (S, 3), (S,)
        else:
            self.A = self.B = np.zeros((0, 3))
            self.line = np.zeros(0, np.int64)
        self.t0, self.t1 = clip_segments(self.A, self.B, _rect_distances(self.A, reach), _rect_distances(self.B, reach))

    def runs(self, half: float | None = None) -> list[tuple[int, np.ndarray]]:
        """(map line, polyline (K, 3)) in the ego frame, cut to the square of half-size `half`."""
        t0, t1 = self.t0, self.t1
        if half is not None:
            u0, u1 = clip_segments(self.A, self.B, _rect_distances(self.A, half), _rect_distances(self.B, half))
            t0, t1 = np.maximum(t0, u0), np.minimum(t1, u1)
        d = self.B - self.A
        return _runs(self.A + t0[:, None] * d, self.A + t1[:, None] * d, self.line, t0 < t1, t0 <= 0, t1 >= 1)


def _to_px(grid: BevGrid, xy: np.ndarray) -> np.ndarray:
    """Ego x/y (P, 2) -> OpenCV points (col, row) in 1/16 cell, cell centres at integers."""
    rc = grid.to_cell(xy)  # (P, 2) row, col
    return np.round(rc[:, ::-1] * (1 << _SHIFT)).astype(np.int32)


def _fill(mask: np.ndarray, ext: np.ndarray, holes: list[np.ndarray]) -> None:
    """mask |= exterior minus holes; points (P, 2) are OpenCV 1/16-pixel (x, y)."""
    if not holes:
        cv2.fillPoly(mask, [ext], 1, lineType=cv2.LINE_8, shift=_SHIFT)
        return
    part = np.zeros_like(mask)
    cv2.fillPoly(part, [ext], 1, lineType=cv2.LINE_8, shift=_SHIFT)
    cv2.fillPoly(part, holes, 0, lineType=cv2.LINE_8, shift=_SHIFT)
    mask |= part


def bev_raster(local: LocalMap, grid: BevGrid, boxes: list[dict], classes: list[str]) -> np.ndarray:
    """(3, X, Y) uint8 in the sample's ego frame: drivable (0/255), divider lines (0/255), box
    footprints (index in `classes` + 1). The grid must lie inside the local map's square."""
    X, Y = grid.shape
    if max(np.abs(grid.x_range).max(), np.abs(grid.y_range).max()) > local.reach:
        raise ValueError(f"BEV grid {grid.as_dict()} reaches beyond the local map's {local.reach} m")
    out = np.zeros((3, X, Y), np.uint8)
    drivable = np.zeros((X, Y), np.uint8)
    for ext, holes in local.polygons:
        _fill(drivable, _to_px(grid, ext[:, :2]), [_to_px(grid, h[:, :2]) for h in holes])
    out[0] = drivable * 255
    lanes = np.zeros((X, Y), np.uint8)
    for _, pts in local.runs():
        cv2.polylines(lanes, [_to_px(grid, pts[:, :2])], False, 255, thickness=1, lineType=cv2.LINE_8, shift=_SHIFT)
    out[1] = lanes
    objects = np.zeros((X, Y), np.uint8)
    if boxes:
        c = np.array([b["center"][:2] for b in boxes], np.float64)  # (B, 2)
        half = 0.5 * np.array([b["size"][:2] for b in boxes], np.float64)  # (B, 2) length, width
        yaw = np.array([b["yaw"] for b in boxes], np.float64)
        cos, sin = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
        lx, ly = _FOOT[None, :, 0] * half[:, :1], _FOOT[None, :, 1] * half[:, 1:]  # (B, 4) in the box frame
        corners = np.stack([c[:, :1] + cos * lx - sin * ly, c[:, 1:] + sin * lx + cos * ly], -1)  # (B, 4, 2) ego
        px = _to_px(grid, corners.reshape(-1, 2)).reshape(-1, 4, 2)
        for b, quad in zip(boxes, px):
            cv2.fillConvexPoly(objects, quad, classes.index(b["class"]) + 1, lineType=cv2.LINE_8, shift=_SHIFT)
    out[2] = objects
    return out


def _project(P: np.ndarray, K: np.ndarray) -> np.ndarray:
    uvw = P @ K.T
    return uvw[:, :2] / uvw[:, 2:3]


def camera_drivable(local: LocalMap, ego2cam: np.ndarray, K: np.ndarray, width: int, height: int) -> np.ndarray:
    """(H, W) bool: the local drivable area seen by a camera (ego2cam 4x4: the sample's ego frame
    to the camera at its own instant), cut at NEAR m in front of it."""
    mask = np.zeros((height, width), np.uint8)

    def image_poly(e: np.ndarray) -> np.ndarray | None:
        c = transform_points(ego2cam, e)  # (V, 3) camera
        c = clip_polygon(c, c[:, 2] - NEAR)
        if len(c) < 3:
            return None
        return np.round(_project(c, K) * (1 << _SHIFT)).astype(np.int32)

    for ext, holes in local.polygons:
        e = image_poly(ext)
        if e is not None:
            _fill(mask, e, [h for h in map(image_poly, holes) if h is not None])
    return mask.view(bool)  # 0/1 bytes


def camera_lanes(local: LocalMap, ego2cam: np.ndarray, K: np.ndarray, width: int, height: int) -> list[dict]:
    """lanes2d of one camera: the local divider lines cut at NEAR m and to the image [0, W-1] x
    [0, H-1], as {"points" (K, 2), "type": layer, "lane_id": map line index + 1}."""
    A, B = transform_points(ego2cam, local.A), transform_points(ego2cam, local.B)  # (S, 3) camera
    u0, u1 = clip_segments(A, B, [A[:, 2] - NEAR], [B[:, 2] - NEAR])
    t0, t1 = np.maximum(local.t0, u0), np.minimum(local.t1, u1)
    kept = t0 < t1
    P0, P1 = A + t0[:, None] * (B - A), A + t1[:, None] * (B - A)
    P0[~kept, 2] = P1[~kept, 2] = 1.0  # dropped segments: any point in front, never used
    P0, P1 = _project(P0, K), _project(P1, K)  # (S, 2): a segment in front projects to a segment
    lim = lambda P: [width - 1 - P[:, 0], P[:, 0], height - 1 - P[:, 1], P[:, 1]]  # noqa: E731
    s0, s1 = clip_segments(P0, P1, lim(P0), lim(P1))
    Q0, Q1 = P0 + s0[:, None] * (P1 - P0), P0 + s1[:, None] * (P1 - P0)
    runs = _runs(Q0, Q1, local.line, kept & (s0 < s1), (t0 <= 0) & (s0 <= 0), (t1 >= 1) & (s1 >= 1))
    return [{"points": pts.tolist(), "type": local.layer[k], "lane_id": k + 1} for k, pts in runs]


def lanes_3d(local: LocalMap, grid: BevGrid) -> list[dict]:
    """lanes3d: the divider lines (on world z = 0) in the ego frame, cut to the BEV grid's square."""
    half = float(max(np.abs(grid.x_range).max(), np.abs(grid.y_range).max()))
    return [{"points": np.round(pts, 3).tolist(), "type": local.layer[k], "lane_id": k + 1}
            for k, pts in local.runs(half)]
