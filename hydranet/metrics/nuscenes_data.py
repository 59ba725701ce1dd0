"""nuScenes detection evaluation, data side: tables, splits, GT and submission loading, filtering.

Mirrors what the official nuscenes-devkit (v1.2) does in `nuscenes.eval.common.loaders` and
`nuscenes.utils.splits` for `DetectionEval`, with numpy and json only, so metrics can be computed
where the devkit is not installed (Caesar et al., "nuScenes: A multimodal dataset for autonomous
driving", CVPR 2020). docs/nuscenes_metrics.md lists where behaviour differs.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from hydranet.io import read_json

DETECTION_NAMES = ("car", "truck", "bus", "trailer", "construction_vehicle", "pedestrian", "motorcycle",
                   "bicycle", "traffic_cone", "barrier")
ATTRIBUTE_NAMES = ("pedestrian.moving", "pedestrian.sitting_lying_down", "pedestrian.standing", "cycle.with_rider",
                   "cycle.without_rider", "vehicle.moving", "vehicle.parked", "vehicle.stopped")
# nuscenes.eval.detection.utils.category_to_detection_name
CATEGORY_TO_DETECTION = {
    "movable_object.barrier": "barrier", "vehicle.bicycle": "bicycle", "vehicle.bus.bendy": "bus",
    "vehicle.bus.rigid": "bus", "vehicle.car": "car", "vehicle.construction": "construction_vehicle",
    "vehicle.motorcycle": "motorcycle", "human.pedestrian.adult": "pedestrian", "human.pedestrian.child": "pedestrian",
    "human.pedestrian.construction_worker": "pedestrian", "human.pedestrian.police_officer": "pedestrian",
    "movable_object.trafficcone": "traffic_cone", "vehicle.trailer": "trailer", "vehicle.truck": "truck",
}
BIKE_RACK = "static_object.bicycle_rack"
# the devkit's hard-coded splits (nuscenes.utils.splits.create_splits_scenes); only the mini ones are shipped
OFFICIAL_SPLITS = {"train": "trainval", "val": "trainval", "train_detect": "trainval", "train_track": "trainval",
                   "test": "test", "mini_train": "mini", "mini_val": "mini"}
MINI_SPLITS = {"mini_train": ["scene-0061", "scene-0553", "scene-0655", "scene-0757", "scene-0796", "scene-1077",
                              "scene-1094", "scene-1100"],
               "mini_val": ["scene-0103", "scene-0916"]}
TABLES = ("attribute", "category", "instance", "sample", "sample_annotation", "sample_data", "calibrated_sensor",
          "sensor", "ego_pose", "scene")
_REQUIRED = ("sample_token", "translation", "size", "rotation", "velocity", "detection_name", "attribute_name")


class NuScenesEvalError(ValueError):
    """An input the evaluation cannot use; the message says what and where."""


def category_to_detection_name(category_name: str) -> str | None:
    return CATEGORY_TO_DETECTION.get(category_name)


class EvalBox:
    """One GT or predicted box in global coordinates (the devkit's DetectionBox)."""
    __slots__ = ("sample_token", "translation", "size", "rotation", "velocity", "ego_translation", "num_pts",
                 "detection_name", "detection_score", "attribute_name")

    def __init__(self, sample_token, translation, size, rotation, velocity, detection_name,
                 detection_score=-1.0, attribute_name="", num_pts=-1):
        self.sample_token = sample_token
        self.translation = np.asarray(translation, dtype=float)  # (3,) x, y, z world
        self.size = np.asarray(size, dtype=float)                # (3,) w, l, h
        self.rotation = np.asarray(rotation, dtype=float)        # (4,) w, x, y, z
        self.velocity = np.asarray(velocity, dtype=float)        # (2,) vx, vy world
        self.ego_translation = np.zeros(3)
        self.num_pts = num_pts
        self.detection_name = detection_name
        self.detection_score = detection_score
        self.attribute_name = attribute_name

    @property
    def ego_dist(self) -> float:
        return float(np.sqrt(np.sum(self.ego_translation[:2] ** 2)))


Boxes = dict  # sample_token -> list[EvalBox], in the devkit's order


def quaternion_matrix(q) -> np.ndarray:
    """(w, x, y, z) -> 3x3 rotation matrix, normalising first (as pyquaternion does)."""
    q = np.asarray(q, dtype=float)
    n = np.sqrt(np.sum(q * q))
    if n > 0:
        q = q / n
    w, x, y, z = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


class NuScenesTables:
    """The tables of `<dataroot>/<version>/` the detection evaluation needs, with the devkit's reverse indices."""

    def __init__(self, dataroot, version: str):
        self.dataroot, self.version = Path(dataroot), version
        self.table_root = self.dataroot / version
        if not self.table_root.is_dir():
            raise NuScenesEvalError(f"no nuScenes version folder {self.table_root}: check --data and --version")
        t = {name: self._load(name) for name in TABLES}
        self.sample, self.scene = t["sample"], t["scene"]
        attribute = {a["token"]: a["name"] for a in t["attribute"]}
        category = {c["token"]: c["name"] for c in t["category"]}
        inst_cat = {i["token"]: category[i["category_token"]] for i in t["instance"]}
        sensor_channel = {s["token"]: s["channel"] for s in t["sensor"]}
        cs_channel = {c["token"]: sensor_channel[c["sensor_token"]] for c in t["calibrated_sensor"]}
        ego = {e["token"]: e for e in t["ego_pose"]}
        self.scene_name = {s["token"]: s["name"] for s in self.scene}
        self.anns = {s["token"]: [] for s in self.sample}   # sample -> annotations in table order
        for a in t["sample_annotation"]:
            a = dict(a, category_name=inst_cat[a["instance_token"]])
            a["attribute_names"] = [attribute[tok] for tok in a["attribute_tokens"]]
            self._append(self.anns, a["sample_token"], a, "sample_annotation")
        self.ann_by_token = {a["token"]: a for anns in self.anns.values() for a in anns}
        self.sample_by_token = {s["token"]: s for s in self.sample}
        self.ego_of_sample = {}  # sample -> ego pose record of its key-frame LIDAR_TOP sample_data
        for sd in t["sample_data"]:
            if sd["is_key_frame"] and cs_channel[sd["calibrated_sensor_token"]] == "LIDAR_TOP":
                self.ego_of_sample[sd["sample_token"]] = ego[sd["ego_pose_token"]]

    def _load(self, name: str) -> list:
        return read_json(self.table_root / f"{name}.json", "nuScenes table", NuScenesEvalError,
                         "give the table folder of a nuScenes dataset (v1.0-*/ with its JSON tables)")

    @staticmethod
    def _append(index: dict, key: str, value, table: str) -> None:
        if key not in index:
            raise NuScenesEvalError(f"{table} record {value['token']} points to unknown sample {key}")
        index[key].append(value)

    # --- splits (nuscenes.utils.splits.get_scenes_of_split) ---
    def scenes_of_split(self, split: str) -> list[str]:
        if split in OFFICIAL_SPLITS:  # the devkit checks its hard-coded names first, before splits.json
            part = OFFICIAL_SPLITS[split]
            if not self.version.endswith(part):
                raise NuScenesEvalError(f"split {split!r} needs a v1.0-{part} dataset, not version {self.version!r}")
            if split not in MINI_SPLITS:
                raise NuScenesEvalError(f"official split {split!r}: its scene list is not shipped with hydranet; "
                                        f"evaluate with the devkit, or list the scenes in {self.table_root}/splits.json "
                                        f"under another name")
            return list(MINI_SPLITS[split])
        path = self.table_root / "splits.json"
        custom = read_json(path, "splits.json", NuScenesEvalError, "fix or remove splits.json") if path.is_file() else {}
        if split in custom:
            if not isinstance(custom[split], list):
                raise NuScenesEvalError(f"split {split!r} in {path} must be a list of scene names")
            return list(custom[split])
        if split == "all":  # our extension: every scene of the version
            return [s["name"] for s in self.scene]
        known = sorted(custom) + ["all"] + sorted(MINI_SPLITS)
        raise NuScenesEvalError(f"unknown split {split!r}: {path} has {sorted(custom) or 'no splits'}; "
                                f"known here: {', '.join(known)}")

    def sample_tokens_of_split(self, split: str) -> list[str]:
        names = set(self.scenes_of_split(split))
        return [s["token"] for s in self.sample if self.scene_name[s["scene_token"]] in names]

    # --- GT (nuscenes.eval.common.loaders.load_gt_of_sample_tokens) ---
    def box_velocity(self, ann: dict, max_time_diff: float = 1.5) -> np.ndarray:
        """nuscenes.NuScenes.box_velocity: finite differences over neighbouring annotations, (3,)."""
        has_prev, has_next = ann["prev"] != "", ann["next"] != ""
        if not has_prev and not has_next:
            return np.full(3, np.nan)
        first = self.ann_by_token[ann["prev"]] if has_prev else ann
        last = self.ann_by_token[ann["next"]] if has_next else ann
        pos_diff = np.array(last["translation"]) - np.array(first["translation"])
        time_diff = 1e-6 * self.sample_by_token[last["sample_token"]]["timestamp"] - \
            1e-6 * self.sample_by_token[first["sample_token"]]["timestamp"]
        if has_next and has_prev:
            max_time_diff *= 2
        if time_diff > max_time_diff:
            return np.full(3, np.nan)
        return pos_diff / time_diff

    def load_gt(self, sample_tokens: list[str]) -> Boxes:
        gt: Boxes = {}
        for tok in sample_tokens:
            boxes = gt.setdefault(tok, [])
            for a in self.anns[tok]:
                name = category_to_detection_name(a["category_name"])
                if name is None:
                    continue
                if len(a["attribute_names"]) > 1:
                    raise NuScenesEvalError(f"sample_annotation {a['token']} has more than one attribute")
                boxes.append(EvalBox(tok, a["translation"], a["size"], a["rotation"], self.box_velocity(a)[:2],
                                     name, -1.0, a["attribute_names"][0] if a["attribute_names"] else "",
                                     num_pts=int(a["num_lidar_pts"] + a["num_radar_pts"])))
        return gt

    def bike_racks(self, sample_token: str) -> list[dict]:
        return [a for a in self.anns[sample_token] if a["category_name"] == BIKE_RACK]


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def box_from_json(d: dict, where: str, token: str | None = None) -> EvalBox:
    """One submission box, checked as the devkit's DetectionBox and stricter: every number finite (a NaN
    velocity excepted: the devkit's "unknown"), sizes > 0, a non-zero rotation quaternion, `sample_token`
    equal to `token` (the key it is filed under). A bad box raises one line naming sample and field."""
    if not isinstance(d, dict):
        raise NuScenesEvalError(f"{where}: expected a box object, got {json.dumps(d)[:60]}")
    missing = [k for k in _REQUIRED if k not in d]
    if missing:
        raise NuScenesEvalError(f"{where}: missing field(s) {missing}")
    if token is not None and d["sample_token"] != token:
        raise NuScenesEvalError(f"{where}: field sample_token is {d['sample_token']!r}, not the sample it is filed "
                                f"under; put every box under its own sample token")
    for key, n in (("translation", 3), ("size", 3), ("rotation", 4), ("velocity", 2)):
        v = d[key]
        if not isinstance(v, list) or len(v) != n or not all(_is_number(x) for x in v):
            raise NuScenesEvalError(f"{where}: field {key} must be a list of {n} numbers, got {json.dumps(v)[:80]}")
        bad = [x for x in v if not math.isfinite(x) and not (key == "velocity" and math.isnan(x))]
        if bad:
            raise NuScenesEvalError(f"{where}: field {key} must be finite, got {v}"
                                    + (" (velocity may be NaN for unknown, not infinite)" if key == "velocity" else ""))
    if not all(x > 0 for x in d["size"]):
        raise NuScenesEvalError(f"{where}: field size must be > 0 in every dimension, got {d['size']}")
    if not math.fsum(x * x for x in d["rotation"]) > 1e-12:
        raise NuScenesEvalError(f"{where}: field rotation is a zero quaternion {d['rotation']}; give a unit "
                                "quaternion (w, x, y, z)")
    for key in ("detection_name", "attribute_name"):
        if not isinstance(d[key], str):
            raise NuScenesEvalError(f"{where}: field {key} must be a string, got {json.dumps(d[key])[:60]}")
    if d["detection_name"] not in DETECTION_NAMES:
        raise NuScenesEvalError(f"{where}: unknown detection_name {d['detection_name']!r}; "
                                f"known: {', '.join(DETECTION_NAMES)}")
    if d["attribute_name"] not in ATTRIBUTE_NAMES and d["attribute_name"] != "":
        raise NuScenesEvalError(f"{where}: unknown attribute_name {d['attribute_name']!r}; "
                                f"known: '' or {', '.join(ATTRIBUTE_NAMES)}")
    score = d.get("detection_score", -1.0)
    if not _is_number(score) or not math.isfinite(score):
        raise NuScenesEvalError(f"{where}: field detection_score must be a finite number, got {json.dumps(score)[:60]}")
    score = float(score)
    return EvalBox(d["sample_token"], d["translation"], d["size"], d["rotation"], d["velocity"],
                   d["detection_name"], score, d["attribute_name"])


def load_predictions(path, sample_tokens: list[str] | None, max_boxes_per_sample: int = 500) -> tuple[Boxes, dict]:
    """A submission file -> (boxes, meta). With `sample_tokens` (custom splits), only those samples are read and
    each must be in the file; without (official splits), every sample of the file is read, in file order."""
    path = Path(path)
    data = read_json(path, "results file", NuScenesEvalError,
                     "give a submission JSON {meta, results} (`hydranet eval` writes nuscenes_results.json)")
    if not isinstance(data, dict) or "results" not in data or not isinstance(data["results"], dict):
        raise NuScenesEvalError(f"{path}: expected {{'meta': {{...}}, 'results': {{sample_token: [boxes]}}}}")
    if "meta" not in data:
        raise NuScenesEvalError(f"{path}: missing the 'meta' field of the nuScenes submission format")
    results = data["results"]
    if not isinstance(data["meta"], dict):
        raise NuScenesEvalError(f"{path}: field meta must be an object, got {json.dumps(data['meta'])[:60]}")
    if sample_tokens is not None:
        wanted = set(sample_tokens)
        extra = [t for t in results if t not in wanted]
        if extra:
            raise NuScenesEvalError(f"{path}: sample {extra[0]} ({len(extra)} in all) is not in the split being "
                                    f"evaluated; give exactly the split's samples (as the devkit requires)")
        missing = [t for t in sample_tokens if t not in results]
        if missing:
            raise NuScenesEvalError(f"{path}: {len(missing)} sample(s) of the split have no entry in 'results' "
                                    f"(first {missing[0]}); give every sample a list, empty if nothing is detected")
        results = {t: results[t] for t in sample_tokens}
    boxes: Boxes = {}
    for tok, items in results.items():
        if not isinstance(items, list):
            raise NuScenesEvalError(f"{path}: sample {tok}: expected a list of boxes, got {json.dumps(items)[:60]}")
        if len(items) > max_boxes_per_sample:
            raise NuScenesEvalError(f"{path}: sample {tok} has {len(items)} boxes, at most "
                                    f"{max_boxes_per_sample} per sample are allowed")
        boxes.setdefault(tok, []).extend(box_from_json(b, f"{path}: sample {tok} box {i}", tok)
                                         for i, b in enumerate(items))
    return boxes, data["meta"]


def add_center_dist(tables: NuScenesTables, boxes: Boxes) -> None:
    """Box centre relative to the ego pose of the sample's LIDAR_TOP (global axes, as the devkit)."""
    for tok, bs in boxes.items():
        if tok not in tables.ego_of_sample:
            raise NuScenesEvalError(f"sample {tok} is not in {tables.table_root} or has no LIDAR_TOP key frame")
        ego = np.asarray(tables.ego_of_sample[tok]["translation"], dtype=float)
        for b in bs:
            b.ego_translation = b.translation - ego


def _in_box(point: np.ndarray, ann: dict) -> bool:
    """nuscenes.utils.geometry_utils.points_in_box for one point, boundaries included."""
    local = quaternion_matrix(ann["rotation"]).T @ (point - np.asarray(ann["translation"], dtype=float))
    w, l, h = ann["size"]
    return bool(abs(local[0]) <= l / 2 and abs(local[1]) <= w / 2 and abs(local[2]) <= h / 2)


def filter_boxes(tables: NuScenesTables, boxes: Boxes, class_range: dict) -> Boxes:
    """Distance per class, zero-point GT, bicycles and motorcycles inside bike racks (filter_eval_boxes)."""
    for tok, bs in boxes.items():
        bs = [b for b in bs if b.ego_dist < class_range[b.detection_name]]
        bs = [b for b in bs if b.num_pts != 0]
        racks = tables.bike_racks(tok)
        if racks:
            bs = [b for b in bs if b.detection_name not in ("bicycle", "motorcycle")
                  or not any(_in_box(b.translation, r) for r in racks)]
        boxes[tok] = bs
    return boxes
