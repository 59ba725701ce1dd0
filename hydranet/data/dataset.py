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

import json
from pathlib import Path

import cv2
import numpy as np

from hydranet.rig import Rig, rig_from_dict

FORMAT = "hydranet-sim"
VERSION = 1
CHANNELS = ("images", "depth", "normals", "semantic", "instance", "bev")
DRIVABLE_CLASSES = ("road", "lane_marking", "crosswalk")
_GENERATE = "generate one with `hydranet sim generate`"


class DatasetError(ValueError):
    """The dataset on disk is missing, of another format, or has a broken file (`.path`, when known)."""

    def __init__(self, message: str, path: Path | None = None):
        super().__init__(message)
        self.path = path


def _read_json(path: Path, what: str = "file"):
    if not path.is_file():
        raise DatasetError(f"{path}: {what} is missing; regenerate the dataset ({_GENERATE})", path)
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: corrupt JSON ({e}); regenerate the dataset", path) from None


def read_image(path: Path, shape: tuple, dtype, color: bool = False) -> np.ndarray:
    """Decode one image file; RGB order for 3-channel images. Raises DatasetError if missing,
    truncated (JPEG without its end marker, PNG without IEND), undecodable or of another shape."""
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError:
        raise DatasetError(f"{path}: camera image is missing; regenerate the frame or use on_bad_frame='skip'", path) from None
    truncated = (path.suffix == ".jpg" and data[-2:].tobytes() != b"\xff\xd9") or (
        path.suffix == ".png" and data[-8:-4].tobytes() != b"IEND")
    img = None if truncated else cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if img is None:
        raise DatasetError(f"{path}: image is corrupt or truncated; regenerate the frame or use on_bad_frame='skip'", path)
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


class SimDataset:
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
    scene.json dicts, in order), `frame_ids` (list of (scene name, frame dir)), `skipped`.
    """

    def __init__(self, root, cameras: list[str] | None = None, channels=CHANNELS, on_bad_frame: str = "raise"):
        self.root = Path(root)
        if not (self.root / "dataset.json").is_file():
            raise DatasetError(f"{self.root} is not a hydranet-sim dataset (no dataset.json); {_GENERATE}")
        self.meta = _read_json(self.root / "dataset.json")
        fmt, ver = self.meta.get("format"), self.meta.get("version")
        if (fmt, ver) != (FORMAT, VERSION):
            raise DatasetError(f"{self.root / 'dataset.json'}: format {fmt!r} version {ver!r}, this reader reads "
                               f"{FORMAT!r} version {VERSION}; regenerate the dataset with this version")
        if on_bad_frame not in ("raise", "skip"):
            raise ValueError(f"on_bad_frame must be 'raise' or 'skip', got {on_bad_frame!r}")
        self.on_bad_frame = on_bad_frame
        self.channels = tuple(channels)
        unknown = sorted(set(self.channels) - set(CHANNELS))
        if unknown:
            raise ValueError(f"unknown channel {unknown[0]!r}; known channels: {list(CHANNELS)}")

        try:
            full = rig_from_dict(self.meta["rig"], f"{self.root / 'dataset.json'} rig")
        except (ValueError, KeyError) as e:
            raise DatasetError(f"{self.root / 'dataset.json'}: bad rig ({e}); regenerate the dataset") from None
        self.rig = full if cameras is None else _select(full, list(cameras))
        self.classes: list[str] = self.meta["classes"]
        self.semantic_classes: list[str] = self.meta["semantic_classes"]
        self._drivable_lut = self._drivable_table() if "semantic" in self.channels else None
        b = self.meta["bev"]
        self._bev_hw = (round((b["x_range"][1] - b["x_range"][0]) / b["resolution"]),
                        round((b["y_range"][1] - b["y_range"][0]) / b["resolution"]))

        self.scenes: list[dict] = []
        self._frames: list[tuple[int, int]] = []  # flat index -> (scene position, frame position)
        for si, entry in enumerate(self.meta["scenes"]):
            path = self.root / "scenes" / entry["name"] / "scene.json"
            scene = _read_json(path, "scene.json")
            if len(scene["frames"]) != entry["num_frames"]:
                raise DatasetError(f"{path}: lists {len(scene['frames'])} frames, dataset.json says "
                                   f"{entry['num_frames']}; regenerate the dataset")
            self.scenes.append(scene)
            self._frames += [(si, fi) for fi in range(len(scene["frames"]))]
        self.frame_ids: list[tuple[str, str]] = [
            (self.scenes[s]["name"], self.scenes[s]["frames"][f]["dir"]) for s, f in self._frames]
        self.skipped: list[str] = []
        self._bad: set[int] = set()

    def _drivable_table(self) -> np.ndarray:
        missing = [c for c in DRIVABLE_CLASSES if c not in self.semantic_classes]
        if missing:
            raise DatasetError(f"{self.root / 'dataset.json'}: semantic_classes lack {missing}, needed to derive "
                               "'drivable'; regenerate the dataset")
        lut = np.zeros(256, dtype=bool)  # semantic value -> drivable
        lut[[self.semantic_classes.index(c) for c in DRIVABLE_CLASSES]] = True
        return lut

    def __len__(self) -> int:
        return len(self._frames)

    def __getitem__(self, i: int) -> dict:
        return self._first_good(self._index(i))

    def clip(self, i: int, length: int, pad: bool = False) -> list[dict]:
        """The `length` consecutive frames of one scene ending at flat index i, oldest first.
        Raises ValueError if frame i has fewer than length-1 frames before it in its scene (see
        `clip_ends(length)` for the valid i), unless `pad`: then the clip starts with its scene's
        first frame repeated (a stream start: the video module sees no motion before it)."""
        i, ends = self._index(i), self.clip_ends(length, pad)
        if i not in ends:
            s, f = self._frames[i]
            raise ValueError(f"frame {i} is frame {f} of scene {self.scenes[s]['name']}; a clip of length {length} "
                             f"needs at least {length - 1} earlier frames; pick i from clip_ends({length}) or pass pad=True")
        pos = ends.index(i)
        order = ends[pos:] + ends[:pos]
        for j in order:
            have = min(length - 1, self._frames[j][1])  # earlier frames of its scene in the clip
            try:
                frames = [self._load_checked(k) for k in range(j - have, j + 1)]
            except DatasetError:
                if self.on_bad_frame == "raise":
                    raise
                continue
            return [frames[0]] * (length - 1 - have) + frames
        raise DatasetError(f"{self.root}: no clip of length {length} is readable ({len(self.skipped)} bad files); regenerate the dataset")

    def clip_ends(self, length: int, pad: bool = False) -> list[int]:
        """Flat indices i for which `clip(i, length)` has enough history in its scene (every
        frame with `pad`)."""
        if length < 1:
            raise ValueError(f"clip length must be >= 1, got {length}")
        return [i for i, (_, f) in enumerate(self._frames) if pad or f >= length - 1]

    # -- loading -------------------------------------------------------------------------
    def _index(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"frame index {i} out of range for {n} frames")
        return i % n

    def _first_good(self, i: int) -> dict:
        for k in range(len(self)):
            j = (i + k) % len(self)
            try:
                return self._load_checked(j)
            except DatasetError:
                if self.on_bad_frame == "raise":
                    raise
        raise DatasetError(f"{self.root}: no frame is readable ({len(self.skipped)} bad files); regenerate the dataset")

    def _load_checked(self, j: int) -> dict:
        """load(j), remembering bad frames in skip mode so they are read (and counted) once."""
        if j in self._bad:
            raise DatasetError(f"frame {j} was already found bad")
        try:
            return self.load(j)
        except DatasetError as e:
            if self.on_bad_frame == "skip":
                self._bad.add(j)
                self.skipped.append(str(e.path or e))
            raise

    def load(self, i: int) -> dict:
        """Frame i exactly as on disk (never skips); raises DatasetError on a bad file."""
        s, f = self._frames[i]
        scene, frame = self.scenes[s], self.scenes[s]["frames"][f]
        folder = self.root / "scenes" / scene["name"] / frame["dir"]
        cams = self.rig.cameras
        sample = {
            "scene": scene["name"],
            "frame_index": int(frame["index"]),
            "timestamp_us": int(frame["timestamp_us"]),
            "camera_names": self.rig.names,
            "intrinsics": np.stack([c.K for c in cams]).astype(np.float32),  # (N, 3, 3)
            "cam2ego": np.stack([c.cam2ego for c in cams]).astype(np.float32),  # (N, 4, 4)
            "ego2world": np.asarray(frame["ego2world"], dtype=np.float64),  # (4, 4)
        }
        ch = self.channels

        def per_cam(suffix, shape3, dtype, color=False):
            arrs = [read_image(folder / f"{c.name}{suffix}", (c.height, c.width) + shape3, dtype, color) for c in cams]
            # a rig with several resolutions gives a list (resize with hydranet.loader.resize_to)
            return np.stack(arrs) if len({a.shape for a in arrs}) == 1 else arrs

        if "images" in ch:
            sample["images"] = per_cam(".jpg", (3,), np.uint8, color=True)  # (N, H, W, 3)
        if "depth" in ch:
            sample["depth"] = _each(decode_depth, per_cam(".depth.png", (), np.uint16))  # (N, H, W)
        if "normals" in ch:
            sample["normals"] = _each(decode_normals, per_cam(".normal.png", (3,), np.uint8, color=True))  # (N, H, W, 3)
        if "semantic" in ch:
            sample["semantic"] = per_cam(".semantic.png", (), np.uint8)  # (N, H, W)
            sample["drivable"] = _each(lambda s: self._drivable_lut[s], sample["semantic"])  # (N, H, W) bool
        if "instance" in ch:
            sample["instance"] = _each(lambda a: a.astype(np.int32), per_cam(".instance.png", (), np.uint16))  # (N, H, W)
        if "bev" in ch:
            bev = read_image(folder / "bev.png", self._bev_hw + (3,), np.uint8, color=True)  # (X, Y, 3)
            sample["bev"] = np.ascontiguousarray(bev.transpose(2, 0, 1))  # (3, X, Y)
        sample["labels"] = _read_json(folder / "labels.json", "labels.json")
        return sample


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
