"""det3d predictions in the nuScenes detection submission format, and the nuScenes metrics of them
against ground truth built from our labels.

    results = {sample_token: [{"sample_token", "translation", "size", "rotation", "velocity",
                               "detection_name", "detection_score", "attribute_name"}]}
    write_results("R.json", results)   # then: hydranet eval-nuscenes --dataroot <export> --results R.json

Boxes are decoded in the ego frame (x, y, z, l, w, h, yaw, vx, vy) and written in the global frame
with the frame's ego pose: translation E (x, y, z), size (w, l, h), rotation the quaternion
(w, x, y, z) of R_E rot_z(yaw), velocity (R_E (vx, vy, 0))[:2]. Sample tokens follow
`sim.nuscenes_export`'s scheme, md5("sample/<scene>/<frame dir>"), so a results file of a sim
dataset evaluates against `hydranet sim export-nuscenes` / `export_nuscenes` of the same dataset.

Class names map as the exporter maps categories, through the devkit's category -> detection name
table: car, truck, bus, pedestrian, cyclist -> bicycle (vehicle.bicycle), traffic_cone,
construction_vehicle. `debris` (movable_object.debris) has no nuScenes detection class: its
predictions are dropped (the devkit ignores its GT too). Attributes are predicted from the
velocity, as the sim labels them (moving = speed > 0.2 m/s): vehicle.moving / vehicle.stopped,
pedestrian.moving / pedestrian.standing, cycle.with_rider (every sim cyclist has a rider), none
for traffic cones.

`frame_eval_boxes` builds GT EvalBoxes from a frame's labels as the exporter filters them (boxes
seen by some camera, num_pixels > 0) and the devkit filters them (class range from the ego), so
`hydranet eval` can report mAP/NDS/mATE..mAAE without an export. One difference to
`eval-nuscenes` on the export: there the GT velocity is the devkit's centred difference of
neighbouring annotations; here it is the sim's instantaneous velocity (equal for constant motion).

numpy only (no torch), like hydranet.metrics.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.geometry import matrix_to_quaternion, rot_z
from hydranet.io import atomic_write_text
from hydranet.metrics import DetectionConfig, EvalBox
from hydranet.metrics.nuscenes_data import box_from_json

# our class -> nuScenes detection name (category_to_detection_name of sim.nuscenes_export.CATEGORY)
DETECTION_NAME = {"car": "car", "truck": "truck", "bus": "bus", "pedestrian": "pedestrian", "cyclist": "bicycle",
                  "traffic_cone": "traffic_cone", "construction_vehicle": "construction_vehicle", "barrier": "barrier",
                  "trailer": "trailer", "motorcycle": "motorcycle"}
MOVING_SPEED = 0.2  # m/s, the sim's "moving" attribute threshold (sim/labels.py)
VEHICLES = ("car", "truck", "bus", "construction_vehicle", "trailer")


def token(*key) -> str:
    """sim.nuscenes_export's deterministic token: md5 hex of the '/'-joined key."""
    return hashlib.md5("/".join(str(k) for k in key).encode()).hexdigest()


def sample_token(scene: str, frame_dir: str) -> str:
    return token("sample", scene, frame_dir)


def attribute_of(detection_name: str, speed: float) -> str:
    """The nuScenes attribute a box of this class and speed (m/s) gets ("" for none)."""
    if detection_name in VEHICLES:
        return "vehicle.moving" if speed > MOVING_SPEED else "vehicle.stopped"
    if detection_name == "pedestrian":
        return "pedestrian.moving" if speed > MOVING_SPEED else "pedestrian.standing"
    if detection_name in ("bicycle", "motorcycle"):
        return "cycle.with_rider"
    return ""


def to_global(box: Sequence[float], ego2world: np.ndarray) -> tuple[list[float], list[float], list[float], list[float]]:
    """Ego box (x, y, z, l, w, h, yaw, vx, vy) -> global (translation, size (w, l, h), rotation (w, x, y, z), velocity)."""
    x, y, z, l, w, h, yaw, vx, vy = (float(v) for v in box)
    E = np.asarray(ego2world, np.float64)
    R = E[:3, :3]
    t = R @ [x, y, z] + E[:3, 3]
    v = R @ [vx, vy, 0.0]
    return [float(a) for a in t], [w, l, h], matrix_to_quaternion(R @ rot_z(yaw)), [float(v[0]), float(v[1])]


def frame_results(boxes: np.ndarray, scores: np.ndarray, labels: np.ndarray, classes: Sequence[str],
                  ego2world: np.ndarray, stoken: str) -> list[dict[str, Any]]:
    """Decoded det3d boxes of one frame (boxes (M, 9) ego, scores (M,), class ids (M,) into `classes`)
    -> submission entries (classes without a detection name, e.g. debris, dropped)."""
    out = []
    for b, s, k in zip(np.asarray(boxes, np.float64).reshape(-1, 9), np.asarray(scores).reshape(-1),
                       np.asarray(labels).reshape(-1)):
        name = DETECTION_NAME.get(classes[int(k)])
        if name is None:
            continue
        tr, size, rot, vel = to_global(b, ego2world)
        out.append({"sample_token": stoken, "translation": tr, "size": size, "rotation": rot, "velocity": vel,
                    "detection_name": name, "detection_score": float(s),
                    "attribute_name": attribute_of(name, float(np.hypot(b[7], b[8])))})
    return out


def write_results(path: str | Path, results: Mapping[str, list], meta: Mapping[str, Any] | None = None) -> Path:
    """The submission file {"meta": {...}, "results": {sample_token: [box, ...]}}."""
    meta = {"use_camera": True, "use_lidar": False, "use_radar": False, "use_map": False, "use_external": False,
            **(meta or {})}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps({"meta": meta, "results": dict(results)}) + "\n")


def _eval_box(d: Mapping[str, Any], ego2world: np.ndarray, num_pts: int = -1) -> EvalBox:
    """A box dict as an EvalBox, checked as a submission box is (a NaN or infinite translation or size, a
    zero quaternion raise one line naming the sample and field, never a silently changed NDS)."""
    d = {"attribute_name": "", **d, **{k: [float(x) for x in d[k]] for k in ("translation", "size", "rotation", "velocity")}}
    if "detection_score" in d:
        d["detection_score"] = float(d["detection_score"])
    b = box_from_json(d, f"sample {d.get('sample_token')}")
    b.num_pts = num_pts
    b.ego_translation = b.translation - np.asarray(ego2world, np.float64)[:3, 3]
    return b


def frame_eval_boxes(labels: Mapping[str, Any], ego2world: np.ndarray, stoken: str,
                     cfg: DetectionConfig | None = None) -> list[EvalBox]:
    """GT of one frame as `eval-nuscenes` sees the export: boxes3d with num_pixels > 0 whose class
    has a detection name, inside the class range (xy distance from the ego)."""
    cfg = cfg or DetectionConfig()
    out = []
    for b in labels.get("boxes3d", []):
        name = DETECTION_NAME.get(b["class"])
        if name is None or b.get("num_pixels", 0) <= 0:
            continue
        v = b.get("velocity", [0.0, 0.0, 0.0])
        tr, size, rot, vel = to_global([*b["center"], *b["size"], b["yaw"], v[0], v[1]], ego2world)
        attrs = b.get("attributes", {})
        speed = MOVING_SPEED + 1 if attrs.get("moving") else 0.0
        d = {"sample_token": stoken, "translation": tr, "size": size, "rotation": rot, "velocity": vel,
             "detection_name": name, "attribute_name": attribute_of(name, speed)}
        out.append(_eval_box(d, ego2world, int(b["num_pixels"])))
    return [e for e in out if e.ego_dist < cfg.class_range[e.detection_name]]


def result_eval_boxes(entries: Sequence[Mapping[str, Any]], ego2world: np.ndarray,
                      cfg: DetectionConfig | None = None) -> list[EvalBox]:
    """Submission entries of one frame as EvalBoxes, class-range filtered (as the devkit)."""
    cfg = cfg or DetectionConfig()
    boxes = [_eval_box(d, ego2world) for d in entries]
    return [e for e in boxes if e.ego_dist < cfg.class_range[e.detection_name]]
