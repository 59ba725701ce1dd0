"""A recorded fleet's frames read in place: FLEET/fleet.json (written by `hydranet engine ingest`,
docs/recordings.md) names, per frame and camera, a file under the recordings' root (read by the one image
decoder), a video frame (PyAV, frame-accurate) or a dataset reader's sample. `Recording` parses and checks the
file (every name and path stays inside its folder) and reads a frame's pixels; the data engine's
`RecordedFleet` adds what a fleet is to the engine, and a training set whose scene.json frames name a
recording (retrain's accepted set) reads its camera images here instead of from image files.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from hydranet.data.image import ImageError, read_image_file
from hydranet.data.reader import DatasetError, make_rig
from hydranet.data.video import VideoError, read_video_frame
from hydranet.io import PathOutsideRoot, check_name, path_inside
from hydranet.rig import Rig, RigError, rig_from_dict

RECORDED_FILE = "fleet.json"


class RecordingError(DatasetError):
    """A fleet.json that cannot be used; one line naming it and what to do."""


class Recording:
    """FLEET/fleet.json (data_engine/ingest.py, docs/recordings.md): clips of recorded frames whose images are
    read in place: files under the source root (one decoder), video frames (PyAV), or a dataset reader's
    samples. Every name and path in the file is checked to stay inside its folder."""

    def __init__(self, root: str | Path, error: type[Exception] = RecordingError):
        """`error`: the exception class of the file's refusals (the engine passes its FleetError)."""
        self.root, self.error = Path(root), error
        path = self.root / RECORDED_FILE
        try:
            meta = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise error(f"{path} is not valid JSON ({e}); ingest the recordings again") from None
        if not isinstance(meta, dict) or meta.get("format") != "hydranet-fleet" or not isinstance(meta.get("clips"), list):
            raise error(f"{path} is not a recorded fleet (format {meta.get('format') if isinstance(meta, dict) else None!r})"
                             "; ingest the recordings again with `hydranet engine ingest`")
        if meta.get("version") != 1:
            raise error(f"{path}: fleet format version {meta.get('version')!r}, this package reads version 1; ingest "
                             "the recordings again")
        src = meta.get("source") or {}
        self.meta, self.source = meta, src
        self.kind = src.get("kind")
        if self.kind not in ("dataset", "video", "images"):
            raise error(f"{path}: unknown source kind {self.kind!r}; ingest the recordings again")
        self.source_root = Path(str(src.get("root", "")))
        if not self.source_root.is_dir():
            raise error(f"{path}: its recordings at {self.source_root} are gone; restore them or ingest again")
        # links `engine ingest --follow-links` followed out of the root: their resolved targets, where fleet.json's
        # absolute references must lie (any other absolute reference is refused)
        self.linked = [Path(str(p)) for p in src.get("linked") or []] if src.get("follow_links") else []
        self.calibrated = meta.get("calibrated", True) is not False
        try:
            self._rig = rig_from_dict(meta.get("rig"), f"{path} rig") if self.calibrated else _uncalibrated(meta.get("rig"))
        except (RigError, ValueError, TypeError, KeyError) as e:
            raise error(f"{path}: bad rig ({e}); ingest the recordings again") from None
        self.rig_name = self._rig.name
        self.cameras = {c.name: (c.height, c.width) for c in self._rig.cameras}
        self.clip_names, self._clips = [], {}
        for i, c in enumerate(meta["clips"]):
            where = f"{path}: clips[{i}]"
            if not isinstance(c, dict) or not isinstance(c.get("frames"), list):
                raise error(f"{where} is not a clip {{name, tags, frames}}; ingest the recordings again")
            name = check_name(c.get("name"), "clip", where, error)
            if name in self._clips:
                raise error(f"{where}: clip {name!r} appears twice; ingest the recordings again")
            self.clip_names.append(name)
            self._clips[name] = c

    @property
    def rig(self):
        """The recording's Rig (cameras with K, camera-to-ego pose and size)."""
        return self._rig

    def clip_frames(self, name: str) -> list[dict[str, Any]]:
        """The clip's frames in order: {"index", "dir", "timestamp_us", "ego2world" (4, 4) or None}."""
        where = f"{self.root / RECORDED_FILE}: clip {name!r}"
        if name not in self._clips:
            raise self.error(f"{where} is not in the fleet ({len(self.clip_names)} clips); the fleet changed since the "
                             "catalog registered it")
        frames = []
        for k, f in enumerate(self._clips[name]["frames"]):
            try:
                pose = None if f.get("ego2world") is None else np.asarray(f["ego2world"], np.float64).reshape(4, 4)
                frames.append({"index": int(f["index"]), "dir": check_name(f["dir"], "frame dir", where, self.error),
                               "timestamp_us": int(f["timestamp_us"]), "ego2world": pose})
            except (KeyError, TypeError, ValueError) as e:
                raise self.error(f"{where} frame {k} is unreadable ({type(e).__name__}: {e}); ingest the recordings "
                                 "again") from None
        return frames

    def frame_refs(self, clip: str, frame_dir: str) -> dict[str, Any]:
        frames = self._clips[clip]["frames"]
        ref = next((f for f in frames if f.get("dir") == frame_dir), None)
        if ref is None:
            raise self.error(f"{self.root / RECORDED_FILE}: clip {clip!r} has no frame {frame_dir!r}; the fleet changed "
                             "since the catalog registered it")
        return ref["images"]

    def source_file(self, ref: str, where: str) -> Path:
        """The file a fleet.json reference names: a path relative to the source root that stays inside it (symlinks
        followed), or an absolute path under a link target ingest followed (`--follow-links`); else PathOutsideRoot."""
        if isinstance(ref, str) and self.linked and os.path.isabs(ref):
            real = Path(ref).resolve()
            if any(real == t or t in real.parents for t in self.linked):
                return Path(ref)
            raise PathOutsideRoot(f"{where}: path {ref!r} lies under neither {self.source_root} nor a link target ingest "
                                  f"followed ({', '.join(map(str, self.linked))}); ingest the recordings again")
        return path_inside(self.source_root, ref, where)

    def read(self, clip: str, frame_dir: str, cameras: list[str]) -> list[np.ndarray]:
        """N (H, W, 3) uint8 RGB images; ValueError naming the file (or video frame) that cannot be read."""
        refs = self.frame_refs(clip, frame_dir)
        if self.kind == "dataset":
            return self._dataset_images(refs["sample"], cameras)
        out = []
        for cam in cameras:
            ref = refs.get(cam)
            if ref is None:
                raise ValueError(f"fleet {self.root} clip {clip} frame {frame_dir} has no image of camera {cam}")
            where = f"{self.root / RECORDED_FILE}: clip {clip} frame {frame_dir} camera {cam}"
            if "video" in ref:
                path = self.source_file(ref["video"], where)
                try:
                    img = read_video_frame(path, int(ref["frame"]))
                except VideoError as e:
                    raise ValueError(str(e)) from None
            else:
                path = self.source_file(ref["file"], where)
                try:
                    img = cv2.cvtColor(read_image_file(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
                except OSError as e:
                    raise ValueError(f"{path}: {e.strerror or e}") from None
                except ImageError as e:
                    raise ValueError(f"{path}: image {e}") from None
            if img.shape[:2] != self.cameras[cam]:
                raise ValueError(f"{path}: image is {img.shape[1]}x{img.shape[0]}, the fleet's rig says camera {cam} is "
                                 f"{self.cameras[cam][1]}x{self.cameras[cam][0]}; ingest the recordings again")
            out.append(img)
        return out

    def _dataset_images(self, sample: int, cameras: list[str]) -> list[np.ndarray]:
        """A dataset source's frames come through its reader, which only the engine's RecordedFleet opens (the readers
        import the sim-format reader, which reads recordings: opening them here would be an import cycle)."""
        raise self.error(f"{self.root / RECORDED_FILE}: a {self.source.get('format')} dataset's frames are read through its "
                         "reader (data_engine.fleet.RecordedFleet), not in place")


def _uncalibrated(rig: dict) -> Rig:
    """The rig of a source without calibration (BDD100K): its cameras' names and sizes, K and cam2ego NaN (unknown:
    a camera-only model runs on it, a model needing geometry is refused)."""
    cams = [(check_name(c["name"], "camera", "rig", ValueError), np.full((3, 3), np.nan), np.full((4, 4), np.nan),
             int(c["width"]), int(c["height"])) for c in rig["cameras"]]
    if not cams or any(w < 1 or h < 1 for _, _, _, w, h in cams):
        raise ValueError("an uncalibrated rig needs cameras with a name, width and height")
    return make_rig(str(rig.get("name", "uncalibrated")), cams)


_OPEN: dict[str, Recording] = {}  # per process: recordings opened by `open_recording`


def open_recording(root: str | Path) -> Recording:
    """The Recording at `root`, opened once per process (a training set reads many frames of one fleet)."""
    key = str(Path(root).resolve())
    if key not in _OPEN:
        _OPEN[key] = Recording(root)
    return _OPEN[key]
