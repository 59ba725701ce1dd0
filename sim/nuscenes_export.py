"""Export a `hydranet-sim` dataset (docs/dataset_format.md) in the nuScenes v1.0 table format.

    export_nuscenes("out/sim", "out/nusc")                     # an existing sim dataset
    export_nuscenes_from_sim("out/nusc", SimConfig(), scenes=10, seed=0)

The official nuscenes-devkit loads the result (`NuScenes(version="v1.0-mini", dataroot=...)`);
docs/nuscenes_export.md describes the mapping. Layout of `out_dir`:

    <version>/*.json            the 13 tables (attribute, calibrated_sensor, category, ego_pose,
                                instance, log, map, sample, sample_annotation, sample_data,
                                scene, sensor, visibility)
    <version>/splits.json       {"sim_train": [scene names], "sim_val": [...]}: the devkit's
                                custom split file (nuscenes.utils.splits.get_scenes_of_split)
    samples/<CAM>/*.jpg         the camera images, copied byte for byte
    sweeps/<CAM>/*.jpg          the non-keyframe camera images (sweeps=N only)
    samples/LIDAR_TOP/*.pcd.bin placeholder point clouds (below)
    maps/<token>.png            one tiny empty map mask (the devkit opens the file on load)

Conventions and honest caveats:
- Every frame is a keyframe sample (sweeps=0). Our data is 10 Hz, nuScenes keyframes are 2 Hz:
  tools that assume 0.5 s between samples (e.g. the tracking eval) see 5x more samples per second.
- `sweeps=N`: frames 0, N+1, 2(N+1), ... of a scene are the keyframe samples; the N frames between
  two keyframes (and any after the last) are camera sweeps: sample_data with is_key_frame false,
  no annotations, their own ego_pose, files under sweeps/<CAM>/, sample_token = the nearest
  keyframe's sample (as nuScenes), each camera's prev/next chain running through keyframes and
  sweeps in time order (LIDAR_TOP has keyframes only). `export_nuscenes_from_sim(sweeps=N)`
  renders the sim at (N+1)x the frame rate so the keyframes keep `frame_rate_hz`.
- Cameras are synchronous: every sample_data of a sample has the sample's timestamp and its own
  ego_pose record (as in nuScenes) holding the frame's ego pose.
- There is no lidar. The devkit needs a LIDAR_TOP sample_data per sample, so LIDAR_TOP is
  calibrated at the ego origin and its .pcd.bin (float32 x, y, z, intensity, ring) holds one
  point per exported box centre, in the ego frame (a single origin point when a frame has none).
- Only 3D boxes seen by some camera (`num_pixels > 0`) are exported, with
  `num_lidar_pts = num_pixels` (visible camera pixels, not lidar returns) and `num_radar_pts = 0`.
- Visibility is the max over cameras of the 2D boxes' `visible_fraction` for the track, binned
  to the nuScenes levels (token "1".."4" = v0-40, v40-60, v60-80, v80-100); a box with pixels
  but no 2D box gets "1".
- Pedestrians with `attributes.child` (the sim's children, 1.0-1.4 m) are exported as
  `human.pedestrian.child`, the rest as `human.pedestrian.adult`.
- Tokens are md5 hex digests of readable keys and tables are written with sorted keys and
  rounded floats, so exporting the same dataset twice gives identical bytes.

This module must not import torch (the sim side runs as a car does).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from hydranet.data.sim_reader import SimDataset
from hydranet.geometry import make_transform, matrix_to_quaternion, rot_z
from hydranet.io import temp_path
from sim.config import SimConfig
from sim.generate import generate_dataset
from sim.writer import DatasetWriteError, to_json

TABLES = ("attribute", "calibrated_sensor", "category", "ego_pose", "instance", "log", "map", "sample",
          "sample_annotation", "sample_data", "scene", "sensor", "visibility")
LIDAR = "LIDAR_TOP"
# our class -> nuScenes category
CATEGORY = {
    "car": "vehicle.car",
    "truck": "vehicle.truck",
    "bus": "vehicle.bus.rigid",
    "pedestrian": "human.pedestrian.adult",
    "cyclist": "vehicle.bicycle",
    "traffic_cone": "movable_object.trafficcone",
    "debris": "movable_object.debris",
    "construction_vehicle": "vehicle.construction",
    "barrier": "movable_object.barrier",
    "trailer": "vehicle.trailer",
    "motorcycle": "vehicle.motorcycle",
}
CATEGORY_DESCRIPTION = {
    "vehicle.car": "Passenger car (sim class car).",
    "vehicle.truck": "Truck (sim class truck).",
    "vehicle.bus.rigid": "Rigid bus (sim class bus).",
    "human.pedestrian.adult": "Adult pedestrian (sim class pedestrian).",
    "vehicle.bicycle": "Bicycle, with its rider inside the box (sim class cyclist).",
    "movable_object.trafficcone": "Traffic cone (sim class traffic_cone).",
    "movable_object.debris": "Debris on the road (sim class debris).",
    "vehicle.construction": "Construction vehicle (sim class construction_vehicle).",
    "movable_object.barrier": "Road barrier segment (sim class barrier).",
    "vehicle.trailer": "Trailer, parked without its towing vehicle (sim class trailer).",
    "vehicle.motorcycle": "Motorcycle, with its rider inside the box (sim class motorcycle).",
    "human.pedestrian.child": "Child pedestrian, 1.0-1.4 m tall (sim class pedestrian with attribute child).",
}
CHILD = "human.pedestrian.child"  # a pedestrian box with attributes.child
ATTRIBUTES = {  # the nuScenes attribute vocabulary
    "vehicle.moving": "Vehicle is moving.",
    "vehicle.stopped": "Vehicle is stationary, e.g. waiting at a light.",
    "vehicle.parked": "Vehicle is parked.",
    "cycle.with_rider": "There is a rider on the bicycle or motorcycle.",
    "cycle.without_rider": "There is no rider on the bicycle or motorcycle.",
    "pedestrian.moving": "The pedestrian is moving.",
    "pedestrian.standing": "The pedestrian is standing.",
    "pedestrian.sitting_lying_down": "The pedestrian is sitting or lying down (not written by this export).",
}
# nuScenes visibility levels: token, level, lower bound of the visible fraction
VISIBILITY = (("1", "v0-40", 0.0), ("2", "v40-60", 0.4), ("3", "v60-80", 0.6), ("4", "v80-100", 0.8))
BASE_TIME_US = 1_577_836_800_000_000  # 2020-01-01 00:00:00 UTC, start of the first scene
SCENE_GAP_US = 3_600_000_000  # one hour between the end of a scene and the start of the next
SPLIT_FILE = "splits.json"
VAL_EVERY = 5  # every 5th scene (index 4, 9, ...) goes to sim_val


def token(*key) -> str:
    """Deterministic 32-hex token of a key."""
    return hashlib.md5("/".join(str(k) for k in key).encode()).hexdigest()


def visibility_token(fraction: float) -> str:
    """nuScenes visibility token of a visible fraction in [0, 1]."""
    return [t for t, _, lo in VISIBILITY if fraction >= lo][-1]


def box_category(cls: str, attrs: dict) -> str:
    """nuScenes category of one of our 3D boxes (children are their own category, as in nuScenes)."""
    return CHILD if cls == "pedestrian" and attrs.get("child") else CATEGORY[cls]


def box_attributes(cls: str, attrs: dict) -> list[str]:
    """nuScenes attribute names of one of our 3D boxes."""
    if cls in ("cyclist", "motorcycle"):
        return ["cycle.with_rider" if attrs.get("has_rider", True) else "cycle.without_rider"]
    if cls == "pedestrian":
        return ["pedestrian.moving" if attrs.get("moving") else "pedestrian.standing"]
    if CATEGORY[cls].startswith("vehicle."):
        if attrs.get("parked"):
            return ["vehicle.parked"]
        return ["vehicle.moving" if attrs.get("moving") else "vehicle.stopped"]
    return []


def _pose(T: np.ndarray) -> tuple[list[float], list[float]]:
    """4x4 rigid transform -> nuScenes (translation, rotation (w, x, y, z))."""
    return [float(v) for v in T[:3, 3]], matrix_to_quaternion(T[:3, :3])


def _points_bin(points: np.ndarray) -> bytes:
    """(K, 3) points -> nuScenes .pcd.bin bytes: float32 x, y, z, intensity, ring per point."""
    if len(points) == 0:
        points = np.zeros((1, 3))
    rows = np.zeros((len(points), 5), np.float32)
    rows[:, :3] = points
    rows[:, 3] = 100.0
    return rows.tobytes()


def _check_out(out_dir: Path) -> None:
    if out_dir.exists():
        raise DatasetWriteError(f"{out_dir} exists; pass another output folder or delete it")


def _check_version(version: str) -> None:
    if not version or "/" in version or "\\" in version or version in (".", ".."):
        raise ValueError(f"version must be a plain folder name such as 'v1.0-mini', got {version!r}")


class _Exporter:
    """Builds the tables in memory and writes the files into `tmp` (one export)."""

    def __init__(self, ds: SimDataset, tmp: Path, version: str, sweeps: int = 0):
        self.ds, self.tmp, self.version, self.sweeps = ds, tmp, version, sweeps
        self.t = {name: [] for name in TABLES}
        self.cam_names = [c.name for c in ds.rig.cameras]
        if LIDAR in self.cam_names:
            raise ValueError(f"camera name {LIDAR} clashes with the exported lidar channel; rename the camera")
        if ds.rig.distorted:  # calibrated_sensor holds a pinhole camera_intrinsic only; nuScenes images are undistorted
            raise ValueError(f"{ds.root / 'dataset.json'}: cameras {ds.rig.distorted} have a lens distortion model, which "
                             "the nuScenes format cannot hold; export a dataset generated with a pinhole rig (e.g. nuscenes6)")
        unknown = sorted(set(ds.meta["classes"]) - set(CATEGORY) - {"traffic_sign", "traffic_light"})
        if unknown:
            raise ValueError(f"{ds.root / 'dataset.json'}: classes {unknown} have no nuScenes category; "
                             f"known: {sorted(CATEGORY)}")

    def static_tables(self) -> None:
        t = self.t
        for name in sorted(set(CATEGORY.values()) | {CHILD}):
            t["category"].append({"token": token("category", name), "name": name,
                                  "description": CATEGORY_DESCRIPTION[name]})
        for name, desc in ATTRIBUTES.items():
            t["attribute"].append({"token": token("attribute", name), "name": name, "description": desc})
        for tok, level, _ in VISIBILITY:
            lo, hi = level[1:].split("-")
            t["visibility"].append({"token": tok, "level": level,
                                    "description": f"visibility of whole object is between {lo} and {hi}%"})
        for cam in self.ds.rig.cameras:
            t["sensor"].append({"token": token("sensor", cam.name), "channel": cam.name, "modality": "camera"})
            tr, rot = _pose(cam.cam2ego)
            t["calibrated_sensor"].append({"token": token("calibrated_sensor", cam.name),
                                           "sensor_token": token("sensor", cam.name), "translation": tr,
                                           "rotation": rot, "camera_intrinsic": np.asarray(cam.K).tolist()})
        t["sensor"].append({"token": token("sensor", LIDAR), "channel": LIDAR, "modality": "lidar"})
        t["calibrated_sensor"].append({"token": token("calibrated_sensor", LIDAR),
                                       "sensor_token": token("sensor", LIDAR),
                                       "translation": [0.0, 0.0, 0.0], "rotation": [1.0, 0.0, 0.0, 0.0],
                                       "camera_intrinsic": []})

    def scene(self, scene: dict, base_us: int, bar) -> int:
        """Export one scene starting at base_us; returns its last timestamp."""
        name, all_frames, t = scene["name"], scene["frames"], self.t
        log_tok, scene_tok = token("log", name), token("scene", name)
        logfile = f"sim-{name}"
        stamps_all = [base_us + int(f["timestamp_us"]) - int(all_frames[0]["timestamp_us"]) for f in all_frames]
        if any(b <= a for a, b in zip(stamps_all, stamps_all[1:])):
            raise ValueError(f"scene {name}: frame timestamps must increase; regenerate the dataset")
        keys = list(range(0, len(all_frames), self.sweeps + 1))  # positions of the keyframes
        frames = [all_frames[k] for k in keys]
        stamps = [stamps_all[k] for k in keys]
        sample_toks = [token("sample", name, f["dir"]) for f in frames]
        day = datetime.fromtimestamp(base_us / 1e6, tz=timezone.utc).strftime("%Y-%m-%d")
        cond = scene.get("conditions", {})
        t["log"].append({"token": log_tok, "logfile": logfile, "vehicle": "hydranet-sim", "date_captured": day,
                         "location": "sim"})
        t["scene"].append({"token": scene_tok, "name": name, "log_token": log_tok, "nbr_samples": len(frames),
                           "first_sample_token": sample_toks[0], "last_sample_token": sample_toks[-1],
                           "description": f"sim scene seed {scene.get('seed')}, {cond.get('time_of_day', '?')}, "
                                          f"{cond.get('weather', '?')}" +
                                          (f", rare: {', '.join(cond['rare'])}" if cond.get("rare") else "")})
        tracks: dict[int, list[dict]] = {}  # track id -> its annotation records in order
        track_cls: dict[int, str] = {}  # track id -> nuScenes category
        first = self.ds.frame_ids.index((name, all_frames[0]["dir"]))
        for pos, frame in enumerate(all_frames):
            if pos % (self.sweeps + 1):  # a sweep: camera sample_data only, linked to the nearest sample
                ki = min(range(len(keys)), key=lambda k: (abs(stamps[k] - stamps_all[pos]), k))
                self.camera_data(name, all_frames, pos, stamps_all[pos], sample_toks[ki], logfile, key=False)
                bar.update(1)
                continue
            fi = keys.index(pos)
            sample = self.ds.load(first + pos)
            ts, stok = stamps[fi], sample_toks[fi]
            t["sample"].append({"token": stok, "timestamp": ts, "scene_token": scene_tok,
                                "prev": sample_toks[fi - 1] if fi else "",
                                "next": sample_toks[fi + 1] if fi + 1 < len(frames) else ""})
            ego2world = np.asarray(frame["ego2world"], np.float64)
            kept = [b for b in sample["labels"]["boxes3d"] if b["num_pixels"] > 0]
            folder = self.ds.root / "scenes" / name / frame["dir"]
            self.camera_data(name, all_frames, pos, ts, stok, logfile, key=True)
            sd_tok = token("sample_data", name, frame["dir"], LIDAR)
            ep_tok = token("ego_pose", name, frame["dir"], LIDAR)
            tr, rot = _pose(ego2world)
            t["ego_pose"].append({"token": ep_tok, "timestamp": ts, "translation": tr, "rotation": rot})
            rel = f"samples/{LIDAR}/{logfile}__{LIDAR}__{ts}.pcd.bin"
            (self.tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            centres = np.array([b["center"] for b in kept], np.float64).reshape(-1, 3)
            (self.tmp / rel).write_bytes(_points_bin(centres))
            t["sample_data"].append({
                "token": sd_tok, "sample_token": stok, "ego_pose_token": ep_tok,
                "calibrated_sensor_token": token("calibrated_sensor", LIDAR), "timestamp": ts,
                "fileformat": "pcd", "is_key_frame": True, "height": 0, "width": 0, "filename": rel,
                "prev": token("sample_data", name, frames[fi - 1]["dir"], LIDAR) if fi else "",
                "next": token("sample_data", name, frames[fi + 1]["dir"], LIDAR) if fi + 1 < len(frames) else "",
            })
            vis: dict[int, float] = {}
            for cam in sample["labels"]["cameras"].values():
                for b2 in cam["boxes2d"]:
                    vis[b2["track_id"]] = max(vis.get(b2["track_id"], 0.0), float(b2["visible_fraction"]))
            for b in kept:
                tid, cls = int(b["track_id"]), b["class"]
                if cls not in CATEGORY:
                    raise ValueError(f"{folder / 'labels.json'}: 3D box class {cls!r} has no nuScenes category")
                cat = box_category(cls, b.get("attributes", {}))
                if track_cls.setdefault(tid, cat) != cat:
                    raise ValueError(f"scene {name}: track {tid} changes category ({track_cls[tid]} -> {cat}); "
                                     "regenerate the dataset")
                l, w_, h_ = b["size"]
                box2world = ego2world @ make_transform(rot_z(b["yaw"]), b["center"])
                tr, rot = _pose(box2world)
                ann = {
                    "token": token("sample_annotation", name, frame["dir"], tid), "sample_token": stok,
                    "instance_token": token("instance", name, tid),
                    "visibility_token": visibility_token(vis.get(tid, 0.0)),
                    "attribute_tokens": [token("attribute", a) for a in box_attributes(cls, b.get("attributes", {}))],
                    "translation": tr, "size": [w_, l, h_], "rotation": rot,
                    "prev": "", "next": "", "num_lidar_pts": int(b["num_pixels"]), "num_radar_pts": 0,
                }
                tracks.setdefault(tid, []).append(ann)
                t["sample_annotation"].append(ann)
            bar.update(1)
        # prev/next along each track (an instance may skip samples where it is unseen, as in nuScenes)
        for tid in sorted(tracks):
            anns = tracks[tid]
            for a, b in zip(anns, anns[1:]):
                a["next"], b["prev"] = b["token"], a["token"]
            toks = [a["token"] for a in anns]
            t["instance"].append({"token": token("instance", name, tid),
                                  "category_token": token("category", track_cls[tid]),
                                  "nbr_annotations": len(toks), "first_annotation_token": toks[0],
                                  "last_annotation_token": toks[-1]})
        return stamps_all[-1]

    def camera_data(self, name: str, frames: list[dict], pos: int, ts: int, stok: str, logfile: str,
                    key: bool) -> None:
        """Every camera's sample_data + ego_pose of frame `pos` of a scene: a keyframe (samples/) or
        a sweep (sweeps/); each camera's prev/next chain runs through all the scene's frames."""
        frame, t = frames[pos], self.t
        folder = self.ds.root / "scenes" / name / frame["dir"]
        tr, rot = _pose(np.asarray(frame["ego2world"], np.float64))
        own = "cam2ego" in frame  # a frame with its own calibration (sim body motion, mount jitter)
        cam2ego = self.ds.frame_cam2ego(frame, self.ds.rig)  # (N, 4, 4)
        for n, (ch, cam) in enumerate(zip(self.cam_names, self.ds.rig.cameras)):
            cs_tok = token("calibrated_sensor", ch)
            if own:  # one calibrated_sensor per sample_data, as nuScenes allows
                cs_tok = token("calibrated_sensor", name, frame["dir"], ch)
                ctr, crot = _pose(cam2ego[n])
                t["calibrated_sensor"].append({"token": cs_tok, "sensor_token": token("sensor", ch), "translation": ctr,
                                               "rotation": crot, "camera_intrinsic": np.asarray(cam.K).tolist()})
            ep_tok = token("ego_pose", name, frame["dir"], ch)
            t["ego_pose"].append({"token": ep_tok, "timestamp": ts, "translation": tr, "rotation": rot})
            rel = f"{'samples' if key else 'sweeps'}/{ch}/{logfile}__{ch}__{ts}.jpg"
            (self.tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            src = folder / f"{ch}.jpg"
            if not src.is_file():
                raise DatasetWriteError(f"{src}: camera image is missing; regenerate the dataset")
            shutil.copyfile(src, self.tmp / rel)
            t["sample_data"].append({
                "token": token("sample_data", name, frame["dir"], ch), "sample_token": stok, "ego_pose_token": ep_tok,
                "calibrated_sensor_token": cs_tok, "timestamp": ts,
                "fileformat": "jpg", "is_key_frame": key, "height": cam.height, "width": cam.width, "filename": rel,
                "prev": token("sample_data", name, frames[pos - 1]["dir"], ch) if pos else "",
                "next": token("sample_data", name, frames[pos + 1]["dir"], ch) if pos + 1 < len(frames) else "",
            })

    def finish(self, map_png: bytes) -> None:
        logs = [r["token"] for r in self.t["log"]]
        map_tok = token("map", *logs)
        rel = f"maps/{map_tok}.png"
        (self.tmp / "maps").mkdir(parents=True, exist_ok=True)
        (self.tmp / rel).write_bytes(map_png)
        self.t["map"].append({"token": map_tok, "log_tokens": logs, "category": "semantic_prior", "filename": rel})
        tables = self.tmp / self.version
        tables.mkdir(parents=True, exist_ok=True)
        for name in TABLES:
            (tables / f"{name}.json").write_text(to_json(self.t[name]))
        names = [s["name"] for s in self.t["scene"]]
        val = [n for i, n in enumerate(names) if i % VAL_EVERY == VAL_EVERY - 1]
        (tables / SPLIT_FILE).write_text(to_json({"sim_train": [n for n in names if n not in val], "sim_val": val}))


def _check_sweeps(sweeps) -> None:
    if isinstance(sweeps, bool) or not isinstance(sweeps, int) or sweeps < 0:
        raise ValueError(f"sweeps must be an integer >= 0 (camera sweeps between two keyframes), got {sweeps!r}")


def export_nuscenes(dataset_root, out_dir, version: str = "v1.0-mini", progress: bool = True, sweeps: int = 0) -> Path:
    """Convert the `hydranet-sim` dataset at `dataset_root` into nuScenes tables and files at
    `out_dir` (which must not exist). Written into `out_dir.tmp-<pid>` and renamed at the end,
    so a failed export leaves nothing behind. Returns `out_dir`. `sweeps` N > 0: every (N+1)th
    frame of a scene is a keyframe sample, the frames between are camera sweeps (module docstring)."""
    _check_version(version)
    _check_sweeps(sweeps)
    out_dir = Path(out_dir)
    _check_out(out_dir)
    ds = SimDataset(dataset_root, channels=())
    tmp = temp_path(out_dir)
    try:
        if tmp.exists():  # left by an earlier process with our pid
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    except OSError as e:
        raise DatasetWriteError(f"cannot write to {out_dir.parent}: {e.strerror or e}; "
                                "choose a writable output folder") from None
    try:
        ex = _Exporter(ds, tmp, version, sweeps)
        ex.static_tables()
        base = BASE_TIME_US
        with tqdm(total=len(ds), desc="nuScenes export", unit="frame", disable=not progress) as bar:
            for scene in ds.scenes:
                base = ex.scene(scene, base, bar) + SCENE_GAP_US
        ok, png = cv2.imencode(".png", np.zeros((8, 8), np.uint8))
        ex.finish(png.tobytes())
        if out_dir.exists():
            raise DatasetWriteError(f"{out_dir} appeared while exporting; pass another output folder or delete it")
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def sweep_config(cfg: SimConfig, sweeps: int) -> SimConfig:
    """The sim config that renders `sweeps` frames between two keyframes of `cfg`: (N+1)x the frame
    rate and (frames_per_scene - 1)(N+1) + 1 frames, so frames 0, N+1, ... are cfg's keyframe instants."""
    _check_sweeps(sweeps)
    if not sweeps:
        return cfg
    return replace(cfg, frame_rate_hz=cfg.frame_rate_hz * (sweeps + 1),
                   frames_per_scene=(cfg.frames_per_scene - 1) * (sweeps + 1) + 1)


def export_nuscenes_from_sim(out_dir, cfg: SimConfig, scenes: int, seed: int, version: str = "v1.0-mini",
                             progress: bool = True, sweeps: int = 0) -> Path:
    """Generate `scenes` sim scenes into a temporary dataset next to `out_dir`, export them to
    `out_dir` with `export_nuscenes` and remove the temporary dataset (also on failure). `sweeps`
    N > 0: the sim renders N camera sweeps between keyframes (`sweep_config`); the keyframes keep
    cfg's frame rate and count."""
    _check_version(version)
    dense = sweep_config(cfg, sweeps)
    out_dir = Path(out_dir)
    _check_out(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.sim-", dir=out_dir.parent))
    try:
        root = generate_dataset(work / "sim", dense, scenes, seed, progress=progress)
        return export_nuscenes(root, out_dir, version, progress=progress, sweeps=sweeps)
    finally:
        shutil.rmtree(work, ignore_errors=True)

