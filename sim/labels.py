"""Labels for every head, computed from the world state and the rendered channels.

Per camera: 2D boxes from the instance mask (with the visible fraction against the object's
unoccluded silhouette) and projected lane lines. In the ego frame: 3D boxes with velocity, lane
lines as 3D polylines and the BEV rasters (drivable, lanes, objects).
"""
from __future__ import annotations

import cv2
import numpy as np

from hydranet.geometry import Camera, box_corners, invert_rigid, transform_points
from sim.classes import BOX3D_CLASSES, OBJECT_CLASSES, SEMANTIC_ID
from sim.lens import lens_view
from sim.render import CameraImages
from sim.silhouette import exact_lens_channels, silhouette_pixels, silhouette_polygons  # noqa: F401 - re-exported
from sim.world import World

LANE_STEP = 1.0  # metres between lane label points


def labelled_objects(world: World) -> dict[int, tuple[str, list, np.ndarray, dict]]:
    """track id -> (class, parts, object-to-world pose, attributes) of every labelled object."""
    out = {a.track_id: (a.cls, a.parts, a.pose(), a.attributes) for a in world.agents}
    for p in world.props:
        if p.track_id:
            out[p.track_id] = (p.semantic, p.parts, p.pose(), p.attributes)
    return out


VIEW_CLASSES = ("traffic_sign", "traffic_light")  # have a front (+x of the object frame) that shows the class


def sees_front(parts, pose: np.ndarray, world2cam: np.ndarray) -> bool:
    """True when the camera lies in front of the plate (sign face or signal lamps), which faces
    +x of the object frame; from behind neither the sign class nor the lit lamp can be seen."""
    plate = [p.center for p in parts if p.semantic != "pole"]
    x_plate = float(np.mean([c[0] for c in plate])) if plate else 0.0
    cam_in_obj = invert_rigid(world2cam @ pose)[:3, 3]
    return bool(cam_in_obj[0] > x_plate)


def view_attributes(cls: str, attrs: dict, parts, pose: np.ndarray, world2cam: np.ndarray) -> dict:
    """A box's attributes in one camera: signs and lights gain `view` ("front" / "back"); a back
    view drops `sign_class` / `light_state`, which it does not show."""
    if cls not in VIEW_CLASSES:
        return dict(attrs)
    if sees_front(parts, pose, world2cam):
        return {**attrs, "view": "front"}
    return {k: v for k, v in attrs.items() if k not in ("sign_class", "light_state")} | {"view": "back"}


def boxes_2d(img: CameraImages, cam: Camera, world2cam: np.ndarray, objects: dict,
             full: dict[int, int] | None = None) -> tuple[list[dict], dict[int, int]]:
    """2D boxes of every object visible in one camera, and its visible pixel counts. `full`:
    silhouette pixel counts already known (a distorted camera's, from `exact_lens_channels`)."""
    ids, counts = np.unique(img.instance, return_counts=True)
    boxes, pixels = [], {}
    for tid, n in zip(ids.tolist(), counts.tolist()):
        if tid == 0 or tid not in objects:
            continue
        cls, parts, pose, attrs = objects[tid]
        pixels[tid] = n
        rows = np.flatnonzero((img.instance == tid).any(1))
        cols = np.flatnonzero((img.instance == tid).any(0))
        whole = full[tid] if full is not None and tid in full else silhouette_pixels(parts, pose, cam, world2cam)
        boxes.append({
            "bbox": [int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1],
            "class": cls,
            "track_id": tid,
            "visible_fraction": round(min(1.0, n / max(whole, n)), 4),
            "attributes": view_attributes(cls, attrs, parts, pose, world2cam),
        })
    return boxes, pixels


def lane_lines_world(world: World, center: np.ndarray, radius: float) -> list[dict]:
    """Painted lines within `radius` of `center` as world polylines (K, 3), one per run."""
    out = []
    for m in world.road.markings:
        pts = m.path.points[:: max(int(LANE_STEP / 0.5), 1)]
        near = np.linalg.norm(pts - center, axis=1) < radius
        for run in _runs(near):
            if len(run) >= 2:
                p = pts[run]
                out.append({"points": np.concatenate([p, np.full((len(p), 1), 0.012)], 1), "type": m.type, "lane_id": m.lane_id})
    return out


def _runs(keep: np.ndarray) -> list[np.ndarray]:
    """Index arrays of the consecutive True runs of `keep`."""
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        return []
    return np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1)


# a lane point is labelled where the pixel shows the road or a road user standing on it (as
# CULane labels lanes through cars), not behind buildings, kerbs or vegetation
_LANE_VISIBLE = np.zeros(256, bool)
_LANE_VISIBLE[[SEMANTIC_ID[n] for n in ("road", "lane_marking", "crosswalk") + BOX3D_CLASSES]] = True


def lanes_2d(lanes_ego: list[dict], cam: Camera, img: CameraImages) -> list[dict]:
    out = []
    for lane in lanes_ego:
        uv, z = cam.project_ego(lane["points"])
        uv = np.round(uv, 2)  # as stored; the visibility test below reads the pixel of the stored point
        inside = (z > 0.5) & (uv[:, 0] >= 0) & (uv[:, 0] <= cam.width - 1) & (uv[:, 1] >= 0) & (uv[:, 1] <= cam.height - 1)
        pix = np.round(np.where(inside[:, None], uv, 0)).astype(int)
        inside &= _LANE_VISIBLE[img.semantic[pix[:, 1], pix[:, 0]]]
        for run in _runs(inside):
            if len(run) >= 2:
                out.append({"points": uv[run].tolist(), "type": lane["type"], "lane_id": lane["lane_id"]})
    return out


def boxes_3d(world: World, world2ego: np.ndarray, pixels: dict[int, int], radius: float) -> list[dict]:
    R = world2ego[:3, :3]
    ego_yaw = np.arctan2(R[1, 0], R[0, 0])  # minus the ego heading
    out = []
    for a in world.agents:
        if a.cls not in BOX3D_CLASSES:
            continue
        center_w = (a.pose() @ np.append(a.box_center, 1.0))[:3]
        c = transform_points(world2ego, center_w)
        if np.linalg.norm(c[:2]) > radius:
            continue
        yaw = (a.heading + ego_yaw + np.pi) % (2 * np.pi) - np.pi
        attrs = dict(a.attributes)
        attrs["moving"] = bool(a.speed > 0.2)
        out.append({
            "center": np.round(c, 4).tolist(),
            "size": np.round(a.box_size, 4).tolist(),
            "yaw": round(float(yaw), 5),
            "velocity": np.round(R @ a.velocity, 4).tolist(),
            "class": a.cls,
            "track_id": a.track_id,
            "num_pixels": int(pixels.get(a.track_id, 0)),
            "attributes": attrs,
        })
    return out


def bev_raster(world: World, world2ego: np.ndarray, boxes: list[dict], lanes_ego: list[dict],
               rng: float, res: float) -> np.ndarray:
    """(3, X, Y) uint8: drivable, lane lines, object class + 1. Row 0 = +x (ahead), col 0 = +y."""
    n = int(round(2 * rng / res))
    out = np.zeros((3, n, n), np.uint8)

    def to_px(xy):  # ego (K, 2) -> cv2 points (col, row) in 1/16 px
        col = (rng - xy[:, 1]) / res - 0.5
        row = (rng - xy[:, 0]) / res - 0.5
        return np.round(np.stack([col, row], 1) * 16).astype(np.int32)

    for poly in world.road.road_polygons():
        p = transform_points(world2ego, np.concatenate([poly, np.zeros((len(poly), 1))], 1))[:, :2]
        if (np.abs(p) < rng * 3).any():
            cv2.fillPoly(out[0], [to_px(p)], 255, lineType=cv2.LINE_8, shift=4)
    lanes = out[1].copy()
    for lane in lanes_ego:
        cv2.polylines(lanes, [to_px(lane["points"][:, :2])], False, 255, thickness=1, lineType=cv2.LINE_8, shift=4)
    out[1] = lanes
    objects = out[2].copy()
    for b in boxes:
        corners = box_corners(b["center"], b["size"], b["yaw"])[:4, :2]
        cv2.fillConvexPoly(objects, to_px(corners), OBJECT_CLASSES.index(b["class"]) + 1, lineType=cv2.LINE_8, shift=4)
    out[2] = objects
    return out


def frame_labels(world: World, rig_cams: list[Camera], images: list[CameraImages], ego2world: np.ndarray,
                 label_range: float, bev_range: float, bev_res: float) -> tuple[dict, np.ndarray]:
    """labels.json content and the BEV raster of one frame. A distorted camera's label channels
    are first made exact at each pixel's ray (`sim.silhouette.exact_lens_channels`, in place)."""
    world2ego = invert_rigid(ego2world)
    objects = labelled_objects(world)
    lanes_w = lane_lines_world(world, ego2world[:2, 3], label_range)
    lanes_ego = [{**l, "points": transform_points(world2ego, l["points"])} for l in lanes_w]
    cams, pixels = {}, {}
    for cam, img in zip(rig_cams, images):
        world2cam = cam.ego2cam @ world2ego
        full = None
        if img.source is not None and lens_view(cam).distorted:
            full = exact_lens_channels(img, cam, world2cam, objects)
            img.source = None  # done: the images are written as they are now
        b2d, pix = boxes_2d(img, cam, world2cam, objects, full)
        for k, v in pix.items():
            pixels[k] = pixels.get(k, 0) + v
        cams[cam.name] = {"boxes2d": b2d, "lanes2d": lanes_2d(lanes_ego, cam, img)}
    b3d = boxes_3d(world, world2ego, pixels, label_range)
    labels = {
        "cameras": cams,
        "boxes3d": b3d,
        "lanes3d": [{"points": np.round(l["points"], 3).tolist(), "type": l["type"], "lane_id": l["lane_id"]} for l in lanes_ego],
        "ego_velocity": np.round(world2ego[:3, :3] @ world.ego.velocity, 4).tolist(),
    }
    return labels, bev_raster(world, world2ego, b3d, lanes_ego, bev_range, bev_res)
