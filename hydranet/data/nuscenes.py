"""Read a nuScenes v1.0 dataset (mini / trainval / test table layout) into the sample contract.

    ds = NuScenesDataset("data/nuscenes", version="v1.0-mini", split="mini_val", cameras=["CAM_FRONT"])
    s = ds[0]      # images (N, 900, 1600, 3), intrinsics, cam2ego, ego2world, labels, supervises

Caesar et al., "nuScenes: A multimodal dataset for autonomous driving", CVPR 2020. What the
tables become (docs/datasets.md has the full table):

- A sample = one keyframe (2 Hz) with the images of the selected cameras; scenes keep their
  sample order (prev/next chain), so clips work as on the sim. `sweeps=N` also reads up to N
  camera sweeps (non-keyframe sample_data, ~12 Hz) between two keyframes, evenly spaced, as
  unlabelled frames in time order (`sample["supervises"]` empty: no head gets a loss from them).
  A sweep frame is the first selected camera's sweep with, for every other camera, its sweep
  nearest in time between the same keyframes; its ego pose is that first camera's, each camera
  is motion-compensated as below and calibrated by its own sample_data's calibrated_sensor.
- Ego frame of a sample: the ego pose of its LIDAR_TOP keyframe (what the devkit's detection
  evaluation uses), else of the first selected camera. Cameras expose at their own instants, so
  `cam2ego[n]` = ego(sample)^-1 @ ego(camera n) @ calibrated_sensor(n): a static world point maps
  through it exactly as the devkit's `get_sample_data` maps it (equal to the calibration when the
  ego does not move). `rig` holds the calibrated_sensor extrinsics of the first sample.
- 3D boxes: every annotation whose category maps to a project class (CATEGORY_MAP), in the ego
  frame: size (l, w, h) from nuScenes' (w, l, h), yaw about +z, velocity as
  `NuScenes.box_velocity` (centre differences over the neighbouring annotations, NaN when the
  instance has one annotation or its neighbours are > 1.5 s apart) rotated from world to ego axes.
- 2D boxes are derived, not annotated: each 3D box projected into each camera with
  `hydranet.data.reader.project_box_2d` (cut at 0.1 m in front of the camera, convex hull of the
  projection clipped to the image). `visible_fraction` = lower bound of the annotation's
  visibility bin (v0-40 -> 0.0, ...: nuScenes grades visibility over all cameras together).
- Drivable area and lanes come from the map expansion (maps/expansion/<location>.json, v1.3;
  hydranet/data/nuscenes_map.py): drivable-area polygons and lane_divider + road_divider lines
  rasterized into the sample's BEV grid (`bev`, with the boxes' footprints) and projected on flat
  ground into every camera (`drivable`, `lanes2d`; `lanes3d` in the ego frame). Samples of a
  location with its map supervise drivable, lanes and bevmap; without it `notes` says what to get.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from hydranet.bevgrid import BevGrid
from hydranet.data.nuscenes_map import LINE_LAYERS, LocalMap, MapExpansion, bev_raster, camera_drivable, camera_lanes, \
    lanes_3d
from hydranet.data.reader import DatasetError, FrameReader, boxes_in_camera, decode_image, make_rig, project_boxes_2d, \
    select_cameras
from hydranet.geometry import invert_rigid
from hydranet.data.nuscenes_tables import FIX, check_record, find_versions, pose, scenes_of_split
from hydranet.io import check_name, path_inside, read_json
from hydranet.metrics.nuscenes_data import CATEGORY_TO_DETECTION

FORMAT = "nuscenes"
KNOWN_VERSIONS = ("v1.0-mini", "v1.0-trainval", "v1.0-test")
TABLES = ("attribute", "calibrated_sensor", "category", "ego_pose", "instance", "log", "sample", "sample_annotation",
          "sample_data", "scene", "sensor", "visibility")
CAMERAS = ("CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_BACK_RIGHT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_FRONT_LEFT")
# the 23 nuScenes categories -> project class (None: not a class the project trains; the devkit's
# detection benchmark ignores the same ones, except debris, which the sim has)
CATEGORY_MAP = {
    "animal": None,
    "human.pedestrian.adult": "pedestrian",
    "human.pedestrian.child": "pedestrian",
    "human.pedestrian.construction_worker": "pedestrian",
    "human.pedestrian.personal_mobility": None,
    "human.pedestrian.police_officer": "pedestrian",
    "human.pedestrian.stroller": None,
    "human.pedestrian.wheelchair": None,
    "movable_object.barrier": "barrier",
    "movable_object.debris": "debris",
    "movable_object.pushable_pullable": None,
    "movable_object.trafficcone": "traffic_cone",
    "static_object.bicycle_rack": None,
    "vehicle.bicycle": "cyclist",  # nuScenes draws the rider inside the bicycle's box, as the sim's cyclist
    "vehicle.bus.bendy": "bus",
    "vehicle.bus.rigid": "bus",
    "vehicle.car": "car",
    "vehicle.construction": "construction_vehicle",
    "vehicle.emergency.ambulance": None,
    "vehicle.emergency.police": None,
    "vehicle.motorcycle": "motorcycle",
    "vehicle.trailer": "trailer",
    "vehicle.truck": "truck",
}
CLASSES = ("car", "truck", "bus", "trailer", "construction_vehicle", "pedestrian", "motorcycle", "cyclist",
           "traffic_cone", "barrier", "debris")
VISIBILITY_LOW = {"v0-40": 0.0, "v40-60": 0.4, "v60-80": 0.6, "v80-100": 0.8}
BEV = {"x_range": [-50.0, 50.0], "y_range": [-50.0, 50.0], "resolution": 0.5}
MAP_HEADS = frozenset({"drivable", "lanes", "bevmap"})  # what a location's map expansion supervises
_FIX = FIX
_SKIP = "fix the table or use data.on_bad_frame=skip"


class NuScenesDataset(FrameReader):
    """Keyframe samples of a nuScenes version folder (see the module docstring).

    Args:
        root: the dataroot (holds samples/, maps/ and the version folder).
        version: "v1.0-mini", "v1.0-trainval", "v1.0-test" or another version folder under root;
            None = the only one there.
        split: None or "all" (every scene), a devkit mini split, or a name in <version>/splits.json.
        cameras: camera channels to load, in this order (None = the six cameras).
        channels: ("images",) or () (labels and calibration only).
        on_bad_frame: as SimDataset (a sweep whose image is missing is a bad frame like a keyframe).
        sweeps: 0 = keyframes only; N = up to N camera sweeps between two keyframes (evenly
            spaced along the first camera's prev/next chain), unlabelled. A broken chain is a
            DatasetError naming the sample_data token.
    """

    format = FORMAT

    def __init__(self, root, version: str | None = None, split: str | None = None, cameras: list[str] | None = None,
                 channels=("images",), on_bad_frame: str = "raise", sweeps: int = 0):
        self.root = Path(root)
        if isinstance(sweeps, bool) or not isinstance(sweeps, int) or sweeps < 0:
            raise ValueError(f"nuScenes reader sweeps: an integer >= 0 (sweeps read between two keyframes), got {sweeps!r}")
        self.sweeps = sweeps
        self._sweep: dict[str, dict] = {}  # sweep frame token (its first camera's sample_data) -> {"sds", "sample"}
        self._init_policy(on_bad_frame)
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: no such folder; pass the nuScenes dataroot (it holds samples/ and v1.0-*/)")
        found = find_versions(self.root)
        if version is None:
            if len(found) != 1:
                raise DatasetError(f"{self.root}: {'no' if not found else 'several'} nuScenes version folders "
                                   f"({found}); pass version= one of {list(KNOWN_VERSIONS)}" +
                                   ("" if found else f" and {_FIX}"))
            version = found[0]
        if version not in found:
            hint = f"this root has {found}" if found else _FIX
            raise DatasetError(f"{self.root}: unknown nuScenes version {version!r} (no {self.root / version}/sample.json); "
                               f"{hint}")
        self.version, self.table_root = version, self.root / version
        self.channels = tuple(channels)
        if set(self.channels) - {"images"}:
            raise ValueError(f"nuScenes reader channels: only 'images' (or none), got {list(self.channels)}")
        t = {name: read_json(self.table_root / f"{name}.json", error=DatasetError, fix=_FIX) for name in TABLES}
        self._build_indices(t, cameras)
        names = [s["name"] for s in t["scene"]]
        wanted = names if split in (None, "all") else scenes_of_split(self.table_root, version, split, names)
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            raise DatasetError(f"{self.table_root}: split {split!r} lists scene {unknown[0]!r}, which scene.json lacks; "
                               "fix splits.json or pick another split")
        self.split = split or "all"
        keep = set(wanted)
        self.scenes = []
        for sc in t["scene"]:
            if sc["name"] not in keep:
                continue
            frames, tok = [], sc["first_sample_token"]
            while tok:
                if tok not in self._sample:
                    raise DatasetError(f"{self.table_root / 'sample.json'}: scene {sc['name']} links to missing sample "
                                       f"{tok}; {_FIX}")
                frames.append(tok)
                tok = self._sample[tok]["next"]
            self.scenes.append({"name": sc["name"], "token": sc["token"], "frames": frames,
                                "location": self._log_location.get(sc["log_token"], "")})
        if not self.scenes or not any(s["frames"] for s in self.scenes):
            raise DatasetError(f"{self.table_root}: split {self.split!r} has no samples; pick another split "
                               f"(scenes here: {names[:5]}{'...' if len(names) > 5 else ''})")
        first = self.scenes[0]["frames"][0]
        self.rig = make_rig(f"nuscenes-{version}", [self._calib(first, ch) for ch in self.camera_names])
        self.grid = BevGrid.from_meta({"bev": BEV})
        self.maps = self._load_maps()
        self.notes = self._map_notes()
        if sweeps:
            for sc in self.scenes:
                sc["frames"] = self._with_sweeps(sc["frames"])
        self._index_frames()
        self._box_heads = frozenset({"det2d", "det3d"} if t["sample_annotation"] else set())
        self.supervises = self._box_heads | (MAP_HEADS if self.maps else frozenset())
        self.meta = {"format": FORMAT, "version": version, "split": self.split, "classes": list(CLASSES),
                     "sign_classes": [], "light_states": [], "lane_types": list(LINE_LAYERS) if self.maps else [],
                     "bev": dict(BEV),
                     "frame_rate_hz": 2.0, "sweeps": sweeps, "rig": self.rig.to_dict(),
                     "scenes": [{"name": s["name"], "num_frames": len(s["frames"])} for s in self.scenes],
                     "class_map": dict(CATEGORY_MAP), "supervises": sorted(self.supervises)}

    # -- tables ---------------------------------------------------------------------------
    def _build_indices(self, t: dict, cameras: list[str] | None) -> None:
        tr = self.table_root
        cats = {c["token"]: c["name"] for c in t["category"]}
        for name in cats.values():
            if name not in CATEGORY_MAP:
                raise DatasetError(f"{tr / 'category.json'}: category {name!r} is not one of the 23 nuScenes v1.0 "
                                   f"categories this reader maps (hydranet.data.nuscenes.CATEGORY_MAP); add it there")
        self._attr = {a["token"]: a["name"] for a in t["attribute"]}
        self._vis = {v["token"]: v["level"] for v in t["visibility"]}
        self._inst_cat, self._track = {}, {}
        for k, inst in enumerate(t["instance"]):
            if inst["category_token"] not in cats:
                raise DatasetError(f"{tr / 'instance.json'}: instance {inst['token']} has unknown category token; {_FIX}")
            self._inst_cat[inst["token"]] = cats[inst["category_token"]]
            self._track[inst["token"]] = k + 1
        self._log_location = {lg["token"]: lg.get("location", "") for lg in t["log"]}
        self._log_of_scene = {s["token"]: s["log_token"] for s in t["scene"]}
        sensors = {s["token"]: s for s in t["sensor"]}
        self._cs = {c["token"]: c for c in t["calibrated_sensor"]}
        csf = tr / "calibrated_sensor.json"
        for tok, c in self._cs.items():  # table-level: a bad calibration is fatal, whatever the skip policy
            if c.get("sensor_token") not in sensors:
                raise DatasetError(f"{csf}: calibrated_sensor {tok}: field 'sensor_token' names sensor "
                                   f"{c.get('sensor_token')!r}, which sensor.json lacks (dangling token); {_FIX}", csf)
            fields = {"translation": "vec3", "rotation": "quat"}
            if sensors[c["sensor_token"]].get("modality") == "camera":
                fields["camera_intrinsic"] = "K"
            try:
                check_record(c, f"{csf}: calibrated_sensor", fields, f"fix the table; {_FIX}")
            except DatasetError as e:
                raise DatasetError(str(e), csf) from None
        self._cs_channel = {tok: sensors[c["sensor_token"]]["channel"] for tok, c in self._cs.items()}
        self._ego = {e["token"]: e for e in t["ego_pose"]}
        self._sample = {s["token"]: s for s in t["sample"]}
        self._sd_tok = {sd["token"]: sd for sd in t["sample_data"]}
        self._sd: dict[str, dict[str, dict]] = {tok: {} for tok in self._sample}  # sample -> channel -> keyframe sd
        sdf = tr / "sample_data.json"
        for sd in t["sample_data"]:
            for key, table, known in (("calibrated_sensor_token", "calibrated_sensor", self._cs),
                                      ("ego_pose_token", "ego_pose", self._ego), ("sample_token", "sample", self._sample)):
                if sd.get(key) not in known:
                    raise DatasetError(f"{sdf}: sample_data {sd.get('token')}: field {key!r} names {table} "
                                       f"{sd.get(key)!r}, which {table}.json lacks (dangling token); {_FIX}", sdf)
            if sd["is_key_frame"]:
                self._sd[sd["sample_token"]][self._cs_channel[sd["calibrated_sensor_token"]]] = sd
        cams = sorted({ch for ch, s in ((self._cs_channel[c], sensors[self._cs[c]["sensor_token"]]) for c in self._cs)
                       if s["modality"] == "camera"}, key=lambda c: (CAMERAS.index(c) if c in CAMERAS else 99, c))
        self.camera_names = select_cameras(cams, cameras, str(tr / "sensor.json"))
        self._anns: dict[str, list[dict]] = {tok: [] for tok in self._sample}
        self._ann = {}
        for a in t["sample_annotation"]:
            if a["sample_token"] not in self._anns:
                raise DatasetError(f"{tr / 'sample_annotation.json'}: annotation {a['token']} points to unknown sample; {_FIX}")
            self._anns[a["sample_token"]].append(a)
            self._ann[a["token"]] = a

    def _calib(self, sample_tok: str, ch: str) -> tuple:
        sd = self._sd[sample_tok].get(ch)
        if sd is None:
            raise DatasetError(f"{self.table_root / 'sample_data.json'}: sample {sample_tok} has no {ch} keyframe; "
                               f"select cameras present in every sample; {_FIX}")
        cs = self._cs[sd["calibrated_sensor_token"]]
        return ch, np.asarray(cs["camera_intrinsic"], np.float64), pose(cs, "calibrated_sensor"), int(sd["width"]), \
            int(sd["height"])

    def _egopose(self, sd: dict) -> np.ndarray:
        """The ego pose (4x4) of a sample_data record; DatasetError naming ego_pose, the token and the field."""
        return pose(self._ego[sd["ego_pose_token"]], f"{self.table_root / 'ego_pose.json'}: ego_pose", _SKIP)

    def _image_path(self, sd: dict) -> Path:
        """root / sample_data's filename, refused unless it stays inside the dataroot (no '..', absolute
        paths or symlinks out): DatasetError naming the sample_data token."""
        return path_inside(self.root, sd.get("filename"), f"{self.table_root / 'sample_data.json'}: sample_data "
                           f"{sd.get('token')}: field 'filename'", DatasetError)

    def _map_path(self, location: str) -> Path:
        where = f"{self.table_root / 'log.json'}: location {location!r}"
        if location:  # a log without a location names no map file
            check_name(location, "location", where, DatasetError)
        return path_inside(self.root, f"maps/expansion/{location}.json", where, DatasetError)

    def _load_maps(self) -> dict[str, MapExpansion]:
        """The map expansion of every location of the selected scenes that has one, each checked
        against its scenes: a scene whose ego is on none of its first, middle and last samples'
        drivable area was recorded elsewhere (the file holds another location's map)."""
        maps = {}
        for loc in sorted({s["location"] for s in self.scenes}):
            if loc and self._map_path(loc).is_file():
                maps[loc] = MapExpansion(self._map_path(loc), loc)
        for sc in self.scenes:
            m = maps.get(sc["location"])
            if m is None or not sc["frames"]:
                continue
            fr = sc["frames"]
            probes = [fr[0], fr[len(fr) // 2], fr[-1]]
            if not any(m.on_drivable(self.egopose(tok)[:2, 3]) for tok in probes):
                xy = self.egopose(fr[0])[:2, 3]
                x0, y0, x1, y1 = m.extent
                raise DatasetError(f"{m.path}: scene {sc['name']} (location {sc['location']!r} in log.json) drives at "
                                   f"x={xy[0]:.1f}, y={xy[1]:.1f}, off this map's drivable area (map spans x {x0:.0f}.."
                                   f"{x1:.0f}, y {y0:.0f}..{y1:.0f}): the file holds another location's map; put the "
                                   f"map of {sc['location']!r} there (nuScenes map expansion v1.3)", m.path)
        return maps

    def _map_notes(self) -> list[str]:
        locs = sorted({s["location"] for s in self.scenes})
        missing = [loc for loc in locs if loc not in self.maps]
        notes = []
        if self.maps:
            notes.append(f"map expansion of {sorted(self.maps)}: drivable area and lane_divider + road_divider lines "
                         "rasterized into the BEV grid and projected on flat ground into every camera (not "
                         "occlusion-aware), so those samples supervise drivable, lanes and bevmap")
        if missing:
            notes.append(f"{self._map_path(missing[0])}: the nuScenes map expansion is not installed (locations "
                         f"{missing}), so {'their samples supervise' if self.maps else 'this dataset supervises'} no "
                         "drivable, lanes or bevmap head; download 'Map expansion' from nuscenes.org and unzip it "
                         "into maps/ to get them")
        return notes

    # -- sweeps ---------------------------------------------------------------------------
    def _chain(self, a: str, b: str, ch: str) -> list[dict]:
        """The sweeps of camera `ch` between the keyframes of samples a and b, following its
        sample_data next links (each checked against the next record's prev)."""
        sdf = self.table_root / "sample_data.json"
        start, end = self._sd[a].get(ch), self._sd[b].get(ch)
        if start is None or end is None:
            self._calib(a if start is None else b, ch)  # raises, naming the sample
        out, cur = [], start
        for _ in range(len(self._sd_tok)):
            nxt = cur["next"]
            if not nxt:
                raise DatasetError(f"{sdf}: the {ch} chain ends at sample_data {cur['token']} before the keyframe "
                                   f"{end['token']} of sample {b} (broken prev/next chain); {_FIX} or set sweeps: 0", sdf)
            rec = self._sd_tok.get(nxt)
            if rec is None:
                raise DatasetError(f"{sdf}: sample_data {cur['token']} ({ch}) links to next {nxt}, which sample_data.json "
                                   f"lacks (broken prev/next chain); {_FIX} or set sweeps: 0", sdf)
            if rec["prev"] != cur["token"] or self._cs_channel.get(rec["calibrated_sensor_token"]) != ch:
                raise DatasetError(f"{sdf}: sample_data {nxt} follows {cur['token']} in the {ch} chain but its prev is "
                                   f"{rec['prev'] or 'empty'!r} and its channel "
                                   f"{self._cs_channel.get(rec['calibrated_sensor_token'])!r} (broken prev/next chain); "
                                   f"{_FIX} or set sweeps: 0", sdf)
            if rec["is_key_frame"]:
                if rec["token"] != end["token"]:
                    raise DatasetError(f"{sdf}: the {ch} chain from sample {a} reaches keyframe {nxt} of sample "
                                       f"{rec['sample_token']}, not the next sample {b} (broken prev/next chain); "
                                       f"{_FIX} or set sweeps: 0", sdf)
                return out
            out.append(rec)
            cur = rec
        raise DatasetError(f"{sdf}: the {ch} chain from sample {a} loops (broken prev/next chain); {_FIX}", sdf)

    def _with_sweeps(self, keys: list[str]) -> list[str]:
        """A scene's keyframe sample tokens with up to self.sweeps sweep frames between each two."""
        ref = self.camera_names[0]
        frames = []
        for a, b in zip(keys, keys[1:]):
            frames.append(a)
            chains = {ch: self._chain(a, b, ch) for ch in self.camera_names}
            m, n = len(chains[ref]), self.sweeps
            picked = range(m) if n >= m else [round((j + 1) * (m + 1) / (n + 1)) - 1 for j in range(n)]
            for j in picked:
                sd = chains[ref][j]
                sds = {ref: sd}
                for ch in self.camera_names[1:]:
                    if not chains[ch]:
                        raise DatasetError(f"{self.table_root / 'sample_data.json'}: camera {ch} has no sweep between "
                                           f"samples {a} and {b} where {ref} has {m}; select cameras that have "
                                           "sweeps or set sweeps: 0")
                    sds[ch] = min(chains[ch], key=lambda r: abs(r["timestamp"] - sd["timestamp"]))
                self._sweep[sd["token"]] = {"sds": sds, "sample": sd["sample_token"]}
                frames.append(sd["token"])
        frames.append(keys[-1])
        return frames

    def is_sweep(self, i: int) -> bool:
        """Whether frame i is an unlabelled sweep frame (sweeps > 0), not a keyframe sample."""
        s, f = self._frames[self._index(i)]
        return self.scenes[s]["frames"][f] in self._sweep

    def _load_sweep(self, s: int, f: int, tok: str) -> dict:
        """An unlabelled sweep frame: its own timestamp, ego pose and calibration, no labels."""
        scene, sds = self.scenes[s], self._sweep[tok]["sds"]
        ref = sds[self.camera_names[0]]
        ego2world = self._egopose(ref)
        world2ego = invert_rigid(ego2world)
        Ks, c2e = [], []
        for ch in self.camera_names:
            sd = sds[ch]
            cs = self._cs[sd["calibrated_sensor_token"]]
            Ks.append(np.asarray(cs["camera_intrinsic"], np.float64))
            c2e.append(world2ego @ self._egopose(sd) @ pose(cs, "calibrated_sensor"))  # motion-compensated
        sample = {
            "format": FORMAT, "scene": scene["name"], "frame_index": f, "keyframe": False,
            "sample_data_token": tok, "nearest_sample_token": self._sweep[tok]["sample"],
            "timestamp_us": int(ref["timestamp"]), "camera_names": list(self.camera_names),
            "intrinsics": np.stack(Ks).astype(np.float32),  # (N, 3, 3)
            "cam2ego": np.stack(c2e).astype(np.float32),  # (N, 4, 4)
            "ego2world": ego2world,  # (4, 4) float64
            "labels": {"cameras": {ch: {"boxes2d": [], "lanes2d": []} for ch in self.camera_names},
                       "boxes3d": [], "lanes3d": []},
            "supervises": set(),  # a sweep has no annotation: no head is supervised by it
        }
        if "images" in self.channels:
            imgs = [decode_image(self._image_path(sds[ch]), f"{_FIX} (samples/ and sweeps/ archives) or use "
                                 "on_bad_frame='skip'", (sds[ch]["height"], sds[ch]["width"])) for ch in self.camera_names]
            sample["images"] = np.stack(imgs) if len({a.shape for a in imgs}) == 1 else imgs  # (N, H, W, 3)
        return sample

    def frame_name(self, scene: int, frame: int) -> str:
        return self.scenes[scene]["frames"][frame]

    def sample_token(self, i: int) -> str:
        s, f = self._frames[i]
        return self.scenes[s]["frames"][f]

    def own_categories(self, i: int) -> list[str]:
        """The nuScenes category name of every annotation of frame i (mapped to a class or not)."""
        return [self._inst_cat[a["instance_token"]] for a in self._anns[self.sample_token(i)]]

    def own_classes(self, i: int, sample: dict) -> list[tuple[str, str | None]]:
        return [(c, CATEGORY_MAP[c]) for c in self.own_categories(i)]

    def instance_category(self, instance_token: str) -> str:
        """The nuScenes category name of an instance (instance.json -> category.json)."""
        return self._inst_cat[instance_token]

    # -- boxes ----------------------------------------------------------------------------
    def box_velocity(self, ann: dict, max_time_diff: float = 1.5) -> np.ndarray:
        """World-frame velocity (3,) of an annotation, exactly as `NuScenes.box_velocity`."""
        has_prev, has_next = ann["prev"] != "", ann["next"] != ""
        if not has_prev and not has_next:
            return np.full(3, np.nan)
        first = self._neighbour(ann, "prev") if has_prev else ann
        last = self._neighbour(ann, "next") if has_next else ann
        pos_diff = np.asarray(last["translation"], np.float64) - np.asarray(first["translation"], np.float64)
        time_diff = 1e-6 * self._sample[last["sample_token"]]["timestamp"] - \
            1e-6 * self._sample[first["sample_token"]]["timestamp"]
        if has_next and has_prev:
            max_time_diff *= 2
        if time_diff > max_time_diff:
            return np.full(3, np.nan)
        return pos_diff / time_diff

    def _neighbour(self, ann: dict, key: str) -> dict:
        """The annotation ann[key] ("prev"/"next") names, its translation checked (it sets the velocity)."""
        other = self._ann.get(ann[key])
        where = f"{self.table_root / 'sample_annotation.json'}: sample_annotation"
        if other is None:
            raise DatasetError(f"{where} {ann.get('token')}: field {key!r} names sample_annotation {ann[key]!r}, which "
                               f"the table lacks (dangling token); {_SKIP}")
        if other["sample_token"] not in self._sample:
            raise DatasetError(f"{where} {other.get('token')}: field 'sample_token' names sample "
                               f"{other['sample_token']!r}, which sample.json lacks (dangling token); {_SKIP}")
        check_record(other, where, {"translation": "vec3"}, _SKIP)
        return other

    def egopose(self, sample_tok: str) -> np.ndarray:
        sds = self._sd[sample_tok]
        sd = sds.get("LIDAR_TOP") or sds.get(self.camera_names[0])
        if sd is None:
            raise DatasetError(f"{self.table_root / 'sample_data.json'}: sample {sample_tok} has no LIDAR_TOP or "
                               f"{self.camera_names[0]} keyframe; {_FIX}")
        return self._egopose(sd)

    def boxes3d(self, sample_tok: str, ego2world: np.ndarray) -> list[dict]:
        """The sample's annotations of mapped categories as labels.json boxes3d, in the ego frame."""
        world2ego = invert_rigid(ego2world)
        where = f"{self.table_root / 'sample_annotation.json'}: sample_annotation"
        out = []
        for a in self._anns[sample_tok]:
            if a.get("instance_token") not in self._inst_cat:
                raise DatasetError(f"{where} {a.get('token')}: field 'instance_token' names instance "
                                   f"{a.get('instance_token')!r}, which instance.json lacks (dangling token); {_SKIP}")
            cat = self._inst_cat[a["instance_token"]]
            cls = CATEGORY_MAP[cat]
            if cls is None:
                continue
            check_record(a, where, {"translation": "vec3", "size": "size", "rotation": "quat"}, _SKIP)
            T = world2ego @ pose(a, where, _SKIP)
            w, l, h = a["size"]
            v = world2ego[:3, :3] @ self.box_velocity(a)
            bad_attr = next((t for t in a.get("attribute_tokens") or [] if t not in self._attr), None)
            if bad_attr is not None:
                raise DatasetError(f"{where} {a.get('token')}: field 'attribute_tokens' names attribute {bad_attr!r}, "
                                   f"which attribute.json lacks (dangling token); {_SKIP}")
            attrs = [self._attr[t] for t in a.get("attribute_tokens") or []]
            vis = self._vis.get(a["visibility_token"], "")
            extra = {"nuscenes_category": cat, "detection_name": CATEGORY_TO_DETECTION.get(cat),
                     "nuscenes_attributes": attrs, "visibility": vis}
            if any(x.endswith(".moving") for x in attrs) or any(x.endswith((".stopped", ".parked", ".standing",
                                                                              ".sitting_lying_down")) for x in attrs):
                extra["moving"] = any(x.endswith(".moving") for x in attrs)
            if "cycle.with_rider" in attrs or "cycle.without_rider" in attrs:
                extra["has_rider"] = "cycle.with_rider" in attrs
            out.append({"center": T[:3, 3].tolist(), "size": [float(l), float(w), float(h)],
                        "yaw": float(np.arctan2(T[1, 0], T[0, 0])), "velocity": v.tolist(), "class": cls,
                        "track_id": self._track[a["instance_token"]], "instance_token": a["instance_token"],
                        "annotation_token": a["token"],
                        "num_points": int(a.get("num_lidar_pts", 0)) + int(a.get("num_radar_pts", 0)),
                        "attributes": extra})
        return out

    # -- a sample -------------------------------------------------------------------------
    def load(self, i: int) -> dict:
        s, f = self._frames[i]
        scene, tok = self.scenes[s], self.scenes[s]["frames"][f]
        if tok in self._sweep:
            return self._load_sweep(s, f, tok)
        rec = self._sample[tok]
        ego2world = self.egopose(tok)
        world2ego = invert_rigid(ego2world)
        Ks, c2e, sds = [], [], []
        for ch in self.camera_names:
            _, K, calib, w, h = self._calib(tok, ch)
            sd = self._sd[tok][ch]
            c2e.append(world2ego @ self._egopose(sd) @ calib)  # motion-compensated
            Ks.append(K)
            sds.append(sd)
        boxes = self.boxes3d(tok, ego2world)
        m = self.maps.get(scene["location"])
        local = LocalMap(m, ego2world) if m is not None else None  # the map around the ego, ego frame
        cameras, drivable = {}, []
        corners = boxes_in_camera(boxes, np.eye(4))  # (B, 8, 3) ego frame, once for every camera
        for ch, K, T, sd in zip(self.camera_names, Ks, c2e, sds):
            b2 = []
            ego2cam = invert_rigid(T)
            projected = project_boxes_2d(corners @ ego2cam[:3, :3].T + ego2cam[:3, 3], K, sd["width"], sd["height"])
            for b, res in zip(boxes, projected):
                if res is None:
                    continue
                bbox, inside = res
                b2.append({"bbox": bbox, "class": b["class"], "track_id": b["track_id"],
                           "visible_fraction": VISIBILITY_LOW.get(b["attributes"]["visibility"], 0.0),
                           "attributes": {"derived_from_3d": True, "in_image_fraction": inside}})
            cameras[ch] = {"boxes2d": b2, "lanes2d": []}
            if local is not None:  # the map laid on flat ground, seen by this camera at its own instant
                cameras[ch]["lanes2d"] = camera_lanes(local, ego2cam, K, sd["width"], sd["height"])
                drivable.append(camera_drivable(local, ego2cam, K, sd["width"], sd["height"]))  # (H, W)
        sample = {
            "format": FORMAT, "scene": scene["name"], "frame_index": f, "sample_token": tok, "keyframe": True,
            "timestamp_us": int(rec["timestamp"]), "camera_names": list(self.camera_names),
            "intrinsics": np.stack(Ks).astype(np.float32),  # (N, 3, 3)
            "cam2ego": np.stack(c2e).astype(np.float32),  # (N, 4, 4)
            "ego2world": ego2world,  # (4, 4) float64
            "labels": {"cameras": cameras, "boxes3d": boxes, "lanes3d": []},
            "supervises": set(self._box_heads | (MAP_HEADS if m is not None else set())),
        }
        if local is not None:
            sample["labels"]["lanes3d"] = lanes_3d(local, self.grid)
            sample["bev"] = bev_raster(local, self.grid, boxes, list(CLASSES))  # (3, X, Y) uint8
            sample["drivable"] = np.stack(drivable) if len({d.shape for d in drivable}) == 1 else drivable  # (N, H, W)
        if "images" in self.channels:
            imgs = [decode_image(self._image_path(sd), f"{_FIX} (samples/ and sweeps/ archives) or use "
                                 "on_bad_frame='skip'", (sd["height"], sd["width"])) for sd in sds]
            sample["images"] = np.stack(imgs) if len({a.shape for a in imgs}) == 1 else imgs  # (N, H, W, 3)
        return sample
