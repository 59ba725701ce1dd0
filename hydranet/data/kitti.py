"""Read the KITTI object benchmark (training/{image_2,label_2,calib}) into the sample contract.

    ds = KittiDataset("data/kitti")                  # every frame of training/
    ds = KittiDataset("data/kitti", split="val")     # the frame ids in ImageSets/val.txt

Geiger, Lenz, Urtasun, "Are we ready for autonomous driving? The KITTI vision benchmark suite",
CVPR 2012. Conventions (docs/datasets.md):

- One sample = one frame, one camera "CAM_FRONT" (image_2, the left colour camera). Frames are
  independent: each is its own scene (no clips beyond length 1, no ego pose: ego2world = I,
  timestamp 0).
- Ego frame = the Velodyne frame (x forward, y left, z up; 1.73 m above the road on the KITTI
  car). Calibration: K = P2[:, :3]; P2 = K [I | b] puts camera 2 at offset b from the rectified
  camera-0 frame, so ego->camera = [I | b] @ R0_rect @ Tr_velo_to_cam and cam2ego its inverse.
- 3D boxes: a label's location is the bottom centre in rectified camera-0 coordinates, its
  dimensions (h, w, l) and rotation_y about the camera's y (down) axis, 0 = facing camera +x.
  We give centre = bottom + h/2 up, moved to the ego frame, size (l, w, h) and the yaw of the
  heading (cos ry, 0, -sin ry) in the ego frame (-ry - pi/2 for an ideal calibration). Velocity is
  unknown (KITTI object has no tracks): NaN. truncation, occlusion and alpha are kept in
  `attributes`.
- 2D boxes: a label's [left, top, right, bottom] are continuous coordinates with pixel centres at
  integers, so bbox = label + 0.5 (docs/dataset_format.md). DontCare boxes go to the camera's
  `dontcare` list (regions where detections are neither rewarded nor punished).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from hydranet.data.dataset import DatasetError
from hydranet.data.dataset import FrameReader
from hydranet.data.reader import decode_image, make_rig
from hydranet.geometry import invert_rigid

FORMAT = "kitti"
CAMERA = "CAM_FRONT"
# KITTI object types -> project class (None: not trained; DontCare marks ignore regions)
TYPE_MAP = {"Car": "car", "Van": "car", "Truck": "truck", "Pedestrian": "pedestrian", "Person_sitting": "pedestrian",
            "Cyclist": "cyclist", "Tram": "train", "Misc": None, "DontCare": None}
CLASSES = ("car", "truck", "pedestrian", "cyclist", "train")
CALIB_KEYS = ("P2", "R0_rect", "Tr_velo_to_cam")
_FIX = "re-extract data_object_{image_2,label_2,calib}.zip into the KITTI root"


def read_calib(path: Path) -> dict[str, np.ndarray]:
    """A KITTI calib file -> {key: flat float array}; DatasetError naming the file if P2, R0_rect
    or Tr_velo_to_cam is missing or malformed."""
    if not path.is_file():
        raise DatasetError(f"{path}: calibration file is missing; {_FIX}", path)
    out = {}
    for line in path.read_text().splitlines():
        if ":" not in line:
            continue
        key, vals = line.split(":", 1)
        try:
            out[key.strip()] = np.array([float(v) for v in vals.split()], np.float64)
        except ValueError:
            raise DatasetError(f"{path}: line {key.strip()!r} is not numbers; {_FIX}", path) from None
    for key, n in (("P2", 12), ("R0_rect", 9), ("Tr_velo_to_cam", 12)):
        if key not in out or out[key].size != n:
            raise DatasetError(f"{path}: {key} is missing or has not {n} numbers; {_FIX}", path)
    return out


def calibration(calib: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K (3, 3), velo->camera-2 (4, 4), velo->rectified camera 0 (4, 4)) from a calib dict."""
    P2 = calib["P2"].reshape(3, 4)
    K = P2[:, :3].copy()
    b = np.linalg.solve(K, P2[:, 3])  # camera 2's offset from the rectified camera-0 frame
    rect = np.eye(4)
    rect[:3, :3] = calib["R0_rect"].reshape(3, 3)
    tr = np.eye(4)
    tr[:3, :] = calib["Tr_velo_to_cam"].reshape(3, 4)
    velo2rect = rect @ tr
    velo2cam = velo2rect.copy()
    velo2cam[:3, 3] += b
    return K, velo2cam, velo2rect


def parse_label_line(line: str, where: str) -> dict:
    """One label_2 line (15 fields, 16 with a score) -> dict in KITTI terms."""
    f = line.split()
    if len(f) not in (15, 16):
        raise DatasetError(f"{where}: expected 15 or 16 fields (type truncated occluded alpha bbox(4) dimensions(3) "
                           f"location(3) rotation_y [score]), got {len(f)}; fix the label file")
    try:
        v = [float(x) for x in f[1:]]
    except ValueError:
        raise DatasetError(f"{where}: non-numeric field in {line!r}; fix the label file") from None
    out = {"type": f[0], "truncated": v[0], "occluded": int(v[1]), "alpha": v[2], "bbox": v[3:7],
           "dimensions": v[7:10], "location": v[10:13], "rotation_y": v[13]}
    if len(f) == 16:
        out["score"] = v[14]
    return out


def read_labels(path: Path) -> list[dict]:
    if not path.is_file():
        raise DatasetError(f"{path}: label file is missing; {_FIX} (or read the testing split, which has none)", path)
    return [parse_label_line(ln, f"{path}:{k + 1}") for k, ln in enumerate(path.read_text().splitlines()) if ln.strip()]


def label_to_box3d(lab: dict, rect2velo: np.ndarray) -> dict:
    """A KITTI label's 3D box in the ego (Velodyne) frame as a labels.json boxes3d entry."""
    h, w, l = lab["dimensions"]
    x, y, z = lab["location"]
    ry = lab["rotation_y"]
    centre = rect2velo[:3, :3] @ np.array([x, y - h / 2, z]) + rect2velo[:3, 3]
    heading = rect2velo[:3, :3] @ np.array([np.cos(ry), 0.0, -np.sin(ry)])
    return {"center": centre.tolist(), "size": [l, w, h], "yaw": float(np.arctan2(heading[1], heading[0]))}


class KittiDataset(FrameReader):
    """Frames of KITTI object `<root>/<training|testing>/` (see the module docstring).

    Args:
        root: the folder holding training/ (and optionally testing/, ImageSets/).
        split: None (every frame of training/), "train"/"val"/... (ids in ImageSets/<split>.txt,
            read from training/), or "testing" (testing/: images and calib, no labels).
        channels: ("images",) or ().
        on_bad_frame: as SimDataset.
    """

    format = FORMAT

    def __init__(self, root, split: str | None = None, cameras: list[str] | None = None, channels=("images",),
                 on_bad_frame: str = "raise"):
        self.root = Path(root)
        self._init_policy(on_bad_frame)
        if cameras is not None and list(cameras) != [CAMERA]:
            raise DatasetError(f"{self.root}: KITTI object has one camera, {CAMERA!r} (image_2); got cameras={list(cameras)}")
        self.channels = tuple(channels)
        self.split = split or "training"
        part = "testing" if split == "testing" else "training"
        self.base = self.root / part
        self.has_labels = part == "training"
        for sub in ("image_2", "calib") + (("label_2",) if self.has_labels else ()):
            if not (self.base / sub).is_dir():
                raise DatasetError(f"{self.base / sub}: folder is missing; {_FIX}", self.base / sub)
        if split in (None, "training", "testing"):
            # frames are what is labelled (training) or imaged (testing): a labelled frame without its image is an error
            ids = sorted(p.stem for p in (self.base / ("label_2" if self.has_labels else "image_2")).glob("*.*"))
        else:
            listing = self.root / "ImageSets" / f"{split}.txt"
            if not listing.is_file():
                raise DatasetError(f"{listing}: split file is missing; write the frame ids of split {split!r} there "
                                   "(one 6-digit id a line) or pass split=None for every training frame", listing)
            ids = [ln.strip() for ln in listing.read_text().splitlines() if ln.strip()]
        if not ids:
            raise DatasetError(f"{self.base / 'image_2'}: split {self.split!r} has no frames; {_FIX}")
        self.ids = ids
        self.scenes = [{"name": i, "frames": [i]} for i in ids]
        self._index_frames()
        K, velo2cam, _ = calibration(read_calib(self.base / "calib" / f"{ids[0]}.txt"))
        first = decode_image(self.base / "image_2" / f"{ids[0]}.png", _FIX) if "images" in self.channels else None
        hw = first.shape[:2] if first is not None else (375, 1242)
        self.rig = make_rig("kitti", [(CAMERA, K, invert_rigid(velo2cam), hw[1], hw[0])])
        self.camera_names = [CAMERA]
        self.supervises = frozenset({"det2d", "det3d"} if self.has_labels else set())
        self.notes = ["KITTI object frames are independent (no ego poses, no tracks): velocity is NaN, clips have "
                      "length 1"]
        self.meta = {"format": FORMAT, "split": self.split, "classes": list(CLASSES), "sign_classes": [],
                     "light_states": [], "lane_types": [], "frame_rate_hz": 0.0, "rig": self.rig.to_dict(),
                     "bev": {"x_range": [-50.0, 50.0], "y_range": [-50.0, 50.0], "resolution": 0.5},
                     "scenes": [{"name": i, "num_frames": 1} for i in ids], "class_map": dict(TYPE_MAP),
                     "supervises": sorted(self.supervises)}

    def frame_name(self, scene: int, frame: int) -> str:
        return self.ids[scene]

    def kitti_labels(self, i: int) -> list[dict]:
        """The raw label_2 records of frame i (KITTI terms, for the KITTI metric)."""
        return read_labels(self.base / "label_2" / f"{self.ids[i]}.txt")

    def load(self, i: int) -> dict:
        fid = self.ids[i]
        K, velo2cam, velo2rect = calibration(read_calib(self.base / "calib" / f"{fid}.txt"))
        rect2velo = invert_rigid(velo2rect)
        boxes2d, boxes3d, dontcare = [], [], []
        for k, lab in enumerate(self.kitti_labels(i) if self.has_labels else []):
            bbox = [c + 0.5 for c in lab["bbox"]]
            if lab["type"] == "DontCare":
                dontcare.append(bbox)
                continue
            if lab["type"] not in TYPE_MAP:
                raise DatasetError(f"{self.base / 'label_2' / (fid + '.txt')}: type {lab['type']!r} is not a KITTI object "
                                   f"type ({sorted(TYPE_MAP)}); fix the label or add it to hydranet.data.kitti.TYPE_MAP")
            cls = TYPE_MAP[lab["type"]]
            if cls is None:
                continue
            attrs = {"kitti_type": lab["type"], "truncated": lab["truncated"], "occluded": lab["occluded"],
                     "alpha": lab["alpha"]}
            boxes2d.append({"bbox": bbox, "class": cls, "track_id": k + 1, "attributes": attrs,
                            "visible_fraction": {0: 1.0, 1: 0.6, 2: 0.3}.get(lab["occluded"], 0.5)})
            boxes3d.append({**label_to_box3d(lab, rect2velo), "velocity": [float("nan")] * 3, "class": cls,
                            "track_id": k + 1, "attributes": attrs})
        sample = {
            "format": FORMAT, "scene": fid, "frame_index": 0, "timestamp_us": 0, "camera_names": [CAMERA],
            "intrinsics": K[None].astype(np.float32),  # (1, 3, 3)
            "cam2ego": invert_rigid(velo2cam)[None].astype(np.float32),  # (1, 4, 4)
            "ego2world": np.eye(4),
            "labels": {"cameras": {CAMERA: {"boxes2d": boxes2d, "lanes2d": [], "dontcare": dontcare}},
                       "boxes3d": boxes3d, "lanes3d": []},
            "supervises": set(self.supervises),
        }
        if "images" in self.channels:
            sample["images"] = decode_image(self.base / "image_2" / f"{fid}.png",
                                            f"{_FIX} or use on_bad_frame='skip'")[None]  # (1, H, W, 3)
        return sample
