"""World content: the classes nuScenes has (barrier, roadside cones, trailer, motorcycle, parked
vehicles), each switchable in configs/sim.yaml, placed without overlapping anything."""
from __future__ import annotations

from collections import Counter

import numpy as np

from sim.agents import body_bounds
from sim.config import RoadsideConfig, SimConfig, TrafficConfig
from sim.nuscenes_export import box_attributes
from sim.traffic import footprint as _footprint
from sim.traffic import polygons_overlap as _polygons_overlap
from sim.world import World


def _count(cfg: SimConfig, seeds=range(4)) -> Counter:
    c = Counter()
    for seed in seeds:
        w = World(cfg, seed)
        c.update(a.cls for a in w.agents)
        c.update("parked" for a in w.agents if a.attributes.get("parked"))
    return c


def test_new_classes_appear_and_switch_off():
    on = _count(SimConfig())
    for cls in ("barrier", "traffic_cone", "trailer", "motorcycle", "parked"):
        assert on[cls] > 0, (cls, on)
    off = _count(SimConfig(traffic=TrafficConfig(motorcycles=0),
                           roadside=RoadsideConfig(parked_vehicles=0, barrier_groups=0, cone_groups=0)),
                 seeds=range(4))
    for cls in ("barrier", "trailer", "motorcycle", "parked"):
        assert off[cls] == 0, (cls, off)


def test_roadside_objects_overlap_nothing_and_parked_ones_export_as_parked():
    for seed in range(4):
        w = World(SimConfig(), seed)
        statics = [a for a in w.agents if a.path is None]
        for a in statics:
            fa = _footprint(a.pos, a.heading, a.box_center, a.box_size, 0.0)
            for p in w.props:
                c, size = body_bounds(p.parts)
                assert not _polygons_overlap(fa, _footprint(p.pos, p.heading, c, size, 0.0)), (seed, a.cls, p.semantic)
            for o in w.agents:
                if o is not a and o.path is None:
                    assert not _polygons_overlap(fa, _footprint(o.pos, o.heading, o.box_center, o.box_size, 0.0)), (seed, a.cls, o.cls)
        for a in w.agents:
            if a.attributes.get("parked"):
                assert a.cls in ("car", "truck", "trailer") and a.speed == 0 and a.path is None
                assert box_attributes(a.cls, {**a.attributes, "moving": False}) == ["vehicle.parked"]
            if a.cls == "motorcycle":
                assert box_attributes(a.cls, a.attributes) == ["cycle.with_rider"]


def test_same_seed_same_world():
    a, b = World(SimConfig(), 11), World(SimConfig(), 11)
    assert [(x.cls, *np.round(x.pos, 9)) for x in a.agents] == [(x.cls, *np.round(x.pos, 9)) for x in b.agents]
