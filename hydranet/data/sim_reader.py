"""Read a `hydranet-sim` dataset (docs/dataset_format.md) into in-memory samples.

    ds = SimDataset("out/sim")             # every camera, every channel
    s = ds[0]                              # s["images"]: uint8 (N, H, W, 3) RGB, ...
    clip = ds.clip(5, length=4)            # frames 2..5 of the same scene, oldest first

The reader is numpy + OpenCV only (usable in DataLoader workers and on the car side); it inverts
`sim.writer`'s encodings: depth uint16 / 256 -> float32 metres, normals uint8 / 127.5 - 1 ->
float32 with (0,0,0) kept as 0, images BGR -> RGB. Every bad input raises a one-line
`DatasetError` naming the file and what to do; a missing or broken image is never replaced by
zeros.
"""
from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from hydranet.data.image import ImageError, decode_bytes
from hydranet.data.reader import BBOX_SLACK_PX, MAX_BOX_CENTER_M, MAX_BOX_SIZE_M, MAX_SPEED_MPS, DatasetError, \
    FrameReader
from hydranet.heads import HEADS, heads_where
from hydranet.io import frame_path, read_json
from hydranet.rig import Rig, check_name, rig_from_dict

FORMAT = "hydranet-sim"
VERSION = 1
CHANNELS = ("images", "depth", "normals", "semantic", "instance", "bev")
LABEL_CHANNELS = CHANNELS[1:]  # per-pixel truth files; a frame that supervises no PIXEL_HEADS has none
# file of each channel in a frame folder: per camera CAM<suffix>, and one bev.png
CHANNEL_SUFFIX = {"images": ".jpg", "depth": ".depth.png", "normals": ".normal.png", "semantic": ".semantic.png",
                  "instance": ".instance.png"}
BEV_FILE = "bev.png"
# the heads a sim frame can supervise (every registered head: the sim has every label), and those that
# read a dense label channel (the rest read labels.json); derived from the heads' specs (hydranet/heads/<name>.py)
SIM_HEADS = tuple(HEADS)
PIXEL_HEADS = heads_where("channels")
DRIVABLE_CLASSES = ("road", "lane_marking", "crosswalk")
_GENERATE = "generate one with `hydranet sim generate`"


def _read_json(path: Path, what: str = "file"):
    return read_json(path, what, DatasetError, f"regenerate the dataset ({_GENERATE})")


def read_image(path: Path, shape: tuple, dtype, color: bool = False) -> np.ndarray:
    """Decode one image file; RGB order for 3-channel images. Raises DatasetError if missing,
    truncated (JPEG without its end marker, PNG without IEND), undecodable or of another shape."""
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except PermissionError:
        raise DatasetError(f"{path}: image cannot be read: permission denied; check the file's permissions", path) from None
    except FileNotFoundError:
        raise DatasetError(f"{path}: camera image is missing; regenerate the frame or use on_bad_frame='skip'", path) from None
    except OSError as e:
        raise DatasetError(f"{path}: image cannot be read ({(e.strerror or str(e)).lower()}); regenerate the frame or "
                           "use on_bad_frame='skip'", path) from None
    try:
        img = decode_bytes(data, path)
    except ImageError as e:
        raise DatasetError(f"{path}: image {e}; regenerate the frame or use on_bad_frame='skip'", path) from None
    if img.shape != tuple(shape) or img.dtype != dtype:
        raise DatasetError(f"{path}: expected {np.dtype(dtype).name} {tuple(shape)}, got {img.dtype} {img.shape}; "
                           "regenerate the frame", path)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if color else img


def decode_depth(enc: np.ndarray) -> np.ndarray:
    """(H, W) uint16 in 1/256 m -> (H, W) float32 metres (0 = none)."""
    return enc.astype(np.float32) / 256.0


def decode_normals(enc: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 RGB -> (H, W, 3) float32 in [-1, 1]; (0,0,0) pixels stay 0 (sky)."""
    n = enc.astype(np.float32) / 127.5 - 1.0
    n[~enc.any(axis=-1)] = 0.0
    return n


class SimDataset(FrameReader):
    """Frames of a `hydranet-sim` dataset, flattened over scenes in scene order.

    Args:
        root: the dataset folder (holds dataset.json).
        cameras: camera names to load, in this order (None = the whole rig). `.rig` is the
            selected sub-rig, so sample arrays and `.rig.cameras` line up.
        channels: which image channels to read, any of CHANNELS; `drivable` is derived whenever
            "semantic" is read. Calibration, pose, timestamp and labels are always in a sample.
        on_bad_frame: "raise" (default) raises DatasetError on a missing/corrupt file. "skip"
            records the bad file's path in `.skipped` (each bad frame once per process) and returns
            the next good frame instead: `ds[i]` for a bad frame i gives frame i+1 (or the first
            good one after it, wrapping around to 0), so indexing never raises IndexError inside
            0..len-1 and a DataLoader keeps its length; only if no frame is readable it raises.
            `clip` skips the same way, to the next end frame whose whole clip is readable.

    A rig whose cameras have several resolutions gives per-camera lists instead of stacked (N, ...)
    arrays for the image channels (`hydranet.loader.resize_to` brings them to one size).

    Attributes: `meta` (dataset.json), `rig`, `classes`, `semantic_classes`, `scenes` (the
    scene.json dicts, in order), `frame_ids` (list of (scene name, frame dir)), `skipped`,
    `supervises` (heads some frame has labels for; frames may name theirs in scene.json, then
    `sample["supervises"]` is that set and label channel files a frame lacks are not read).
    Indexing, clips and the skip policy are the `FrameReader` base's, shared with every reader.
    """

    format = "sim"
    remedy = "; regenerate the dataset"

    def __init__(self, root, cameras: list[str] | None = None, channels=CHANNELS, on_bad_frame: str = "raise"):
        self.root = Path(root)
        if not (self.root / "dataset.json").is_file():
            raise DatasetError(f"{self.root} is not a hydranet-sim dataset (no dataset.json); {_GENERATE}")
        self.meta = _read_json(self.root / "dataset.json")
        if not isinstance(self.meta, dict):
            raise DatasetError(f"{self.root / 'dataset.json'}: expected a JSON object, got {type(self.meta).__name__}; "
                               "regenerate the dataset", self.root / "dataset.json")
        fmt, ver = self.meta.get("format"), self.meta.get("version")
        if (fmt, ver) != (FORMAT, VERSION):
            raise DatasetError(f"{self.root / 'dataset.json'}: format {fmt!r} version {ver!r}, this reader reads "
                               f"{FORMAT!r} version {VERSION}; regenerate the dataset with this version")
        self._init_policy(on_bad_frame)
        self.channels = tuple(channels)
        unknown = sorted(set(self.channels) - set(CHANNELS))
        if unknown:
            raise ValueError(f"unknown channel {unknown[0]!r}; known channels: {list(CHANNELS)}")

        check_meta(self.meta, self.root / "dataset.json")
        try:
            full = rig_from_dict(self.meta["rig"], f"{self.root / 'dataset.json'} rig")
        except (ValueError, KeyError) as e:
            raise DatasetError(f"{self.root / 'dataset.json'}: bad rig ({e}); regenerate the dataset") from None
        self.rig = full if cameras is None else _select(full, list(cameras))
        self._label_cameras = {c.name: (c.width, c.height) for c in full.cameras}  # what labels.json may name
        self.semantic_classes: list[str] = self.meta["semantic_classes"]
        self._drivable_lut = self._drivable_table() if "semantic" in self.channels else None
        b = self.meta["bev"]
        self._bev_hw = (round((b["x_range"][1] - b["x_range"][0]) / b["resolution"]),
                        round((b["y_range"][1] - b["y_range"][0]) / b["resolution"]))

        self.scenes: list[dict] = []
        self._frames: list[tuple[int, int]] = []  # flat index -> (scene position, frame position)
        for si, entry in enumerate(self.meta["scenes"]):
            path = frame_path(self.root, entry["name"], file="scene.json", where=f"{self.root / 'dataset.json'}: "
                              f"scene {entry['name']!r}", error=DatasetError)
            scene = _read_json(path, "scene.json")
            check_scene(scene, path, entry["name"], full.names)
            if len(scene["frames"]) != entry["num_frames"]:
                raise DatasetError(f"{path}: lists {len(scene['frames'])} frames, dataset.json says "
                                   f"{entry['num_frames']}; regenerate the dataset")
            self.scenes.append(scene)
            self._frames += [(si, fi) for fi in range(len(scene["frames"]))]
        self.frame_ids: list[tuple[str, str]] = [
            (self.scenes[s]["name"], self.scenes[s]["frames"][f]["dir"]) for s, f in self._frames]
        # frames may name the heads their labels supervise (scene.json "supervises"); the rest supervise all
        self.supervises = frozenset().union(*(self.scenes[s]["frames"][f].get("supervises", SIM_HEADS)
                                              for s, f in self._frames))

    def _drivable_table(self) -> np.ndarray:
        missing = [c for c in DRIVABLE_CLASSES if c not in self.semantic_classes]
        if missing:
            raise DatasetError(f"{self.root / 'dataset.json'}: semantic_classes lack {missing}, needed to derive "
                               "'drivable'; regenerate the dataset")
        lut = np.zeros(256, dtype=bool)  # semantic value -> drivable
        lut[[self.semantic_classes.index(c) for c in DRIVABLE_CLASSES]] = True
        return lut

    @staticmethod
    def frame_cam2ego(frame: dict, rig) -> np.ndarray:
        """(N, 4, 4) float64 extrinsics of a scene.json frame for the cameras of `rig`: its own
        (`cam2ego`, a sim with body motion or mount jitter; checked when the dataset opens) or the rig's."""
        own = frame.get("cam2ego")
        return np.stack([np.asarray(own[c.name], np.float64) if own is not None else c.cam2ego for c in rig.cameras])

    def frame_labels(self, i: int) -> dict:
        """The checked labels.json of frame i alone (no image is read)."""
        s, f = self._frames[self._index(i)]
        scene, frame = self.scenes[s], self.scenes[s]["frames"][f]
        path = frame_path(self.root, scene["name"], frame["dir"], where=f"scene {scene['name']!r} frame "
                          f"{frame['dir']!r}", error=DatasetError) / "labels.json"
        return check_labels(_read_json(path, "labels.json"), path, self._label_cameras, self.classes)

    def load(self, i: int) -> dict:
        """Frame i exactly as on disk (never skips); raises DatasetError on a bad file."""
        s, f = self._frames[i]
        scene, frame = self.scenes[s], self.scenes[s]["frames"][f]
        folder = frame_path(self.root, scene["name"], frame["dir"], where=f"scene {scene['name']!r} frame "
                            f"{frame['dir']!r}", error=DatasetError)
        cams = self.rig.cameras
        sample = {
            "scene": scene["name"],
            "frame_index": int(frame["index"]),
            "frame_dir": frame["dir"],
            "timestamp_us": int(frame["timestamp_us"]),
            "camera_names": self.rig.names,
            "intrinsics": np.stack([c.K for c in cams]).astype(np.float32),  # (N, 3, 3)
            "cam2ego": self.frame_cam2ego(frame, self.rig).astype(np.float32),  # (N, 4, 4)
            "distortion": self.rig.distortion(),  # (N, 6) lens rows, zeros for pinholes
            "ego2world": np.asarray(frame["ego2world"], dtype=np.float64),  # (4, 4)
        }
        ch = self.channels
        sup = frame.get("supervises")
        if sup is not None and not set(sup) & set(PIXEL_HEADS):  # e.g. a human 2D label: no label channel files
            ch = tuple(c for c in ch if c not in LABEL_CHANNELS)

        def per_cam(suffix, shape3, dtype, color=False):
            arrs = [read_image(folder / f"{c.name}{suffix}", (c.height, c.width) + shape3, dtype, color) for c in cams]
            # a rig with several resolutions gives a list (resize with hydranet.loader.resize_to)
            return np.stack(arrs) if len({a.shape for a in arrs}) == 1 else arrs

        if "images" in ch and frame.get("recording") is not None:  # read in place from a recorded fleet
            sample["images"] = _recorded_images_of(frame["recording"], cams, f"scene {scene['name']!r} frame {frame['dir']!r}")
        elif "images" in ch:
            sample["images"] = per_cam(CHANNEL_SUFFIX["images"], (3,), np.uint8, color=True)  # (N, H, W, 3)
        if "depth" in ch:
            sample["depth"] = _each(decode_depth, per_cam(CHANNEL_SUFFIX["depth"], (), np.uint16))  # (N, H, W)
        if "normals" in ch:
            sample["normals"] = _each(decode_normals, per_cam(CHANNEL_SUFFIX["normals"], (3,), np.uint8, color=True))  # (N, H, W, 3)
        if "semantic" in ch:
            sample["semantic"] = per_cam(CHANNEL_SUFFIX["semantic"], (), np.uint8)  # (N, H, W)
            sample["drivable"] = _each(lambda s: self._drivable_lut[s], sample["semantic"])  # (N, H, W) bool
        if "instance" in ch:
            sample["instance"] = _each(lambda a: a.astype(np.int32), per_cam(CHANNEL_SUFFIX["instance"], (), np.uint16))  # (N, H, W)
        if "bev" in ch:
            bev = read_image(folder / BEV_FILE, self._bev_hw + (3,), np.uint8, color=True)  # (X, Y, 3)
            sample["bev"] = np.ascontiguousarray(bev.transpose(2, 0, 1))  # (3, X, Y)
        sample["labels"] = check_labels(_read_json(folder / "labels.json", "labels.json"), folder / "labels.json",
                                        self._label_cameras, self.classes)
        if sup is not None:
            sample["supervises"] = set(sup)
        return sample


def _recorded_images_of(ref: dict, cams, where: str) -> np.ndarray | list[np.ndarray]:
    """The camera images of a frame that names its recording (scene.json `"recording": {"fleet", "clip", "dir"}`:
    retrain's accepted set of recorded frames), read through `hydranet.data.recording` (N, H, W, 3) RGB."""
    from hydranet.data.recording import RecordingError, open_recording

    try:
        imgs = open_recording(ref["fleet"]).read(str(ref["clip"]), str(ref["dir"]), [c.name for c in cams])
    except (RecordingError, ValueError, KeyError, TypeError) as e:
        raise DatasetError(f"{where}: its recorded images cannot be read ({e}); restore the recordings or retrain again") from None
    for c, img in zip(cams, imgs):
        if img.shape[:2] != (c.height, c.width):
            raise DatasetError(f"{where}: recorded camera {c.name} is {img.shape[1]}x{img.shape[0]}, the dataset's rig says "
                               f"{c.width}x{c.height}; retrain again")
    return np.stack(imgs) if len({a.shape for a in imgs}) == 1 else imgs


def _each(fn, arr):
    """fn over a stacked (N, ...) array, or over each camera of a list (cameras of several sizes)."""
    return [fn(a) for a in arr] if isinstance(arr, list) else fn(arr)


def _select(rig: Rig, names: list[str]) -> Rig:
    by_name = {c.name: c for c in rig.cameras}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise DatasetError(f"unknown camera '{unknown[0]}'; this dataset's cameras are {rig.names}")
    if not names or len(set(names)) != len(names):
        raise DatasetError(f"cameras must be a non-empty list of distinct names from {rig.names}, got {names}")
    return Rig(rig.name, tuple(by_name[n] for n in names))


# -- structure checks: a malformed file is one DatasetError line naming the file and the key ---------


def _bad(path: Path, key: str, problem: str) -> DatasetError:
    return DatasetError(f"{path}: key '{key}' {problem}; fix or regenerate the file", path)


def _get(d: dict, key: str, path: Path, where: str, kind: type | tuple[type, ...]):
    if key not in d:
        raise _bad(path, f"{where}{key}", "is missing")
    v = d[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise _bad(path, f"{where}{key}", f"must be {names}, got {type(v).__name__}")
    return v


def _numbers(v, n: int | None, path: Path, key: str) -> np.ndarray:
    """v as a float array of n finite numbers (n None: any length >= 1)."""
    ok = isinstance(v, list) and (n is None or len(v) == n) and len(v) > 0 and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
    if not ok:
        raise _bad(path, key, f"must be a list of {n or 'some'} numbers, got {v!r}"[:200])
    a = np.asarray(v, dtype=np.float64)
    if not np.isfinite(a).all():
        raise _bad(path, key, f"must be finite, got {v!r}")
    return a


def _number(v, path: Path, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _bad(path, key, f"must be a number, got {v!r}"[:200])
    if not math.isfinite(v):
        raise _bad(path, key, f"must be finite, got {v!r}")
    return float(v)


def _matrix(v, shape: tuple[int, int], path: Path, key: str) -> np.ndarray:
    if not (isinstance(v, list) and len(v) == shape[0] and all(isinstance(r, list) and len(r) == shape[1] for r in v)):
        raise _bad(path, key, f"must be a {shape[0]}x{shape[1]} matrix, got {v!r}"[:200])
    return np.stack([_numbers(r, shape[1], path, key) for r in v])


def check_meta(meta: dict, path: Path) -> None:
    """dataset.json: the keys the reader uses, their types, and scene names that are safe folder names."""
    for key in ("rig", "bev"):
        _get(meta, key, path, "", dict)
    for key in ("classes", "semantic_classes"):
        names = _get(meta, key, path, "", list)
        if not all(isinstance(c, str) and c for c in names) or len(set(names)) != len(names):
            raise _bad(path, key, "must be a list of distinct non-empty names")
    b = meta["bev"]
    res = _number(_get(b, "resolution", path, "bev.", (int, float)), path, "bev.resolution")
    if res <= 0:
        raise _bad(path, "bev.resolution", f"must be > 0, got {res}")
    for key in ("x_range", "y_range"):
        lo, hi = _numbers(_get(b, key, path, "bev.", list), 2, path, f"bev.{key}")
        if not lo < hi:
            raise _bad(path, f"bev.{key}", f"must be [min, max] with min < max, got {[lo, hi]}")
    scenes = _get(meta, "scenes", path, "", list)
    if not scenes:  # nothing to train or score on: every metric would be null with exit 0
        raise _bad(path, "scenes", "is empty: the dataset has no frames; point at a dataset that has scenes")
    seen = set()
    for i, e in enumerate(scenes):
        if not isinstance(e, dict):
            raise _bad(path, f"scenes[{i}]", f"must be an object {{name, num_frames}}, got {e!r}"[:200])
        name = _get(e, "name", path, f"scenes[{i}].", str)
        check_name(name, "scene", f"{path}: key 'scenes[{i}].name'", DatasetError)
        n = _get(e, "num_frames", path, f"scenes[{i}].", int)
        if n < 1:
            raise _bad(path, f"scenes[{i}].num_frames", f"must be >= 1, got {n}")
        if name in seen:
            raise _bad(path, f"scenes[{i}].name", f"repeats scene {name!r}")
        seen.add(name)


def _rigid(value, path: Path, key: str) -> np.ndarray:
    """A rigid 4x4 transform at `key` of `path`, else DatasetError naming the key."""
    T = _matrix(value, (4, 4), path, key)
    R = T[:3, :3]
    if not (np.allclose(T[3], [0, 0, 0, 1]) and np.allclose(R @ R.T, np.eye(3), atol=1e-4) and np.linalg.det(R) > 0):
        raise _bad(path, key, "must be a rigid transform (rotation, translation, last row 0 0 0 1)")
    return T


def check_scene(scene, path: Path, name: str, cameras: list[str] | None = None) -> None:
    """scene.json: its name is the one dataset.json lists; every frame has a safe dir, an index, a time and a
    rigid 4x4 ego pose, and optionally its own rigid cam2ego per camera (body motion, mount jitter)."""
    if not isinstance(scene, dict):
        raise DatasetError(f"{path}: expected a JSON object, got {type(scene).__name__}; regenerate the dataset", path)
    if _get(scene, "name", path, "", str) != name:
        raise _bad(path, "name", f"is {scene['name']!r} but dataset.json lists this scene as {name!r}")
    frames = _get(scene, "frames", path, "", list)
    dirs = set()
    for i, f in enumerate(frames):
        where = f"frames[{i}]."
        if not isinstance(f, dict):
            raise _bad(path, f"frames[{i}]", f"must be an object, got {f!r}"[:200])
        d = _get(f, "dir", path, where, str)
        check_name(d, "frame dir", f"{path}: key 'frames[{i}].dir'", DatasetError)
        if d in dirs:
            raise _bad(path, f"frames[{i}].dir", f"repeats frame dir {d!r}")
        dirs.add(d)
        _get(f, "index", path, where, int)
        _get(f, "timestamp_us", path, where, int)
        if "supervises" in f:
            sup = _get(f, "supervises", path, where, list)
            bad = [h for h in sup if h not in SIM_HEADS]
            if bad or len(set(sup)) != len(sup):
                raise _bad(path, f"frames[{i}].supervises", f"must list distinct heads of {list(SIM_HEADS)}, got {sup!r}"[:300])
        _rigid(_get(f, "ego2world", path, where, list), path, f"frames[{i}].ego2world")
        if "cam2ego" in f:
            own = _get(f, "cam2ego", path, where, dict)
            if cameras is not None and set(own) != set(cameras):
                odd = sorted(set(cameras) - set(own)) or sorted(set(own) - set(cameras))
                raise _bad(path, f"frames[{i}].cam2ego", f"must give every camera of the rig {cameras} and no other "
                           f"(camera {odd[0]!r} is {'missing' if odd[0] in cameras else 'not in the rig'})")
            for cam, T in own.items():
                _rigid(T, path, f"frames[{i}].cam2ego.{cam}")


def check_labels(labels, path: Path, cameras: dict[str, tuple[int, int]], classes: list[str]) -> dict:
    """labels.json (docs/dataset_format.md): known cameras and classes, finite numbers, 2D boxes inside
    their image with x0 < x1 and y0 < y1, 3D boxes with positive sizes of plausible magnitude. Returns
    `labels`; a bad label raises DatasetError (a skip under on_bad_frame='skip'), never a silent wrong target."""
    if not isinstance(labels, dict):
        raise DatasetError(f"{path}: expected a JSON object, got {type(labels).__name__}; regenerate the frame", path)
    cams = _get(labels, "cameras", path, "", dict)
    for cam, c in cams.items():
        if cam not in cameras:
            raise _bad(path, f"cameras.{cam}", f"names no camera of this dataset's rig ({sorted(cameras)})")
        where = f"cameras.{cam}."
        if not isinstance(c, dict):
            raise _bad(path, f"cameras.{cam}", f"must be an object, got {type(c).__name__}")
        w, h = cameras[cam]
        for i, b in enumerate(_get(c, "boxes2d", path, where, list) if "boxes2d" in c else []):
            key = f"{where}boxes2d[{i}]"
            if not isinstance(b, dict):
                raise _bad(path, key, f"must be an object, got {b!r}"[:200])
            _check_class(b, classes, path, key)
            x0, y0, x1, y1 = _numbers(b.get("bbox"), 4, path, f"{key}.bbox")
            s = BBOX_SLACK_PX
            if not (x0 < x1 and y0 < y1):
                raise _bad(path, f"{key}.bbox", f"is inverted or empty: {[x0, y0, x1, y1]} (need x0 < x1, y0 < y1)")
            if not (-s <= x0 and x1 <= w + s and -s <= y0 and y1 <= h + s):
                raise _bad(path, f"{key}.bbox", f"{[x0, y0, x1, y1]} lies outside the {w}x{h} image")
        for i, lane in enumerate(_get(c, "lanes2d", path, where, list) if "lanes2d" in c else []):
            _lane(lane, 2, path, f"{where}lanes2d[{i}]")
    for i, b in enumerate(_get(labels, "boxes3d", path, "", list)):
        key = f"boxes3d[{i}]"
        if not isinstance(b, dict):
            raise _bad(path, key, f"must be an object, got {b!r}"[:200])
        _check_class(b, classes, path, key)
        c = _numbers(b.get("center"), 3, path, f"{key}.center")
        if np.linalg.norm(c) > MAX_BOX_CENTER_M:
            raise _bad(path, f"{key}.center", f"{c.tolist()} is more than {MAX_BOX_CENTER_M:.0f} m from the ego")
        size = _numbers(b.get("size"), 3, path, f"{key}.size")
        if not ((size > 0).all() and (size <= MAX_BOX_SIZE_M).all()):
            raise _bad(path, f"{key}.size", f"{size.tolist()} must lie in (0, {MAX_BOX_SIZE_M:.0f}] m")
        _number(b.get("yaw"), path, f"{key}.yaw")
        if "velocity" in b:
            v = _numbers(b["velocity"], 3, path, f"{key}.velocity")
            if np.linalg.norm(v) > MAX_SPEED_MPS:
                raise _bad(path, f"{key}.velocity", f"{v.tolist()} is faster than {MAX_SPEED_MPS:.0f} m/s")
        if "num_pixels" in b and not (isinstance(b["num_pixels"], int) and b["num_pixels"] >= 0):
            raise _bad(path, f"{key}.num_pixels", f"must be an integer >= 0, got {b['num_pixels']!r}")
    for i, lane in enumerate(_get(labels, "lanes3d", path, "", list) if "lanes3d" in labels else []):
        _lane(lane, 3, path, f"lanes3d[{i}]")
    if "ego_velocity" in labels:
        _numbers(labels["ego_velocity"], 3, path, "ego_velocity")
    return labels


def _check_class(b: dict, classes: list[str], path: Path, key: str) -> None:
    if b.get("class") not in classes:
        raise _bad(path, f"{key}.class", f"{b.get('class')!r} is not one of dataset.json's classes")


def _lane(lane, dim: int, path: Path, key: str) -> None:
    if not isinstance(lane, dict):
        raise _bad(path, key, f"must be an object, got {lane!r}"[:200])
    pts = lane.get("points")
    if not isinstance(pts, list):
        raise _bad(path, f"{key}.points", f"must be a list of points, got {pts!r}"[:200])
    for j, p in enumerate(pts):
        _numbers(p, dim, path, f"{key}.points[{j}]")
