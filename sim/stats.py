"""Content statistics of a `hydranet-sim` dataset next to nuScenes' (`hydranet sim stats --data DIR`).

Per keyframe, the 3D boxes within 50 m of the ego (as the nuScenes detection benchmark's largest
class range): how many (all, and those seen by some camera, which the nuScenes export keeps), the
class shares in the nuScenes detection classes, the distance histogram and the visibility levels
(max over cameras of the 2D boxes' `visible_fraction`, binned as the export bins it).

nuScenes reference (v1.0-trainval, 850 scenes, 34,149 keyframes): per-category annotation counts
as printed by the official devkit's `NuScenes.list_categories()`, mapped to the detection classes
with the devkit's `category_to_detection_name` (other categories: "other"). 1,166,187
annotations / 34,149 keyframes = 34.2 per keyframe (all annotations; the devkit filters by class
range only at evaluation). nuScenes publishes its distance and visibility distributions as plots
only, so those rows have no reference column.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

RANGE_M = 50.0
DIST_BINS = (0.0, 10.0, 20.0, 30.0, 40.0, 50.0)
# nuScenes v1.0-trainval annotations per category (devkit list_categories)
NUSCENES_COUNTS = {
    "animal": 787, "human.pedestrian.adult": 208240, "human.pedestrian.child": 2066,
    "human.pedestrian.construction_worker": 9161, "human.pedestrian.personal_mobility": 395,
    "human.pedestrian.police_officer": 727, "human.pedestrian.stroller": 1072, "human.pedestrian.wheelchair": 503,
    "movable_object.barrier": 152087, "movable_object.debris": 3016, "movable_object.pushable_pullable": 24605,
    "movable_object.trafficcone": 97959, "static_object.bicycle_rack": 2713, "vehicle.bicycle": 11859,
    "vehicle.bus.bendy": 1820, "vehicle.bus.rigid": 14501, "vehicle.car": 493322, "vehicle.construction": 14671,
    "vehicle.emergency.ambulance": 49, "vehicle.emergency.police": 638, "vehicle.motorcycle": 12617,
    "vehicle.trailer": 24860, "vehicle.truck": 88519,
}
NUSCENES_KEYFRAMES = 34149  # v1.0-trainval samples (28,130 train + 6,019 val)
DETECTION_CLASSES = ("car", "pedestrian", "barrier", "traffic_cone", "truck", "trailer", "bus",
                     "construction_vehicle", "motorcycle", "bicycle", "other")
# our class -> nuScenes detection class
SIM_TO_DETECTION = {"car": "car", "truck": "truck", "bus": "bus", "pedestrian": "pedestrian", "cyclist": "bicycle",
                    "traffic_cone": "traffic_cone", "debris": "other", "construction_vehicle": "construction_vehicle",
                    "barrier": "barrier", "trailer": "trailer", "motorcycle": "motorcycle"}


def nuscenes_detection_name(category: str) -> str:
    """The devkit's category_to_detection_name, with "other" for the categories it drops."""
    if category.startswith("human.pedestrian.") and category.split(".")[-1] in (
            "adult", "child", "construction_worker", "police_officer"):
        return "pedestrian"
    return {"vehicle.bicycle": "bicycle", "vehicle.motorcycle": "motorcycle", "vehicle.bus.bendy": "bus",
            "vehicle.bus.rigid": "bus", "vehicle.car": "car", "vehicle.construction": "construction_vehicle",
            "vehicle.trailer": "trailer", "vehicle.truck": "truck", "movable_object.barrier": "barrier",
            "movable_object.trafficcone": "traffic_cone"}.get(category, "other")


def nuscenes_reference() -> dict:
    """{"per_keyframe", "shares": {detection class: share}} of nuScenes v1.0-trainval."""
    total = sum(NUSCENES_COUNTS.values())
    shares = dict.fromkeys(DETECTION_CLASSES, 0.0)
    for cat, n in NUSCENES_COUNTS.items():
        shares[nuscenes_detection_name(cat)] += n / total
    return {"per_keyframe": total / NUSCENES_KEYFRAMES, "annotations": total, "shares": shares}


def frame_stats(labels: dict, radius: float = RANGE_M) -> dict:
    """Counts of one frame's labels.json: boxes within `radius` (all / seen), classes, distances and
    visibility levels of the seen ones."""
    from sim.nuscenes_export import VISIBILITY, visibility_token

    vis: dict[int, float] = {}
    for cam in labels["cameras"].values():
        for b in cam["boxes2d"]:
            vis[b["track_id"]] = max(vis.get(b["track_id"], 0.0), float(b["visible_fraction"]))
    levels = {tok: level for tok, level, _ in VISIBILITY}
    out = {"all": 0, "seen": 0, "classes": dict.fromkeys(DETECTION_CLASSES, 0),
           "distance": [0] * (len(DIST_BINS) - 1), "visibility": dict.fromkeys(levels.values(), 0)}
    for b in labels["boxes3d"]:
        d = float(np.hypot(b["center"][0], b["center"][1]))
        if d > radius:
            continue
        out["all"] += 1
        if b["num_pixels"] <= 0:
            continue
        out["seen"] += 1
        out["classes"][SIM_TO_DETECTION.get(b["class"], "other")] += 1
        out["distance"][min(int(np.searchsorted(DIST_BINS, d, side="right")) - 1, len(DIST_BINS) - 2)] += 1
        out["visibility"][levels[visibility_token(vis.get(b["track_id"], 0.0))]] += 1
    return out


def dataset_stats(root: str | Path, progress: bool = False) -> dict:
    """Statistics over every frame of the sim dataset at `root` (reads labels only)."""
    from tqdm import tqdm

    from hydranet.data.sim_reader import SimDataset

    ds = SimDataset(root, channels=())
    frames = [frame_stats(ds.load(i)["labels"]) for i in tqdm(range(len(ds)), desc="sim stats", unit="frame",
                                                               disable=not progress)]
    if not frames:
        raise ValueError(f"{root}: the dataset has no frames; generate one with `hydranet sim generate`")
    seen = sum(f["seen"] for f in frames)
    merged = {k: {c: sum(f[k][c] for f in frames) for c in frames[0][k]} for k in ("classes", "visibility")}
    dist = np.sum([f["distance"] for f in frames], 0)
    per = np.array([f["seen"] for f in frames], float)
    return {
        "frames": len(frames), "scenes": len(ds.scenes),
        "per_keyframe_all": float(np.mean([f["all"] for f in frames])),
        "per_keyframe": float(per.mean()), "per_keyframe_p10_p90": [float(np.percentile(per, 10)), float(np.percentile(per, 90))],
        "boxes": seen,
        "shares": {c: n / max(seen, 1) for c, n in merged["classes"].items()},
        "distance": {f"{a:.0f}-{b:.0f} m": int(n) / max(seen, 1) for a, b, n in zip(DIST_BINS, DIST_BINS[1:], dist)},
        "visibility": {k: n / max(seen, 1) for k, n in merged["visibility"].items()},
    }


def format_stats(stats: dict) -> str:
    """The sim-vs-nuScenes table as text (markdown-friendly)."""
    ref = nuscenes_reference()
    lo, hi = stats["per_keyframe_p10_p90"]
    rows = [f"sim: {stats['scenes']} scenes, {stats['frames']} frames, {stats['boxes']} boxes seen within {RANGE_M:.0f} m",
            "", f"| {'statistic':<34} | {'sim':>8} | {'nuScenes':>8} |", f"|{'-' * 36}|{'-' * 10}|{'-' * 10}|",
            f"| {'boxes per keyframe, seen <= 50 m *':<34} | {stats['per_keyframe']:>8.1f} | {ref['per_keyframe']:>8.1f} |",
            f"| {'  10th-90th percentile':<34} | {f'{lo:.0f}-{hi:.0f}':>8} | {'':>8} |",
            f"| {'boxes per keyframe, all, <= 50 m':<34} | {stats['per_keyframe_all']:>8.1f} | {'':>8} |"]
    for c in DETECTION_CLASSES:
        rows.append(f"| {'share ' + c:<34} | {100 * stats['shares'][c]:>7.1f}% | {100 * ref['shares'][c]:>7.1f}% |")
    for k, v in stats["distance"].items():
        rows.append(f"| {'distance ' + k:<34} | {100 * v:>7.1f}% | {'-':>8} |")
    for k, v in stats["visibility"].items():
        rows.append(f"| {'visibility ' + k:<34} | {100 * v:>7.1f}% | {'-':>8} |")
    rows.append(f"* nuScenes: all {ref['annotations']:,} v1.0-trainval annotations / {NUSCENES_KEYFRAMES:,} keyframes; "
                "shares from the devkit's list_categories (see sim/stats.py)")
    return "\n".join(rows)


def parking_stats(seeds, cfg=None) -> dict:
    """Where the parked vehicles and the car boxes stand (issue 21, item 8), over worlds at t = 0
    (no rendering): parked vehicles whose footprint leaves the road surface, and car boxes (all
    cars, parked or moving) within RANGE_M of the ego whose centre stands on the terrain."""
    from sim.config import SimConfig
    from sim.roads import TERRAIN_Z
    from sim.traffic import footprint
    from sim.world import World

    out = {"parked": 0, "parked_off_road": 0, "cars": 0, "cars_on_terrain": 0}
    for seed in seeds:
        w = World(cfg or SimConfig(), seed)
        for a in w.agents:
            if a.attributes.get("parked"):
                out["parked"] += 1
                fp = footprint(a.pos, a.heading, a.box_center, a.box_size, 0.0)
                out["parked_off_road"] += bool((w.road.surface_z(fp) != 0).any())
            if a.cls == "car" and np.linalg.norm(a.pos - w.ego.pos) <= RANGE_M:
                out["cars"] += 1
                out["cars_on_terrain"] += bool(w.road.surface_z(a.pos[None])[0] == TERRAIN_Z)
    return out


if __name__ == "__main__":  # python -m sim.stats --parking 8: parking_stats over seeds 0-7
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parking", type=int, metavar="SEEDS", required=True,
                    help="where parked vehicles and cars stand, over worlds of seeds 0..SEEDS-1")
    n = ap.parse_args().parking
    st = parking_stats(range(n))
    print(f"seeds 0-{n - 1}: parked vehicles {st['parked']}, footprint off the road surface {st['parked_off_road']} "
          f"({st['parked_off_road'] / max(st['parked'], 1):.0%}); car boxes within {RANGE_M:.0f} m {st['cars']}, "
          f"on the terrain {st['cars_on_terrain']} ({st['cars_on_terrain'] / max(st['cars'], 1):.0%})")
