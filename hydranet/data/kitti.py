"""Read the KITTI object benchmark (training/{image_2,label_2,calib}) into the sample contract.

    ds = KittiDataset("data/kitti")                  # every frame of training/
    ds = KittiDataset("data/kitti", split="val")     # the frame ids in ImageSets/val.txt

Geiger, Lenz, Urtasun, "Are we ready for autonomous driving? The KITTI vision benchmark suite",
CVPR 2012. Conventions (docs/datasets.md):

- One sample = one frame, one camera "CAM_FRONT" (image_2, the left colour camera). Frames are
  independent: each is its own scene (no clips beyond length 1, no ego pose: ego2world = I,
  timestamp 0).
- Ego frame = the Velodyne frame's projection on the road: the Velodyne's axes (x forward, y left,
  z up), origin VELO_HEIGHT_M = 1.73 m below it (KITTI's published mounting height: Geiger, Lenz,
  Stiller, Urtasun, "Vision meets Robotics: The KITTI Dataset", IJRR 2013, Fig. 3; the cameras sit
  1.65 m up), so the road is z = 0 as in every other reader and the camera is mounted ~1.65 m up.
  Calibration: K = P2[:, :3]; P2 = K [I | b] puts camera 2 at offset b from the rectified
  camera-0 frame, so ego->camera = [I | b] @ R0_rect @ Tr_velo_to_cam @ ego->velo and cam2ego its
  inverse.
- 3D boxes: a label's location is the bottom centre in rectified camera-0 coordinates, its
  dimensions (h, w, l) and rotation_y about the camera's y (down) axis, 0 = facing camera +x.
  We give centre = bottom + h/2 up (along the rectified camera's -y), moved to the ego frame,
  size (l, w, h) and the yaw of the heading (cos ry, 0, -sin ry) in the ego frame (-ry - pi/2 for
  an ideal calibration). KITTI's boxes are upright in the rectified camera frame, which is tilted
  ~0.85 deg from the Velodyne's on the real car; the ego box is upright (docs/datasets.md gives
  what that costs). `box3d_to_label` is the inverse (ego-frame boxes back to KITTI terms). Velocity is
  unknown (KITTI object has no tracks): NaN. truncation, occlusion and alpha are kept in
  `attributes`.
- 2D boxes: a label's [left, top, right, bottom] are continuous coordinates with pixel centres at
  integers, so bbox = label + 0.5 (docs/dataset_format.md). DontCare boxes go to the camera's
  `dontcare` list (regions where detections are neither rewarded nor punished).
- Bad labels are one-line DatasetErrors naming the file, the line and the field, and what to do
  (`on_bad_frame="skip"` skips and counts the frame): a non-finite number, an inverted or empty
  2D box, a 2D box outside its image (its real size, 1 px slack), dimensions not in (0, 100] m, a
  location or rotation_y that is not finite. Frame ids from an ImageSets list must name files
  inside the root (`hydranet.io.path_inside`, symlinks followed).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hydranet.data.reader import BBOX_SLACK_PX, MAX_BOX_CENTER_M, MAX_BOX_SIZE_M, DatasetError, FrameReader, decode_image, \
    make_rig
from hydranet.geometry import invert_rigid
from hydranet.io import path_inside

FORMAT = "kitti"
CAMERA = "CAM_FRONT"
# KITTI object types -> project class (None: not trained; DontCare marks ignore regions)
TYPE_MAP = {"Car": "car", "Van": "car", "Truck": "truck", "Pedestrian": "pedestrian", "Person_sitting": "pedestrian",
            "Cyclist": "cyclist", "Tram": "train", "Misc": None, "DontCare": None}
CLASSES = ("car", "truck", "pedestrian", "cyclist", "train")
CALIB_KEYS = ("P2", "R0_rect", "Tr_velo_to_cam")
VELO_HEIGHT_M = 1.73  # the Velodyne above the road on the KITTI car (Geiger et al., IJRR 2013, Fig. 3)
EGO2VELO = np.array([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, -VELO_HEIGHT_M], [0, 0, 0, 1]])  # ego = velo, 1.73 m lower
_FIX = "re-extract data_object_{image_2,label_2,calib}.zip into the KITTI root"
_LABEL_FIX = "fix that line of the label file, or skip the frame with data.on_bad_frame=skip"
_PNG = b"\x89PNG\r\n\x1a\n"


def read_calib(path: Path) -> dict[str, np.ndarray]:
    """A KITTI calib file -> {key: flat float array}; DatasetError naming the file if P2, R0_rect
    or Tr_velo_to_cam is missing, malformed or not finite."""
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
        if not np.isfinite(out[key]).all():
            raise DatasetError(f"{path}: {key} holds a NaN or infinite number; {_FIX}", path)
    return out


def calibration(calib: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K (3, 3), ego->camera 2 (4, 4), ego->rectified camera 0 (4, 4)) from a calib dict; the ego
    frame is the Velodyne's lowered by VELO_HEIGHT_M onto the road (module docstring)."""
    P2 = calib["P2"].reshape(3, 4)
    K = P2[:, :3].copy()
    b = np.linalg.solve(K, P2[:, 3])  # camera 2's offset from the rectified camera-0 frame
    rect = np.eye(4)
    rect[:3, :3] = calib["R0_rect"].reshape(3, 3)
    tr = np.eye(4)
    tr[:3, :] = calib["Tr_velo_to_cam"].reshape(3, 4)
    ego2rect = rect @ tr @ EGO2VELO
    ego2cam = ego2rect.copy()
    ego2cam[:3, 3] += b
    return K, ego2cam, ego2rect


def _bad_field(where: str, field: str, why: str) -> DatasetError:
    path = Path(where.rsplit(":", 1)[0]) if ":" in where else None
    return DatasetError(f"{where}: field {field} {why}; {_LABEL_FIX}", path)


def check_label(lab: dict, where: str) -> dict:
    """`lab` (a parsed label line) if it is a box; else a DatasetError naming `where` (file:line)
    and the field. DontCare regions need only a 2D box; every other object needs finite numbers,
    dimensions in (0, 100] m, a location within 1000 m and, for a label (no score), truncation in
    [0, 1] and occlusion 0-3."""
    l_, t_, r_, b_ = lab["bbox"]
    if not all(math.isfinite(v) for v in lab["bbox"]):
        raise _bad_field(where, "bbox (left top right bottom)", f"{lab['bbox']} is not finite")
    if not (l_ < r_ and t_ < b_):
        raise _bad_field(where, "bbox (left top right bottom)", f"{lab['bbox']} is inverted or empty "
                         "(need left < right, top < bottom)")
    if lab["type"] == "DontCare":
        return lab
    dims, loc = lab["dimensions"], lab["location"]
    if not all(math.isfinite(v) and 0 < v <= MAX_BOX_SIZE_M for v in dims):
        raise _bad_field(where, "dimensions (height width length)", f"{dims} must be finite and in "
                         f"(0, {MAX_BOX_SIZE_M:.0f}] m")
    if not all(math.isfinite(v) for v in loc) or np.linalg.norm(loc) > MAX_BOX_CENTER_M:
        raise _bad_field(where, "location (x y z)", f"{loc} must be finite and within {MAX_BOX_CENTER_M:.0f} m of the camera")
    for key in ("rotation_y", "alpha") + (("score",) if "score" in lab else ()):
        if not math.isfinite(lab[key]):
            raise _bad_field(where, key, f"{lab[key]} is not finite")
    if "score" in lab:  # a detection: truncated and occluded are -1 (unknown) in KITTI's result files
        return lab
    if not 0 <= lab["truncated"] <= 1:  # NaN fails too
        raise _bad_field(where, "truncated", f"{lab['truncated']} must lie in [0, 1]")
    if lab["occluded"] not in (0, 1, 2, 3):
        raise _bad_field(where, "occluded", f"{lab['occluded']} must be 0, 1, 2 or 3")
    return lab


def parse_label_line(line: str, where: str) -> dict:
    """One label_2 line (15 fields, 16 with a score) -> dict in KITTI terms, checked (`check_label`)."""
    f = line.split()
    if len(f) not in (15, 16):
        raise DatasetError(f"{where}: expected 15 or 16 fields (type truncated occluded alpha bbox(4) dimensions(3) "
                           f"location(3) rotation_y [score]), got {len(f)}; {_LABEL_FIX}")
    try:
        v = [float(x) for x in f[1:]]
    except ValueError:
        raise DatasetError(f"{where}: non-numeric field in {line!r}; {_LABEL_FIX}") from None
    occ = v[1]
    out = {"type": f[0], "truncated": v[0], "occluded": int(occ) if math.isfinite(occ) and occ == int(occ) else occ,
           "alpha": v[2], "bbox": v[3:7], "dimensions": v[7:10], "location": v[10:13], "rotation_y": v[13]}
    if len(f) == 16:
        out["score"] = v[14]
    return check_label(out, where)


def read_labels(path: Path) -> list[dict]:
    """The label_2 records of a file, each with its 1-based `line` number."""
    if not path.is_file():
        raise DatasetError(f"{path}: label file is missing; {_FIX} (or read the testing split, which has none)", path)
    return [{**parse_label_line(ln, f"{path}:{k + 1}"), "line": k + 1}
            for k, ln in enumerate(path.read_text().splitlines()) if ln.strip()]


def image_size(path: Path, fix: str) -> tuple[int, int]:
    """(width, height) of an image file from its PNG header (the file is decoded when it is no PNG)."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError:
        raise DatasetError(f"{path}: image is missing; {fix}", path) from None
    if head[:8] == _PNG and head[12:16] == b"IHDR":
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    img = decode_image(path, fix)
    return img.shape[1], img.shape[0]


def label_to_box3d(lab: dict, rect2ego: np.ndarray) -> dict:
    """A KITTI label's 3D box in the ego frame as a labels.json boxes3d entry (upright, yaw only)."""
    h, w, l = lab["dimensions"]
    x, y, z = lab["location"]
    ry = lab["rotation_y"]
    centre = rect2ego[:3, :3] @ np.array([x, y - h / 2, z]) + rect2ego[:3, 3]
    heading = rect2ego[:3, :3] @ np.array([np.cos(ry), 0.0, -np.sin(ry)])
    return {"center": centre.tolist(), "size": [l, w, h], "yaw": float(np.arctan2(heading[1], heading[0]))}


def box3d_to_label(box: dict, ego2rect: np.ndarray) -> dict:
    """The inverse of `label_to_box3d`: an ego-frame box {center, size (l, w, h), yaw} as KITTI's
    dimensions (h, w, l), location (bottom centre, rectified camera 0) and rotation_y."""
    l, w, h = (float(v) for v in box["size"])
    c = ego2rect[:3, :3] @ np.asarray(box["center"], np.float64) + ego2rect[:3, 3]
    hd = ego2rect[:3, :3] @ np.array([np.cos(box["yaw"]), np.sin(box["yaw"]), 0.0])
    return {"dimensions": [h, w, l], "location": [float(c[0]), float(c[1] + h / 2), float(c[2])],
            "rotation_y": float(np.arctan2(-hd[2], hd[0]))}


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
        self._one_camera(cameras, CAMERA, "KITTI object")
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
            listing = path_inside(self.root / "ImageSets", f"{split}.txt", f"split {split!r}", DatasetError)
            if not listing.is_file():
                raise DatasetError(f"{listing}: split file is missing; write the frame ids of split {split!r} there "
                                   "(one 6-digit id a line) or pass split=None for every training frame", listing)
            ids = []
            for k, ln in enumerate(listing.read_text().splitlines()):
                if ln.strip():
                    ids.append(ln.strip())
                    for sub, ext in self._files():  # an id names files: they must stay in their folders
                        path_inside(self.base / sub, ids[-1] + ext, f"{listing}:{k + 1}", DatasetError)
        if not ids:
            raise DatasetError(f"{self.base / 'image_2'}: split {self.split!r} has no frames; {_FIX}")
        self.ids = ids
        self.scenes = [{"name": i, "frames": [i]} for i in ids]
        self._index_frames()
        K, ego2cam, _ = calibration(read_calib(self._file("calib", 0)))
        if "images" in self.channels:
            w, h = image_size(self._file("image_2", 0), _FIX)
        else:
            w, h = 1242, 375
        self.rig = make_rig("kitti", [(CAMERA, K, invert_rigid(ego2cam), w, h)])
        self.camera_names = [CAMERA]
        self.supervises = frozenset({"det2d", "det3d"} if self.has_labels else set())
        self.notes = ["KITTI object frames are independent (no ego poses, no tracks): velocity is NaN, clips have "
                      "length 1"]
        self.meta = {"format": FORMAT, "split": self.split, "classes": list(CLASSES), "sign_classes": [],
                     "light_states": [], "lane_types": [], "frame_rate_hz": 0.0, "rig": self.rig.to_dict(),
                     "bev": {"x_range": [-50.0, 50.0], "y_range": [-50.0, 50.0], "resolution": 0.5},
                     "scenes": [{"name": i, "num_frames": 1} for i in ids], "class_map": dict(TYPE_MAP),
                     "supervises": sorted(self.supervises)}

    def _files(self) -> list[tuple[str, str]]:
        return [("image_2", ".png"), ("calib", ".txt")] + ([("label_2", ".txt")] if self.has_labels else [])

    def _file(self, sub: str, i: int) -> Path:
        """training|testing/<sub>/<id>.<ext> of frame i; it must resolve inside <sub> (a symlink out is refused)."""
        ext = dict(self._files())[sub]
        return path_inside(self.base / sub, self.ids[i] + ext, f"frame {self.ids[i]!r} of {self.base / sub}", DatasetError)

    def frame_name(self, scene: int, frame: int) -> str:
        return self.ids[scene]

    def kitti_labels(self, i: int) -> list[dict]:
        """The raw label_2 records of frame i (KITTI terms, for the KITTI metric), checked."""
        return read_labels(self._file("label_2", i))

    def own_classes(self, i: int, sample: dict) -> list[tuple[str, str | None]]:
        return [(lab["type"], TYPE_MAP.get(lab["type"])) for lab in (self.kitti_labels(i) if self.has_labels else [])]

    def load(self, i: int) -> dict:
        fid = self.ids[i]
        K, ego2cam, ego2rect = calibration(read_calib(self._file("calib", i)))
        rect2ego = np.linalg.inv(ego2rect)  # exact: the typed rotations are orthonormal only to ~1e-6
        image = None
        if "images" in self.channels:
            image = decode_image(self._file("image_2", i), f"{_FIX} or use on_bad_frame='skip'")  # (H, W, 3)
            w, h = image.shape[1], image.shape[0]
        elif self.has_labels:
            w, h = image_size(self._file("image_2", i), f"{_FIX} or use on_bad_frame='skip'")
        boxes2d, boxes3d, dontcare = [], [], []
        label_path = self._file("label_2", i) if self.has_labels else None
        for k, lab in enumerate(read_labels(label_path) if self.has_labels else []):
            bbox = [c + 0.5 for c in lab["bbox"]]
            s = BBOX_SLACK_PX
            if not (-s <= bbox[0] and bbox[2] <= w + s and -s <= bbox[1] and bbox[3] <= h + s):
                raise _bad_field(f"{label_path}:{lab['line']}", "bbox (left top right bottom)",
                                 f"{lab['bbox']} lies outside the {w}x{h} image {fid}.png (pixel centres at 0..{w - 1}, "
                                 f"0..{h - 1}; {s:g} px slack)")
            if lab["type"] == "DontCare":
                dontcare.append(bbox)
                continue
            if lab["type"] not in TYPE_MAP:
                raise DatasetError(f"{label_path}:{lab['line']}: type {lab['type']!r} is not a KITTI object "
                                   f"type ({sorted(TYPE_MAP)}); fix the label or add it to hydranet.data.kitti.TYPE_MAP",
                                   label_path)
            cls = TYPE_MAP[lab["type"]]
            if cls is None:
                continue
            attrs = {"kitti_type": lab["type"], "truncated": lab["truncated"], "occluded": lab["occluded"],
                     "alpha": lab["alpha"]}
            boxes2d.append({"bbox": bbox, "class": cls, "track_id": k + 1, "attributes": attrs,
                            "visible_fraction": {0: 1.0, 1: 0.6, 2: 0.3}.get(lab["occluded"], 0.5)})
            boxes3d.append({**label_to_box3d(lab, rect2ego), "velocity": [float("nan")] * 3, "class": cls,
                            "track_id": k + 1, "attributes": attrs})
        sample = {
            "format": FORMAT, "scene": fid, "frame_index": 0, "timestamp_us": 0, "camera_names": [CAMERA],
            "intrinsics": K[None].astype(np.float32),  # (1, 3, 3)
            "cam2ego": invert_rigid(ego2cam)[None].astype(np.float32),  # (1, 4, 4)
            "ego2world": np.eye(4),
            "labels": {"cameras": {CAMERA: {"boxes2d": boxes2d, "lanes2d": [], "dontcare": dontcare}},
                       "boxes3d": boxes3d, "lanes3d": []},
            "supervises": set(self.supervises),
        }
        if image is not None:
            sample["images"] = image[None]  # (1, H, W, 3)
        return sample
