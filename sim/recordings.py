"""A sim dataset written the way cars record: camera videos (DIR/<clip>/<CAMERA>.mp4, OpenCV's mp4v writer,
one video frame per sim frame at the dataset's frame rate) or image sequences (ROOT/<clip>/<CAMERA>/
<timestamp_us>.jpg), with the rig file that names their cameras (RIG.yaml). What `hydranet engine ingest`
reads (docs/recordings.md); the truth stays in the sim dataset.

    hydranet sim export-videos --data DS --out DIR [--fps F] [--images]
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import yaml

from hydranet.io import frame_path
from hydranet.rig import camera_sizes


def _scenes(dataset: Path) -> tuple[dict, dict[str, list[dict]]]:
    meta = json.loads((dataset / "dataset.json").read_text())
    scenes = {s["name"]: json.loads(frame_path(dataset, s["name"], file="scene.json", where=str(dataset)).read_text())
              ["frames"] for s in meta["scenes"]}
    return meta, scenes


def write_rig(dataset: Path, out: Path) -> Path:
    """The sim dataset's rig (dataset.json) as a rig YAML file (docs/rig_format.md)."""
    meta = json.loads((Path(dataset) / "dataset.json").read_text())
    out.write_text(yaml.safe_dump(meta["rig"], sort_keys=False))
    return out


def write_videos(dataset: str | Path, out: str | Path, fps: float | None = None,
                 cameras: list[str] | None = None) -> Path:
    """out/<scene>/<CAMERA>.mp4 for every camera of a sim dataset (fps: the dataset's frame rate by default)."""
    dataset, out = Path(dataset), Path(out)
    meta, scenes = _scenes(dataset)
    fps = fps or float((meta.get("sim_config") or {}).get("frame_rate_hz") or 2.0)
    cams = cameras or list(camera_sizes(meta["rig"], f"{dataset / 'dataset.json'} rig"))
    for scene, frames in scenes.items():
        (out / scene).mkdir(parents=True, exist_ok=True)
        for cam in cams:
            paths = [frame_path(dataset, scene, f["dir"], f"{cam}.jpg", where=str(dataset)) for f in frames]
            h, w = cv2.imread(str(paths[0])).shape[:2]
            writer = cv2.VideoWriter(str(out / scene / f"{cam}.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
            if not writer.isOpened():
                raise OSError(f"{out / scene / f'{cam}.mp4'}: OpenCV cannot write MP4 (mp4v) here")
            for p in paths:
                writer.write(cv2.imread(str(p)))
            writer.release()
    return out


def write_image_sequences(dataset: str | Path, out: str | Path) -> Path:
    """out/<scene>/<CAMERA>/<timestamp_us>.jpg: the sim frames' own JPEG files, named by their timestamps."""
    dataset, out = Path(dataset), Path(out)
    meta, scenes = _scenes(dataset)
    cams = list(camera_sizes(meta["rig"], f"{dataset / 'dataset.json'} rig"))
    for scene, frames in scenes.items():
        for cam in cams:
            (out / scene / cam).mkdir(parents=True, exist_ok=True)
            for f in frames:
                shutil.copyfile(frame_path(dataset, scene, f["dir"], f"{cam}.jpg", where=str(dataset)),
                                out / scene / cam / f"{f['timestamp_us']}.jpg")
    return out
