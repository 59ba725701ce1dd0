"""Small synthetic samples in the `SimDataset[i]` form of docs/dataset_format.md, for unit tests.

Not a renderer: a flat road below a horizon, sky above, coloured rectangles for objects (with
matching instance ids and 2D boxes), two painted lane lines, and depth/normals of the flat road.
"""
from __future__ import annotations

import numpy as np
import torch

from hydranet.geometry import make_transform, rot_z
from hydranet.models.config import BevConfig, ModelConfig, TaskConfig

FAKE_META = {
    "format": "hydranet-sim",
    "version": 1,
    "classes": ["car", "truck", "bus", "pedestrian", "cyclist", "traffic_cone", "debris", "construction_vehicle",
                "traffic_sign", "traffic_light"],
    "semantic_classes": ["sky", "road", "lane_marking", "crosswalk", "sidewalk", "vehicle", "pedestrian", "pole"],
    "sign_classes": ["stop", "yield", "speed_limit", "no_entry", "pedestrian_crossing"],
    "light_states": ["red", "yellow", "green"],
    "lane_types": ["solid_white", "dashed_white", "solid_yellow"],
}


def make_sample(num_cameras: int = 2, height: int = 64, width: int = 96, seed: int = 0, num_boxes: int = 4) -> dict:
    """One frame of `num_cameras` cameras; boxes sit on a grid so their centres never collide."""
    rng = np.random.default_rng(seed)
    N, H, W = num_cameras, height, width
    horizon = H // 2
    f = float(W)  # focal length in pixels
    K = np.array([[f, 0, (W - 1) / 2], [0, f, (H - 1) / 2], [0, 0, 1]], np.float32)
    v = np.arange(H, dtype=np.float32)[:, None].repeat(W, 1)  # (H, W) row index
    below = v > horizon
    road_depth = np.where(below, np.minimum(1.5 * f / np.maximum(v - horizon, 1e-3), 80.0), 0.0).astype(np.float32)

    images = np.zeros((N, H, W, 3), np.uint8)
    depth = np.zeros((N, H, W), np.float32)
    normals = np.zeros((N, H, W, 3), np.float32)
    semantic = np.zeros((N, H, W), np.uint8)
    instance = np.zeros((N, H, W), np.int32)
    cameras, names = {}, [f"CAM_{i}" for i in range(N)]
    classes = FAKE_META["classes"]
    for n in range(N):
        images[n][~below] = (120, 170, 230)
        images[n][below] = (90, 90, 90)
        semantic[n][below] = 1
        depth[n] = road_depth
        normals[n][below] = (0.0, -1.0, 0.0)
        lanes = []
        for lane_id, x_bottom in enumerate((0.25 * W, 0.75 * W)):
            pts = np.array([[x_bottom, H - 1], [W / 2 + (x_bottom - W / 2) * 0.2, horizon + 2]], np.float32)
            lanes.append({"points": pts.tolist(), "type": "solid_white", "lane_id": lane_id + 10 * n})
            for t in np.linspace(0, 1, 4 * H):
                u, vv = pts[0] + t * (pts[1] - pts[0])
                images[n, int(round(vv)), max(0, int(round(u)) - 1):int(round(u)) + 1] = (250, 250, 250)
                semantic[n, int(round(vv)), max(0, int(round(u)) - 1):int(round(u)) + 1] = 2
        boxes = []
        cells = rng.permutation(8)[:num_boxes]  # a 4 x 2 grid of slots
        for k, cell in enumerate(cells):
            cls = classes[int(rng.integers(len(classes)))] if k > 1 else ("traffic_sign", "traffic_light")[k]
            cw, ch = W // 4, H // 2
            bw, bh = int(rng.integers(6, cw - 4)), int(rng.integers(6, ch - 4))
            x0 = int(cell % 4) * cw + int(rng.integers(1, cw - bw))
            y0 = int(cell // 4) * ch + int(rng.integers(1, ch - bh))
            track = 100 * n + k + 1
            color = (40 + 20 * classes.index(cls), 255 - 20 * classes.index(cls), 30)
            images[n, y0:y0 + bh, x0:x0 + bw] = color
            instance[n, y0:y0 + bh, x0:x0 + bw] = track
            semantic[n, y0:y0 + bh, x0:x0 + bw] = 5
            depth[n, y0:y0 + bh, x0:x0 + bw] = 10.0 + k
            normals[n, y0:y0 + bh, x0:x0 + bw] = (0.0, 0.0, -1.0)
            attributes = {}
            if cls == "traffic_sign":
                attributes["sign_class"] = FAKE_META["sign_classes"][int(rng.integers(5))]
            if cls == "traffic_light":
                attributes["light_state"] = FAKE_META["light_states"][int(rng.integers(3))]
            boxes.append({"bbox": [x0, y0, x0 + bw, y0 + bh], "class": cls, "track_id": track,
                          "visible_fraction": 1.0, "attributes": attributes})
        cameras[names[n]] = {"boxes2d": boxes, "lanes2d": lanes}
    drivable = np.isin(semantic, [1, 2, 3])
    return {
        "images": images, "intrinsics": np.stack([K] * N), "cam2ego": np.stack([np.eye(4, dtype=np.float32)] * N),
        "ego2world": np.eye(4), "timestamp_us": 100_000 * seed, "scene": "scene_0000", "frame_index": seed,
        "camera_names": names, "depth": depth, "normals": normals, "semantic": semantic, "instance": instance,
        "drivable": drivable, "bev": np.zeros((3, 20, 20), np.uint8),
        "labels": {"cameras": cameras, "boxes3d": [], "lanes3d": [], "ego_velocity": [0.0, 0.0, 0.0]},
    }


def make_batch(tasks, samples: list[dict]) -> dict:
    """A training batch: images float (B, N, 3, H, W) in [0, 1] and collated targets per task."""
    images = torch.from_numpy(np.stack([s["images"] for s in samples])).permute(0, 1, 4, 2, 3).float() / 255
    targets = {name: task.collate([task.build_targets(s) for s in samples]) for name, task in tasks.items()}
    return {"images": images, "targets": targets}


# -- a tiny BEV model on a 64 x 64 m grid (tests of the fused model and its export) ----------------
BEV_H, BEV_W = 64, 96
BEV_META = {**FAKE_META, "bev": {"x_range": [-32, 32], "y_range": [-32, 32], "resolution": 0.5}}
TINY_BEV_CONFIG = BevConfig(downsample=4, heights=(0.0, 1.0), channels=16, encoder_depth=1)
TINY_BEV = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1, bev=TINY_BEV_CONFIG,
                       tasks=(TaskConfig("det3d", options={"width": 16}), TaskConfig("bevmap", options={"width": 16})))


def bev_sample(rig, seed: int = 0) -> dict:
    """One frame in the SimDataset form at the model size: random pixels, boxes3d, a bev raster.
    A rig with several resolutions is resized to (BEV_H, BEV_W) (Rig.resized)."""
    rng = np.random.default_rng(seed)
    rig = rig.resized(BEV_W, BEV_H)
    images = np.stack([rng.integers(0, 255, (BEV_H, BEV_W, 3), dtype=np.uint8) for _ in rig.cameras])
    K = np.stack([c.K for c in rig.cameras]).astype(np.float32)
    classes = ["car", "truck", "pedestrian", "cyclist", "traffic_cone"]
    boxes = [{"center": [float(x), float(y), 0.8], "size": [4.0, 1.8, 1.6], "yaw": float(rng.uniform(-3, 3)),
              "velocity": [float(rng.normal()), float(rng.normal()), 0.0], "class": classes[k % 5], "track_id": k + 1,
              "num_pixels": 50, "attributes": {}}
             for k, (x, y) in enumerate([(10.3, 4.1), (-15.2, -7.7), (25.0, 20.4), (3.0, -12.9), (-28.1, 27.3)])]
    bev = np.zeros((3, 128, 128), np.uint8)
    bev[0, :, 40:90] = 255  # a road along x
    bev[1, :, 64] = 255  # a lane line
    bev[2, 50:58, 60:66] = 1  # an object
    return {"images": images, "intrinsics": K, "cam2ego": np.stack([c.cam2ego for c in rig.cameras]).astype(np.float32),
            "distortion": rig.distortion(),  # (N, 6) lens rows, as SimDataset gives them
            "ego2world": make_transform(rot_z(0.1 * seed), [100.0 + 2 * seed, 50.0, 0.0]), "camera_names": rig.names,
            "bev": bev, "labels": {"cameras": {}, "boxes3d": boxes, "lanes3d": [], "ego_velocity": [0.0, 0.0, 0.0]},
            "scene": "scene-0", "frame_dir": f"{seed:06d}"}
