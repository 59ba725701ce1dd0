"""Procedural road network: a main road of straights and arcs with perpendicular cross
streets at intersections, lanes, painted markings, crosswalks, stop lines and sidewalks.

All geometry is 2D in the world frame (x, y; z is up) and seeded; `sim.meshes` turns it into
triangles and `sim.labels` into lane lines and BEV rasters.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LANE_WIDTH = 3.5
SIDEWALK_WIDTH = 3.0
CURB_HEIGHT = 0.15
TERRAIN_Z = -0.03  # off-road terrain sits just under the road surface
CHORD_STEP = 4  # meshes draw strips with one quad per 4 path samples (~2 m)
MARKING_WIDTH = 0.15
CROSS_LENGTH = 70.0  # cross streets reach this far either side of the main road
DS = 0.5  # sampling step of every path, metres


@dataclass
class Path:
    """A polyline sampled every ~DS metres with cumulative arclength `s` and heading."""

    points: np.ndarray  # (M, 2)
    s: np.ndarray = field(init=False)  # (M,)
    heading: np.ndarray = field(init=False)  # (M,)

    def __post_init__(self):
        seg = np.diff(self.points, axis=0)
        self.s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(seg, axis=1))])
        h = np.arctan2(seg[:, 1], seg[:, 0])
        self.heading = np.concatenate([h, h[-1:]])

    @property
    def length(self) -> float:
        return float(self.s[-1])

    def at(self, s: float) -> tuple[np.ndarray, float]:
        """Position (2,) and heading at arclength `s` (extrapolated straight past either end)."""
        if s <= 0:
            return self.points[0] + s * _dir(self.heading[0]), float(self.heading[0])
        if s >= self.length:
            return self.points[-1] + (s - self.length) * _dir(self.heading[-1]), float(self.heading[-1])
        i = int(np.searchsorted(self.s, s, side="right") - 1)
        t = (s - self.s[i]) / max(self.s[i + 1] - self.s[i], 1e-9)
        return self.points[i] * (1 - t) + self.points[i + 1] * t, float(self.heading[i])

    def offset(self, d: float) -> "Path":
        """The path shifted `d` metres to its left (negative: right)."""
        normal = np.stack([-np.sin(self.heading), np.cos(self.heading)], axis=1)
        return Path(self.points + d * normal)

    def reversed(self) -> "Path":
        return Path(self.points[::-1].copy())

    def slice(self, s0: float, s1: float) -> "Path | None":
        keep = (self.s >= s0) & (self.s <= s1)
        return Path(self.points[keep]) if keep.sum() >= 2 else None

    def nearest_s(self, xy: np.ndarray) -> float:
        return float(self.s[np.argmin(np.linalg.norm(self.points - xy, axis=1))])


def _dir(h: float) -> np.ndarray:
    return np.array([np.cos(h), np.sin(h)])


@dataclass
class Intersection:
    s: float  # arclength on the main centreline
    center: np.ndarray  # (2,)
    heading: float  # main road heading
    cross: Path  # cross street centreline, from the main road's right to its left
    cross_lanes: int
    signalized: bool

    @property
    def cross_half_width(self) -> float:
        return self.cross_lanes * LANE_WIDTH


@dataclass
class Marking:
    """A painted line: its centre polyline, type and whether it is drawn dashed."""

    path: Path
    type: str  # solid_white, dashed_white, solid_yellow
    lane_id: int


@dataclass
class RoadNetwork:
    main: Path
    lanes: int  # per direction on the main road
    intersections: list[Intersection]
    markings: list[Marking]
    stripes: list[np.ndarray]  # crosswalk stripes and stop lines, (4, 2) polygons
    sidewalks: list[tuple[Path, float]]  # (inner edge path, +1 if it extends to the path's left)

    @property
    def half_width(self) -> float:
        return self.lanes * LANE_WIDTH

    def road_polygons(self) -> list[np.ndarray]:
        """Drivable surface as polygons (K, 2): the main road strip and every cross street."""
        polys = [_strip_polygon(self.main, -self.half_width, self.half_width)]
        for it in self.intersections:
            polys.append(_strip_polygon(it.cross, -it.cross_half_width, it.cross_half_width))
        return polys

    def surface_z(self, xy: np.ndarray) -> np.ndarray:
        """(K,) height of the drawn surface under points (K, 2): CURB_HEIGHT on a sidewalk, 0 on
        the road, TERRAIN_Z elsewhere. Tested against the same quads `sim.meshes` draws."""
        xy = np.atleast_2d(np.asarray(xy, float))
        if not hasattr(self, "_surface_quads"):
            hw = self.half_width
            road = [strip_quads(self.main.offset(hw).points, self.main.offset(-hw).points)]
            road += [strip_quads(it.cross.offset(it.cross_half_width).points, it.cross.offset(-it.cross_half_width).points)
                     for it in self.intersections]
            walk = [strip_quads(inner.points, inner.offset(side * SIDEWALK_WIDTH).points) for inner, side in self.sidewalks]
            self._surface_quads = (np.concatenate(walk), np.concatenate(road))
        walk, road = self._surface_quads
        z = np.full(len(xy), TERRAIN_Z)
        z[_in_quads(xy, road)] = 0.0
        z[_in_quads(xy, walk)] = CURB_HEIGHT
        return z

    def near_road(self, xy: np.ndarray, margin: float) -> np.ndarray:
        """(K,) bool: points within `margin` of any road surface edge (or on it)."""
        d = _dist_to_path(xy, self.main) - self.half_width
        for it in self.intersections:
            d = np.minimum(d, _dist_to_path(xy, it.cross) - it.cross_half_width)
        return d < margin

    def lane_path(self, k: int, forward: bool) -> Path:
        """Centre of lane `k` (0 = next to the centre line is k = lanes-1; 0 = rightmost)."""
        off = (self.lanes - k - 0.5) * LANE_WIDTH
        return self.main.offset(-off) if forward else self.main.offset(off).reversed()


def chord_samples(points: np.ndarray) -> np.ndarray:
    """The samples of a path (M, 2) kept as strip vertices: every CHORD_STEP-th and the last."""
    return points[np.unique(np.r_[np.arange(0, len(points), CHORD_STEP), len(points) - 1])]


def strip_quads(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """(Q, 4, 2) quads between two polylines (M, 2), as `sim.meshes` draws the strip."""
    a, b = chord_samples(left), chord_samples(right)
    return np.stack([a[:-1], b[:-1], b[1:], a[1:]], 1)


def _in_quads(xy: np.ndarray, quads: np.ndarray) -> np.ndarray:
    """(K,) bool: points (K, 2) inside any of the convex quads (Q, 4, 2), either winding."""
    e = np.roll(quads, -1, 1) - quads  # (Q, 4, 2) edges
    d = xy[:, None, None, :] - quads[None]  # (K, Q, 4, 2)
    c = e[None, ..., 0] * d[..., 1] - e[None, ..., 1] * d[..., 0]  # (K, Q, 4)
    return (((c >= 0).all(-1)) | ((c <= 0).all(-1))).any(-1)


def _dist_to_path(xy: np.ndarray, path: Path) -> np.ndarray:
    pts = path.points[::4]
    d2 = ((xy[:, None, :] - pts[None]) ** 2).sum(-1)
    return np.sqrt(d2.min(1))


def _strip_polygon(path: Path, d0: float, d1: float) -> np.ndarray:
    a, b = path.offset(d0).points, path.offset(d1).points
    return np.concatenate([a, b[::-1]])


def _centreline(rng: np.random.Generator, length: float) -> tuple[Path, list[tuple[float, float]]]:
    """Main road: straights and arcs. Returns the path and the straights as (s0, s1)."""
    pts, straights = [np.zeros(2)], []
    h, s = 0.0, 0.0
    first = True
    while s < length:
        L = rng.uniform(120, 170) if first else rng.uniform(60, 130)
        n = int(L / DS)
        start = pts[-1]
        pts.extend(start + _dir(h) * DS * np.arange(1, n + 1)[:, None])
        straights.append((s, s + n * DS))
        s += n * DS
        first = False
        R = rng.uniform(50, 140)
        ang = rng.choice([-1, 1]) * np.radians(rng.uniform(20, 65))
        n = max(int(abs(ang) * R / DS), 2)
        c = pts[-1] + R * np.sign(ang) * _dir(h + np.pi / 2)
        for i in range(1, n + 1):
            hh = h + ang * i / n
            pts.append(c - R * np.sign(ang) * _dir(hh + np.pi / 2))
        h += ang
        s += n * DS
    return Path(np.asarray(pts)), straights


def _dashes(path: Path, dash: float, gap: float) -> list[Path]:
    out = []
    s = 0.0
    while s < path.length:
        piece = path.slice(s, s + dash)
        if piece is not None:
            out.append(piece)
        s += dash + gap
    return out


def marking_pieces(m: Marking) -> list[Path]:
    """The painted pieces of a marking (dashes for dashed lines)."""
    return _dashes(m.path, 3.0, 6.0) if m.type == "dashed_white" else [m.path]


def _split(path: Path, gaps: list[tuple[float, float]]) -> list[Path]:
    """Pieces of `path` outside the arclength intervals `gaps`."""
    keep = np.ones(len(path.s), bool)
    for a, b in gaps:
        keep &= ~((path.s > a) & (path.s < b))
    pieces, start = [], None
    for i, k in enumerate(np.append(keep, False)):
        if k and start is None:
            start = i
        elif not k and start is not None:
            if i - start >= 2:
                pieces.append(Path(path.points[start:i]))
            start = None
    return pieces


def _rect(center: np.ndarray, heading: float, length: float, width: float) -> np.ndarray:
    d, n = _dir(heading), _dir(heading + np.pi / 2)
    l2, w2 = length / 2, width / 2
    return np.stack([center + d * l2 + n * w2, center - d * l2 + n * w2, center - d * l2 - n * w2, center + d * l2 - n * w2])


def build_road_network(rng: np.random.Generator, lanes: int, length: float = 420.0) -> RoadNetwork:
    main, straights = _centreline(rng, length)
    hw = lanes * LANE_WIDTH
    intersections: list[Intersection] = []
    for j, (a, b) in enumerate(straights):
        lo, hi = a + 30, b - 30
        if j == 0:
            lo = max(lo, 85.0)
        if hi <= lo or (j > 0 and rng.random() > 0.7):
            continue
        s = float(rng.uniform(lo, hi))
        c, h = main.at(s)
        n = _dir(h + np.pi / 2)
        cross = Path(c + np.linspace(-CROSS_LENGTH, CROSS_LENGTH, int(2 * CROSS_LENGTH / DS) + 1)[:, None] * n)
        intersections.append(Intersection(s, c, h, cross, 1, bool(rng.random() < 0.7)))

    gaps = [(it.s - it.cross_half_width - 5.0, it.s + it.cross_half_width + 5.0) for it in intersections]
    markings: list[Marking] = []
    stripes: list[np.ndarray] = []
    lane_id = 0

    def add(path: Path, typ: str, cut: list[tuple[float, float]]):
        nonlocal lane_id
        for piece in _split(path, cut):
            markings.append(Marking(piece, typ, lane_id))
            lane_id += 1

    for side in (-1, 1):
        add(main.offset(side * 0.15), "solid_yellow", gaps)
        for k in range(1, lanes):
            add(main.offset(side * k * LANE_WIDTH), "dashed_white", gaps)
        add(main.offset(side * (hw - 0.3)), "solid_white", gaps)
    sidewalks: list[tuple[Path, float]] = []
    side_gaps = [(it.s - it.cross_half_width, it.s + it.cross_half_width) for it in intersections]
    for side in (-1, 1):
        for piece in _split(main.offset(side * hw), side_gaps):
            sidewalks.append((piece, side))

    for it in intersections:
        wc = it.cross_half_width
        t_cut = [(CROSS_LENGTH - hw - 5.0, CROSS_LENGTH + hw + 5.0)]
        for side in (-1, 1):
            add(it.cross.offset(side * 0.15), "solid_yellow", t_cut)
            add(it.cross.offset(side * (wc - 0.3)), "solid_white", t_cut)
            for piece in _split(it.cross.offset(side * wc), [(CROSS_LENGTH - hw - SIDEWALK_WIDTH, CROSS_LENGTH + hw + SIDEWALK_WIDTH)]):
                sidewalks.append((piece, side))
            # crosswalk across the main road on both sides of the cross street
            s_cw = it.s + side * (wc + 2.5)
            c, h = main.at(s_cw)
            n = _dir(h + np.pi / 2)
            for t in np.arange(-hw + 0.6, hw - 0.3, 1.2):
                stripes.append(_rect(c + n * t, h, 3.0, 0.6))
            # stop line before the crosswalk for the lanes approaching it
            c2, _ = main.at(it.s + side * (wc + 5.0))
            stripes.append(_rect(c2 + side * n * hw / 2, h, 0.4, hw))
    return RoadNetwork(main, lanes, intersections, markings, stripes, sidewalks)
