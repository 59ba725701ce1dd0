"""The traffic rules of a running scene (`sim.world.World.step`): signal phases, stop lines and
stop signs, junctions kept clear, merges out of a dropped lane into a gap, and the Intelligent
Driver Model (Treiber et al., 2000; `sim.agents`) that moves every road user. `TrafficRules` is the
run-time half of `World` (its placement half builds the scene); the footprint helpers are shared
by both.
"""
from __future__ import annotations

import numpy as np

from sim.agents import Agent, idm_acceleration, leader_gaps
from sim.roads import LANE_WIDTH, Path

SIGNAL_CYCLE = 24.0  # s: main green 10, yellow 3, red 11 (cross green 8, yellow 3)
MERGE_WINDOW = 20.0  # m before the arterial's taper where a vehicle in the dropped lane starts looking for a gap


def signal_state(t: float, offset: float, approach: str) -> str:
    ph = (t + offset) % SIGNAL_CYCLE
    if approach == "main":
        return "green" if ph < 10 else "yellow" if ph < 13 else "red"
    return "green" if 13 <= ph < 21 else "yellow" if ph >= 21 else "red"


def footprint(pos: np.ndarray, heading: float, center: np.ndarray, size: np.ndarray, margin: float) -> np.ndarray:
    """World corners (4, 2) of a box footprint: object-frame centre/size, posed at pos/heading."""
    c, s = np.cos(heading), np.sin(heading)
    R = np.array([[c, -s], [s, c]])
    half = np.asarray(size[:2]) / 2 + margin
    local = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]]) * half + np.asarray(center[:2])
    return np.asarray(pos[:2]) + local @ R.T


def polygons_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Separating-axis test of two convex polygons (K, 2)."""
    for poly in (a, b):
        e = np.roll(poly, -1, 0) - poly
        for n in np.stack([-e[:, 1], e[:, 0]], 1):
            pa, pb = a @ n, b @ n
            if pa.max() < pb.min() or pb.max() < pa.min():
                return False
    return True


class TrafficRules:
    """The run-time rules of `sim.world.World` (a base class: it reads the world's road, agents,
    signal offsets, time and random generator, which `World.__init__` sets)."""

    def signal(self, k: int, approach: str) -> str:
        return signal_state(self.t, self.signal_offsets[k], approach)

    def _stop_gap(self, a: Agent) -> float:
        """Distance to the first stop line `a` must respect (or to where it must have begun its
        merge, on the arterial's dropped lane), or inf."""
        end = self._merge_end.get(a.track_id)
        gap = self._signal_gap(a)
        return gap if end is None else min(gap, max(end - a.s - a.box_size[0] / 2, 0.0))

    def _update_occupants(self) -> None:
        """The road users inside each intersection's box now (what `_crossed_by` reads)."""
        movers = [o for o in self.agents + [self.ego] if o.path is not None and o.follows_traffic]
        self._occupants = []
        P = np.array([o.pos for o in movers]).reshape(-1, 2)
        for it in self.road.intersections:
            d = np.array([np.cos(it.heading), np.sin(it.heading)])
            rel = P - it.center
            along, lat = rel @ d, rel @ np.array([-d[1], d[0]])
            inside = (np.abs(along) < it.cross_half_width + 2.0) & (np.abs(lat) < self.road.half_width_at(it.s) + 2.0)
            self._occupants.append([movers[i] for i in np.flatnonzero(inside)])

    def _crossed_by(self, k: int, me: Agent) -> bool:
        """Whether a road user crossing `me`'s way (heading more than 45 degrees off) is inside
        intersection `k`: `me` waits at its line rather than drive into it."""
        return any(o is not me and abs(np.cos(o.heading - me.heading)) < 0.7 for o in self._occupants[k])

    def _junction_clear(self, k: int, me: Agent) -> bool:
        """Whether a car waiting at intersection `k`'s stop sign may go: no road user inside the
        junction and none on the main road reaching it within ~5 s."""
        it = self.road.intersections[k]
        hw, wc = self.road.half_width_at(it.s), it.cross_half_width
        d = np.array([np.cos(it.heading), np.sin(it.heading)])
        n = np.array([-d[1], d[0]])
        for o in self.agents + [self.ego]:
            if o is me or o.path is None or not o.follows_traffic:
                continue
            rel = o.pos - it.center
            along, lat = float(rel @ d), float(rel @ n)
            if abs(along) < wc + 1.5 and abs(lat) < hw + 1.5:
                return False  # in the junction
            c = np.cos(o.heading - it.heading)
            if abs(lat) < hw + 0.5 and abs(c) > 0.7:
                ahead = -along * np.sign(c) - o.box_size[0] / 2  # its front's distance to the junction's centre
                if -wc - 2.0 < ahead < wc + 8.0 + 5.0 * o.speed:
                    return False
        return True

    def _merge_gap_ok(self, a: Agent, c: np.ndarray, h: float, target: float, everyone: list[Agent]) -> bool:
        """Whether the lane at lateral offset `target` from the main centreline (at `c`, heading
        `h`) has room for `a` to change into: its leader there far enough ahead, its follower far
        enough behind for its speed (a gap-acceptance rule)."""
        d = np.array([np.cos(h), np.sin(h)])
        n = np.array([-d[1], d[0]])
        for o in everyone:
            if o is a or o.path is None or not o.follows_traffic or np.cos(o.heading - h) < 0.5:
                continue
            rel = o.pos - c
            along, lat = float(rel @ d), float(rel @ n)
            if abs(along) > 80 or abs(lat - target) > LANE_WIDTH / 2 + 0.8:
                continue
            gap = abs(along) - (a.box_size[0] + o.box_size[0]) / 2
            need = 3.0 + 0.8 * a.speed if along >= 0 else 4.0 + 1.5 * o.speed + 2.0 * max(o.speed - a.speed, 0.0)
            if gap < need:
                return False
        return True

    def _try_merge(self, a: Agent, everyone: list[Agent]) -> None:
        """A vehicle in the arterial's dropped lane changes into the next lane once it is near
        the taper and there is a gap: a new path from where it is, blending over 10-30 m (by its
        speed) into lane 1, finished before the taper ends and never past the travel lanes' edge."""
        road, main = self.road, self.road.main
        s_a, s_b = road.taper
        ms = main.nearest_s(a.pos)
        if ms < s_a - MERGE_WINDOW:
            return
        c, h = main.at(ms)
        target = -(road.lanes - 1.5) * LANE_WIDTH
        if not self._merge_gap_ok(a, c, h, target, everyone):
            return
        now = float((a.pos - c) @ np.array([-np.sin(h), np.cos(h)]))
        length = min(float(np.clip(8.0 + 2.0 * a.speed, 10.0, 30.0)), max(s_b - 2.0 - ms, 8.0))
        i = int(np.searchsorted(main.s, ms, side="right"))
        u = np.clip((main.s[i:] - ms) / length, 0.0, 1.0)
        off = np.maximum(now + (target - now) * u * u * (3 - 2 * u), -(road.edge_profile[i:] - 1.4))
        normal = np.stack([-np.sin(main.heading[i:]), np.cos(main.heading[i:])], 1)
        a.path, a.s = Path(np.concatenate([a.pos[None], main.points[i:] + off[:, None] * normal])), 0.0
        self._cleared = {key for key in self._cleared if key[0] != id(a)}
        a.stops = []
        self._attach_stops(a)
        del self._merge_end[a.track_id]
        a.update_pose(animate_parts=False)

    def _signal_gap(self, a: Agent) -> float:
        """Distance to the first stop line `a` must respect, or inf."""
        for i, (s_stop, k, approach) in enumerate(a.stops):
            d = s_stop - a.s - a.box_size[0] / 2
            if d < -1.0 or (id(a), i) in self._cleared:
                continue
            it = self.road.intersections[k]
            if it.signalized:
                state = self.signal(k, approach)
                if state == "green" or (state == "yellow" and d < a.speed ** 2 / 6.0):
                    if d >= 0.0 and self._crossed_by(k, a):
                        return d  # a green light, but someone still crossing in the junction
                    continue
                return max(d, 0.0)
            if approach == "main":  # the right of way, unless someone is still crossing
                if d >= 0.0 and self._crossed_by(k, a):
                    return d
                continue
            if approach == "cross":
                if a.speed < 0.3 and d < 2.5:  # IDM stops s0 = 2 m short of the line
                    a.waited += 0.05
                    if a.waited > 1.5 and self._junction_clear(k, a):
                        self._cleared.add((id(a), i))
                        a.waited = 0.0
                        continue
                return max(d, 0.0)
        return np.inf

    def step(self, dt: float = 0.1, substeps: int = 2):
        h = dt / substeps
        movers = [a for a in self.agents + [self.ego] if a.path is not None]
        everyone = self.agents + [self.ego]
        drivers = [a for a in movers if a.follows_traffic]
        for a in drivers:
            if a.track_id in self._merge_end:
                self._try_merge(a, everyone)
        for k in range(substeps):
            self._update_occupants()
            acc = {}
            for a, gap, v_lead in zip(drivers, *leader_gaps(drivers, everyone)):
                stop = self._stop_gap(a)
                if stop < gap:
                    gap, v_lead = stop, 0.0
                acc[id(a)] = idm_acceleration(a.speed, a.desired_speed, float(gap), a.speed - float(v_lead))
            for a in movers:
                if id(a) in acc:
                    a.speed = max(0.0, a.speed + acc[id(a)] * h)
                a.s += a.speed * h
                a.update_pose(animate_parts=k == substeps - 1)  # limbs only where a frame is drawn
        self._stand_on_ground(movers)
        self.t += dt
