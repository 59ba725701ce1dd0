"""Per-frame calibration in the sim: the car body's pitch and roll (the horizon moves) and each
camera's mount jitter (`conditions.body_motion_deg`, `conditions.mount_jitter_deg`). Labels are
drawn with the frame's own extrinsics; the dataset stores them per frame (scene.json `cam2ego`),
the reader returns them, and the nuScenes export writes one calibrated_sensor per sample_data that
the official devkit projects with."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hydranet.data.sim_reader import SimDataset
from hydranet.geometry import transform_points, unproject, yaw_pitch_roll
from sim.classes import SEMANTIC_ID
from sim.config import SimConfig
from sim.generate import generate_dataset, sim_rig
from sim.nuscenes_export import export_nuscenes
from sim.render import Renderer
from sim.scene import frame_cameras, simulate
from sim.world import World

from devkit import needs_devkit

BASE = SimConfig(image_width=160, image_height=96, frames_per_scene=3)
MOVING = dataclasses.replace(BASE, conditions=dataclasses.replace(BASE.conditions, body_motion_deg=1.5,
                                                                   mount_jitter_deg=0.3))


def test_off_by_default_the_frames_have_the_rig_itself():
    rig = sim_rig(BASE)
    assert all(a is b for a, b in zip(frame_cameras(rig, BASE, 7, 0), rig.cameras))


def test_body_motion_tilts_every_camera_together_and_is_seeded():
    cfg = dataclasses.replace(BASE, conditions=dataclasses.replace(BASE.conditions, body_motion_deg=1.0))
    rig = sim_rig(cfg)
    f0, f1 = frame_cameras(rig, cfg, 7, 0), frame_cameras(rig, cfg, 7, 1)
    assert all(np.array_equal(a.cam2ego, b.cam2ego) for a, b in zip(f0, frame_cameras(rig, cfg, 7, 0)))
    pitch = [np.degrees(yaw_pitch_roll(c.cam2ego[:3, :3])[1] - yaw_pitch_roll(r.cam2ego[:3, :3])[1])
             for c, r in zip(f0, rig.cameras)]
    assert abs(pitch[0]) > 0.01 and not np.allclose(f0[0].cam2ego, f1[0].cam2ego)
    # a rigid rig on a moving body: camera-to-camera transforms do not change
    rel = lambda cams: np.linalg.inv(cams[0].cam2ego) @ cams[1].cam2ego  # noqa: E731
    np.testing.assert_allclose(rel(f0), rel(list(rig.cameras)), atol=1e-12)
    np.testing.assert_allclose(rel(f1), rel(list(rig.cameras)), atol=1e-12)


@pytest.fixture(scope="module")
def moving_scene():
    rig = sim_rig(MOVING)
    renderer = Renderer(rig)
    frames = list(simulate(World(MOVING, 1), rig, MOVING, renderer, 2))
    still = list(simulate(World(BASE, 1), rig, BASE, renderer, 2))
    renderer.ctx.release()
    return rig, frames, still


def _road_height(cam, img, cam2ego):
    rows, cols = np.nonzero(img.semantic == SEMANTIC_ID["road"])
    pc = unproject(np.stack([cols, rows], 1).astype(np.float64), img.depth[rows, cols].astype(np.float64), cam.K)
    return transform_points(cam2ego, pc)[:, 2]


def test_labels_and_pixels_follow_the_frames_own_extrinsics(moving_scene):
    """Road pixels back-projected with the frame's cam2ego land on the ground; with the rig's
    nominal cam2ego they do not (the camera really moved): the label geometry is the frame's."""
    rig, frames, _ = moving_scene
    worst_own, worst_nominal = 0.0, 0.0
    for f in frames:
        for cam, own, img in zip(rig.cameras, f["cameras"], f["images"]):
            if not (img.semantic == SEMANTIC_ID["road"]).any():
                continue
            worst_own = max(worst_own, np.abs(_road_height(cam, img, own.cam2ego)).max())
            worst_nominal = max(worst_nominal, np.abs(_road_height(cam, img, cam.cam2ego)).max())
    assert worst_own < 0.03 and worst_nominal > 0.2, (worst_own, worst_nominal)


def test_the_world_is_the_same_with_or_without_motion(moving_scene):
    """The body motion has its own random stream: same seed, same world and same 3D labels."""
    _, frames, still = moving_scene
    for a, b in zip(frames, still):
        np.testing.assert_array_equal(a["ego2world"], b["ego2world"])
        ca = {x["track_id"]: x["center"] for x in a["labels"]["boxes3d"]}
        cb = {x["track_id"]: x["center"] for x in b["labels"]["boxes3d"]}
        common = set(ca) & set(cb)
        assert len(common) >= 10 and all(ca[t] == cb[t] for t in common)


@pytest.fixture(scope="module")
def moving_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("calib")
    sim = generate_dataset(root / "sim", MOVING, 1, 3, progress=False)
    return sim, root


def test_dataset_stores_and_reads_each_frames_cam2ego(moving_dataset):
    sim, _ = moving_dataset
    ds = SimDataset(sim, channels=())
    got = [ds.load(i)["cam2ego"] for i in range(len(ds))]
    assert not np.allclose(got[0], got[1], atol=1e-5)
    cfg = MOVING
    for i, c in enumerate(got):
        expected = np.stack([cam.cam2ego for cam in frame_cameras(ds.rig, cfg, ds.scenes[0]["seed"], i)])
        np.testing.assert_allclose(c, expected, atol=1e-6)


@needs_devkit
def test_nuscenes_export_has_a_calibrated_sensor_per_sample_data(moving_dataset):
    from nuscenes.nuscenes import NuScenes
    from nuscenes.utils.geometry_utils import BoxVisibility

    sim, root = moving_dataset
    out = export_nuscenes(sim, root / "nusc", "v1.0-mini", progress=False)
    nusc = NuScenes(version="v1.0-mini", dataroot=str(out), verbose=False)
    ds = SimDataset(sim, channels=())
    sample = nusc.get("sample", nusc.scene[0]["first_sample_token"])
    checked = 0
    for i in range(len(ds)):
        s = ds.load(i)
        centers = {b["track_id"]: np.array(b["center"]) for b in s["labels"]["boxes3d"]}
        for n, cam in enumerate(ds.rig.cameras):
            sd = nusc.get("sample_data", sample["data"][cam.name])
            _, boxes, _ = nusc.get_sample_data(sd["token"], box_vis_level=BoxVisibility.NONE)
            for box in boxes:  # the devkit's camera-frame box, back to ego with this frame's cam2ego = our label
                tid = next(b["track_id"] for b in s["labels"]["boxes3d"]
                           if np.allclose(transform_points(s["cam2ego"][n].astype(np.float64), box.center),
                                          b["center"], atol=2e-3))
                assert tid in centers
                checked += 1
        sample = nusc.get("sample", sample["next"]) if sample["next"] else sample
    assert checked > 20
    assert len({c["token"] for c in nusc.calibrated_sensor}) > len(ds.rig) * len(ds)  # per frame, plus the shared ones
    # and the project's own nuScenes reader gives each frame's extrinsics back
    from hydranet.data.nuscenes import NuScenesDataset

    back = NuScenesDataset(out, version="v1.0-mini")
    assert len(back) == len(ds)
    for i in range(len(ds)):
        np.testing.assert_allclose(back.load(i)["cam2ego"], ds.load(i)["cam2ego"], atol=1e-5)

