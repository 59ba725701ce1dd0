"""Content density (issue 14.5): object counts scale with `density`, the defaults come near the
nuScenes density and class mix, the statistics table is counted right, children export as
`human.pedestrian.child`."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from hydranet.config import ConfigError, load_config
from sim.config import RareConfig, RoadsideConfig, SimConfig, TrafficConfig
from sim.generate import generate_dataset
from sim.stats import (DETECTION_CLASSES, SIM_TO_DETECTION, dataset_stats, format_stats, frame_stats,
                       nuscenes_reference)
from sim.world import World

SEEDS = range(6)
NO_RARE = RareConfig(cones_on_road=0, debris_on_road=0, night_pedestrian_crossing=0, unusual_vehicle=0)


def _near(cfg: SimConfig, seeds=SEEDS, radius: float = 50.0) -> Counter:
    """Detection-class counts of the labelled road users within `radius` of the ego, over `seeds`."""
    c = Counter()
    for seed in seeds:
        w = World(cfg, seed)
        c.update(SIM_TO_DETECTION[a.cls] for a in w.agents if np.linalg.norm(a.pos - w.ego.pos) <= radius)
    return c


def test_density_scales_every_count():
    none = _near(SimConfig(density=0.0, rare=NO_RARE), seeds=range(2), radius=1e9)
    assert sum(none.values()) == 0, none  # no traffic, no pedestrians, no roadside objects
    one, two = _near(SimConfig(), seeds=range(8)), _near(SimConfig(density=2.0), seeds=range(8))
    # over 48 seeds doubling the density gives 1.52x the road users within 50 m (1.52x before the
    # parking lanes); over these 8 seeds it spreads by about +-0.1 (barrier rows come in clumps,
    # moving traffic fills its lanes, parked vehicles their parking lanes), so the bar sits below that
    assert sum(two.values()) > 1.3 * sum(one.values()), (one, two)
    for cls in ("car", "pedestrian", "barrier", "traffic_cone"):
        assert two[cls] > one[cls], (cls, one, two)


def test_default_density_and_mix_near_nuscenes():
    """~35 road users within 50 m per frame (nuScenes: 34 annotations per keyframe), cars the
    largest class near nuScenes' share, pedestrians no longer twice theirs, barriers and cones
    common, the rare classes rare."""
    c = _near(SimConfig())
    n = sum(c.values()) / len(SEEDS)
    share = {k: v / sum(c.values()) for k, v in c.items()}
    ref = nuscenes_reference()["shares"]
    assert 30 <= n <= 48, n
    assert max(share, key=share.get) == "car" and abs(share["car"] - ref["car"]) < 0.1, share
    assert 0.1 < share["pedestrian"] < 0.3, share
    assert share["barrier"] > 0.05 and share["traffic_cone"] > 0.04, share
    assert share["truck"] > 0.02 and share.get("trailer", 0) > 0.0, share
    for rare in ("bus", "motorcycle", "bicycle"):
        assert share.get(rare, 0.0) < 0.05, (rare, share)


def test_standing_pedestrians_and_pairs():
    w = World(SimConfig(traffic=TrafficConfig(standing_share=1.0, pair_share=1.0), rare=NO_RARE), 3)
    walkers = [a for a in w.agents if a.cls == "pedestrian" and a.speed == 0]
    assert len(walkers) >= 4  # sidewalk pedestrians all stand (crosswalk ones walk)
    pos = np.array([a.pos for a in walkers])
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + np.eye(len(pos)) * 1e9
    assert (d.min(1) < 1.5).mean() > 0.8  # each has a companion beside it
    w.step(0.5)
    assert all(a.speed == 0 for a in walkers)


def test_parked_rows_of_several_vehicles():
    w = World(SimConfig(roadside=RoadsideConfig(parked_vehicles=12, parked_row=4), density=1.0), 2)
    parked = [a for a in w.agents if a.attributes.get("parked")]
    assert len(parked) >= 6
    pos = np.array([a.pos for a in parked])
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + np.eye(len(pos)) * 1e9
    assert (d.min(1) < 12.0).sum() >= 4  # end to end in rows, not scattered one by one


@pytest.mark.parametrize("key, value, words", [
    ("density", "-1", "density"), ("density", "11", "density"),
    ("traffic.truck_share", "1.5", "traffic.truck_share"),
    ("traffic.bus_share", "0.9", "truck_share + bus_share"),
    ("roadside.parked_row", "0", "roadside.parked_row"),
    ("roadside.parked_truck_share", "0.95", "parked_trailer_share + parked_truck_share"),
    ("traffic.pair_share", "-0.1", "traffic.pair_share"),
    ("roadside.parked_against_traffic", "1.5", "roadside.parked_against_traffic"),
])
def test_density_knobs_are_checked(key, value, words):
    with pytest.raises(ConfigError, match=words.replace("+", r"\+")):
        load_config(SimConfig, None, [f"{key}={value}"])


def test_frame_stats_counts_boxes_by_distance_class_and_visibility():
    labels = {"cameras": {"CAM_FRONT": {"boxes2d": [{"track_id": 1, "visible_fraction": 0.95},
                                                    {"track_id": 2, "visible_fraction": 0.5}]},
                          "CAM_BACK": {"boxes2d": [{"track_id": 2, "visible_fraction": 0.7}]}},
              "boxes3d": [{"center": [5.0, 1.0, 0.8], "class": "car", "track_id": 1, "num_pixels": 90},
                          {"center": [-25.0, 3.0, 0.9], "class": "cyclist", "track_id": 2, "num_pixels": 40},
                          {"center": [30.0, 30.0, 0.5], "class": "traffic_cone", "track_id": 3, "num_pixels": 5},  # 42 m
                          {"center": [10.0, 0.0, 0.5], "class": "barrier", "track_id": 4, "num_pixels": 0},  # hidden
                          {"center": [49.0, 12.0, 0.5], "class": "pedestrian", "track_id": 5, "num_pixels": 3}]}  # 50.4 m
    s = frame_stats(labels)
    assert (s["all"], s["seen"]) == (4, 3)
    assert s["classes"]["car"] == s["classes"]["bicycle"] == s["classes"]["traffic_cone"] == 1
    assert s["classes"]["pedestrian"] == s["classes"]["barrier"] == 0
    assert s["distance"] == [1, 0, 1, 0, 1]
    # visibility: the max over cameras (0.7 for the cyclist), a box without a 2D box in the lowest bin
    assert s["visibility"] == {"v0-40": 1, "v40-60": 0, "v60-80": 1, "v80-100": 1}


def test_dataset_stats_and_table(tmp_path):
    cfg = SimConfig(image_width=64, image_height=48, frames_per_scene=2, frame_rate_hz=2.0)
    root = generate_dataset(tmp_path / "sim", cfg, scenes=1, seed=3, progress=False)
    st = dataset_stats(root)
    labels = [json.loads(p.read_text()) for p in sorted(root.glob("scenes/*/*/labels.json"))]
    seen = [sum(1 for b in lab["boxes3d"] if b["num_pixels"] > 0 and np.hypot(*b["center"][:2]) <= 50) for lab in labels]
    assert st["frames"] == 2 and st["boxes"] == sum(seen) > 0
    assert st["per_keyframe"] == pytest.approx(np.mean(seen))
    for k in ("shares", "distance", "visibility"):
        assert sum(st[k].values()) == pytest.approx(1.0)
    assert set(st["shares"]) == set(DETECTION_CLASSES)
    table = format_stats(st)
    assert "| share car" in table and "34.1" in table and "42.3%" in table  # the nuScenes reference column
    assert all(np.isfinite(v) for v in st["shares"].values())


def test_nuscenes_reference_is_the_devkit_count():
    ref = nuscenes_reference()
    assert ref["annotations"] == 1166187  # nuScenes v1.0-trainval sample_annotation count
    assert sum(ref["shares"].values()) == pytest.approx(1.0)
    assert ref["shares"]["car"] == pytest.approx(493322 / 1166187)
    assert 34.0 < ref["per_keyframe"] < 34.3


def test_children_export_as_child(tmp_path):
    """A child pedestrian (attribute child) is human.pedestrian.child in the nuScenes tables,
    an adult human.pedestrian.adult; the reader maps both back to pedestrian."""
    from sim.nuscenes_export import export_nuscenes

    cfg = SimConfig(image_width=96, image_height=64, frames_per_scene=1,
                    traffic=TrafficConfig(vehicles=4, pedestrians=40),
                    roadside=RoadsideConfig(parked_vehicles=0, barrier_groups=0, cone_groups=0), rare=NO_RARE)
    root = generate_dataset(tmp_path / "sim", cfg, scenes=1, seed=CHILD_SEED, progress=False)
    labels = json.loads(next(root.glob("scenes/*/*/labels.json")).read_text())
    peds = [b for b in labels["boxes3d"] if b["class"] == "pedestrian" and b["num_pixels"] > 0]
    kids = {b["track_id"] for b in peds if b["attributes"].get("child")}
    assert kids and len(kids) < len(peds)
    assert all(b["size"][2] < 1.45 for b in peds if b["track_id"] in kids)
    out = export_nuscenes(root, tmp_path / "nusc", progress=False)
    tables = {n: json.loads((out / "v1.0-mini" / f"{n}.json").read_text()) for n in ("category", "instance")}
    cat = {c["token"]: c["name"] for c in tables["category"]}
    names = Counter(cat[i["category_token"]] for i in tables["instance"])
    assert names["human.pedestrian.child"] == len(kids)
    assert names["human.pedestrian.adult"] == len(peds) - len(kids)


CHILD_SEED = 4
