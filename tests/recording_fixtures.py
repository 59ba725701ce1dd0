"""Recordings written from sim frames, so their truth is known (sim/recordings.py: camera videos as
DIR/<clip>/<CAMERA>.mp4, image sequences as ROOT/<clip>/<CAMERA>/<timestamp_us>.jpg, the rig file)."""
from __future__ import annotations

import json
from pathlib import Path

from sim.recordings import write_image_sequences, write_rig, write_videos

__all__ = ["sim_clips", "sim_rig_file", "write_image_sequences", "write_videos"]


def sim_rig_file(dataset: Path, out: Path) -> Path:
    return write_rig(dataset, out)


def sim_clips(dataset: Path) -> dict[str, list[dict]]:
    """{scene: scene.json frames} of a sim dataset, in order."""
    meta = json.loads((dataset / "dataset.json").read_text())
    return {s["name"]: json.loads((dataset / "scenes" / s["name"] / "scene.json").read_text())["frames"]
            for s in meta["scenes"]}
