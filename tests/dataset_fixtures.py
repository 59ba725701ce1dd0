"""Fixture writers: small public-dataset folders in their official formats, written from the
sim's own frames so the truth is known (docs/datasets.md).

- `make_sim(root)`: a small 2 Hz sim dataset (the truth).
- `write_nuscenes(sim, out)`: nuScenes v1.0 tables (sim/nuscenes_export.py; the devkit loads them).
- `write_kitti(sim, out)`: KITTI object `training/{image_2,label_2,calib}` from the front camera.
- `write_bdd100k(sim, out)`: BDD100K `images/100k/<split>`, det_20 Scalabel JSON, drivable masks,
  lane polylines from the front camera.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np

from hydranet.data.dataset import SimDataset
from sim.config import SimConfig
from sim.generate import generate_dataset
from sim.nuscenes_export import export_nuscenes

SIM_CFG = SimConfig(frames_per_scene=4, image_width=160, image_height=96, frame_rate_hz=2.0)
SIM_SCENES, SIM_SEED = 2, 3


def make_sim(root, cfg: SimConfig = SIM_CFG, scenes: int = SIM_SCENES, seed: int = SIM_SEED) -> Path:
    return generate_dataset(Path(root), cfg, scenes, seed, progress=False)


def write_nuscenes(sim_root, out, version: str = "v1.0-mini") -> Path:
    return export_nuscenes(sim_root, out, version, progress=False)
