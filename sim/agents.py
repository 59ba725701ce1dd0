"""Road users and their kinematics: box-part bodies, lane following with the Intelligent
Driver Model (Treiber et al. 2000), stopping at red lights and stop signs, pedestrians on
sidewalks and crosswalks. Every agent has an exact velocity at every step.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from sim.bodies import detailed_body, pedestrian
from sim.roads import Path
from sim.shapes import SHAPES, Part, pitch_matrix

# (length, width, height) ranges per class; bodies are unions of boxes inside these bounds.
CLASS_SIZES = {
    "car": ((4.2, 4.9), (1.8, 2.0), (1.45, 1.7)),
    "truck": ((6.5, 9.0), (2.4, 2.6), (2.9, 3.6)),
    "bus": ((10.5, 12.5), (2.5, 2.6), (3.0, 3.3)),
    "pedestrian": ((0.5, 0.7), (0.5, 0.7), (1.55, 1.9)),
    "cyclist": ((1.7, 1.9), (0.6, 0.7), (1.6, 1.8)),
    "traffic_cone": ((0.4, 0.45), (0.4, 0.45), (0.7, 0.8)),
    "debris": ((0.5, 1.4), (0.4, 1.0), (0.15, 0.4)),
    "construction_vehicle": ((6.0, 7.0), (2.6, 2.9), (3.3, 3.8)),
    "barrier": ((1.5, 2.5), (0.4, 0.55), (0.8, 1.05)),  # a concrete (jersey) or plastic road barrier segment
    "trailer": ((4.0, 8.0), (2.2, 2.5), (2.4, 3.4)),  # a box trailer with its drawbar
    "motorcycle": ((1.9, 2.3), (0.7, 0.9), (1.4, 1.6)),  # with its rider
}
CAR_COLORS = np.array([[0.8, 0.1, 0.1], [0.1, 0.2, 0.6], [0.85, 0.85, 0.85], [0.1, 0.1, 0.1],
                       [0.5, 0.5, 0.55], [0.2, 0.45, 0.25], [0.9, 0.7, 0.2], [0.35, 0.2, 0.15]])


def _box(cx, cy, cz, l, w, h, color, emissive=0.0, light="") -> Part:
    return Part(np.array([cx, cy, cz], float), np.array([l, w, h], float), np.asarray(color, float), emissive, light)


CHILD_SHARE = 0.1  # of pedestrians (detailed bodies only): 1.0-1.4 m tall, attribute child


def make_body(cls: str, rng: np.random.Generator, detail: bool = True) -> list[Part]:
    """Parts of one object of class `cls`, with z = 0 on the ground: recognizable convex parts
    (`sim.bodies`) or, with detail=False, the few plain boxes of the old look. Both draw the
    same numbers from `rng` (the dimensions and one seed), so the world's layout does not
    depend on `detail`."""
    if cls not in CLASS_SIZES:
        raise ValueError(f"unknown agent class {cls!r}; known: {sorted(CLASS_SIZES)}")
    (l0, l1), (w0, w1), (h0, h1) = CLASS_SIZES[cls]
    L, W, H = rng.uniform(l0, l1), rng.uniform(w0, w1), rng.uniform(h0, h1)
    sub = np.random.default_rng(int(rng.integers(1 << 62)))
    if detail:
        if cls == "pedestrian":
            child = sub.random() < CHILD_SHARE
            return pedestrian(sub, sub.uniform(1.0, 1.4) if child else H, child)
        parts = detailed_body(cls, L, W, H, sub)
        if parts is not None:
            return on_ground(parts)
    return _box_body(cls, L, W, H, sub)


def on_ground(parts: list[Part]) -> list[Part]:
    """The parts lowered so the lowest corner touches z = 0 (an octagonal wheel's flat lies
    r (1 - cos 22.5 deg) above its circle's bottom: 2-4 cm under a vehicle)."""
    low = min(p.points()[:, 2].min() for p in parts)
    if low == 0:
        return parts
    dz = np.array([0.0, 0.0, low])
    return [replace(p, center=p.center - dz, pivot=None if p.pivot is None else p.pivot - dz) for p in parts]


def is_child(parts: list[Part]) -> bool:
    """A pedestrian body of a child (shorter than any adult's)."""
    return body_bounds(parts)[1][2] < CLASS_SIZES["pedestrian"][2][0] - 0.1


def _box_body(cls: str, L: float, W: float, H: float, rng: np.random.Generator) -> list[Part]:
    """The old look: a few boxes per object."""
    black = (0.05, 0.05, 0.05)
    if cls == "car":
        c = CAR_COLORS[rng.integers(len(CAR_COLORS))]
        parts = [_box(0, 0, 0.25 + 0.45 * (H - 0.25) * 0.5 + 0.0, L, W, 0.45 * (H - 0.25) + 0.0, c),
                 _box(-0.1 * L, 0, 0, 0.5 * L, 0.9 * W, H, c * 0.7 + 0.05)]
        parts[0].center[2] = 0.25 + parts[0].size[2] / 2
        parts[0].size[2] += 0.0
        parts[1].size[2] = H - (0.25 + parts[0].size[2])
        parts[1].center[2] = H - parts[1].size[2] / 2
        parts.append(_box(0, 0, 0.125, 0.9 * L, W * 0.98, 0.25, black))  # wheels / underbody
    elif cls in ("truck", "construction_vehicle"):
        c = np.array([0.95, 0.7, 0.1]) if cls == "construction_vehicle" else CAR_COLORS[rng.integers(len(CAR_COLORS))]
        cab = 0.25 * L
        parts = [_box(L / 2 - cab / 2, 0, 0.4 + 0.35 * H, cab, W, 0.7 * H - 0.4 + 0.0, c),
                 _box(-cab / 2, 0, 0.3 + 0.5 * (H - 0.3), L - cab, W, H - 0.3, (0.8, 0.8, 0.8) if cls == "truck" else c * 0.8),
                 _box(0, 0, 0.2, L, W * 0.95, 0.4, black)]
        parts[0].size[2] = 0.75 * H - 0.4
        parts[0].center[2] = 0.4 + parts[0].size[2] / 2
        if cls == "construction_vehicle":  # a raised arm: the unusual silhouette
            parts[1] = _box(-cab / 2, 0, 0.4 + 0.25 * (H - 0.4), L - cab, W, 0.5 * (H - 0.4), c * 0.8)
            parts.append(_box(0.0, 0, H - 0.3, 0.5 * L, 0.35, 0.6, c))
    elif cls == "bus":
        c = CAR_COLORS[rng.integers(len(CAR_COLORS))]
        parts = [_box(0, 0, 0.3 + (H - 0.3) / 2, L, W, H - 0.3, c),
                 _box(0, 0, 0.3 + 0.7 * (H - 0.3), L * 1.0, W * 1.0, 0.25 * (H - 0.3), (0.1, 0.12, 0.15)),
                 _box(0, 0, 0.15, L * 0.9, W * 0.95, 0.3, black)]
        parts[1].size[:2] += 0.02  # window band sits on the body's surface
    elif cls == "pedestrian":
        shirt = rng.uniform(0.1, 0.9, 3)
        legs = 0.47 * H
        parts = [_box(0, 0, legs / 2, 0.3 * L / 0.6, 0.45 * W / 0.6, legs, (0.15, 0.15, 0.3)),
                 _box(0, 0, legs + 0.38 * H / 2, 0.45 * L / 0.6 * 0.6, W, 0.38 * H, shirt),
                 _box(0, 0, H - 0.075 * H, 0.36 * L, 0.36 * W, 0.15 * H, (0.8, 0.6, 0.45))]
    elif cls == "cyclist":
        shirt = rng.uniform(0.1, 0.9, 3)
        parts = [_box(0, 0, 0.425, L, 0.12, 0.85, (0.1, 0.1, 0.1)),  # wheels reach the ground
                 _box(-0.1, 0, 0.85 + 0.3, 0.45, W, 0.6, shirt),
                 _box(-0.05, 0, H - 0.12, 0.25, 0.25, 0.24, (0.8, 0.6, 0.45))]
    elif cls == "traffic_cone":
        parts = [_box(0, 0, 0.025, L, W, 0.05, (0.9, 0.35, 0.05)),
                 _box(0, 0, 0.05 + (H - 0.05) / 2, 0.55 * L, 0.55 * W, H - 0.05, (0.95, 0.4, 0.05)),
                 _box(0, 0, 0.55 * H, 0.57 * L, 0.57 * W, 0.12, (0.95, 0.95, 0.95))]
    elif cls == "barrier":
        concrete = rng.random() < 0.5
        c = np.array([0.62, 0.61, 0.58]) * rng.uniform(0.85, 1.1) if concrete else np.array([0.9, 0.35, 0.05])
        parts = [_box(0, 0, 0.15 * H, L, W, 0.3 * H, c),  # wide foot
                 _box(0, 0, 0.3 * H + 0.35 * H, L, 0.45 * W, 0.7 * H, c)]
        if not concrete:  # a white reflective band on a plastic barrier
            parts.append(_box(0, 0, 0.75 * H, L + 0.01, 0.45 * W + 0.01, 0.12 * H, (0.95, 0.95, 0.95)))
    elif cls == "trailer":
        c = CAR_COLORS[rng.integers(len(CAR_COLORS))] * 0.5 + 0.4
        bar = 1.2
        parts = [_box(-bar / 2, 0, 0.75 + (H - 0.75) / 2, L - bar, W, H - 0.75, c),  # box
                 _box(-bar / 2, 0, 0.6, L - bar - 0.4, W * 0.9, 0.3, black),  # chassis
                 _box(L / 2 - bar / 2, 0, 0.55, bar, 0.12, 0.1, black),  # drawbar (at the front)
                 _box(-bar / 2 - 0.5, 0, 0.4, 1.5, W * 0.96, 0.8, black)]  # wheels
    elif cls == "motorcycle":
        paint = CAR_COLORS[rng.integers(len(CAR_COLORS))]
        jacket = rng.uniform(0.05, 0.5, 3)
        parts = [_box(0.5 * L / 2, 0, 0.32, 0.62, 0.12, 0.64, black),  # front wheel
                 _box(-0.5 * L / 2, 0, 0.32, 0.62, 0.14, 0.64, black),  # rear wheel
                 _box(0, 0, 0.6, 0.55 * L, 0.3, 0.35, paint),  # tank and engine
                 _box(0.3 * L, 0, 0.95, 0.1, W, 0.06, (0.2, 0.2, 0.2)),  # handlebar
                 _box(-0.08 * L, 0, 1.05, 0.35, 0.42, 0.6, jacket),  # rider
                 _box(0.0, 0, H - 0.14, 0.28, 0.28, 0.28, (0.1, 0.1, 0.12))]  # helmet
        parts.append(_box(L / 2 - 0.05, 0, 0.85, 0.1, 0.16, 0.12, (1.0, 1.0, 0.85), 0.0, "head"))
        parts.append(_box(-L / 2 + 0.05, 0, 0.7, 0.1, 0.14, 0.08, (0.7, 0.02, 0.02), 0.0, "tail"))
    elif cls == "debris":
        parts = [_box(0, 0, H / 2, L, W, H, rng.uniform(0.2, 0.5, 3)),
                 _box(0.2 * L, 0.1 * W, H * 0.35, 0.5 * L, 0.6 * W, 0.7 * H, rng.uniform(0.3, 0.6, 3))]
    if cls in ("car", "truck", "bus", "construction_vehicle"):
        body = parts[0]
        zl = body.center[2]
        front, back = L / 2, -L / 2
        for y in (-0.35 * W, 0.35 * W):
            parts.append(_box(front + 0.01, y, zl, 0.04, 0.25, 0.12, (1.0, 1.0, 0.85), 0.0, "head"))
            parts.append(_box(back - 0.01, y, zl, 0.04, 0.25, 0.12, (0.7, 0.02, 0.02), 0.0, "tail"))
    return parts


def body_bounds(parts: list[Part]) -> tuple[np.ndarray, np.ndarray]:
    """Tight box (centre, size) of the parts in the object frame."""
    pts = np.concatenate([p.points() for p in parts])
    lo, hi = pts.min(0), pts.max(0)
    return (lo + hi) / 2, hi - lo


def animate(parts: list[Part], cycle: float) -> list[Part]:
    """The parts at gait phase `cycle` (radians): swinging parts rotate about their pivot by
    swing * sin(cycle + phase); the body then drops so the lowest swinging point stays on the
    ground (a straight leg lifts the hip as it swings). Returns new parts; others are shared."""
    out, low, moved = [], None, False
    for p in parts:
        if p.swing:
            a = p.swing * np.sin(cycle + p.phase)
            R = pitch_matrix(a)
            q = replace(p, center=p.pivot + R @ (p.center - p.pivot), pitch=p.pitch + a)
            z = q.points()[:, 2].min()
            low = z if low is None else min(low, z)
            moved = True
            out.append(q)
        else:
            out.append(p)
    if not moved:
        return out
    rest = min(p.points()[:, 2].min() for p in parts if p.swing)  # lowest swinging point at rest
    if rest > 0.02:  # not standing on it (a cyclist's legs)
        return out
    return [replace(p, center=p.center + [0, 0, rest - low]) for p in out]


def animated_bounds(parts: list[Part], samples: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Box (centre, size) enclosing the parts over a whole gait cycle: the extent over `samples`
    phases grown by 1 mm (between samples a swinging corner reaches ~0.2 mm further), the
    bottom kept on the ground. The phases of `animate` at once: (C,) angles per swinging part."""
    cycle = np.linspace(0, 2 * np.pi, samples, endpoint=False)  # (C,)
    still = [p.points() for p in parts if not p.swing]
    swinging = [p for p in parts if p.swing]
    if not swinging:
        pts = np.concatenate(still)
        lo, hi = pts.min(0) - [1e-3, 1e-3, 0.0], pts.max(0) + 1e-3
        return (lo + hi) / 2, hi - lo
    posed = []  # per swinging part (C, K, 3): its corners at each phase
    for p in swinging:
        a = p.swing * np.sin(cycle + p.phase)  # (C,)
        ca, sa = np.cos(a), np.sin(a)
        rel = p.center - p.pivot
        centre = p.pivot + np.stack([ca * rel[0] - sa * rel[2], np.full_like(a, rel[1]), sa * rel[0] + ca * rel[2]], 1)  # (C, 3)
        t = p.pitch + a
        ct, st = np.cos(t)[:, None], np.sin(t)[:, None]
        b = SHAPES[p.shape].points * p.size  # (K, 3)
        posed.append(np.stack([ct * b[:, 0] - st * b[:, 2], np.broadcast_to(b[:, 1], (len(a), len(b))),
                               st * b[:, 0] + ct * b[:, 2]], -1) + centre[:, None])  # (C, K, 3)
    low = np.min([q[..., 2].min(1) for q in posed], 0)  # (C,) lowest swinging point per phase
    rest = min(p.points()[:, 2].min() for p in swinging)
    dz = np.zeros((samples, 1, 3))
    if rest <= 0.02:  # standing on the swinging parts: the body drops so a foot stays down (as animate)
        dz[:, 0, 2] = rest - low
    if still:
        fixed = np.concatenate(still)  # (K'', 3) the parts that do not swing, dropped with the body
        posed.append(np.broadcast_to(fixed, (samples,) + fixed.shape))
    pts = (np.concatenate(posed, 1) + dz).reshape(-1, 3)
    lo, hi = pts.min(0) - [1e-3, 1e-3, 0.0], pts.max(0) + 1e-3
    return (lo + hi) / 2, hi - lo


@dataclass
class Agent:
    track_id: int
    cls: str
    parts: list[Part]
    path: Path | None  # None: static (parked, cone, debris)
    s: float = 0.0
    speed: float = 0.0
    desired_speed: float = 0.0
    pos: np.ndarray = field(default_factory=lambda: np.zeros(2))
    heading: float = 0.0
    stops: list = field(default_factory=list)  # [(path_s, intersection_index, approach)]
    waited: float = 0.0  # seconds stopped at a stop sign
    follows_traffic: bool = True  # vehicles and cyclists; pedestrians just walk
    attributes: dict = field(default_factory=dict)
    z: float = 0.0  # height of the surface it stands on (World keeps it on the ground under it)
    stride: float = 0.0  # metres travelled per gait cycle (walking, pedalling); 0: by class and height

    def __post_init__(self):
        if self.cls == "pedestrian" and is_child(self.parts):
            self.attributes = {**self.attributes, "child": True}  # exported as human.pedestrian.child
        self.rest_parts = self.parts
        self.animated = any(p.swing for p in self.parts)
        if self.animated:  # one box for the whole cycle (as annotators box a walking person)
            self.box_center, self.box_size = animated_bounds(self.parts)
        else:
            self.box_center, self.box_size = body_bounds(self.parts)
        if not self.stride:
            self.stride = 4.4 if self.cls == "cyclist" else 0.85 * float(self.box_size[2])
        self.update_pose()

    def update_pose(self, animate_parts: bool = True):
        """Position and heading at `s` on the path; the limbs' gait phase too unless told not to
        (the traffic model's substeps need only the pose)."""
        if self.path is not None:
            self.pos, self.heading = self.path.at(self.s)
        if self.animated and animate_parts:
            self.parts = animate(self.rest_parts, 2 * np.pi * self.s / self.stride)

    @property
    def velocity(self) -> np.ndarray:
        """World-frame velocity (3,) over the ground, m/s."""
        return np.array([np.cos(self.heading), np.sin(self.heading), 0.0]) * self.speed

    def pose(self) -> np.ndarray:
        """Object-to-world 4x4."""
        return _pose(self.pos, self.heading, self.z)

    def pose_at(self, tau: float) -> np.ndarray:
        """Object-to-world 4x4 `tau` seconds from now at the current speed along the path (motion
        blur's sub-frames; the limbs keep their pose)."""
        if self.path is None or self.speed == 0 or tau == 0:
            return self.pose()
        pos, heading = self.path.at(self.s + self.speed * tau)
        return _pose(pos, heading, self.z)


def _pose(pos: np.ndarray, heading: float, z: float) -> np.ndarray:
    c, s = np.cos(heading), np.sin(heading)
    T = np.eye(4)
    T[:2, :2] = [[c, -s], [s, c]]
    T[:2, 3] = pos
    T[2, 3] = z
    return T


MAX_BRAKE = 8.0  # m/s^2, an emergency stop on dry asphalt


def safe_speed(gap: float) -> float:
    """Highest speed from which a car stops within `gap` metres at a comfortable 3 m/s^2."""
    return float(np.sqrt(2 * 3.0 * max(gap - 2.0, 0.0)))


def idm_acceleration(v: float, v0: float, gap: float, dv: float) -> float:
    """Intelligent Driver Model: acceleration for speed v, desired v0, gap to leader and
    closing speed dv (v - v_leader)."""
    a, b, s0, T = 1.5, 3.0, 2.0, 1.2
    s_star = s0 + max(0.0, v * T + v * dv / (2 * np.sqrt(a * b)))
    return max(a * (1 - (v / max(v0, 0.1)) ** 4 - (s_star / max(gap, 0.1)) ** 2), -MAX_BRAKE)


def leader_gap(me: Agent, others: list[Agent]) -> tuple[float, float]:
    """Gap (m) and speed of the nearest agent ahead of `me` inside its lane corridor."""
    best, v_lead = 1e9, 0.0
    c, s = np.cos(me.heading), np.sin(me.heading)
    for o in others:
        if o is me:
            continue
        d = o.pos - me.pos
        ahead, lateral = d[0] * c + d[1] * s, -d[0] * s + d[1] * c
        half = me.box_size[1] / 2 + o.box_size[1] / 2 + 0.4
        if 0 < ahead < 60 and abs(lateral) < half:
            gap = ahead - me.box_size[0] / 2 - max(o.box_size[0], o.box_size[1]) / 2
            if gap < best:
                best = gap
                v_lead = float(np.dot(o.velocity[:2], [c, s]))
    return best, v_lead


def leader_gaps(mes: list[Agent], others: list[Agent]) -> tuple[np.ndarray, np.ndarray]:
    """`leader_gap` of every agent of `mes` at once: gaps (M,) and leader speeds (M,)."""
    if not mes:
        return np.zeros(0), np.zeros(0)
    P = np.array([o.pos for o in others])  # (N, 2)
    V = np.array([o.velocity[:2] for o in others])  # (N, 2)
    half_o = np.array([o.box_size[1] / 2 for o in others])  # (N,)
    reach_o = np.array([max(o.box_size[0], o.box_size[1]) / 2 for o in others])  # (N,)
    h = np.array([m.heading for m in mes])
    c, s = np.cos(h)[:, None], np.sin(h)[:, None]  # (M, 1)
    d = P[None] - np.array([m.pos for m in mes])[:, None]  # (M, N, 2)
    ahead, lateral = d[..., 0] * c + d[..., 1] * s, -d[..., 0] * s + d[..., 1] * c  # (M, N)
    half = np.array([m.box_size[1] / 2 for m in mes])[:, None] + half_o + 0.4
    ok = (0 < ahead) & (ahead < 60) & (np.abs(lateral) < half)
    ok &= np.array([[o is not m for o in others] for m in mes])
    gap = np.where(ok, ahead - np.array([m.box_size[0] / 2 for m in mes])[:, None] - reach_o, 1e9)
    j = gap.argmin(1)  # (M,) the nearest leader (the first of equals, as leader_gap)
    rows = np.arange(len(mes))
    best = gap[rows, j]
    v_lead = np.where(best < 1e9, V[j, 0] * c[:, 0] + V[j, 1] * s[:, 0], 0.0)
    return best, v_lead
