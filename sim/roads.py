"""Procedural road network: a main road of straights and arcs with perpendicular side streets,
lanes, painted markings, crosswalks, stop lines and sidewalks, in one of three layouts:

- `cross`: 4-way intersections (a cross street through the main road);
- `t_junction`: T-junctions (a side street joining from one side; the far side's lane lines, edge
  line and sidewalk run on across the mouth, a crosswalk and a stop line on the side street);
- `arterial`: a multi-lane road (at least 2 lanes per direction) that narrows by one lane per
  direction over a linear taper: forward traffic loses its kerb lane (the dashed line to it ends
  where the taper starts, the edge line, parking lane and kerb follow the taper), reverse traffic
  gains one.

The main road has a parking lane (PARKING_WIDTH) on either side, between the travel lanes' outer
edge (the solid edge line) and the kerb: parked vehicles stand there (`sim.world`), moving traffic
keeps to the travel lanes.

The world is flat (no grade: the dataset's boxes and ego frame are gravity-aligned).

All geometry is 2D in the world frame (x, y; z is up) and seeded; `sim.meshes` turns it into
triangles and `sim.labels` into lane lines and BEV rasters.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LANE_WIDTH = 3.5
PARKING_WIDTH = 2.8  # the main road's parking lane, each side: a truck (2.6 m) parks 0.1 m off the kerb and the edge line
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

    def offset(self, d) -> "Path":
        """The path shifted `d` metres to its left (negative: right); `d` a number or one per
        sample (M,)."""
        normal = np.stack([-np.sin(self.heading), np.cos(self.heading)], axis=1)
        d = np.asarray(d, float)
        return Path(self.points + (d[:, None] if d.ndim else d) * normal)

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
    cross: Path  # cross street centreline, from the main road's right to its left (CROSS_LENGTH each way)
    cross_lanes: int
    signalized: bool
    arms: tuple[int, ...] = (-1, 1)  # sides of the main road the street reaches: both, or one (a T-junction)
    street: Path = field(init=False)  # the drawn street: `cross`, or a T's arm from the main centreline outward

    def __post_init__(self):
        if self.arms == (-1, 1):
            self.street = self.cross
        elif self.arms == (1,):
            self.street = self.cross.slice(CROSS_LENGTH, 2 * CROSS_LENGTH)
        elif self.arms == (-1,):
            self.street = self.cross.slice(0, CROSS_LENGTH).reversed()
        else:
            raise ValueError(f"intersection arms {self.arms!r}: give (-1, 1), (-1,) or (1,)")

    @property
    def cross_half_width(self) -> float:
        return self.cross_lanes * LANE_WIDTH

    @property
    def is_t(self) -> bool:
        return len(self.arms) == 1


@dataclass
class Marking:
    """A painted line: its centre polyline, type and whether it is drawn dashed."""

    path: Path
    type: str  # solid_white, dashed_white, solid_yellow
    lane_id: int


@dataclass
class RoadNetwork:
    main: Path
    lanes: int  # per direction on the main road where it starts (the arterial has one fewer past its taper)
    intersections: list[Intersection]
    markings: list[Marking]
    stripes: list[np.ndarray]  # crosswalk stripes and stop lines, (4, 2) polygons
    sidewalks: list[tuple[Path, float]]  # (inner edge path, +1 if it extends to the path's left)
    layout: str = "cross"
    taper: tuple[float, float] | None = None  # main arclengths where the arterial's narrowing starts and ends
    parking: float = PARKING_WIDTH  # the main road's parking lane, each side (0: none)
    edge_profile: np.ndarray = field(init=False)  # (M,) the travel lanes' outer edge (the edge line) at each sample of `main`
    hw_profile: np.ndarray = field(init=False)  # (M,) half width of the main road (kerb to centreline) at each sample

    def __post_init__(self):
        self.edge_profile = np.full(len(self.main.s), self.lanes * LANE_WIDTH)
        if self.taper is not None:
            a, b = self.taper
            self.edge_profile -= LANE_WIDTH * np.clip((self.main.s - a) / (b - a), 0.0, 1.0)
        self.hw_profile = self.edge_profile + self.parking

    @property
    def half_width(self) -> float:
        """Half width (kerb to centreline) where the main road starts (everywhere but past an
        arterial's taper)."""
        return self.lanes * LANE_WIDTH + self.parking

    def half_width_at(self, s):
        """Half width of the main road (kerb to centreline) at main arclength(s) `s`."""
        out = np.interp(s, self.main.s, self.hw_profile)
        return float(out) if np.ndim(out) == 0 else out

    def edges(self) -> list[tuple[Path, float | None]]:
        """Every roadway's centreline with its constant half width (None for the main road: `half_width_at`),
        the main road first: what buildings, trees and roadside clutter line."""
        return [(self.main, None)] + [(it.street, it.cross_half_width) for it in self.intersections]

    def lane_edge_at(self, s):
        """Distance of the travel lanes' outer edge (the edge line; the parking lane lies beyond
        it) from the main centreline at main arclength(s) `s`."""
        out = np.interp(s, self.main.s, self.edge_profile)
        return float(out) if np.ndim(out) == 0 else out

    def lateral(self, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(main arclength (K,), signed offset left of the main centreline (K,)) of points (K, 2),
        from the nearest sample of the centreline."""
        xy = np.atleast_2d(np.asarray(xy, float))
        i = ((xy[:, None, :] - self.main.points[None]) ** 2).sum(-1).argmin(1)
        h = self.main.heading[i]
        rel = xy - self.main.points[i]
        return self.main.s[i], rel[:, 1] * np.cos(h) - rel[:, 0] * np.sin(h)

    @property
    def merge_latest(self) -> float | None:
        """Main arclength by which a vehicle in the arterial's dropped lane must have begun its
        merge (a quarter into the taper: up to there the lane still holds a truck clear of the
        next lane); it waits for a gap there if it has not."""
        if self.taper is None:
            return None
        a, b = self.taper
        return a + 0.25 * (b - a)

    def strips(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The drivable surface as strips (left edge (M, 2), right edge (M, 2)): the main road,
        then every street. `sim.meshes` draws them, `surface_z` and `road_polygons` read them."""
        out = [(self.main.offset(self.hw_profile).points, self.main.offset(-self.hw_profile).points)]
        for it in self.intersections:
            wc = it.cross_half_width
            out.append((it.street.offset(wc).points, it.street.offset(-wc).points))
        return out

    def road_polygons(self) -> list[np.ndarray]:
        """Drivable surface as polygons (K, 2): the main road strip and every street."""
        return [np.concatenate([right, left[::-1]]) for left, right in self.strips()]

    def surface_z(self, xy: np.ndarray) -> np.ndarray:
        """(K,) height of the drawn surface under points (K, 2): CURB_HEIGHT on a sidewalk, 0 on
        the road, TERRAIN_Z elsewhere. Tested against the same quads `sim.meshes` draws."""
        xy = np.atleast_2d(np.asarray(xy, float))
        if not hasattr(self, "_surface_quads"):
            road = [strip_quads(left, right) for left, right in self.strips()]
            walk = [strip_quads(inner.points, inner.offset(side * SIDEWALK_WIDTH).points) for inner, side in self.sidewalks]
            self._surface_quads = (np.concatenate(walk), np.concatenate(road))
        walk, road = self._surface_quads
        z = np.full(len(xy), TERRAIN_Z)
        z[_in_quads(xy, road)] = 0.0
        z[_in_quads(xy, walk)] = CURB_HEIGHT
        return z

    def near_road(self, xy: np.ndarray, margin: float) -> np.ndarray:
        """(K,) bool: points within `margin` of any road surface edge (or on it)."""
        d = _dist_to_path(xy, self.main, self.hw_profile)
        for it in self.intersections:
            d = np.minimum(d, _dist_to_path(xy, it.street, it.cross_half_width))
        return d < margin

    def on_street(self, xy: np.ndarray, margin: float) -> np.ndarray:
        """(K,) bool: points on (or within `margin` of) a side or cross street's roadway, the
        junction mouths included (where the main road's kerb is cut)."""
        d = np.full(len(xy), np.inf)
        for it in self.intersections:
            d = np.minimum(d, _dist_to_path(xy, it.street, it.cross_half_width))
        return d < margin

    def lane_path(self, k: int, forward: bool) -> Path:
        """Centre of lane `k` (0 = rightmost, next to the parking lane; lanes-1 next to the centre
        line). On the arterial, forward lane 0 is the dropped lane: its centre until the lane edge
        squeezes it, then 1.4 m inside the edge (a vehicle changes lane before: `sim.world`);
        reverse lane 0 is the added one: on lane 1 before the taper, then out into the new lane
        over it."""
        off = np.asarray((self.lanes - k - 0.5) * LANE_WIDTH)
        if k == 0 and self.taper is not None:
            off = np.minimum(off, self.edge_profile - 1.4) if forward else self.edge_profile - LANE_WIDTH / 2
        return self.main.offset(-off) if forward else self.main.offset(off).reversed()


def chord_samples(points: np.ndarray) -> np.ndarray:
    """The samples of a path (M, 2) kept as strip vertices: every CHORD_STEP-th and the last."""
    return points[np.unique(np.r_[np.arange(0, len(points), CHORD_STEP), len(points) - 1])]


def strip_quads(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """(Q, 4, 2) quads between two polylines (M, 2), as `sim.meshes` draws the strip."""
    a, b = chord_samples(left), chord_samples(right)
    return np.stack([a[:-1], b[:-1], b[1:], a[1:]], 1)


def _in_quads(xy: np.ndarray, quads: np.ndarray) -> np.ndarray:
    """(K,) bool: points (K, 2) inside any of the convex quads (Q, 4, 2), either winding; a point
    on an edge (within rounding: two neighbouring quads share it) counts as inside."""
    e = np.roll(quads, -1, 1) - quads  # (Q, 4, 2) edges
    d = xy[:, None, None, :] - quads[None]  # (K, Q, 4, 2)
    c = e[None, ..., 0] * d[..., 1] - e[None, ..., 1] * d[..., 0]  # (K, Q, 4)
    return (((c >= -1e-6).all(-1)) | ((c <= 1e-6).all(-1))).any(-1)


def _dist_to_path(xy: np.ndarray, path: Path, half_width=0.0) -> np.ndarray:
    """(K,) distance of points (K, 2) from the edge of a strip of `half_width` (a number or per
    sample) around `path` (negative inside), to the nearest of every 4th sample."""
    pts = path.points[::4]
    d2 = ((xy[:, None, :] - pts[None]) ** 2).sum(-1)
    j = d2.argmin(1)
    hw = np.broadcast_to(np.asarray(half_width, float), (len(path.points),))[::4]
    return np.sqrt(d2[np.arange(len(xy)), j]) - hw[j]


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


def _split(path: Path, gaps: list[tuple[float, float]], s_ref: np.ndarray | None = None) -> list[Path]:
    """Pieces of `path` outside the arclength intervals `gaps`, measured along `s_ref` (M,) (the
    main centreline's arclength for a path offset from it: an offset path is shorter or longer
    round an arc) or the path's own."""
    s_ref = path.s if s_ref is None else s_ref
    keep = np.ones(len(path.s), bool)
    for a, b in gaps:
        keep &= ~((s_ref > a) & (s_ref < b))
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


LAYOUTS = ("cross", "t_junction", "arterial")


def build_road_network(rng: np.random.Generator, lanes: int, length: float = 420.0, layout: str = "cross",
                       taper_length: float = 60.0) -> RoadNetwork:
    """The road network of one scene. `lanes` per direction (the arterial has at least 2 before its
    taper); `layout` one of LAYOUTS. The cross layout draws from `rng` exactly as it always did."""
    if layout not in LAYOUTS:
        raise ValueError(f"road layout {layout!r}: give one of {list(LAYOUTS)}")
    taper = None
    if layout == "arterial":
        lanes = max(lanes, 2)
    main, straights = _centreline(rng, length)
    if layout == "arterial":  # ahead of the ego's start (45 m), within the labels' 60 m range
        s_a = float(rng.uniform(75.0, 95.0))
        taper = (s_a, s_a + taper_length)
    lanes_w = lanes * LANE_WIDTH  # the travel lanes of one direction, where the road starts
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
        signalized = bool(rng.random() < 0.7)
        if taper is not None and taper[0] - 40.0 < s < taper[1] + 30.0:
            continue  # no junction in or next to the arterial's taper
        arms = (-1, 1) if layout != "t_junction" else (int(rng.choice([-1, 1])),)
        intersections.append(Intersection(s, c, h, cross, 1, signalized, arms))
    road = RoadNetwork(main, lanes, intersections, [], [], [], layout, taper)
    hwp, edge = road.hw_profile, road.edge_profile
    kerb = road.half_width  # at every junction (none is near the arterial's taper)

    gaps = [(it.s - it.cross_half_width - 5.0, it.s + it.cross_half_width + 5.0) for it in intersections]
    markings, stripes, sidewalks = road.markings, road.stripes, road.sidewalks
    lane_id = 0

    def add(path: Path, typ: str, cut: list[tuple[float, float]], s_ref: np.ndarray | None = None):
        nonlocal lane_id
        for piece in _split(path, cut, s_ref):
            if typ == "dashed_white":  # the line ends with its last whole dash, not a gap or a stub
                whole = [d for d in _dashes(piece, 3.0, 6.0) if d.length > 2.5]
                if not whole:
                    continue
                end = np.flatnonzero(np.all(piece.points == whole[-1].points[-1], axis=1))[0]
                piece = Path(piece.points[:end + 1])
            markings.append(Marking(piece, typ, lane_id))
            lane_id += 1

    for side in (-1, 1):
        # a T's lane lines, edge line and kerb run on across the junction on the side it has no arm
        side_cut = [g for g, it in zip(gaps, intersections) if side in it.arms]
        add(main.offset(side * 0.15), "solid_yellow", gaps, main.s)
        for k in range(1, lanes):
            # the dashed line to the arterial's dropped (added) kerb lane ends where the taper starts
            ends = [(taper[0], np.inf)] if taper is not None and k == lanes - 1 else []
            add(main.offset(side * k * LANE_WIDTH), "dashed_white", side_cut + ends, main.s)
        add(main.offset(side * edge), "solid_white", side_cut, main.s)  # the travel lanes' edge
    side_gaps = [(it.s - it.cross_half_width, it.s + it.cross_half_width) for it in intersections]
    for side in (-1, 1):
        for piece in _split(main.offset(side * hwp), [g for g, it in zip(side_gaps, intersections) if side in it.arms],
                            main.s):
            sidewalks.append((piece, side))

    for it in intersections:
        wc = it.cross_half_width
        if it.is_t:  # the street runs from the main centreline out: its lines start past the crosswalk
            t_cut = [(-1.0, kerb + 5.0)]
            walk_cut = [(-1.0, kerb + SIDEWALK_WIDTH)]
        else:
            t_cut = [(CROSS_LENGTH - kerb - 5.0, CROSS_LENGTH + kerb + 5.0)]
            walk_cut = [(CROSS_LENGTH - kerb - SIDEWALK_WIDTH, CROSS_LENGTH + kerb + SIDEWALK_WIDTH)]
        for side in (-1, 1):
            add(it.street.offset(side * 0.15), "solid_yellow", t_cut)
            add(it.street.offset(side * (wc - 0.3)), "solid_white", t_cut)
            for piece in _split(it.street.offset(side * wc), walk_cut):
                sidewalks.append((piece, side))
            # crosswalk across the main road on both sides of the cross street
            s_cw = it.s + side * (wc + 2.5)
            c, h = main.at(s_cw)
            n = _dir(h + np.pi / 2)
            for t in np.arange(-kerb + 0.6, kerb - 0.3, 1.2):  # kerb to kerb
                stripes.append(_rect(c + n * t, h, 3.0, 0.6))
            # stop line before the crosswalk across the travel lanes approaching it (a T's main
            # road stops only at a signal: it has the right of way)
            if not it.is_t or it.signalized:
                c2, _ = main.at(it.s + side * (wc + 5.0))
                stripes.append(_rect(c2 + side * n * lanes_w / 2, h, 0.4, lanes_w))
        if it.is_t:
            # a crosswalk across the side street's mouth where the main road's sidewalk meets it,
            # and the side street's stop line before it, across its inbound lane (to the street's left)
            c, h = it.street.at(kerb + SIDEWALK_WIDTH / 2)
            n = _dir(h + np.pi / 2)
            for t in np.arange(-wc + 0.6, wc - 0.3, 1.2):
                stripes.append(_rect(c + n * t, h, SIDEWALK_WIDTH, 0.6))
            c, h = it.street.at(kerb + SIDEWALK_WIDTH + 1.0)
            stripes.append(_rect(c + n * wc / 2, h, 0.4, wc))
    return road


# ---- turning paths (a road user leaving its lane at a junction) ------------------------------------------
def _corner_curve(head: Path, p2: np.ndarray, h_out: float, toward: np.ndarray) -> np.ndarray:
    """(22, 2) interior points of the quadratic Bezier from `head`'s end to `p2`, its control point the corner
    where `head`'s end tangent meets the line through `toward` with heading `h_out`."""
    p0, h_in = head.points[-1], head.heading[-1]
    A = np.array([[np.cos(h_in), -np.cos(h_out)], [np.sin(h_in), -np.sin(h_out)]])
    t = np.linalg.solve(A, toward - p0)
    p1 = p0 + t[0] * np.array([np.cos(h_in), np.sin(h_in)])
    u = np.linspace(0, 1, 24)[1:-1, None]
    return (1 - u) ** 2 * p0 + 2 * (1 - u) * u * p1 + u ** 2 * p2


def turn_onto(lane: Path, s_turn: float, target: Path, keep: float = 150.0) -> Path:
    """`lane` up to `s_turn`, then a quadratic Bezier onto `target` (a lane it meets at an angle),
    symmetric about the corner where their tangents cross, then `keep` metres of `target`."""
    head = lane.slice(0, s_turn)
    p0, h_in = head.points[-1], head.heading[-1]
    q, h_out = target.at(target.nearest_s(p0))
    A = np.array([[np.cos(h_in), -np.cos(h_out)], [np.sin(h_in), -np.sin(h_out)]])
    t = np.linalg.solve(A, q - p0)
    p1 = p0 + t[0] * np.array([np.cos(h_in), np.sin(h_in)])  # the corner
    s_join = target.nearest_s(p1) + abs(t[0])
    tail = target.slice(s_join, s_join + keep)
    return Path(np.concatenate([head.points, _corner_curve(head, tail.points[0], h_out, q), tail.points]))


def right_turn(lane: Path, s_turn: float, road: RoadNetwork, it, fwd: bool) -> Path:
    """`lane` up to `s_turn`, then a quadratic Bezier onto the main road's rightmost lane in
    the direction to the car's right."""
    head = lane.slice(0, s_turn)
    h_out = head.heading[-1] - np.pi / 2
    main_fwd = np.cos(h_out - it.heading) > 0
    target = road.lane_path(0, bool(main_fwd))
    s_join = target.nearest_s(head.points[-1]) + 9.0
    tail = target.slice(s_join, s_join + 150.0)
    p2 = tail.points[0]
    return Path(np.concatenate([head.points, _corner_curve(head, p2, h_out, p2), tail.points]))
