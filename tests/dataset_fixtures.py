"""Fixture writers: small public-dataset folders in their official formats, written from the
sim's own frames so the truth is known (docs/datasets.md).

- `make_sim(root)`: a small 2 Hz sim dataset (the truth).
- `write_nuscenes(sim, out)`: nuScenes v1.0 tables (sim/nuscenes_export.py; the devkit loads them);
  with `sweeps=N` over `make_sweeps_sim(root, N)`: N camera sweeps between 2 Hz keyframes.
- `write_nuscenes_map(sim, nusc)`: the map expansion v1.3 (maps/expansion/<location>.json) of every
  scene's sim world, each scene moved to its own nuScenes location in log.json (the devkit's
  `NuScenesMap` loads them); `write_map_json(path, polygons, lines)` writes any small map.
- `write_kitti(sim, out)`: KITTI object `training/{image_2,label_2,calib}` from the front camera; over
  `make_kitti_sim(root)` (the sim seen by KITTI's camera 2 at 1242x375) with KITTI's real calibration.
- `write_bdd100k(sim, out)`: BDD100K `images/100k/<split>`, det_20 Scalabel JSON, drivable masks,
  lane polylines from the front camera.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np

from hydranet.data.sim_reader import SimDataset
from sim.config import SimConfig
from sim.generate import generate_dataset
from sim.nuscenes_export import export_nuscenes, sweep_config, token

SIM_CFG = SimConfig(frames_per_scene=4, image_width=160, image_height=96, frame_rate_hz=2.0)
SIM_SCENES, SIM_SEED = 2, 3


def make_sim(root, cfg: SimConfig = SIM_CFG, scenes: int = SIM_SCENES, seed: int = SIM_SEED) -> Path:
    return generate_dataset(Path(root), cfg, scenes, seed, progress=False)


def train_tiny_bev(sim_root, out, tasks: str = "{name: det2d}, {name: lanes}, {name: drivable}, {name: bevmap}") -> Path:
    """A 2-step run of a tiny HydraNet (camera heads and a BEV head, one frame, 64x96) on a sim dataset."""
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    cfg = load_experiment(None, [f"data.root={sim_root}", "data.image_size=[64,96]", "model.backbone=tiny",
                                 "model.neck_width=16", "model.neck_repeats=1", f"model.tasks=[{tasks}]",
                                 "model.bev.video_frames=1", "model.bev.channels=16", "batch_size=2", "num_workers=0",
                                 "augment.photometric=false", "augment.geometric=false", "steps=2",
                                 "checkpoint_every=2", "log_every=1"])
    train(cfg, out, progress=False)
    return Path(out)


def write_nuscenes(sim_root, out, version: str = "v1.0-mini", sweeps: int = 0) -> Path:
    """`sweeps` N: every (N+1)th sim frame is a keyframe, the N between are camera sweeps (render
    the sim with `make_sweeps_sim` so the keyframes keep SIM_CFG's 2 Hz)."""
    return export_nuscenes(sim_root, out, version, progress=False, sweeps=sweeps)


def make_sweeps_sim(root, sweeps: int, cfg: SimConfig = SIM_CFG, scenes: int = SIM_SCENES, seed: int = SIM_SEED) -> Path:
    """A sim dataset rendered at (sweeps+1)x SIM_CFG's rate: SIM_CFG's keyframes with `sweeps` frames between."""
    return make_sim(root, sweep_config(cfg, sweeps), scenes, seed)


# -- nuScenes map expansion (v1.3) -------------------------------------------------------------
NUSC_LOCATIONS = ("boston-seaport", "singapore-onenorth", "singapore-hollandvillage", "singapore-queenstown")


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def write_map_json(path, drivable: list, lines: dict[str, list], canvas_edge=(3000.0, 3000.0)) -> Path:
    """A map expansion v1.3 JSON in the official layout: `drivable` polygons [(exterior (P, 2),
    [holes (Q, 2)])] in one drivable_area record, `lines` {"lane_divider" | "road_divider":
    [(P, 2) polylines]}, global x/y metres. The semantic layers this fixture has no geometry for
    are written empty, as the devkit needs them all."""
    js = {"version": "1.3", "canvas_edge": list(canvas_edge), "node": [], "line": [], "polygon": [],
          "drivable_area": [], "road_segment": [], "road_block": [], "lane": [], "ped_crossing": [], "walkway": [],
          "stop_line": [], "carpark_area": [], "road_divider": [], "lane_divider": [], "traffic_light": [],
          "lane_connector": [], "arcline_path_3": {}, "connectivity": {}}

    def nodes(pts, key) -> list[str]:
        toks = []
        for k, (x, y) in enumerate(np.asarray(pts, np.float64).reshape(-1, 2)):
            toks.append(token("node", *key, str(k)))
            js["node"].append({"token": toks[-1], "x": round(float(x), 4), "y": round(float(y), 4)})
        return toks

    ptoks = []
    for i, (ext, holes) in enumerate(drivable):
        ptoks.append(token("polygon", str(i)))
        js["polygon"].append({"token": ptoks[-1], "exterior_node_tokens": nodes(ext, ("poly", str(i))),
                              "holes": [{"node_tokens": nodes(h, ("hole", str(i), str(j)))} for j, h in enumerate(holes)]})
    js["drivable_area"].append({"token": token("drivable_area", "0"), "polygon_tokens": ptoks})
    for layer in ("lane_divider", "road_divider"):
        for i, pts in enumerate(lines.get(layer, [])):
            ltok = token("line", layer, str(i))
            js["line"].append({"token": ltok, "node_tokens": nodes(pts, (layer, str(i)))})
            rec = {"token": token(layer, str(i)), "line_token": ltok}
            if layer == "lane_divider":
                rec["lane_divider_segments"] = []
            else:
                rec["road_segment_token"] = ""
            js[layer].append(rec)
    _write_json(Path(path), js)
    return Path(path)


def write_nuscenes_map(sim_root, nusc_root, version: str = "v1.0-mini") -> dict[str, str]:
    """Give scene k of a nuScenes fixture (written by write_nuscenes from `sim_root`) the location
    NUSC_LOCATIONS[k] in log.json, and write maps/expansion/<location>.json with its sim world's
    road polygons (drivable_area) and painted lines: the yellow centre lines -> road_divider, the
    white lane and edge lines -> lane_divider (nuScenes has no edge-line layer; drawing them keeps
    the sim's lane raster as the truth). Coordinates are the sim world's: the frame of the
    exported ego poses. Returns {scene name: location}."""
    from hydranet.config import from_dict
    from sim.world import World

    sim_root, nusc_root = Path(sim_root), Path(nusc_root)
    meta = json.loads((sim_root / "dataset.json").read_text())
    cfg = from_dict(SimConfig, meta["sim_config"])
    if len(meta["scenes"]) > len(NUSC_LOCATIONS):
        raise ValueError(f"write_nuscenes_map: {len(meta['scenes'])} scenes, only {len(NUSC_LOCATIONS)} locations")
    log_path = nusc_root / version / "log.json"
    scene_path = nusc_root / version / "scene.json"
    logs, scenes = json.loads(log_path.read_text()), json.loads(scene_path.read_text())
    log_of = {s["name"]: s["log_token"] for s in scenes}
    where = {}
    for k, sc in enumerate(meta["scenes"]):
        loc = NUSC_LOCATIONS[k]
        where[sc["name"]] = loc
        for lg in logs:
            if lg["token"] == log_of[sc["name"]]:
                lg["location"] = loc
        seed = json.loads((sim_root / "scenes" / sc["name"] / "scene.json").read_text())["seed"]
        road = World(cfg, seed).road
        lines = {"road_divider": [m.path.points for m in road.markings if m.type == "solid_yellow"],
                 "lane_divider": [m.path.points for m in road.markings if m.type != "solid_yellow"]}
        write_map_json(nusc_root / "maps" / "expansion" / f"{loc}.json", [(p, []) for p in road.road_polygons()], lines)
    _write_json(log_path, logs)
    return where


# -- KITTI object ---------------------------------------------------------------------------
KITTI_TYPE = {"car": "Car", "truck": "Truck", "pedestrian": "Pedestrian", "cyclist": "Cyclist"}  # others: Misc
# KITTI's real calibration (the 2011_09_26 drives, as every object-benchmark calib file of those drives
# holds it; typed, not copied): camera 2's projection, the rectifying rotation of camera 0, Velodyne ->
# camera 0. The car: Velodyne 1.73 m above the road, cameras 1.65 m (Geiger et al., IJRR 2013).
KITTI_CALIB = {
    "P0": "7.215377e+02 0.000000e+00 6.095593e+02 0.000000e+00 0.000000e+00 7.215377e+02 1.728540e+02 0.000000e+00 "
          "0.000000e+00 0.000000e+00 1.000000e+00 0.000000e+00",
    "P1": "7.215377e+02 0.000000e+00 6.095593e+02 -3.875744e+02 0.000000e+00 7.215377e+02 1.728540e+02 0.000000e+00 "
          "0.000000e+00 0.000000e+00 1.000000e+00 0.000000e+00",
    "P2": "7.215377e+02 0.000000e+00 6.095593e+02 4.485728e+01 0.000000e+00 7.215377e+02 1.728540e+02 2.163791e-01 "
          "0.000000e+00 0.000000e+00 1.000000e+00 2.745884e-03",
    "P3": "7.215377e+02 0.000000e+00 6.095593e+02 -3.395242e+02 0.000000e+00 7.215377e+02 1.728540e+02 2.199936e+00 "
          "0.000000e+00 0.000000e+00 1.000000e+00 2.729905e-03",
    "R0_rect": "9.999239e-01 9.837760e-03 -7.445048e-03 -9.869795e-03 9.999421e-01 -4.278459e-03 7.402527e-03 "
               "4.351614e-03 9.999631e-01",
    "Tr_velo_to_cam": "7.533745e-03 -9.999714e-01 -6.166020e-04 -4.069766e-03 1.480249e-02 7.280733e-04 -9.998902e-01 "
                      "-7.631618e-02 9.998621e-01 7.523790e-03 1.480755e-02 -2.717806e-01",
    "Tr_imu_to_velo": "9.999976e-01 7.553071e-04 -2.035826e-03 -8.086759e-01 -7.854027e-04 9.998898e-01 -1.482298e-02 "
                      "3.195559e-01 2.024406e-03 1.482454e-02 9.998881e-01 -7.997231e-01",
}
KITTI_SIZE = (1242, 375)  # (W, H) of image_2 on those drives
KITTI_VELO_HEIGHT = 1.73  # metres above the road


def _kitti_matrix(key: str) -> np.ndarray:
    v = np.array([float(x) for x in KITTI_CALIB[key].split()])
    return v.reshape(3, 3) if v.size == 9 else np.vstack([v.reshape(3, 4), [0, 0, 0, 1]])


def _rot(R: np.ndarray) -> np.ndarray:
    u, _, vt = np.linalg.svd(R)
    return u @ vt


def kitti_ego2rect() -> np.ndarray:
    """ego (the road below the Velodyne) -> rectified camera 0, from KITTI_CALIB (written out here, not
    taken from the reader, so the reader is checked against it)."""
    rect = np.eye(4)
    rect[:3, :3] = _kitti_matrix("R0_rect")
    ego2velo = np.eye(4)
    ego2velo[2, 3] = -KITTI_VELO_HEIGHT
    return rect @ _kitti_matrix("Tr_velo_to_cam") @ ego2velo


def kitti_rig_dict(width: int = KITTI_SIZE[0], height: int = KITTI_SIZE[1]) -> dict:
    """The rig of KITTI's camera 2 as CAM_FRONT (docs/rig_format.md), at KITTI's image size or scaled."""
    P2 = _kitti_matrix("P2")
    K = P2[:3, :3]
    ego2cam = kitti_ego2rect()
    ego2cam[:3, 3] += np.linalg.solve(K, P2[:3, 3])  # P2 = K [I | b]: camera 2 sits at b in the rect frame
    cam2ego = np.linalg.inv(ego2cam)
    cam2ego[:3, :3] = _rot(cam2ego[:3, :3])  # the typed 7 digits are orthonormal to ~1e-7
    K = K * [[width / KITTI_SIZE[0]], [height / KITTI_SIZE[1]], [1.0]]
    return {"name": "kitti", "cameras": [{"name": "CAM_FRONT", "width": width, "height": height, "K": K.tolist(),
                                          "cam2ego": cam2ego.tolist()}]}


def make_kitti_sim(root, scenes: int = 2, frames: int = 4, seed: int = SIM_SEED) -> Path:
    """A sim dataset (root/sim, its rig in root/kitti_rig.yaml) seen by KITTI's camera 2 (kitti_rig_dict)
    at KITTI's 1242x375: `write_kitti` turns it into KITTI files carrying KITTI's real calibration."""
    import yaml

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rig = root / "kitti_rig.yaml"
    rig.write_text(yaml.safe_dump(kitti_rig_dict()))
    cfg = SimConfig(rig=str(rig), frames_per_scene=frames, frame_rate_hz=2.0)
    return generate_dataset(root / "sim", cfg, scenes, seed, progress=False)


def _fmt(a) -> str:
    return " ".join(f"{v:.12e}" for v in np.asarray(a).ravel())


def _kitti_calib(cam) -> tuple[str, np.ndarray]:
    """(calib file text, ego->rectified camera 0) for a sim camera. KITTI's own camera 2 (a sim rendered
    on kitti_rig_dict) gets KITTI_CALIB as typed; any other camera a calibration of the same form that
    gives its K and cam2ego back (camera 2 at P2's offset, KITTI's R0_rect, the Velodyne 1.73 m up)."""
    from hydranet.geometry import invert_rigid
    real = kitti_rig_dict()["cameras"][0]
    if (cam.width, cam.height) == KITTI_SIZE and np.allclose(cam.K, real["K"], atol=1e-9) and \
            np.allclose(cam.cam2ego, real["cam2ego"], atol=1e-9):
        return "".join(f"{k}: {v}\n" for k, v in KITTI_CALIB.items()), kitti_ego2rect()
    b = np.linalg.solve(_kitti_matrix("P2")[:3, :3], _kitti_matrix("P2")[:3, 3])
    R0 = _rot(_kitti_matrix("R0_rect"))
    ego2rect = invert_rigid(cam.cam2ego)
    ego2rect[:3, 3] -= b
    velo2ego = np.eye(4)
    velo2ego[2, 3] = KITTI_VELO_HEIGHT
    tr = np.eye(4)
    tr[:3, :3] = R0.T
    tr = tr @ ego2rect @ velo2ego  # Tr_velo_to_cam, so that R0_rect @ Tr @ ego->velo = ego->rect
    P2 = np.concatenate([cam.K, (cam.K @ b)[:, None]], 1)
    text = "".join(f"P{k}: {_fmt(P2)}\n" for k in range(4)) + f"R0_rect: {_fmt(R0)}\n" + \
        f"Tr_velo_to_cam: {_fmt(tr[:3])}\n" + f"Tr_imu_to_velo: {_fmt(np.eye(4)[:3])}\n"
    return text, ego2rect


def kitti_label_lines(labels: dict, cam, ego2rect: np.ndarray) -> list[str]:
    """label_2 lines of the sim's front camera: every 2D box with its 3D box (DontCare for signs and lights).
    Location = the box's bottom centre in the rectified camera-0 frame (centre + h/2 along its y)."""
    from hydranet.data.reader import box_in_camera, project_box_2d
    from hydranet.geometry import invert_rigid
    by_track = {b["track_id"]: b for b in labels["boxes3d"]}
    lines = []
    for b2 in labels["cameras"][cam.name]["boxes2d"]:
        l_, t_, r_, b_ = (np.asarray(b2["bbox"], np.float64) - 0.5).tolist()
        b3 = by_track.get(b2["track_id"])
        if b2["class"] in ("traffic_sign", "traffic_light") or b3 is None:
            lines.append(f"DontCare -1 -1 -10 {l_:.2f} {t_:.2f} {r_:.2f} {b_:.2f} -1 -1 -1 -1000 -1000 -1000 -10")
            continue
        L, W, H = b3["size"]
        c = ego2rect[:3, :3] @ np.asarray(b3["center"]) + ego2rect[:3, 3]
        x, y, z = c[0], c[1] + H / 2, c[2]
        yaw = b3["yaw"]
        h = ego2rect[:3, :3] @ np.array([np.cos(yaw), np.sin(yaw), 0.0])
        ry = float(np.arctan2(-h[2], h[0]))
        alpha = (ry - np.arctan2(x, z) + np.pi) % (2 * np.pi) - np.pi
        res = project_box_2d(box_in_camera(b3["center"], b3["size"], yaw, invert_rigid(cam.cam2ego)), cam.K,
                             cam.width, cam.height)
        trunc = 0.0 if res is None else round(1.0 - res[1], 2)
        vf = b2["visible_fraction"]
        occ = 0 if vf >= 0.8 else 1 if vf >= 0.4 else 2
        lines.append(f"{KITTI_TYPE.get(b2['class'], 'Misc')} {trunc:.2f} {occ} {alpha:.2f} {l_:.2f} {t_:.2f} {r_:.2f} "
                     f"{b_:.2f} {H:.2f} {W:.2f} {L:.2f} {x:.2f} {y:.2f} {z:.2f} {ry:.2f}")
    return lines


def write_kitti(sim_root, out, camera: str = "CAM_FRONT", val_every: int = 4) -> Path:
    """KITTI object layout from every frame of a sim dataset's `camera` (the ego frame = the road below
    the Velodyne, as the reader's). A sim from `make_kitti_sim` gets KITTI's real calibration files.
    Frame k is `training/*/{k:06d}.*`; ImageSets/val.txt takes every `val_every`-th frame."""
    ds = SimDataset(sim_root, cameras=[camera], channels=("images",))
    cam = ds.rig.cameras[0]
    out = Path(out)
    for sub in ("image_2", "label_2", "calib"):
        (out / "training" / sub).mkdir(parents=True, exist_ok=True)
    (out / "ImageSets").mkdir(parents=True, exist_ok=True)
    calib, ego2rect = _kitti_calib(cam)
    ids = []
    for k in range(len(ds)):
        s = ds.load(k)
        fid = f"{k:06d}"
        ids.append(fid)
        cv2.imwrite(str(out / "training" / "image_2" / f"{fid}.png"), cv2.cvtColor(s["images"][0], cv2.COLOR_RGB2BGR))
        (out / "training" / "calib" / f"{fid}.txt").write_text(calib)
        (out / "training" / "label_2" / f"{fid}.txt").write_text(
            "".join(f"{ln}\n" for ln in kitti_label_lines(s["labels"], cam, ego2rect)))
    val = ids[val_every - 1::val_every]
    (out / "ImageSets" / "val.txt").write_text("".join(f"{i}\n" for i in val))
    (out / "ImageSets" / "train.txt").write_text("".join(f"{i}\n" for i in ids if i not in val))
    return out


# -- BDD100K --------------------------------------------------------------------------------
BDD_CATEGORY = {"car": "car", "truck": "truck", "bus": "bus", "pedestrian": "pedestrian", "cyclist": "bicycle",
                "construction_vehicle": "other vehicle", "traffic_light": "traffic light", "traffic_sign": "traffic sign"}
BDD_LANE = {"solid_white": ("single white", "solid"), "dashed_white": ("single white", "dashed"),
            "solid_yellow": ("single yellow", "solid")}


def write_bdd100k(sim_root, out, camera: str = "CAM_FRONT", val_every: int = 4) -> Path:
    """BDD100K layout from a sim dataset's `camera`: frame k goes to val if k % val_every == val_every - 1.
    Images keep the sim's size (BDD100K's are 1280x720; the reader does not require it)."""
    ds = SimDataset(sim_root, cameras=[camera], channels=("semantic",))
    out = Path(out)
    frames = {"train": [], "val": []}
    lanes = {"train": [], "val": []}
    for k in range(len(ds)):
        s = ds.load(k)
        split = "val" if k % val_every == val_every - 1 else "train"
        scene, fdir = ds.frame_ids[k]
        name = f"{scene}-{fdir}.jpg"
        img_dir = out / "images" / "100k" / split
        img_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(sim_root) / "scenes" / scene / fdir / f"{camera}.jpg", img_dir / name)
        mask_dir = out / "labels" / "drivable" / "masks" / split
        mask_dir.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(mask_dir / f"{Path(name).stem}.png"), np.where(s["drivable"][0], 0, 2).astype(np.uint8))
        labels = []
        for b in s["labels"]["cameras"][camera]["boxes2d"]:
            cat = BDD_CATEGORY.get(b["class"])
            if cat is None:
                continue
            x0, y0, x1, y1 = b["bbox"]
            attrs = {"occluded": b["visible_fraction"] < 0.8, "truncated": False,
                     "trafficLightColor": {"red": "R", "yellow": "Y", "green": "G"}.get(
                         b["attributes"].get("light_state"), "NA")}
            labels.append({"id": str(b["track_id"]), "category": cat, "attributes": attrs,
                           "box2d": {"x1": float(x0), "y1": float(y0), "x2": float(x1 - 1), "y2": float(y1 - 1)}})
        frames[split].append({"name": name, "attributes": {"weather": "clear", "timeofday": "daytime"},
                              "timestamp": 10000, "labels": labels})
        lane_labels = []
        for lane in s["labels"]["cameras"][camera]["lanes2d"]:
            cat, style = BDD_LANE[lane["type"]]
            lane_labels.append({"id": str(len(lane_labels)), "category": cat,
                                "attributes": {"laneDirection": "parallel", "laneStyle": style},
                                "poly2d": [{"vertices": lane["points"], "types": "L" * len(lane["points"]),
                                            "closed": False}]})
        lanes[split].append({"name": name, "labels": lane_labels})
    for split in ("train", "val"):
        for sub, data in (("det_20", frames), ("lane/polygons", lanes)):
            d = out / "labels" / sub
            d.mkdir(parents=True, exist_ok=True)
            stem = "det" if sub == "det_20" else "lane"
            (d / f"{stem}_{split}.json").write_text(json.dumps(data[split]))
    return out
