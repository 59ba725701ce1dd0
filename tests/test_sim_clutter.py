"""Roadside clutter (`roadside.clutter`, sim.clutter): hedges, fences, walls and distractor blocks beyond the
sidewalk, background in every label, drawn from their own random stream."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hydranet.config import ConfigError, load_config
from sim.classes import SEMANTIC_ID
from sim.config import RoadsideConfig, SimConfig
from sim.generate import render_frames
from sim.agents import body_bounds
from sim.clutter import blockers, place_runs
from sim.roads import SIDEWALK_WIDTH
from sim.traffic import footprint, polygons_overlap
from sim.world import World

CLUTTERED = SimConfig(roadside=RoadsideConfig(clutter=12.0))


def _clutter(plain: World, cluttered: World) -> list:
    assert len(cluttered.props) > len(plain.props)
    return cluttered.props[len(plain.props):]


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_clutter_adds_background_props_and_changes_nothing_else(seed):
    plain, cluttered = World(SimConfig(), seed), World(CLUTTERED, seed)
    extra = _clutter(plain, cluttered)
    # its own random stream: every other prop and every road user is where it was
    for a, b in zip(plain.props, cluttered.props):
        assert a.semantic == b.semantic and np.array_equal(a.pos, b.pos)
    assert [(a.cls, a.pos.tolist()) for a in plain.agents] == [(a.cls, a.pos.tolist()) for a in cluttered.agents]
    assert {p.semantic for p in extra} <= {"building", "vegetation"} and all(p.track_id == 0 for p in extra)
    assert len(extra) >= 20, len(extra)  # 12 runs per 100 m of each edge, in pieces of at most 3 m


@pytest.mark.parametrize("seed", [0, 5])
def test_clutter_stands_beyond_the_sidewalk_clear_of_props_and_labelled_objects(seed):
    plain, cluttered = World(SimConfig(), seed), World(CLUTTERED, seed)
    taken = blockers(plain)  # every prop, static labelled objects grown by 1 m
    for p in _clutter(plain, cluttered):
        fp = footprint(p.pos, p.heading, *body_bounds(p.parts), 0.0)
        assert not cluttered.road.near_road(fp, SIDEWALK_WIDTH).any(), (p.semantic, p.pos)
        assert not any(polygons_overlap(fp, b) for b in taken), (p.semantic, p.pos)


def test_a_blocked_spot_is_left_free_and_a_run_keeps_its_style_along_a_curve():
    """place_runs with a footprint where a run would stand: no piece overlaps it; a run's pieces share one look
    (height, colour, material) and meet end to end along the curved road (no gap, no overlap beyond 1 cm)."""
    w = World(SimConfig(), 2)
    free = place_runs(w.road, 12.0, 2, [], True)
    spot = footprint(free[0][2], free[0][3], np.zeros(3), np.array([2.0, 2.0, 1.0]), 0.0)
    assert not any(polygons_overlap(footprint(pos, h, *body_bounds(parts), 0.0), spot)
                   for _, parts, pos, h in place_runs(w.road, 12.0, 2, [spot], True))
    joined = 0
    for (_, a, pa, ha), (_, b, pb, hb) in zip(free, free[1:]):
        same_run = len(a) == len(b) and all(np.allclose(x.color, y.color) and x.material == y.material and
                                            np.isclose(x.size[2], y.size[2]) for x, y in zip(a, b))
        if not same_run:
            continue
        end_a = pa + np.array([np.cos(ha), np.sin(ha)]) * max(x.size[0] for x in a) / 2  # the piece's length
        start_b = pb - np.array([np.cos(hb), np.sin(hb)]) * max(x.size[0] for x in b) / 2
        if np.linalg.norm(end_a - start_b) < 0.5:  # consecutive pieces of one run (not a gap left by a blocker)
            assert np.linalg.norm(end_a - start_b) < 0.01
            joined += 1
    assert joined >= 10, joined


def test_clutter_is_rendered_as_background_and_only_hides_objects():
    """Frame 0 of a scene with and without clutter: the same labelled objects (a box per object that is still
    seen, never a new one), visibility never higher, more building and vegetation pixels."""
    cfg = SimConfig(rig="nuscenes6", image_width=160, image_height=96, frames_per_scene=1)
    (plain,), (cluttered,) = render_frames(cfg, 1), render_frames(dataclasses.replace(cfg, roadside=CLUTTERED.roadside), 1)
    more_background = 0
    for name, lab in plain["labels"]["cameras"].items():
        before = {b["track_id"]: b for b in lab["boxes2d"]}
        after = {b["track_id"]: b for b in cluttered["labels"]["cameras"][name]["boxes2d"]}
        assert set(after) <= set(before), name
        for tid, b in after.items():
            assert b["visible_fraction"] <= before[tid]["visible_fraction"] + 1e-6, (name, tid)
    for a, b in zip(plain["images"], cluttered["images"]):
        bg = [SEMANTIC_ID["building"], SEMANTIC_ID["vegetation"]]
        more_background += np.isin(b.semantic, bg).sum() - np.isin(a.semantic, bg).sum()
    assert more_background > 0


@pytest.mark.parametrize("value", ["-1", "101"])
def test_clutter_rate_is_checked(value):
    with pytest.raises(ConfigError, match="roadside.clutter"):
        load_config(SimConfig, None, [f"roadside.clutter={value}"])
