"""Road layouts (issue 14, item 5): 4-way crossings, T-junctions and the multi-lane arterial with
a lane drop / lane gain over a taper (`sim.roads`, `roads.layouts` in configs/sim.yaml).

Each layout is built for a few seeds, without rendering (world geometry, traffic model and the
label functions that read the road network): the lane-line labels lie on the paint the meshes
draw, the drivable raster covers the new road pieces and not the sidewalks, nothing is placed on
the road that should not be, vehicles never overlap, a vehicle in the dropped lane has changed
lane before the taper ends, side-street traffic turns in and out and keeps to its stop line and
signal, and the same seed gives the same world.
"""
from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from hydranet.config import ConfigError, load_config
from hydranet.geometry import invert_rigid
from sim.agents import Agent, body_bounds, make_body
from sim.config import LayoutMix, RareConfig, RoadsConfig, RoadsideConfig, SimConfig
from sim.labels import bev_raster, lane_lines_world
from sim.roads import (CROSS_LENGTH, CURB_HEIGHT, LANE_WIDTH, MARKING_WIDTH, PARKING_WIDTH, SIDEWALK_WIDTH, TERRAIN_Z,
                       _in_quads, marking_pieces, strip_quads)
from sim.traffic import footprint as _footprint
from sim.traffic import polygons_overlap as _polygons_overlap
from sim.world import World, draw_layout

SEEDS = (0, 1, 2)
NO_RARE = RareConfig(cones_on_road=0, debris_on_road=0, night_pedestrian_crossing=0, unusual_vehicle=0)


def only(layout: str, **kw) -> SimConfig:
    mix = LayoutMix(**{name: float(name == layout) for name in ("cross", "t_junction", "arterial")})
    return SimConfig(roads=RoadsConfig(layouts=mix), **kw)


@cache
def built(layout: str, seed: int, rare: bool = True) -> World:
    """A world at t = 0, shared by the tests that only read it (the traffic tests step their own)."""
    return World(only(layout) if rare else only(layout, rare=NO_RARE), seed)


def frame_at(xy: np.ndarray, heading: float) -> np.ndarray:
    """world2ego of an ego standing at `xy` facing `heading`."""
    c, s = np.cos(heading), np.sin(heading)
    T = np.eye(4)
    T[:2, :2] = [[c, -s], [s, c]]
    T[:2, 3] = xy
    return invert_rigid(T)


def lateral(road, xy: np.ndarray) -> tuple[float, float]:
    """(main arclength, signed offset left of the main centreline) of a point (2,)."""
    ms = road.main.nearest_s(xy)
    c, h = road.main.at(ms)
    return ms, float((xy - c) @ np.array([-np.sin(h), np.cos(h)]))


# --- the knob ----------------------------------------------------------------------------------

@pytest.mark.parametrize("key, value, words", [
    ("roads.layouts.arterial", "1.5", "roads.layouts.arterial"),
    ("roads.layouts.t_junction", "-0.1", "roads.layouts.t_junction"),
    ("roads.layouts.cross", "0.9", "sum to 1.5"),
    ("roads.taper_length", "5", "roads.taper_length"),
])
def test_layout_knob_is_checked(key, value, words):
    with pytest.raises(ConfigError, match=words):
        load_config(SimConfig, None, [f"{key}={value}"])


def test_default_mix_draws_every_layout_and_one_layout_alone():
    mix = load_config(SimConfig, "configs/sim.yaml").roads.layouts
    assert min(mix.cross, mix.t_junction, mix.arterial) > 0
    drawn = [draw_layout(SimConfig(), seed) for seed in range(12)]
    assert set(drawn) == {"cross", "t_junction", "arterial"}, drawn
    assert [World(SimConfig(), seed).layout for seed in range(3)] == drawn[:3]
    for layout in ("cross", "t_junction", "arterial"):
        assert {draw_layout(only(layout), seed) for seed in range(12)} == {layout}


def test_layouts_have_their_pieces():
    for seed in SEEDS:
        cross, t, art = (built(name, seed).road for name in ("cross", "t_junction", "arterial"))
        assert cross.intersections and all(it.arms == (-1, 1) for it in cross.intersections)
        assert t.intersections and all(it.is_t for it in t.intersections)
        assert art.taper is not None and art.lanes >= 2
        assert all(it.s < art.taper[0] - 40 or it.s > art.taper[1] + 30 for it in art.intersections)
        assert np.isclose(art.lane_edge_at(art.taper[0] - 1), art.lanes * LANE_WIDTH)
        assert np.isclose(art.lane_edge_at(art.taper[1] + 1), (art.lanes - 1) * LANE_WIDTH)
        for road in (cross, t, art):  # a parking lane each side, between the travel lanes and the kerb
            assert np.allclose(road.hw_profile - road.edge_profile, PARKING_WIDTH)


def test_same_seed_same_world():
    for layout in ("t_junction", "arterial"):
        a, b = World(only(layout), 5), World(only(layout), 5)
        for w in (a, b):
            for _ in range(20):
                w.step(0.1)
        ra, rb = a.road, b.road
        assert [m.path.points.tobytes() for m in ra.markings] == [m.path.points.tobytes() for m in rb.markings]
        assert np.array_equal(np.array(ra.stripes), np.array(rb.stripes))
        assert [p.pos.tobytes() for p in a.props] == [p.pos.tobytes() for p in b.props]
        assert [(x.cls, x.pos.tobytes(), x.speed) for x in a.agents] == [(x.cls, x.pos.tobytes(), x.speed) for x in b.agents]


# --- labels ------------------------------------------------------------------------------------

def painted_quads(road, types) -> np.ndarray:
    """(Q, 4, 2) the paint of the markings of `types`, as `sim.meshes.road_mesh` draws it."""
    w = MARKING_WIDTH / 2 + 0.005  # half a centimetre for the float rounding of the edges
    return np.concatenate([strip_quads(p.offset(w).points, p.offset(-w).points)
                           for m in road.markings if m.type in types for p in marking_pieces(m)])


def on_paint(xy: np.ndarray, quads: np.ndarray) -> np.ndarray:
    near = np.abs(quads.mean(1)[None] - xy.mean(0)).max(-1)[0] < np.abs(xy - xy.mean(0)).max() + 5
    return _in_quads(xy, quads[near])


@pytest.mark.parametrize("layout", ["cross", "t_junction", "arterial"])
def test_lane_labels_lie_on_the_paint(layout):
    """A solid line's label points all lie on its paint; a dashed line's on its dashes about a
    third of the time (3 m dash, 6 m gap) and never more than about a gap's half from one; every label
    point lies on the drivable road."""
    for seed in SEEDS:
        w = built(layout, seed)
        road = w.road
        solid, dashed = painted_quads(road, ("solid_white", "solid_yellow")), painted_quads(road, ("dashed_white",))
        centres = [w.ego.pos] + [it.center for it in road.intersections] + ([road.main.at(road.taper[0])[0]]
                                                                            if road.taper else [])
        n, dash_hits = 0, []
        for c in centres:
            for lane in lane_lines_world(w, c, 60.0):
                xy = lane["points"][:, :2]
                assert (road.surface_z(xy) == 0).all(), (layout, seed, lane["type"])
                if lane["type"] == "dashed_white":
                    dash_hits.append(on_paint(xy, dashed))
                    d = np.linalg.norm(xy[:, None] - dashed.reshape(-1, 2)[None], axis=-1).min(1)
                    assert d.max() < 3.65, (layout, seed, d.max())  # half the 6 m gap, and a sample's spacing
                else:
                    assert on_paint(xy, solid).all(), (layout, seed, lane["type"], lane["lane_id"])
                n += 1
        assert n >= 6
        if road.lanes > 1:
            frac = np.concatenate(dash_hits).mean()
            assert 0.28 < frac < 0.5, (layout, seed, frac)


def t_junctions():
    """(seed, world, road, intersection, side of its arm, main road half width, side street half width)
    of every T-junction of the SEEDS."""
    for seed in SEEDS:
        w = built("t_junction", seed)
        for it in w.road.intersections:
            (arm,) = it.arms
            yield seed, w, w.road, it, arm, w.road.half_width_at(it.s), it.cross_half_width


def test_t_junction_markings_across_the_mouth():
    """The far side's edge line and lane lines run on across a T's mouth; on the arm's side
    every line stops short of the side street, and the side street's lines start past its
    crosswalk and stop line."""
    for seed, w, road, it, arm, hw, wc in t_junctions():
        far_edge = mouth = 0
        for lane in lane_lines_world(w, it.center, 30.0):
            for xy in lane["points"][:, :2]:
                ms, lat = lateral(road, xy)
                if abs(ms - it.s) < wc and abs(lat) < hw:  # on the main road in front of the mouth
                    assert np.sign(lat) == -arm and lane["type"] != "solid_yellow", (seed, lane["type"], lat)
                    far_edge += lane["type"] == "solid_white" and abs(abs(lat) - road.lane_edge_at(ms)) < 0.02
                if abs(lat) > hw:  # on the side street: past the crosswalk and the stop line
                    assert abs(lat) > hw + SIDEWALK_WIDTH + 1.2, (seed, lat)
                    mouth += 1
        assert far_edge >= 2 and mouth > 0, (seed, far_edge, mouth)
        # the mouth's crosswalk (on the main road's sidewalk line) and the side street's stop line
        lats = np.array([lateral(road, st.mean(0))[1] for st in road.stripes
                         if abs(lateral(road, st.mean(0))[0] - it.s) < wc])
        assert (np.abs(lats - arm * (hw + SIDEWALK_WIDTH / 2)) < 0.01).sum() >= 3, (seed, lats)
        assert (np.abs(lats - arm * (hw + SIDEWALK_WIDTH + 1.0)) < 0.01).sum() == 1, (seed, lats)


def test_arterial_markings_follow_the_taper():
    """The dashed line to the dropped (added) kerb lane ends where the taper starts; the edge
    line follows the taper on the travel lanes' edge (the parking lane beyond it), on both sides."""
    for seed in SEEDS:
        w = built("arterial", seed)
        road = w.road
        s_a, s_b = road.taper
        edge, last_dash = [], -np.inf
        for lane in lane_lines_world(w, road.main.at((s_a + s_b) / 2)[0], 70.0):
            for xy in lane["points"][:, :2]:
                ms, lat = lateral(road, xy)
                if lane["type"] == "dashed_white" and abs(abs(lat) - (road.lanes - 1) * LANE_WIDTH) < 0.05:
                    last_dash = max(last_dash, ms)
                if lane["type"] == "solid_white" and s_a - 5 < ms < s_b + 5:
                    edge.append(abs(lat) - road.lane_edge_at(ms))
        assert s_a - 10 < last_dash <= s_a + 0.5, (seed, s_a, last_dash)
        assert len(edge) > 100 and np.abs(edge).max() < 0.02, (seed, len(edge), np.abs(edge).max())


def _raster_at(w: World, xy: np.ndarray, heading: float, points: np.ndarray) -> np.ndarray:
    """Drivable raster values (K,) at world points (K, 2), in a BEV frame centred at `xy`."""
    world2ego = frame_at(xy, heading)
    bev = bev_raster(w, world2ego, [], [], 50.0, 0.5)
    p = (np.concatenate([points, np.zeros((len(points), 1)), np.ones((len(points), 1))], 1) @ world2ego.T)[:, :2]
    row, col = ((50.0 - p[:, 0]) / 0.5).astype(int), ((50.0 - p[:, 1]) / 0.5).astype(int)
    return bev[0, row, col]


def _sidewalk_samples(road, xy: np.ndarray, radius: float) -> np.ndarray:
    """Points along the middle of the sidewalks within `radius` of `xy`, 1 m from their ends (a
    BEV cell is 0.5 m)."""
    out = []
    for inner, side in road.sidewalks:
        mid = inner.offset(side * SIDEWALK_WIDTH / 2).points[2:-2]
        out.append(mid[np.linalg.norm(mid - xy, axis=1) < radius])
    return np.concatenate(out)


def test_drivable_raster_covers_the_new_pieces_and_not_the_sidewalks():
    for seed, w, road, it, arm, hw, wc in t_junctions():
        d = np.array([np.cos(it.heading), np.sin(it.heading)])
        n = np.array([-d[1], d[0]])
        lanes = np.array([it.center + arm * n * t + d * o for t in (hw + 3, hw + 15, hw + 30) for o in (-wc + 0.5, wc - 0.5)])
        far = it.center - arm * n * (hw + SIDEWALK_WIDTH / 2)  # the far side's sidewalk, across the mouth
        assert (_raster_at(w, it.center, it.heading, lanes) == 255).all(), seed
        assert (road.surface_z(lanes) == 0).all()
        assert _raster_at(w, it.center, it.heading, far[None])[0] == 0 and road.surface_z(far[None])[0] == CURB_HEIGHT
        walks = _sidewalk_samples(road, it.center, 45.0)
        assert len(walks) > 100 and (_raster_at(w, it.center, it.heading, walks) == 0).all(), seed
        assert (road.surface_z(walks) == CURB_HEIGHT).all()
    for seed in SEEDS:
        w = built("arterial", seed)
        road = w.road
        s_a, s_b = road.taper
        c, h = road.main.at((s_a + s_b) / 2)
        kerb_lane = road.lanes * LANE_WIDTH - LANE_WIDTH / 2
        walk = road.half_width_at(s_b + 8) + SIDEWALK_WIDTH / 2  # the middle of the sidewalk past the taper
        before = [road.main.offset(side * d).at(s_a - 8)[0] for side in (-1, 1) for d in (kerb_lane, walk)]
        after = [road.main.offset(side * walk).at(s_b + 8)[0] for side in (-1, 1)]
        assert (_raster_at(w, c, h, np.array(before)) == 255).all(), seed  # the extra lane (and its parking lane) before the taper
        assert (_raster_at(w, c, h, np.array(after)) == 0).all(), seed  # past it: the sidewalk
        assert (road.surface_z(np.array(after)) == CURB_HEIGHT).all()
        walks = _sidewalk_samples(road, c, 45.0)
        assert len(walks) > 100 and (_raster_at(w, c, h, walks) == 0).all(), seed


@pytest.mark.parametrize("layout", ["t_junction", "arterial"])
def test_nothing_placed_on_the_road(layout):
    """Buildings and tree trunks stand off the road and sidewalks, poles, signs and lights on the
    sidewalk or beyond, parked vehicles in a parking lane (below), barriers and roadside cones on
    the sidewalk."""
    for seed in SEEDS:
        w = built(layout, seed, rare=False)
        road = w.road
        for p in w.props:
            c, size = body_bounds(p.parts)
            fp = _footprint(p.pos, p.heading, c, size, 0.0)
            if p.semantic == "building":
                assert (road.surface_z(np.vstack([fp, p.pos])) == TERRAIN_Z).all(), (seed, p.semantic, p.pos)
            elif p.semantic == "vegetation":  # the trunk (a crown may hang over the sidewalk)
                assert road.surface_z(p.pos[None])[0] == TERRAIN_Z, (seed, p.semantic, p.pos)
            else:
                assert road.surface_z(p.pos[None])[0] != 0, (seed, p.semantic, p.pos)
        for a in w.agents:
            if a.attributes.get("parked"):
                continue
            if a.path is None:  # barriers and cones along the kerb
                assert road.surface_z(a.pos[None])[0] == CURB_HEIGHT, (seed, a.cls, a.pos)
            elif a.cls == "pedestrian":
                assert a.z == road.surface_z(a.pos[None])[0]


def parked(w: World) -> list[tuple[Agent, np.ndarray]]:
    """The parked vehicles of `w` with their footprints (4, 2)."""
    return [(a, _footprint(a.pos, a.heading, a.box_center, a.box_size, 0.0)) for a in w.agents if a.attributes.get("parked")]


@pytest.mark.parametrize("against", [0.0, 1.0])
def test_parked_vehicles_face_the_traffic_of_their_side(against):
    """Right-hand traffic: a vehicle parked on the main road's right faces along the road, one on its left against
    it (the way its oncoming lanes run), as parallel parking is done; `roadside.parked_against_traffic` 1 turns
    every one round."""
    sides = set()
    for seed in SEEDS:
        w = World(only("arterial", rare=NO_RARE, roadside=RoadsideConfig(parked_against_traffic=against)), seed)
        for a, fp in parked(w):
            ms, lat = w.road.lateral(fp)
            right = lat.mean() < 0
            along = np.cos(a.heading - w.road.main.at(float(ms.mean()))[1]) > 0
            assert along == (right != (against == 1.0)), (seed, a.cls, a.pos, a.heading)
            sides.add(bool(right))
    assert sides == {True, False}


@pytest.mark.parametrize("layout", ["cross", "t_junction", "arterial"])
def test_parked_vehicles_stand_in_the_parking_lane(layout):
    """Parked vehicles (issue 21, item 8) stand wholly on the road surface, between the travel
    lanes' edge (the edge line, 0.1 m clear of it) and the kerb, their side 0.1-0.3 m off the
    kerb, aligned with it, at least 10 m from a junction's roadway, none overlapping another; at
    the kerb height of the sidewalk or the terrain none of them."""
    count = 0
    for seed in SEEDS:
        w = built(layout, seed, rare=False)
        road = w.road
        cars = parked(w)
        count += len(cars)
        for a, fp in cars:
            assert (road.surface_z(np.vstack([fp, a.pos])) == 0).all() and a.z == 0, (seed, a.cls, a.pos)
            ms, lat = road.lateral(fp)
            side = np.sign(lat.mean())
            assert (side * lat >= road.lane_edge_at(ms) + 0.09).all(), (seed, a.cls, side * lat - road.lane_edge_at(ms))
            kerb_gap = road.half_width_at(ms) - side * lat
            assert 0.05 <= kerb_gap.min() < 0.31, (seed, a.cls, kerb_gap)  # 0.1-0.3 m, less a chord's sagitta round an arc
            # aligned with the kerb: its two kerb-side corners equally far from it
            assert np.ptp(np.sort(kerb_gap)[:2]) < 0.1, (seed, a.cls, kerb_gap)
            for it in road.intersections:
                assert (np.abs(ms - it.s) >= it.cross_half_width + 10.0).all(), (seed, a.cls, ms, it.s)
        for i, (a, fa) in enumerate(cars):
            for b, fb in cars[i + 1:]:
                assert not _polygons_overlap(fa, fb), (seed, a.track_id, b.track_id)
    assert count >= 10 * len(SEEDS), count


@pytest.mark.parametrize("layout", ["cross", "t_junction", "arterial"])
def test_no_moving_path_crosses_a_parked_vehicle(layout):
    """No moving road user's path (every lane, a merge's new path, turns in and out of side
    streets, cyclists) comes within its half width of a parked vehicle, at the start and through
    a 15 s clip, and no footprint overlaps one."""
    for seed in SEEDS[:2]:
        w = World(only(layout, rare=NO_RARE), seed)
        cars = parked(w)
        assert cars, seed
        grown = {}  # (parked id, mover half width) -> the parked footprint grown by it
        for step in range(151):
            movers = [a for a in w.agents + [w.ego] if a.path is not None and a.cls != "pedestrian"]
            if step % 25 == 0:
                for m in movers:
                    half = round(float(m.box_size[1]) / 2 + 0.05, 2)
                    for p, _ in cars:
                        key = (p.track_id, half)
                        if key not in grown:
                            grown[key] = _footprint(p.pos, p.heading, p.box_center, p.box_size, half)[None]
                        near = np.linalg.norm(m.path.points - p.pos, axis=1) < 20.0
                        hit = _in_quads(m.path.points[near], grown[key])
                        assert not hit.any(), (layout, seed, w.t, m.cls, m.track_id, p.track_id)
            for m in movers:
                fm = _footprint(m.pos, m.heading, m.box_center, m.box_size, 0.0)
                for p, fp in cars:
                    if np.linalg.norm(m.pos - p.pos) < 15.0:
                        assert not _polygons_overlap(fm, fp), (layout, seed, w.t, m.track_id, p.track_id)
            w.step(0.1)


# --- traffic -----------------------------------------------------------------------------------

VEHICLES = {"car", "truck", "bus", "motorcycle", "cyclist", "construction_vehicle", "trailer", "barrier",
            "traffic_cone", "debris"}


def overlapping(w: World) -> list[tuple]:
    """Pairs of road users (pedestrians aside) whose footprints overlap."""
    objs = [a for a in w.agents + [w.ego] if a.cls in VEHICLES]
    P = np.array([a.pos for a in objs])
    R = np.array([np.linalg.norm(a.box_size[:2]) / 2 + np.linalg.norm(a.box_center[:2]) for a in objs])
    near = np.triu(np.linalg.norm(P[:, None] - P[None], axis=-1) < R[:, None] + R[None], 1)
    fp = {i: _footprint(objs[i].pos, objs[i].heading, objs[i].box_center, objs[i].box_size, 0.0)
          for i in set(np.flatnonzero(near.any(0) | near.any(1)))}
    return [(objs[i].cls, objs[i].track_id, objs[j].cls, objs[j].track_id)
            for i, j in zip(*np.nonzero(near)) if _polygons_overlap(fp[i], fp[j])]


@pytest.mark.parametrize("layout", ["cross", "t_junction", "arterial"])
def test_vehicles_never_overlap(layout):
    """Road users and roadside objects never overlap over a clip (the rare scenarios put cones and
    debris on the road without looking: left out)."""
    for seed in SEEDS:
        w = World(only(layout, rare=NO_RARE), seed)
        for step in range(60):
            bad = overlapping(w)
            assert not bad, (layout, seed, step, bad)
            w.step(0.1)


def test_dropped_lane_merges_before_the_taper_ends():
    """Every vehicle in the arterial's dropped lane either is still before the latest point to
    begin its merge or has changed into the next lane; none leaves the travel lanes on the kerb
    side (into the parking lane),
    and each one past the taper's end is on lane 1's centre; nobody overlaps. Most of them do
    merge in 15 s."""
    merged = tracked = 0
    for seed in SEEDS:
        w = World(only("arterial", rare=NO_RARE), seed)
        road = w.road
        s_a, s_b = road.taper
        lane1 = -(road.lanes - 1.5) * LANE_WIDTH
        droppers = [a for a in w.agents + [w.ego] if a.track_id in w._merge_end]
        assert droppers, seed
        for _ in range(150):
            for a in droppers:
                ms, lat = lateral(road, a.pos)
                if a.track_id in w._merge_end:  # not yet changing lane
                    assert ms + a.box_size[0] / 2 <= road.merge_latest + 0.5, (seed, a.track_id, ms)
                    assert abs(lat + (road.lanes - 0.5) * LANE_WIDTH) < LANE_WIDTH / 2, (seed, a.track_id, lat)
                assert -lat + a.box_size[1] / 2 <= road.lane_edge_at(ms), (seed, a.track_id, ms, lat)
                if ms > s_b:
                    assert abs(lat - lane1) < 0.05, (seed, a.track_id, ms, lat)
            bad = overlapping(w)  # a merge cuts in only where there is room
            assert not bad, (seed, w.t, bad)
            w.step(0.1)
        tracked += len(droppers)
        merged += sum(a.track_id not in w._merge_end for a in droppers)
    assert merged >= 0.7 * tracked, (merged, tracked)


def test_added_lane_is_taken_up_by_reverse_traffic():
    """Reverse traffic on its kerb lane passes from lane 1 (past the taper) out into the added
    lane over it."""
    for seed in SEEDS:
        road = built("arterial", seed).road
        pts = road.lane_path(0, False).points[::-1]  # sample i lies beside the main centreline's sample i
        s_a, s_b = road.taper
        lats = [lateral(road, pts[np.searchsorted(road.main.s, s)])[1] for s in (s_b + 5, (s_a + s_b) / 2, s_a - 5)]
        assert np.allclose(lats, [(road.lanes - 1.5) * LANE_WIDTH, (road.lanes - 1) * LANE_WIDTH,
                                  (road.lanes - 0.5) * LANE_WIDTH], atol=0.05), (seed, lats)


def test_t_junction_traffic_turns_in_and_out_and_keeps_to_its_line():
    """Side-street cars come up to the main road and turn onto it, some main-road cars turn into
    the side street; a side-street car passes its stop line only on green or yellow (signal) or
    after it stopped there (stop sign)."""
    out = into = 0
    for seed in SEEDS:
        w = World(only("t_junction"), seed)
        road = w.road
        side = [(a, next(st for st in a.stops if st[2] == "cross")) for a in w.agents
                if a.path is not None and any(st[2] == "cross" for st in a.stops)]
        into += sum(1 for a in w.agents if a.path is not None and a.follows_traffic and any(
            np.linalg.norm(a.path.points[-1] - it.street.points[-1]) < LANE_WIDTH for it in road.intersections))
        stopped = set()
        front = {a.track_id: (s_stop - a.s - a.box_size[0] / 2) for a, (s_stop, _, _) in side}
        for _ in range(200):
            before = {k: w.signal(k, "cross") for k in range(len(road.intersections))}
            w.step(0.1)
            bad = overlapping(w)  # turning across traffic only into a clear junction
            assert not bad, (seed, w.t, bad)
            for a, (s_stop, k, _) in side:
                d = s_stop - a.s - a.box_size[0] / 2
                if a.speed < 0.3 and d < 2.5:
                    stopped.add(a.track_id)
                if front[a.track_id] >= 0 > d:  # crossed its line in this step
                    it = road.intersections[k]
                    if it.signalized:
                        assert before[k] != "red", (seed, a.track_id)
                    else:
                        assert a.track_id in stopped, (seed, a.track_id)
                front[a.track_id] = d
        for a, _ in side:
            ms, lat = lateral(road, a.pos)
            if abs(lat) < road.half_width_at(ms) and abs(np.cos(a.heading - road.main.at(ms)[1])) > 0.99:
                out += 1
    assert out >= 2 and into >= 1, (out, into)


def _junction_scene():
    """A T-junction world emptied of road users (the ego parked far down the road), and helpers
    to put a car on a lane path: (world, k, it, put)."""
    w = World(only("t_junction", rare=NO_RARE), 0)
    w.agents = []
    w.ego.s = w.ego.path.length - 1.0
    w.ego.update_pose()
    k, it = 0, w.road.intersections[0]

    def put(path, s, speed, stops=None):
        a = Agent(900 + len(w.agents), "car", make_body("car", np.random.default_rng(len(w.agents))), path, s, speed, speed)
        if stops is None:
            w._attach_stops(a)
        else:
            a.stops = stops
        w.agents.append(a)
        return a
    return w, k, it, put


def test_green_or_right_of_way_waits_while_someone_crosses_the_junction():
    w, k, it, put = _junction_scene()
    lane = w.road.lane_path(0, True)
    s_line = lane.nearest_s(it.center) - it.cross_half_width - 6.0
    car = put(lane, s_line - 8.0, 5.0)
    cross_in = it.cross if it.arms == (-1,) else it.cross.reversed()
    for signalized in (False, True):
        it.signalized = signalized
        w.t = (5.0 - w.signal_offsets[k]) % 24.0  # the main road's green
        assert not signalized or w.signal(k, "main") == "green"
        w._update_occupants()
        assert w._stop_gap(car) > 50  # no stop here (the next junction's, if any, is further on)
        crosser = put(cross_in.offset(-LANE_WIDTH / 2), CROSS_LENGTH, 2.0, stops=[])  # in the junction, across
        w._update_occupants()
        assert abs(w._stop_gap(car) - (8.0 - car.box_size[0] / 2)) < 0.6, signalized
        w.agents.remove(crosser)


def test_stop_sign_car_goes_only_into_a_clear_junction():
    w, k, it, put = _junction_scene()
    it.signalized = False
    hw = w.road.half_width_at(it.s)
    cross_in = it.cross if it.arms == (-1,) else it.cross.reversed()
    stop = CROSS_LENGTH - (hw + SIDEWALK_WIDTH + 1.0)
    side = put(cross_in.offset(-LANE_WIDTH / 2), 0.0, 0.0, stops=[(stop, k, "cross")])
    side.s = stop - 2.2 - side.box_size[0] / 2  # stopped just short of its line, as the IDM stops
    side.update_pose()
    lane = w.road.lane_path(0, True)
    main = put(lane, lane.nearest_s(it.center) - 30.0, 10.0)  # 3 s away
    for _ in range(60):  # 3 s of waiting
        w._update_occupants()
        assert w._stop_gap(side) < 3.0
    w.agents.remove(main)
    w._update_occupants()
    assert w._stop_gap(side) == np.inf  # stopped long enough, nobody coming: it goes


def test_scene_json_names_the_layout(tmp_path):
    import json

    from sim.generate import generate_dataset
    cfg = only("arterial", rig="nuscenes6", image_width=32, image_height=16, frames_per_scene=1)
    out = generate_dataset(tmp_path / "ds", cfg, scenes=1, seed=0, progress=False)
    assert json.loads((out / "scenes" / "scene_0000" / "scene.json").read_text())["road_layout"] == "arterial"
