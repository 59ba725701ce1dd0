"""A one-camera dashcam is a first-class rig (issue 32 item 3, docs/recordings.md "A one-camera dashcam"): the
`dashcam` rig preset renders a sim dataset, configs/dashcam.yaml trains the camera heads on its one camera, and
the export runs in shadow mode on a genuine-style recording of another camera (its own size and calibration)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import cv2
import numpy as np

from hydranet.cli import main


def _recording(folder: Path, size: tuple[int, int], frames: int = 3) -> Path:
    """One clip of one CAM_FRONT video at `size` (W, H) with its own rig file (70 degrees, another mount)."""
    clip = folder / "clip_a"
    clip.mkdir(parents=True)
    w, h = size
    out = cv2.VideoWriter(str(clip / "CAM_FRONT.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 10, size)
    rng = np.random.default_rng(0)
    for k in range(frames):
        img = np.full((h, w, 3), 90, np.uint8)
        img[h // 2:] = 60  # a road below the horizon
        img[h // 2 + 10:h // 2 + 40, w // 3 + 8 * k:w // 3 + 60 + 8 * k] = rng.integers(0, 255, 3)  # something ahead
        out.write(img)
    out.release()
    (folder / "rig.yaml").write_text(f"name: my_dashcam\ncameras:\n  - {{name: CAM_FRONT, width: {w}, height: {h}, "
                                     "hfov_deg: 70.0, translation: [1.4, 0.0, 1.25], ypr_deg: [0.0, 0.0, 0.0]}\n")
    return folder


def test_dashcam_model_trains_on_the_preset_and_shadows_a_one_camera_recording(tmp_path):
    sim, run, onnx = tmp_path / "sim", tmp_path / "run", tmp_path / "model.onnx"
    assert main(["sim", "generate", "--out", str(sim), "--rig", "dashcam", "--scenes", "2", "--seed", "0", "--quiet",
                 "--set", "frames_per_scene=2"]) == 0
    assert main(["train", "--config", "dashcam", "--out", str(run), "--quiet", "--set", f"data.root={sim}", "--set",
                 "steps=2", "--set", "checkpoint_every=2", "--set", "batch_size=2", "--set", "device=cpu"]) == 0
    assert main(["export", "--checkpoint", str(run), "--out", str(onnx)]) == 0
    rec = _recording(tmp_path / "videos", (640, 360))
    fleet, cat = tmp_path / "fleet", tmp_path / "cat.db"
    assert main(["engine", "ingest", "--out", str(fleet), "--source", "video", "--videos", str(rec), "--rig",
                 str(rec / "rig.yaml"), "--hz", "10", "--quiet"]) == 0
    assert main(["engine", "shadow", "--onnx", str(onnx), "--data", str(fleet), "--catalog", str(cat), "--workers",
                 "1", "--quiet"]) == 0
    with sqlite3.connect(cat) as db:
        rows = db.execute("SELECT status, det2d_entropy, drivable_entropy FROM signals").fetchall()
    assert len(rows) == 3 and all(r[0] == "ok" and np.isfinite(r[1]) and np.isfinite(r[2]) for r in rows)
