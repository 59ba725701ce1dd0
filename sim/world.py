"""A seeded driving scene: road network, buildings, vegetation, street furniture, signs,
traffic lights with signal phases, and road users moving under `sim.agents` kinematics.

`World(cfg, seed)` samples everything from one `numpy.random.Generator` (roadside clutter from a second one of
the same seed, `sim.clutter`, so a scene without it is unchanged); `world.step(dt)`
advances time. Same config and seed give the same world, step by step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim.agents import (Agent, Part, body_bounds, leader_gap, make_body,
                        safe_speed)
from sim.clutter import clutter_pieces
from sim.config import SimConfig
from sim.roads import (CROSS_LENGTH, LANE_WIDTH, LAYOUTS, SIDEWALK_WIDTH, Path, RoadNetwork, build_road_network,
                        right_turn, turn_onto)
from sim.shapes import box_part, material
from sim.traffic import SIGNAL_CYCLE, TrafficRules, footprint, polygons_overlap

SIGN_CLASSES = ("stop", "yield", "speed_limit", "no_entry", "pedestrian_crossing")
LIGHT_STATES = ("red", "yellow", "green")
EGO_START_S = 45.0
PARK_KERB_GAP = (0.1, 0.3)  # a parked vehicle's side off the kerb, metres
PARK_EDGE_CLEAR = 0.1  # and at least this off the edge line (the travel lanes' edge)
PARK_JUNCTION_CLEAR = 10.0  # no parking within this of a junction's roadway (its crosswalks, stop lines, turns)
SIGN_BACK = (0.45, 0.45, 0.46)  # galvanised grey of a sign plate's back


@dataclass
class Prop:
    """A static object: box parts in its own frame, a pose, semantic class and track id."""

    semantic: str
    parts: list[Part]
    pos: np.ndarray  # (2,) on the ground
    heading: float
    track_id: int = 0  # 0: not an object with labels (buildings, trees, poles)
    attributes: dict = field(default_factory=dict)
    z: float = 0.0

    def pose(self) -> np.ndarray:
        c, s = np.cos(self.heading), np.sin(self.heading)
        T = np.eye(4)
        T[:2, :2] = [[c, -s], [s, c]]
        T[:3, 3] = [self.pos[0], self.pos[1], self.z]
        return T


@dataclass
class Conditions:
    time_of_day: str
    weather: str
    sun_direction: np.ndarray  # (3,) towards the sun
    rare: list[str]


def sign_parts(cls: str) -> list[Part]:
    """A sign on a pole, facing +x. The plate's design tells the class apart."""
    red, white, blue, black = (0.75, 0.05, 0.05), (0.92, 0.92, 0.92), (0.05, 0.2, 0.7), (0.05, 0.05, 0.05)
    pole = box_part((0, 0, 1.1), (0.08, 0.08, 2.2), (0.4, 0.4, 0.42), semantic="pole")
    z = 2.55
    designs = {  # (width, height), colour, dz: distinct layouts that stay apart at a few pixels
        "stop": [((0.7, 0.7), white, 0.0), ((0.6, 0.6), red, 0.0), ((0.45, 0.12), white, 0.0)],
        "yield": [((0.8, 0.7), red, 0.0), ((0.55, 0.45), white, 0.05)],
        "speed_limit": [((0.6, 0.8), white, 0.0), ((0.3, 0.35), black, 0.0)],
        "no_entry": [((0.65, 0.65), red, 0.0), ((0.55, 0.2), white, 0.0)],
        "pedestrian_crossing": [((0.7, 0.7), blue, 0.0), ((0.45, 0.45), white, 0.0), ((0.1, 0.35), black, 0.0)],
    }
    parts = [pole]
    for i, ((w, h), color, dz) in enumerate(designs[cls]):
        parts.append(box_part((0.05 + 0.01 * i, 0, z + dz), (0.04, w, h), color))
    (w, h), _, dz = designs[cls][0]  # the back of the plate: bare grey metal, the same for every class
    parts.append(box_part((0.0225, 0, z + dz), (0.025, w - 0.01, h - 0.01), SIGN_BACK))
    return parts


def light_parts(state: str) -> list[Part]:
    """A signal head on a pole, facing +x, with the lamp of `state` lit."""
    parts = [box_part((0, 0, 1.4), (0.12, 0.12, 2.8), (0.3, 0.3, 0.32), semantic="pole"),
             box_part((0.05, 0, 3.2), (0.3, 0.36, 0.95), (0.08, 0.08, 0.08))]
    lamps = {"red": (3.5, (1.0, 0.1, 0.05)), "yellow": (3.2, (1.0, 0.75, 0.05)), "green": (2.9, (0.1, 1.0, 0.4))}
    for name, (z, color) in lamps.items():
        on = name == state
        c = np.asarray(color) * (1.0 if on else 0.18)
        parts.append(box_part((0.215, 0, z), (0.03, 0.22, 0.22), c, 1.0 if on else 0.0, name if on else ""))
    return parts


class World(TrafficRules):
    """One scene. Attributes: road, props, agents, ego, conditions, t."""

    def __init__(self, cfg: SimConfig, seed: int):
        self.cfg, self.seed = cfg, seed
        self.rng = rng = np.random.default_rng(seed)
        self.t = 0.0
        self._next_id = 1
        lanes = int(rng.choice(cfg.lanes_per_direction))
        self.layout = draw_layout(cfg, seed)
        self.road: RoadNetwork = build_road_network(rng, lanes, layout=self.layout,
                                                    taper_length=cfg.roads.taper_length)
        self._merge_end: dict[int, float] = {}  # track id -> path s by which it must begin merging (arterial)
        self.conditions = self._sample_conditions()
        self.signal_offsets = rng.uniform(0, SIGNAL_CYCLE, len(self.road.intersections))
        self.props: list[Prop] = []
        self.lights: list[tuple[Prop, int, str]] = []  # (prop, intersection, approach)
        self.agents: list[Agent] = []
        self._place_buildings_and_vegetation()
        self._place_signs_and_lights()
        self.ego = Agent(0, "car", self._body("car"), self.road.lane_path(0, True), EGO_START_S,
                         speed=rng.uniform(5, 10), desired_speed=rng.uniform(8, 13))
        self._attach_stops(self.ego)
        self._plan_merge(self.ego, 0, True)
        self._place_traffic()
        self._cleared: set = set()
        self._place_rare()
        self._place_motorcycles()
        self._place_roadside()
        self.props += [Prop(*piece) for piece in clutter_pieces(self)]
        self._settle_speeds()
        self._stand_on_ground(self.agents + [self.ego])

    # ---- sampling -------------------------------------------------------------------------
    def _body(self, cls: str) -> list[Part]:
        return make_body(cls, self.rng, self.cfg.look.detailed_meshes)

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _sample_conditions(self) -> Conditions:
        c, rng = self.cfg.conditions, self.rng
        tod = str(rng.choice(c.time_of_day, p=np.asarray(c.time_of_day_weights) / sum(c.time_of_day_weights)))
        weather = str(rng.choice(c.weather, p=np.asarray(c.weather_weights) / sum(c.weather_weights)))
        r = self.cfg.rare
        rare = [name for name, p in (("cones_on_road", r.cones_on_road), ("debris_on_road", r.debris_on_road),
                                     ("night_pedestrian_crossing", r.night_pedestrian_crossing),
                                     ("unusual_vehicle", r.unusual_vehicle)) if rng.random() < p]
        if "night_pedestrian_crossing" in rare:
            tod = "night"
        elev = {"day": rng.uniform(35, 65), "dusk": rng.uniform(4, 12), "night": 40.0}[tod]
        az = rng.uniform(0, 2 * np.pi)
        e = np.radians(elev)
        sun = np.array([np.cos(e) * np.cos(az), np.cos(e) * np.sin(az), np.sin(e)])
        return Conditions(tod, weather, sun, rare)

    def _free(self, xy: np.ndarray, margin: float) -> bool:
        return not self.road.near_road(np.atleast_2d(xy), margin).any()

    def _place_buildings_and_vegetation(self):
        rng, road = self.rng, self.road
        detail, tex = self.cfg.look.detailed_meshes, self.cfg.look.textures
        for path, width in road.edges():
            for side in (-1, 1):
                s = rng.uniform(0, 10)
                while s < path.length:
                    c, h = path.at(s)
                    hw = road.half_width_at(s) if width is None else width
                    n = np.array([-np.sin(h), np.cos(h)]) * side
                    kind = rng.random()
                    if kind < 0.55:
                        L, D, H = rng.uniform(8, 22), rng.uniform(8, 16), rng.uniform(5, 28)
                        setback = hw + SIDEWALK_WIDTH + rng.uniform(2, 8) + D / 2
                        p = c + n * setback
                        # its outline every ~2 m (corners alone would let a long building straddle a street)
                        u = np.linspace(-1, 1, int(L / 2) + 2)
                        v = np.linspace(-1, 1, int(D / 2) + 2)
                        outline = np.concatenate([np.stack([u * L / 2, np.full_like(u, b * D / 2)], 1) for b in (-1, 1)] +
                                                 [np.stack([np.full_like(v, a * L / 2), v * D / 2], 1) for a in (-1, 1)])
                        corners = p + outline @ np.array([[np.cos(h), np.sin(h)], [-np.sin(h), np.cos(h)]])
                        if self._free(corners, SIDEWALK_WIDTH + 1.0):
                            color = rng.uniform(0.35, 0.75) * np.array([1.0, rng.uniform(0.85, 1.0), rng.uniform(0.7, 0.95)])
                            style = (L * 7.31 + H * 3.73) % 1.0  # window pattern, without a draw from rng
                            parts = [box_part((0, 0, H / 2), (L, D, H), color, material=material("facade", style) if tex else 0.0),
                                     box_part((0, 0, H * 0.55), (L + 0.04, D + 0.04, H * 0.08), color * 0.45)]
                            self.props.append(Prop("building", parts, p, h))
                        s += L + rng.uniform(1, 8)
                    else:
                        p = c + n * (hw + SIDEWALK_WIDTH + rng.uniform(0.8, 3.0))
                        if self._free(p, SIDEWALK_WIDTH + 0.5):
                            th, cw = rng.uniform(1.5, 3.0), rng.uniform(1.8, 4.0)
                            green = np.array([0.1, rng.uniform(0.3, 0.5), 0.1])
                            crown, trunk = ("ball", "cyl_z") if detail else ("box", "box")
                            leaf, bark = (material("foliage", th % 1.0), material("bark")) if tex else (0.0, 0.0)
                            parts = [box_part((0, 0, th / 2), (0.3, 0.3, th), (0.3, 0.2, 0.1), shape=trunk, material=bark),
                                     box_part((0, 0, th + cw / 2), (cw, cw, cw), green, shape=crown, material=leaf),
                                     box_part((0, 0, th + cw * 0.6), (cw * 1.2, cw * 0.7, cw * 0.5), green * 1.15, shape=crown,
                                          material=leaf)]
                            self.props.append(Prop("vegetation", parts, p, rng.uniform(0, np.pi)))
                        s += rng.uniform(4, 12)
            # street lights along the sidewalk's outer edge
            for s in np.arange(rng.uniform(0, 30), path.length, 30.0):
                c, h = path.at(s)
                hw = road.half_width_at(s) if width is None else width
                side = 1 if int(s / 30) % 2 else -1
                p = c + np.array([-np.sin(h), np.cos(h)]) * side * (hw + SIDEWALK_WIDTH - 0.4)
                if self._free(p, SIDEWALK_WIDTH - 0.6):
                    parts = [box_part((0, 0, 3.0), (0.15, 0.15, 6.0), (0.35, 0.35, 0.37), semantic="pole",
                                  shape="cyl_z" if detail else "box", material=material("metal") if tex else 0.0),
                             box_part((0, -side * 0.6, 6.0), (0.5, 1.4, 0.15), (0.9, 0.9, 0.8), 0.0, "street", "pole")]
                    self.props.append(Prop("pole", parts, p, h))

    def _add_sign(self, cls: str, path: Path, s: float, offset: float):
        """A sign `offset` metres right of `path` at `s`, facing traffic coming along the path."""
        c, h = path.at(s)
        p = c - np.array([-np.sin(h), np.cos(h)]) * offset
        self.props.append(Prop("traffic_sign", sign_parts(cls), p, h + np.pi, self.new_id(), {"sign_class": cls}))

    def _place_signs_and_lights(self):
        rng, road = self.rng, self.road
        for fwd in (True, False):
            path = road.main if fwd else road.main.reversed()
            for s in np.arange(rng.uniform(10, 40), path.length, rng.uniform(45, 80)):
                cls = str(rng.choice(["speed_limit", "speed_limit", "no_entry", "yield"]))
                if not any(abs(path.nearest_s(it.center) - s) < it.cross_half_width + 12 for it in road.intersections):
                    self._add_sign(cls, path, s, road.half_width_at(s if fwd else path.length - s) + 0.6)
        for k, it in enumerate(road.intersections):
            wc = it.cross_half_width
            hw = road.half_width_at(it.s)
            for fwd in (True, False):
                path = road.main if fwd else road.main.reversed()
                s_it = path.nearest_s(it.center)
                if it.signalized:
                    light = Prop("traffic_light", light_parts("red"), path.at(s_it - wc - 5.5)[0], 0.0, self.new_id())
                    c, h = path.at(s_it - wc - 5.5)
                    light.pos = c - np.array([-np.sin(h), np.cos(h)]) * (hw + 0.7)
                    light.heading = h + np.pi
                    self.props.append(light)
                    self.lights.append((light, k, "main"))
                self._add_sign("pedestrian_crossing", path, s_it - wc - 8.0, hw + 0.9)
            for fwd in (True, False):
                if it.is_t and fwd != (it.arms == (-1,)):
                    continue  # a T's side street has one approach: towards the main road
                cross = it.cross if fwd else it.cross.reversed()
                t_it = cross.length / 2
                if it.signalized:
                    c, h = cross.at(t_it - hw - 5.5)
                    light = Prop("traffic_light", light_parts("red"), c - np.array([-np.sin(h), np.cos(h)]) * (wc + 0.7),
                                 h + np.pi, self.new_id())
                    self.props.append(light)
                    self.lights.append((light, k, "cross"))
                else:
                    self._add_sign(str(rng.choice(["stop", "stop", "yield"])), cross, t_it - hw - 4.0, wc + 0.7)

    def _attach_stops(self, a: Agent, exclude: tuple[int, ...] = ()):
        """Stop lines on `a.path`: the point before each intersection it drives through (but those
        in `exclude`)."""
        hw = self.road.half_width
        for k, it in enumerate(self.road.intersections):
            if k in exclude:
                continue
            s_c = a.path.nearest_s(it.center)
            if np.linalg.norm(a.path.at(s_c)[0] - it.center) > hw + 1.0:
                continue
            _, h = a.path.at(max(s_c - 12.0, 0.0))
            along_main = abs(np.cos(h - it.heading)) > 0.7
            back = (it.cross_half_width if along_main else hw) + 6.0
            if s_c - back > 0:
                a.stops.append((s_c - back, k, "main" if along_main else "cross"))

    def _vehicle(self, cls: str, path: Path, s: float, speed: float) -> Agent:
        a = Agent(self.new_id(), cls, self._body(cls), path, s, speed, speed * self.rng.uniform(0.9, 1.3))
        self._attach_stops(a)
        return a

    def _lane_ok(self, k: int, fwd: bool, path: Path, s: float) -> bool:
        """Whether lane `k` exists at `s` on its path: the arterial's dropped lane only up to where
        its vehicles must have begun merging, less a margin."""
        if k != 0 or not fwd or self.road.taper is None:
            return True
        return s < path.s[np.searchsorted(self.road.main.s, self.road.merge_latest)] - 15.0

    def _plan_merge(self, a: Agent, k: int, fwd: bool) -> None:
        """A vehicle in the arterial's dropped lane (forward lane 0): it must begin its lane change
        by `merge_latest` (it stops there and waits for a gap if it has not)."""
        if k == 0 and fwd and self.road.taper is not None:
            self._merge_end[a.track_id] = float(a.path.s[np.searchsorted(self.road.main.s, self.road.merge_latest)])

    def _lane_free(self, path: Path, s: float, gap: float) -> bool:
        xy, _ = path.at(s)
        return all(np.linalg.norm(o.pos - xy) > gap for o in self.agents + [self.ego])

    def _n(self, count: int) -> int:
        """A configured object count scaled by `density`."""
        return int(round(count * self.cfg.density))

    def _place_traffic(self):
        rng, road, tc = self.rng, self.road, self.cfg.traffic
        vehicles = self._n(tc.vehicles)
        for _ in range(vehicles * 5):
            if sum(a.cls in ("car", "truck", "bus") for a in self.agents) >= vehicles:
                break
            k, fwd = int(rng.integers(road.lanes)), bool(rng.random() < 0.55)
            path = road.lane_path(k, fwd)
            ego_s = path.nearest_s(self.ego.pos)
            s = ego_s + rng.uniform(-50, 110) * (1 if fwd else -1)
            u = rng.random()
            cls = "truck" if u < tc.truck_share else "bus" if u < tc.truck_share + tc.bus_share else "car"
            if 0 < s < path.length and self._lane_ok(k, fwd, path, s) and self._lane_free(path, s, 9.0 if cls == "car" else 15.0):
                a = self._vehicle(cls, path, s, rng.uniform(4, 12))
                self.agents.append(a)
                self._plan_merge(a, k, fwd)
                if road.layout == "t_junction" and k == 0 and rng.random() < 0.35:
                    self._turn_into_street(a, fwd)
        for j, it in enumerate(road.intersections):
            if abs(road.main.nearest_s(it.center) - EGO_START_S) > 160:
                continue
            if it.is_t:
                self._place_side_street_traffic(j, it)
                continue
            for _ in range(self._n(int(rng.integers(1, 4)))):
                fwd = bool(rng.random() < 0.5)
                cross = it.cross if fwd else it.cross.reversed()
                lane = cross.offset(-LANE_WIDTH / 2)
                s = cross.length / 2 - road.half_width - rng.uniform(8, 45)
                if rng.random() < 0.4:  # right turn onto the main road
                    lane = right_turn(lane, cross.length / 2 - road.half_width - 1.0, road, it, fwd)
                if self._lane_free(lane, s, 9.0):
                    self.agents.append(self._vehicle("car", lane, s, rng.uniform(3, 9)))
        for _ in range(self._n(tc.cyclists)):
            path = road.main.offset(-(road.edge_profile - 0.9))  # at the right of the kerb lane, by the edge line
            s = road.main.nearest_s(self.ego.pos) + rng.uniform(-20, 80)
            if self._lane_free(path, s, 5.0):
                a = Agent(self.new_id(), "cyclist", self._body("cyclist"), path, s, rng.uniform(3, 6), rng.uniform(4, 6.5),
                          attributes={"has_rider": True})
                self._attach_stops(a)
                self.agents.append(a)
        placed, i = 0, 0
        while placed < self._n(tc.pedestrians) and i < 3 * self._n(tc.pedestrians):
            i += 1
            if i % 4 == 0 and road.intersections:  # crossing at a crosswalk
                it = road.intersections[int(rng.integers(len(road.intersections)))]
                self.agents.append(self._crossing_pedestrian(it.s + rng.choice([-1, 1]) * (it.cross_half_width + 2.5), rng.uniform(-8, 0)))
                placed += 1
                continue
            side, d = rng.choice([-1, 1]), rng.uniform(1.0, 2.2)  # metres into the sidewalk, clear of the barrier rows at its kerb
            pair = rng.random() < tc.pair_share
            speed = 0.0 if rng.random() < tc.standing_share else rng.uniform(0.9, 1.6)
            back, s0 = rng.random() < 0.5, rng.uniform(-40, 70)
            for dd, ds in ((d, 0.0), (d + 0.8 if d < 1.8 else d - 0.8, rng.uniform(-0.6, 0.6)))[:1 + pair]:
                path = road.main.offset(side * (road.hw_profile + dd))  # a companion walks 0.8 m beside
                path = path.reversed() if back else path
                s = path.nearest_s(self.ego.pos) + s0 + ds
                if 0 < s < path.length:
                    self.agents.append(Agent(self.new_id(), "pedestrian", self._body("pedestrian"), path, s, speed,
                                             0.0, follows_traffic=False))
                    placed += 1

    def _turn_into_street(self, a: Agent, fwd: bool) -> None:
        """`a` (in the kerb lane) turns right into the side street of the first T-junction ahead
        that joins from its right, if there is room before it."""
        road = self.road
        for it in road.intersections:
            if not it.is_t or it.arms != ((-1,) if fwd else (1,)):
                continue
            s_it = a.path.nearest_s(it.center)
            s_turn = s_it - it.cross_half_width - 1.0
            if s_turn < a.s + 15.0:
                continue
            a.path = turn_onto(a.path, s_turn, it.street.offset(-LANE_WIDTH / 2))
            a.stops = []
            self._attach_stops(a)
            return

    def _place_side_street_traffic(self, k: int, it) -> None:
        """Cars on a T's side street coming up to the main road (stop line, sign or signal), each
        turning right or left onto it."""
        rng, road = self.rng, self.road
        hw = road.half_width_at(it.s)
        cross_in = it.cross if it.arms == (-1,) else it.cross.reversed()  # towards the main road
        lane = cross_in.offset(-LANE_WIDTH / 2)
        stop = CROSS_LENGTH - (hw + SIDEWALK_WIDTH + 1.0)  # the stop line, before the mouth's crosswalk
        for _ in range(self._n(int(rng.integers(2, 5)))):  # all of a T's side traffic comes from one side
            s = CROSS_LENGTH - hw - rng.uniform(8, 45)
            right = bool(rng.random() < 0.5)
            h_out = cross_in.heading[0] + (-np.pi / 2 if right else np.pi / 2)
            main_fwd = bool(np.cos(h_out - it.heading) > 0)
            target = road.lane_path(0 if right else road.lanes - 1, main_fwd)
            path = turn_onto(lane, CROSS_LENGTH - hw - 1.0, target)
            speed = rng.uniform(3, 9)
            if self._lane_free(path, s, 9.0):
                a = Agent(self.new_id(), "car", self._body("car"), path, s, speed, speed * rng.uniform(0.9, 1.3))
                self._attach_stops(a, exclude=(k,))
                a.stops = sorted([(stop, k, "cross")] + a.stops)
                self.agents.append(a)

    def _crossing_pedestrian(self, s_main: float, start: float) -> Agent:
        """A pedestrian walking across the main road at `s_main`, `start` metres before the kerb."""
        rng, road = self.rng, self.road
        c, h = road.main.at(s_main)
        n = np.array([-np.sin(h), np.cos(h)]) * rng.choice([-1, 1])
        w = road.half_width_at(s_main) + 1.5
        pts = c + np.linspace(-w, w, int(2 * w / 0.5) + 1)[:, None] * n
        d = np.array([np.cos(h), np.sin(h)])
        pts = np.concatenate([pts, pts[-1] + np.arange(1, 60)[:, None] * 0.5 * d])
        return Agent(self.new_id(), "pedestrian", self._body("pedestrian"), Path(pts), start, rng.uniform(1.0, 1.5), 0.0,
                     follows_traffic=False)

    def _place_rare(self):
        rng, road, rare = self.rng, self.road, self.conditions.rare
        ego_s = EGO_START_S
        if "cones_on_road" in rare:  # a taper closing the lane next to the ego's
            k = min(1, road.lanes - 1)
            s0 = ego_s + rng.uniform(25, 45)
            for i in range(int(rng.integers(4, 8))):
                xy, h = road.main.at(s0 + 4.0 * i)
                off = -(road.lanes - k - 0.5) * LANE_WIDTH + (1.2 - 0.35 * i if k == 0 else 1.5)
                self._static("traffic_cone", xy + np.array([-np.sin(h), np.cos(h)]) * off, h)
        if "debris_on_road" in rare:
            for _ in range(int(rng.integers(1, 4))):
                s_d = ego_s + rng.uniform(20, 50)
                xy, h = road.main.at(s_d)
                off = rng.uniform(-road.lane_edge_at(s_d) + 0.5, road.lane_edge_at(s_d) - 0.5)
                self._static("debris", xy + np.array([-np.sin(h), np.cos(h)]) * off, rng.uniform(0, np.pi))
        if "night_pedestrian_crossing" in rare:
            s = ego_s + rng.uniform(18, 28)
            self.agents.append(self._crossing_pedestrian(s, rng.uniform(-1.0, 2.0)))
        if "unusual_vehicle" in rare:
            fwd = bool(rng.random() < 0.5)
            k = int(rng.integers(road.lanes))
            path = road.lane_path(k, fwd)
            s = path.nearest_s(self.ego.pos) + (rng.uniform(20, 40) if fwd else -rng.uniform(20, 40))
            a = self._vehicle("construction_vehicle", path, s, rng.uniform(2, 5))
            if self._lane_ok(k, fwd, path, s):
                self.agents.append(a)
                self._plan_merge(a, k, fwd)

    def _static(self, cls: str, xy: np.ndarray, heading: float, attributes: dict | None = None,
                check: bool = False, margin: float = 0.3, parts: list | None = None) -> Agent | None:
        a = Agent(self.new_id(), cls, parts or self._body(cls), None, pos=np.asarray(xy, float),
                  heading=float(heading), attributes=attributes or {})
        if check and self._overlaps(a, margin):
            return None
        self.agents.append(a)
        return a

    def _prop_footprints(self) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Centres (P, 2), bounding radii (P,) and footprints (4, 2) of the props, cached (props
        are all placed before anything asks)."""
        if getattr(self, "_fp_cache", (None, -1))[1] != len(self.props):
            fps = [footprint(o.pos, o.heading, *body_bounds(o.parts), 0.0) for o in self.props]
            c = np.array([f.mean(0) for f in fps]).reshape(-1, 2)
            r = np.array([np.linalg.norm(f - f.mean(0), axis=1).max() for f in fps])
            self._fp_cache = ((c, r, fps), len(self.props))
        return self._fp_cache[0]

    def _overlaps(self, a: Agent, margin: float = 0.3) -> bool:
        """Whether `a`'s footprint (grown by `margin`) overlaps a prop's or another agent's."""
        fa = footprint(a.pos, a.heading, a.box_center, a.box_size, margin)
        ca, ra = fa.mean(0), np.linalg.norm(fa - fa.mean(0), axis=1).max()
        centres, radii, fps = self._prop_footprints()
        near = np.flatnonzero(np.linalg.norm(centres - ca, axis=1) < radii + ra) if len(fps) else []
        if any(polygons_overlap(fa, fps[i]) for i in near):
            return True
        return any(np.linalg.norm(o.pos - ca) < ra + np.linalg.norm(o.box_size[:2]) / 2 + np.linalg.norm(o.box_center[:2])
                   and polygons_overlap(fa, footprint(o.pos, o.heading, o.box_center, o.box_size, 0.0))
                   for o in self.agents + [self.ego])

    def _place_motorcycles(self):
        rng, road = self.rng, self.road
        placed, n = 0, self._n(self.cfg.traffic.motorcycles)
        for _ in range(n * 8):
            if placed >= n:
                break
            k, fwd = int(rng.integers(road.lanes)), bool(rng.random() < 0.55)
            path = road.lane_path(k, fwd)
            s = path.nearest_s(self.ego.pos) + rng.uniform(-40, 90) * (1 if fwd else -1)
            if 0 < s < path.length and self._lane_ok(k, fwd, path, s) and self._lane_free(path, s, 8.0):
                a = self._vehicle("motorcycle", path, s, rng.uniform(5, 12))
                a.attributes["has_rider"] = True
                self.agents.append(a)
                self._plan_merge(a, k, fwd)
                placed += 1

    def _place_roadside(self):
        """Parked vehicles and trailers in the main road's parking lanes; barriers and cones along
        kerbs."""
        rng, road, rc = self.rng, self.road, self.cfg.roadside
        main = road.main
        ego_s = main.nearest_s(self.ego.pos)

        def spot(s: float, side: int, offset: float) -> tuple[np.ndarray, float]:
            """`offset` metres beyond the main road's edge at `s` (its half width there added)."""
            c, h = main.at(s)
            return c + np.array([-np.sin(h), np.cos(h)]) * side * (road.half_width_at(s) + offset), h

        def off_street(cls: str, xy: np.ndarray, h: float, parts: list, margin: float = 0.3) -> bool:
            """Not in a side street's mouth (where the main road's kerb is cut), nor within
            `margin` of its roadway."""
            c, size = body_bounds(parts)
            return not road.on_street(footprint(xy, h, c, size, 0.0), margin).any()

        left = self._n(rc.parked_vehicles)
        while left > 0:  # rows of up to parked_row vehicles end to end, in a parking lane
            side, s = int(rng.choice([-1, 1])), ego_s + rng.uniform(-40, 110)
            for _ in range(min(left, int(rng.integers(1, rc.parked_row + 1)))):
                u = rng.random()
                cls = ("trailer" if u < rc.parked_trailer_share else
                       "truck" if u < rc.parked_trailer_share + rc.parked_truck_share else "car")
                parts = self._body(cls)
                length = body_bounds(parts)[1][0]
                against = rng.random() < rc.parked_against_traffic  # the left side's traffic runs against the road
                flip = np.pi if (side > 0) != against else 0.0
                kerb_gap = float(rng.uniform(PARK_KERB_GAP[0], PARK_KERB_GAP[1]))
                for _ in range(6):  # a junction or a car in the way: move up the kerb
                    pose = self._parking_pose(parts, s, side, kerb_gap)
                    if pose is not None and \
                            self._static(cls, pose[0], pose[1] + flip, {"parked": True}, check=True, parts=parts) is not None:
                        break
                    s += 2.0
                s += length + rng.uniform(0.8, 2.5)
                left -= 1
        for _ in range(self._n(rc.barrier_groups)):
            side, s = int(rng.choice([-1, 1])), ego_s + rng.uniform(-20, 100)
            n = int(rng.integers(2, 6))
            for i in range(n + 1):  # a cone, then n barrier segments end to end along the kerb
                cls = "traffic_cone" if i == 0 else "barrier"
                parts = self._body(cls)
                length = body_bounds(parts)[1][0]
                xy, h = spot(s + length / 2, side, 0.35)
                if not off_street(cls, xy, h, parts) or \
                        self._static(cls, xy, h, check=True, margin=0.05, parts=parts) is None:
                    break
                s += length + (0.25 if cls == "barrier" and i < n else 1.0)
        for _ in range(self._n(rc.cone_groups)):
            side, s = int(rng.choice([-1, 1])), ego_s + rng.uniform(-20, 100)
            for i in range(int(rng.integers(2, 5))):
                xy, h = spot(s + 1.5 * i, side, 0.3)
                if not road.on_street(xy[None], 0.5).any():  # on the sidewalk, maybe beside a parked car
                    self._static("traffic_cone", xy, h, check=True, margin=0.05)

    def _parking_pose(self, parts: list, s: float, side: int, kerb_gap: float) -> tuple[np.ndarray, float] | None:
        """Pose (position (2,), heading) of a vehicle of `parts` parked in the main road's parking
        lane on `side` (+1: left of the main road's direction), its rear at main arclength `s`, its
        side `kerb_gap` metres off the kerb (less for a vehicle too wide for that, so it keeps
        PARK_EDGE_CLEAR off the edge line), aligned with the kerb (its chord, round an arc or
        along the arterial's taper); None where its footprint would leave the parking lane or come
        within PARK_JUNCTION_CLEAR of a junction's roadway."""
        road, main = self.road, self.road.main
        c, size = body_bounds(parts)
        gap = min(kerb_gap, road.parking - PARK_EDGE_CLEAR - size[1])
        if gap < 0.0:
            return None
        # the vehicle's centreline, parallel to the kerb
        line = main.offset(side * (road.hw_profile - gap - size[1] / 2))
        t = float(line.s[min(int(np.searchsorted(main.s, s)), len(main.s) - 1)])
        if not 0.0 < t < line.length - size[0]:
            return None
        back, front = line.at(t)[0], line.at(t + size[0])[0]
        h = float(np.arctan2(*(front - back)[::-1]))
        R = np.array([[np.cos(h), -np.sin(h)], [np.sin(h), np.cos(h)]])
        pos = (back + front) / 2 - R @ c[:2]
        fp = footprint(pos, h, c, size, 0.0)
        ms, lat = road.lateral(fp)
        inside = (side * lat >= road.lane_edge_at(ms) + PARK_EDGE_CLEAR - 0.01) & \
                 (side * lat <= road.half_width_at(ms) - 0.05)
        near_junction = any((np.abs(ms - it.s) < it.cross_half_width + PARK_JUNCTION_CLEAR).any()
                            for it in road.intersections)
        if not inside.all() or near_junction or road.on_street(fp, PARK_JUNCTION_CLEAR).any():
            return None
        return pos, h

    def _settle_speeds(self):
        """Cap initial speeds so nobody starts closer to a leader or a red light than it can stop."""
        self._update_occupants()
        everyone = self.agents + [self.ego]
        for a in everyone:
            if a.path is not None and a.follows_traffic:
                gap = min(leader_gap(a, everyone)[0], self._stop_gap(a))
                a.speed = min(a.speed, safe_speed(gap))

    def _stand_on_ground(self, agents: list[Agent]) -> None:
        """Put each agent on the surface under its centre (sidewalks are CURB_HEIGHT up)."""
        if agents:
            for a, z in zip(agents, self.road.surface_z(np.array([a.pos for a in agents]))):
                a.z = float(z)

    # ---- time -----------------------------------------------------------------------------



def draw_layout(cfg: SimConfig, seed: int) -> str:
    """The road layout of scene `seed`, from its own stream (so the rest of the world draws as
    it did before layouts existed)."""
    mix = cfg.roads.layouts
    p = np.array([getattr(mix, name) for name in LAYOUTS])
    return str(np.random.default_rng([abs(int(seed)), 14]).choice(LAYOUTS, p=p / p.sum()))
