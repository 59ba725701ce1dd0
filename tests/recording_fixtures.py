"""Recordings written from sim frames, so their truth is known: camera videos (cv2.VideoWriter, mp4v) laid out
as DIR/<clip>/<CAMERA>.mp4, image sequences as ROOT/<clip>/<CAMERA>/<timestamp_us>.jpg, and the rig file
that names their cameras."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import yaml


def sim_rig_file(dataset: Path, out: Path) -> Path:
    """The sim dataset's rig (dataset.json) as a rig YAML file."""
    out.write_text(yaml.safe_dump(json.loads((dataset / "dataset.json").read_text())["rig"], sort_keys=False))
    return out


def sim_clips(dataset: Path) -> dict[str, list[dict]]:
    """{scene: scene.json frames} of a sim dataset, in order."""
    meta = json.loads((dataset / "dataset.json").read_text())
    return {s["name"]: json.loads((dataset / "scenes" / s["name"] / "scene.json").read_text())["frames"]
            for s in meta["scenes"]}


def write_videos(dataset: Path, out: Path, fps: float = 2.0, cameras: list[str] | None = None) -> Path:
    """out/<scene>/<CAMERA>.mp4 of every camera of a sim dataset, one video frame per sim frame."""
    meta = json.loads((dataset / "dataset.json").read_text())
    cams = cameras or [c["name"] for c in meta["rig"]["cameras"]]
    for scene, frames in sim_clips(dataset).items():
        (out / scene).mkdir(parents=True, exist_ok=True)
        for cam in cams:
            first = cv2.imread(str(dataset / "scenes" / scene / frames[0]["dir"] / f"{cam}.jpg"))
            h, w = first.shape[:2]
            writer = cv2.VideoWriter(str(out / scene / f"{cam}.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
            assert writer.isOpened()
            for f in frames:
                writer.write(cv2.imread(str(dataset / "scenes" / scene / f["dir"] / f"{cam}.jpg")))
            writer.release()
    return out


def write_image_sequences(dataset: Path, out: Path) -> Path:
    """out/<scene>/<CAMERA>/<timestamp_us>.jpg: the sim frames' own JPEG files, named by their timestamps."""
    meta = json.loads((dataset / "dataset.json").read_text())
    for scene, frames in sim_clips(dataset).items():
        for cam in (c["name"] for c in meta["rig"]["cameras"]):
            (out / scene / cam).mkdir(parents=True, exist_ok=True)
            for f in frames:
                shutil.copyfile(dataset / "scenes" / scene / f["dir"] / f"{cam}.jpg",
                                out / scene / cam / f"{f['timestamp_us']}.jpg")
    return out
