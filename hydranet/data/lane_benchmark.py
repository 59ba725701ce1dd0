"""What the lane benchmarks' readers share (TuSimple, CULane): one uncalibrated front camera, lanes only, each
labelled frame its own scene. A subclass sets `format` and `title`, calls `_open`, fills its frames and calls
`_init_lanes_only`; its `load` builds the sample with `_lanes_sample`."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from hydranet.data.image import image_size
from hydranet.data.reader import DatasetError, FrameReader, decode_image, make_rig

CAMERA = "CAM_FRONT"
LANE_TYPES = ("unknown",)  # neither benchmark types its lanes


class LaneBenchmarkReader(FrameReader):
    title: str = "?"  # the benchmark's name as its authors write it, for notes and errors

    def _open(self, root, split: str | None, cameras, channels, on_bad_frame: str, fix: str) -> None:
        """The arguments every reader takes: `root` must be a folder (else DatasetError ending in `fix`)."""
        self.root = Path(root)
        self._init_policy(on_bad_frame)
        self._one_camera(cameras, CAMERA, self.title)
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: no such folder; {fix}", self.root)
        self.split, self.channels = split or "all", tuple(channels)

    def _init_lanes_only(self, scenes: list[dict], first_image: Path, default_size: tuple[int, int]) -> None:
        """scenes: [{"name", "frames": [one frame]}]; the rig's image size is the first image's (`default_size`
        (w, h), the benchmark's own, when its header cannot be read: that frame then fails on load, named)."""
        self.scenes = scenes
        self._index_frames()
        w, h = image_size(first_image) or default_size
        self.rig = make_rig(self.format, [(CAMERA, np.full((3, 3), np.nan), np.full((4, 4), np.nan), w, h)])
        self.camera_names = [CAMERA]
        self.supervises = frozenset({"lanes"})
        self.notes = [f"{self.title} labels lanes only and has no calibration: det2d, drivable and the geometry heads "
                      "get no labels from it"]
        self.meta = {"format": self.format, "split": self.split, "classes": [], "sign_classes": [], "light_states": [],
                     "lane_types": list(LANE_TYPES), "calibrated": False, "rig": self.rig.to_dict(),
                     "frame_rate_hz": 0.0, "scenes": [{"name": s["name"], "num_frames": 1} for s in self.scenes],
                     "class_map": {}, "supervises": sorted(self.supervises)}

    def _lanes_sample(self, i: int, lanes: list[dict], image: np.ndarray | None) -> dict:
        """The sample of frame i: its lanes2d, no calibration (NaN), and the image (H, W, 3) when read."""
        sample = {
            "format": self.format, "scene": self.scenes[i]["name"], "frame_index": 0, "timestamp_us": 0,
            "camera_names": [CAMERA],
            "intrinsics": np.full((1, 3, 3), np.nan, np.float32),  # unknown: the benchmark has no calibration
            "cam2ego": np.full((1, 4, 4), np.nan, np.float32),
            "ego2world": np.full((4, 4), np.nan),
            "labels": {"cameras": {CAMERA: {"boxes2d": [], "lanes2d": lanes, "dontcare": []}},
                       "boxes3d": [], "lanes3d": []},
            "supervises": set(self.supervises),
        }
        if image is not None:
            sample["images"] = image[None]  # (1, H, W, 3)
        return sample

    def image_wh(self, path: Path, image: np.ndarray | None, fix: str) -> tuple[int, int]:
        """(w, h) of a frame: of its decoded image, else read from the file's header (read without its pixels);
        DatasetError naming the image when neither is there (its lanes cannot be checked against its size)."""
        if image is not None:
            return image.shape[1], image.shape[0]
        size = image_size(path)
        if size is None:  # a header this parser does not read: decode it (raises naming what is wrong, if anything)
            img = decode_image(path, fix)
            size = (img.shape[1], img.shape[0])
        return size

    def own_classes(self, i: int, sample: dict) -> list[tuple[str, str | None]]:
        return []
