"""Read Cityscapes (leftImg8bit + gtFine) into the sample contract: road -> drivable, instances -> 2D boxes.

    ds = CityscapesDataset("data/cityscapes", split="val")

Cordts et al., "The Cityscapes Dataset for Semantic Urban Scene Understanding", CVPR 2016. Layout read
(the official archives leftImg8bit_trainvaltest.zip, gtFine_trainvaltest.zip and, optionally,
camera_trainvaltest.zip unzipped into one root; docs/datasets.md):

    leftImg8bit/{train,val,test}/<city>/<city>_<seq>_<frame>_leftImg8bit.png   2048x1024 RGB
    gtFine/{train,val,test}/<city>/<stem>_gtFine_labelIds.png                  uint8: the label id of each pixel
    gtFine/{train,val,test}/<city>/<stem>_gtFine_instanceIds.png               uint16: id * 1000 + k for instance k
                                                                               of a class with instances, the id
                                                                               alone for a group or a stuff class
    camera/{train,val,test}/<city>/<stem>_camera.json                         intrinsic {fx, fy, u0, v0}

Label ids are the dataset's own (cityscapesScripts, helpers/labels.py), restated below for the ones read.

- One image = one sample (`CAM_FRONT`), its own scene (each fine annotation is one frame of its own
  snippet). `drivable` = the pixels of label `road` (id 7; lane markings are road in Cityscapes, as in the
  sim's drivable). Supervises det2d and drivable; split `test` has no public labels and supervises nothing.
- 2D boxes: every instance (instanceIds >= 1000) of a mapped class is the extent of its pixels,
  [xmin, ymin, xmax + 1, ymax + 1] (pixel centres at integers, docs/dataset_format.md): the visible part, not
  an amodal box (the sim's boxes are the projected whole object, so an occluded car's box here is smaller).
  Class map (INSTANCE_LABELS): person -> pedestrian, rider -> rider, car, truck, bus, trailer, motorcycle ->
  the same names, bicycle -> bicycle (the bicycle without its rider, as BDD100K's); caravan and train (the sim
  has neither) and every group region (`cargroup`: instanceIds = the label id) go to the camera's `dontcare`
  list, one box per connected region: ignored, not invented.
- Calibration: K from camera.json when the camera/ folder is there (else NaN); the extrinsics are not read, so
  cam2ego and ego2world are NaN and `meta["calibrated"]` is False: det3d, bevmap and depth cannot use it.
- Bad input is one line naming the file and what to do: an unknown split, a missing folder, an image without
  its gtFine labelIds/instanceIds (with `on_bad_frame="skip"`: a skipped, counted frame), a label image of
  another size than its image, an instance id whose class has no instances, a camera.json without finite
  positive focal lengths.
"""
from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from hydranet.data.image import image_size
from hydranet.data.reader import DatasetError, FrameReader, decode_image, make_rig
from hydranet.io import path_inside, read_json

FORMAT = "cityscapes"
CAMERA = "CAM_FRONT"
SPLITS = ("train", "val", "test")
ROAD_ID = 7
# Cityscapes label id of each class with instances -> (its name, project class; None: an ignore region)
INSTANCE_LABELS = {24: ("person", "pedestrian"), 25: ("rider", "rider"), 26: ("car", "car"), 27: ("truck", "truck"),
                   28: ("bus", "bus"), 29: ("caravan", None), 30: ("trailer", "trailer"), 31: ("train", None),
                   32: ("motorcycle", "motorcycle"), 33: ("bicycle", "bicycle")}
CATEGORY_MAP = {name: cls for name, cls in INSTANCE_LABELS.values()}
CLASSES = ("car", "truck", "bus", "trailer", "pedestrian", "rider", "bicycle", "motorcycle")
IMAGE_SUFFIX, LABEL_SUFFIX, INSTANCE_SUFFIX = "_leftImg8bit.png", "_gtFine_labelIds.png", "_gtFine_instanceIds.png"
WIDTH, HEIGHT = 2048, 1024
_FIX = "unzip leftImg8bit_trainvaltest.zip and gtFine_trainvaltest.zip into the root as docs/datasets.md shows"
_SKIP = "or use data.on_bad_frame=skip"


def instance_boxes(ids: np.ndarray, where: str) -> tuple[list[dict], list[tuple[str, list[float]]]]:
    """Boxes of an instanceIds image (H, W): ([{"bbox", "class", "name", "instance_id"}] of every instance of a
    mapped class, [(name, bbox)] of the ignore regions: instances of unmapped classes and, per connected region,
    the groups). DatasetError naming `where` for an instance id whose class has no instances."""
    ids = np.asarray(ids, np.int64)
    ys, xs = np.nonzero(ids >= 1000)
    vals = ids[ys, xs]
    order = np.argsort(vals, kind="stable")
    ys, xs, vals = ys[order], xs[order], vals[order]
    uniq, start = np.unique(vals, return_index=True)
    boxes, ignore = [], []
    if len(uniq):
        x0, x1 = np.minimum.reduceat(xs, start), np.maximum.reduceat(xs, start)
        y0, y1 = np.minimum.reduceat(ys, start), np.maximum.reduceat(ys, start)
        for k, v in enumerate(uniq.tolist()):
            if v // 1000 not in INSTANCE_LABELS:
                raise DatasetError(f"{where}: instance id {v} is label {v // 1000}, which has no instances (ids "
                                   f"{sorted(INSTANCE_LABELS)} do); {_FIX}")
            name, cls = INSTANCE_LABELS[v // 1000]
            bbox = [float(x0[k]), float(y0[k]), float(x1[k] + 1), float(y1[k] + 1)]
            if cls is None:
                ignore.append((name, bbox))
            else:
                boxes.append({"bbox": bbox, "class": cls, "name": name, "instance_id": v})
    for label in np.unique(ids[ids < 1000]).tolist():  # groups: the label id alone
        if label not in INSTANCE_LABELS:
            continue
        n, _, stats, _ = cv2.connectedComponentsWithStats((ids == label).astype(np.uint8), connectivity=8)
        for x, y, w, h, _ in stats[1:n].tolist():
            ignore.append((INSTANCE_LABELS[label][0] + "group", [float(x), float(y), float(x + w), float(y + h)]))
    return boxes, ignore


def read_intrinsics(path: Path) -> np.ndarray:
    """K (3, 3) from a camera.json's intrinsic {fx, fy, u0, v0}; DatasetError naming the file and field."""
    cam = read_json(path, "camera file", DatasetError, f"unzip camera_trainvaltest.zip into the root, {_SKIP}")
    intr = cam.get("intrinsic") if isinstance(cam, dict) else None
    vals = [intr.get(k) if isinstance(intr, dict) else None for k in ("fx", "fy", "u0", "v0")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals) \
            or vals[0] <= 0 or vals[1] <= 0:
        raise DatasetError(f"{path}: field 'intrinsic' must hold finite fx, fy > 0, u0, v0, got {intr!r}; fix the "
                           f"file {_SKIP}", path)
    fx, fy, u0, v0 = (float(v) for v in vals)
    return np.array([[fx, 0.0, u0], [0.0, fy, v0], [0.0, 0.0, 1.0]])


class CityscapesDataset(FrameReader):
    """Images of one Cityscapes split with their fine labels (see the module docstring).

    Args:
        root: the folder holding leftImg8bit/ and gtFine/ (and optionally camera/).
        split: "train", "val" or "test" (images only).
        channels: any of ("images", "drivable").
        on_bad_frame: as SimDataset.
    """

    format = FORMAT

    def __init__(self, root, split: str = "val", cameras: list[str] | None = None, channels=("images", "drivable"),
                 on_bad_frame: str = "raise"):
        self.root = Path(root)
        self._init_policy(on_bad_frame)
        if split not in SPLITS:
            raise DatasetError(f"{self.root}: unknown Cityscapes split {split!r}; choose one of {list(SPLITS)}")
        self._one_camera(cameras, CAMERA, "Cityscapes")
        self.split, self.channels = split, tuple(channels)
        self.image_dir = self.root / "leftImg8bit" / split
        self.label_dir = self.root / "gtFine" / split
        self.camera_dir = self.root / "camera" / split
        self.has_labels = split != "test"
        for d in (self.image_dir,) + ((self.label_dir,) if self.has_labels else ()):
            if not d.is_dir():
                raise DatasetError(f"{d}: folder is missing; {_FIX}", d)
        self.files = sorted(str(p.relative_to(self.image_dir)) for p in self.image_dir.glob(f"*/*{IMAGE_SUFFIX}"))
        if not self.files:
            raise DatasetError(f"{self.image_dir}: split {split!r} has no <city>/*{IMAGE_SUFFIX} images; {_FIX}",
                               self.image_dir)
        self.has_camera = self.camera_dir.is_dir()
        self.notes = [] if self.has_camera else [f"{self.camera_dir}: no camera files, so intrinsics are unknown (NaN); "
                                                 "unzip camera_trainvaltest.zip there to get them"]
        self.notes.append("Cityscapes extrinsics are not read: det3d, bevmap and depth cannot be trained on it")
        self.scenes = [{"name": f[:-len(IMAGE_SUFFIX)].split("/")[-1], "frames": [f]} for f in self.files]
        self._index_frames()
        w, h = image_size(self.image_path(0)) or (WIDTH, HEIGHT)
        K = self.intrinsics(0) if self.has_camera else np.full((3, 3), np.nan)
        self.rig = make_rig("cityscapes", [(CAMERA, K, np.full((4, 4), np.nan), w, h)])
        self.camera_names = [CAMERA]
        self.supervises = frozenset({"det2d", "drivable"} if self.has_labels else set())
        self.meta = {"format": FORMAT, "split": split, "classes": list(CLASSES), "sign_classes": [], "light_states": [],
                     "lane_types": [], "calibrated": False, "rig": self.rig.to_dict(), "frame_rate_hz": 0.0,
                     "scenes": [{"name": s["name"], "num_frames": 1} for s in self.scenes],
                     "class_map": dict(CATEGORY_MAP), "supervises": sorted(self.supervises)}

    def frame_name(self, scene: int, frame: int) -> str:
        return self.files[scene]

    def _path(self, folder: Path, i: int, suffix: str) -> Path:
        """<folder>/<city>/<stem><suffix> of frame i, refused when it resolves outside the folder (a symlink out)."""
        rel = self.files[i][:-len(IMAGE_SUFFIX)] + suffix
        return path_inside(folder, rel, f"frame {self.files[i]!r} of {folder}", DatasetError)

    def image_path(self, i: int) -> Path:
        return self._path(self.image_dir, i, IMAGE_SUFFIX)

    def intrinsics(self, i: int) -> np.ndarray:
        return read_intrinsics(self._path(self.camera_dir, i, "_camera.json"))

    def _label(self, i: int, suffix: str, hw: tuple[int, int] | None) -> np.ndarray:
        path = self._path(self.label_dir, i, suffix)
        fix = f"the image leftImg8bit/{self.split}/{self.files[i]} needs it: {_FIX}, {_SKIP}"
        img = decode_image(path, fix, hw, flags=cv2.IMREAD_UNCHANGED)
        if img.ndim != 2:
            raise DatasetError(f"{path}: expected a one-channel id image, got {img.shape[2]} channels; use the "
                               f"*{suffix} files, not the *_gtFine_color.png ones", path)
        return img

    def load(self, i: int) -> dict:
        fix = f"{_FIX}, {_SKIP}"
        image = decode_image(self.image_path(i), fix) if "images" in self.channels else None  # (H, W, 3)
        hw = image.shape[:2] if image is not None else (image_size(self.image_path(i)) or (WIDTH, HEIGHT))[::-1]
        boxes, dontcare, ignored, road = [], [], [], None
        if self.has_labels:
            ids = self._label(i, INSTANCE_SUFFIX, hw)
            found, ignore = instance_boxes(ids, str(self._path(self.label_dir, i, INSTANCE_SUFFIX)))
            boxes = [{"bbox": b["bbox"], "class": b["class"], "track_id": k + 1, "visible_fraction": 1.0,
                      "attributes": {"cityscapes_label": b["name"], "instance_id": b["instance_id"]}}
                     for k, b in enumerate(found)]
            dontcare = [bbox for _, bbox in ignore]
            ignored = [name for name, _ in ignore]
            if "drivable" in self.channels:
                road = self._label(i, LABEL_SUFFIX, hw) == ROAD_ID  # (H, W) bool
        K = self.intrinsics(i) if self.has_camera else np.full((3, 3), np.nan)
        sup = set(self.supervises) - (set() if road is not None else {"drivable"})
        sample = {
            "format": FORMAT, "scene": self.scenes[i]["name"], "frame_index": 0, "timestamp_us": 0,
            "camera_names": [CAMERA],
            "intrinsics": K[None].astype(np.float32),  # (1, 3, 3)
            "cam2ego": np.full((1, 4, 4), np.nan, np.float32),  # extrinsics not read
            "ego2world": np.full((4, 4), np.nan),
            "labels": {"cameras": {CAMERA: {"boxes2d": boxes, "lanes2d": [], "dontcare": dontcare}},
                       "boxes3d": [], "lanes3d": [], "ignored": ignored},
            "supervises": sup,
        }
        if image is not None:
            sample["images"] = image[None]  # (1, H, W, 3)
        if road is not None:
            sample["drivable"] = road[None]  # (1, H, W) bool
        return sample

    def own_classes(self, i: int, sample: dict) -> list[tuple[str, str | None]]:
        boxes = sample["labels"]["cameras"][CAMERA]["boxes2d"]
        return [(b["attributes"]["cityscapes_label"], b["class"]) for b in boxes] + \
            [(name, None) for name in sample["labels"].get("ignored", [])]
