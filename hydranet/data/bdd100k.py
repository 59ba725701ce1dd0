"""Read BDD100K (images/100k/<split>, det_20 Scalabel JSON, drivable masks, lane polylines) into
the sample contract.

    ds = BDD100KDataset("data/bdd100k", split="val")

Yu et al., "BDD100K: A Diverse Driving Dataset for Heterogeneous Multitask Learning", CVPR 2020.
Layout read (the official archives unzipped into one root, docs/datasets.md):

    images/100k/{train,val,test}/<name>.jpg               1280x720
    labels/det_20/det_{train,val}.json                    Scalabel frames: name, attributes, labels[box2d]
    labels/drivable/masks/{train,val}/<stem>.png          uint8: 0 direct, 1 alternative, 2 background
    labels/lane/polygons/lane_{train,val}.json            Scalabel frames: labels[poly2d] lane markings

- One sample = one image, one camera "CAM_FRONT", its own scene (BDD100K images are single
  frames of different videos). BDD100K has no calibration: intrinsics, cam2ego and ego2world are
  NaN and `meta["calibrated"]` is False; heads that need geometry (det3d, bevmap, depth) cannot
  be trained on it.
- box2d is in inclusive pixel coordinates (Scalabel): bbox = [x1, y1, x2 + 1, y2 + 1].
- Categories (CATEGORY_MAP): the 8 road users to det2d classes, "traffic light" to the
  signs_lights light states (trafficLightColor G/Y/R or green/yellow/red; NA -> "unknown"),
  "traffic sign" to one sign class "unknown" (BDD100K does not name the sign); "other person",
  "other vehicle" are ignore regions (kept with `ignore: true`, det2d skips them).
- Drivable: `drivable` (1, H, W) bool = direct or alternative, `drivable_class` (1, H, W) the
  mask itself. Lanes: each poly2d becomes a `lanes2d` polyline (cubic Bezier segments sampled at
  8 points); crosswalks are not lane lines and are left out.
"""
from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from hydranet.data.image import image_size
from hydranet.data.reader import BBOX_SLACK_PX, DatasetError, FrameReader, decode_image, make_rig
from hydranet.io import check_name, path_inside, read_json

FORMAT = "bdd100k"
CAMERA = "CAM_FRONT"
SPLITS = ("train", "val", "test")
CATEGORY_MAP = {"car": "car", "truck": "truck", "bus": "bus", "pedestrian": "pedestrian", "rider": "rider",
                "bicycle": "bicycle", "motorcycle": "motorcycle", "train": "train", "trailer": "trailer",
                "traffic light": "traffic_light", "traffic sign": "traffic_sign",
                "other person": None, "other vehicle": None}
CLASSES = ("car", "truck", "bus", "pedestrian", "rider", "bicycle", "motorcycle", "train", "trailer",
           "traffic_sign", "traffic_light")
LIGHT_COLOUR = {"G": "green", "Y": "yellow", "R": "red", "NA": "unknown", "green": "green", "yellow": "yellow",
                "red": "red", "none": "unknown"}
LIGHT_STATES = ("red", "yellow", "green", "unknown")
SIGN_CLASSES = ("unknown",)
LANE_CATEGORIES = ("single white", "single yellow", "single other", "double white", "double yellow", "double other",
                   "road curb", "crosswalk")
LANE_TYPES = ("solid_white", "dashed_white", "solid_yellow", "dashed_yellow", "double_white", "double_yellow",
              "other", "road_curb")
DRIVABLE_CLASSES = ("direct", "alternative", "background")
WIDTH, HEIGHT = 1280, 720
_FIX = "unzip the BDD100K archives (images, det_20, drivable, lane) into the root as docs/datasets.md shows"


def check_box(lab: dict, frame: str, k: int, width: int, height: int, where: Path) -> list[float]:
    """bbox [x1, y1, x2 + 1, y2 + 1] of label k of a frame: box2d must hold four finite numbers, not be
    inverted and lie inside the width x height image (1 px slack, as the sim's check_labels); else a
    one-line DatasetError naming the file, frame, label and field."""
    box = lab.get("box2d")
    head = f"{where}: frame {frame} label {k} ({lab.get('category')!r}, id {lab.get('id')!r}): field 'box2d'"
    fix = "fix the label or use data.on_bad_frame=skip"
    vals = [box.get(c) for c in ("x1", "y1", "x2", "y2")] if isinstance(box, dict) else None
    if vals is None or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                               for v in vals):
        raise DatasetError(f"{head} must hold four finite numbers x1, y1, x2, y2, got {box!r}; {fix}")
    x1, y1, x2, y2 = (float(v) for v in vals)
    bbox = [x1, y1, x2 + 1, y2 + 1]  # inclusive pixels -> [x0, y0, x1, y1]
    if not (bbox[0] < bbox[2] and bbox[1] < bbox[3]):
        raise DatasetError(f"{head} is inverted: x1={x1:g}, y1={y1:g}, x2={x2:g}, y2={y2:g} (need x1 <= x2, y1 <= y2); "
                           f"{fix}")
    s = BBOX_SLACK_PX
    if not (-s <= bbox[0] and bbox[2] <= width + s and -s <= bbox[1] and bbox[3] <= height + s):
        raise DatasetError(f"{head} x1={x1:g}, y1={y1:g}, x2={x2:g}, y2={y2:g} lies outside the {width}x{height} "
                           f"image; {fix}")
    return bbox


def lane_type(category: str, style: str | None) -> str | None:
    if category == "crosswalk":
        return None
    if category == "road curb":
        return "road_curb"
    colour = category.split()[1]
    if category.startswith("double"):
        return f"double_{colour}" if colour in ("white", "yellow") else "other"
    if colour not in ("white", "yellow"):
        return "other"
    return f"{'dashed' if style == 'dashed' else 'solid'}_{colour}"


def poly_points(poly: dict, samples: int = 8) -> np.ndarray:
    """Scalabel poly2d vertices (types 'L' vertex, 'C' Bezier control point) -> (P, 2) polyline."""
    v = np.asarray(poly["vertices"], np.float64).reshape(-1, 2)
    types = poly.get("types") or "L" * len(v)
    out, i = [v[0]], 1
    while i < len(v):
        if types[i] == "C" and i + 2 < len(v) and types[i + 1] == "C":
            p0, p1, p2, p3 = v[i - 1], v[i], v[i + 1], v[i + 2]
            t = np.linspace(0, 1, samples + 1)[1:, None]
            out += list((1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t ** 2 * p2 + t ** 3 * p3)
            i += 3
        else:
            out.append(v[i])
            i += 1
    return np.asarray(out)


class BDD100KDataset(FrameReader):
    """Images of one BDD100K split with their labels (see the module docstring).

    Args:
        root: the folder holding images/ and labels/.
        split: "train", "val" or "test" (images only).
        channels: any of ("images", "drivable"); drivable masks are read when present.
        on_bad_frame: as SimDataset.
    """

    format = FORMAT

    def __init__(self, root, split: str = "val", cameras: list[str] | None = None, channels=("images", "drivable"),
                 on_bad_frame: str = "raise"):
        self.root = Path(root)
        self._init_policy(on_bad_frame)
        if split not in SPLITS:
            raise DatasetError(f"{self.root}: unknown BDD100K split {split!r}; choose one of {list(SPLITS)}")
        self._one_camera(cameras, CAMERA, "BDD100K")
        self.split, self.channels = split, tuple(channels)
        self.image_dir = self.root / "images" / "100k" / split
        if not self.image_dir.is_dir():
            raise DatasetError(f"{self.image_dir}: image folder is missing; {_FIX}", self.image_dir)
        self.notes: list[str] = []
        self.det_path = self.root / "labels" / "det_20" / f"det_{split}.json"
        if split == "test":
            frames = [{"name": p.name, "labels": None} for p in sorted(self.image_dir.glob("*.jpg"))]
        else:
            frames = read_json(self.det_path, error=DatasetError, fix=f"get det_20 labels ({_FIX})")
            if not isinstance(frames, list):
                raise DatasetError(f"{self.det_path}: expected a list of Scalabel frames; {_FIX}", self.det_path)
            for fr in frames:
                for lab in fr.get("labels") or []:
                    if lab.get("category") not in CATEGORY_MAP:
                        raise DatasetError(f"{self.det_path}: frame {fr.get('name')} has category "
                                           f"{lab.get('category')!r}, not a BDD100K det_20 category {sorted(CATEGORY_MAP)}; "
                                           "fix the label or add it to hydranet.data.bdd100k.CATEGORY_MAP", self.det_path)
        if not frames:
            raise DatasetError(f"{self.det_path if split != 'test' else self.image_dir}: split {split!r} has no images; {_FIX}")
        for k, fr in enumerate(frames):  # an image name is one file of images/100k/<split>/: never '../x' or '/x'
            where = f"{self.det_path}: frames[{k}].name"
            if not isinstance(fr, dict):
                raise DatasetError(f"{self.det_path}: frames[{k}] is not an object; {_FIX}", self.det_path)
            check_name(fr.get("name"), "image", where, DatasetError)
        self.frames = frames
        self.mask_dir = self.root / "labels" / "drivable" / "masks" / split
        self.has_drivable = split != "test" and self.mask_dir.is_dir()
        if split != "test" and not self.has_drivable:
            self.notes.append(f"{self.mask_dir}: no drivable masks, so this split supervises no drivable head; "
                              "unzip bdd100k_drivable_labels_trainval.zip there to get it")
        lane_path = self.root / "labels" / "lane" / "polygons" / f"lane_{split}.json"
        self.lanes: dict[str, list] | None = None
        if split != "test" and lane_path.is_file():
            self.lanes = {fr["name"]: fr.get("labels") or [] for fr in read_json(lane_path, error=DatasetError, fix=_FIX)}
            for name, labs in self.lanes.items():
                for lab in labs:
                    if lab.get("category") not in LANE_CATEGORIES:
                        raise DatasetError(f"{lane_path}: frame {name} has lane category {lab.get('category')!r}, not "
                                           f"one of {list(LANE_CATEGORIES)}; fix the label", lane_path)
        elif split != "test":
            self.notes.append(f"{lane_path}: no lane labels, so this split supervises no lanes head; unzip "
                              "bdd100k_lane_labels_trainval.zip there to get it")
        self.notes.append("BDD100K has no camera calibration: det3d, bevmap and depth cannot be trained on it")
        self.scenes = [{"name": Path(fr["name"]).stem, "frames": [fr["name"]]} for fr in frames]
        self._index_frames()
        nan = np.full((3, 3), np.nan)
        # the rig's size is the first image's (BDD100K's are 1280x720; read from its header, never assumed
        # when the file is there); each frame's boxes are checked against its own image
        w, h = image_size(self.image_path(frames[0]["name"])) or (WIDTH, HEIGHT)
        self.rig = make_rig("bdd100k", [(CAMERA, nan, np.full((4, 4), np.nan), w, h)])
        self.camera_names = [CAMERA]
        sup = set() if split == "test" else {"det2d", "signs_lights"}
        sup |= {"drivable"} if self.has_drivable else set()
        sup |= {"lanes"} if self.lanes is not None else set()
        self.supervises = frozenset(sup)
        self.meta = {"format": FORMAT, "split": split, "classes": list(CLASSES), "sign_classes": list(SIGN_CLASSES),
                     "light_states": list(LIGHT_STATES), "lane_types": list(LANE_TYPES), "calibrated": False,
                     "drivable_classes": list(DRIVABLE_CLASSES), "rig": self.rig.to_dict(), "frame_rate_hz": 0.0,
                     "scenes": [{"name": s["name"], "num_frames": 1} for s in self.scenes],
                     "class_map": dict(CATEGORY_MAP), "supervises": sorted(self.supervises)}

    def frame_name(self, scene: int, frame: int) -> str:
        return self.frames[scene]["name"]

    def boxes2d(self, frame: dict, size: tuple[int, int] | None = None) -> list[dict]:
        """The frame's labels as boxes2d entries; each box2d checked (`check_box`) against the image's
        (width, height) `size` (None: read from the image's header)."""
        out = []
        labels = frame.get("labels") or []
        if labels and size is None:
            size = self.image_size(frame["name"])
        for k, lab in enumerate(labels):
            bbox = check_box(lab, frame["name"], k, size[0], size[1], self.det_path)
            cat, attrs = lab["category"], dict(lab.get("attributes") or {})
            cls = CATEGORY_MAP[cat]
            extra = {"bdd100k_category": cat, "occluded": bool(attrs.get("occluded", False)),
                     "truncated": bool(attrs.get("truncated", False))}
            if cls == "traffic_light":
                extra["light_state"] = LIGHT_COLOUR.get(str(attrs.get("trafficLightColor", "NA")), "unknown")
            elif cls == "traffic_sign":
                extra["sign_class"] = "unknown"
            entry = {"bbox": bbox, "class": cls, "track_id": k + 1, "attributes": extra,
                     "visible_fraction": 0.5 if extra["occluded"] else 1.0}
            if cls is None:
                entry["ignore"] = True
            out.append(entry)
        return out

    def image_path(self, name: str) -> Path:
        """images/100k/<split>/<name>, refused when it resolves outside that folder (a symlink out)."""
        return path_inside(self.image_dir, name, f"{self.det_path}: image {name!r}", DatasetError)

    def image_size(self, name: str) -> tuple[int, int]:
        """(width, height) of image `name` from its header; DatasetError when it cannot be read."""
        path = self.image_path(name)
        size = image_size(path)
        if size is None:
            img = decode_image(path, f"{_FIX} or use on_bad_frame='skip'")  # raises naming what is wrong
            size = (img.shape[1], img.shape[0])
        return size

    def lanes2d(self, name: str) -> list[dict]:
        out = []
        for k, lab in enumerate((self.lanes or {}).get(name, [])):
            style = (lab.get("attributes") or {}).get("laneStyle")
            t = lane_type(lab["category"], style)
            if t is None:
                continue
            for poly in lab.get("poly2d") or []:
                out.append({"points": poly_points(poly).tolist(), "type": t, "lane_id": k + 1})
        return out

    def own_classes(self, i: int, sample: dict) -> list[tuple[str, str | None]]:
        return [(lab["category"], CATEGORY_MAP[lab["category"]]) for lab in self.frames[i].get("labels") or []]

    def load(self, i: int) -> dict:
        fr = self.frames[i]
        name = fr["name"]
        image = None
        if "images" in self.channels:
            image = decode_image(self.image_path(name), f"{_FIX} or use on_bad_frame='skip'")
        all_boxes = self.boxes2d(fr, None if image is None else (image.shape[1], image.shape[0]))
        boxes = [b for b in all_boxes if not b.get("ignore")]
        ignore = [b["bbox"] for b in all_boxes if b.get("ignore")]
        sup = set(self.supervises)
        if self.lanes is not None and name not in self.lanes:
            sup.discard("lanes")  # this image has no lane annotation
        sample = {
            "format": FORMAT, "scene": Path(name).stem, "frame_index": 0,
            "timestamp_us": int(fr.get("timestamp", 0)) * 1000,
            "camera_names": [CAMERA],
            "intrinsics": np.full((1, 3, 3), np.nan, np.float32),  # unknown: BDD100K has no calibration
            "cam2ego": np.full((1, 4, 4), np.nan, np.float32),
            "ego2world": np.full((4, 4), np.nan),
            "labels": {"cameras": {CAMERA: {"boxes2d": boxes, "lanes2d": self.lanes2d(name), "dontcare": ignore}},
                       "boxes3d": [], "lanes3d": [], "attributes": dict(fr.get("attributes") or {})},
        }
        if image is not None:
            sample["images"] = image[None]  # (1, H, W, 3)
        if "drivable" in self.channels and self.has_drivable:
            path = self.mask_dir / f"{Path(name).stem}.png"
            mask = decode_image(path, f"the image is listed in {self.det_path.name} but has no drivable mask; {_FIX}",
                                flags=cv2.IMREAD_UNCHANGED)
            if mask.ndim != 2 or mask.max() > 2:
                raise DatasetError(f"{path}: expected a one-channel mask of 0 direct / 1 alternative / 2 background; "
                                   "use the masks/ folder, not colormaps/", path)
            sample["drivable_class"] = mask[None]  # (1, H, W) uint8
            sample["drivable"] = mask[None] < 2  # (1, H, W) bool
        else:
            sup.discard("drivable")
        sample["supervises"] = sup
        return sample
