"""BEV augmentation (a random yaw of the ego frame): what the cameras see and where things are in
the world must not change; the BEV raster and boxes turn with the frame; all frames of a clip
turn alike."""
from __future__ import annotations

import numpy as np
import pytest

from hydranet.bev_augment import rotate_raster, rotate_sample
from hydranet.bevgrid import BevGrid
from hydranet.geometry import box_corners, invert_rigid, make_transform, project, rot_z, transform_points
from hydranet.loader import Augmenter
from hydranet.rig import load_rig

GRID = BevGrid((-16.0, 16.0), (-16.0, 16.0), 0.5)  # 64 x 64 raster


def _sample(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    rig = load_rig("nuscenes6").resized(96, 64)
    boxes = [{"center": [float(x), float(y), 0.8], "size": [4.0, 1.8, 1.6], "yaw": float(rng.uniform(-3, 3)),
              "velocity": [float(rng.normal(0, 5)), float(rng.normal(0, 5)), 0.0], "class": "car", "track_id": k + 1,
              "num_pixels": 40} for k, (x, y) in enumerate([(10.0, 3.0), (-6.0, -4.5), (2.0, 12.0)])]
    bev = rng.integers(0, 255, (3, *GRID.shape), dtype=np.uint8)
    return {"images": np.zeros((len(rig), 64, 96, 3), np.uint8), "camera_names": rig.names,
            "intrinsics": np.stack([c.K for c in rig.cameras]).astype(np.float32),
            "cam2ego": np.stack([c.cam2ego for c in rig.cameras]).astype(np.float32),
            "ego2world": make_transform(rot_z(0.3), [120.0, -40.0, 0.0]), "bev": bev,
            "labels": {"cameras": {}, "boxes3d": boxes, "ego_velocity": [8.0, 0.5, 0.0],
                       "lanes3d": [{"points": [[0.0, 1.75, 0.0], [20.0, 1.75, 0.0]], "type": "dashed_white", "lane_id": 1}]}}


@pytest.mark.parametrize("theta", [0.4, -2.0])
def test_cameras_see_the_same_pixels_and_the_world_does_not_move(theta):
    s = _sample()
    r = rotate_sample(s, theta, GRID)
    for b0, b1 in zip(s["labels"]["boxes3d"], r["labels"]["boxes3d"], strict=True):
        c0 = box_corners(b0["center"], b0["size"], b0["yaw"])  # (8, 3) ego
        c1 = box_corners(b1["center"], b1["size"], b1["yaw"])
        # the same world corners ...
        np.testing.assert_allclose(transform_points(r["ego2world"], c1), transform_points(s["ego2world"], c0), atol=1e-6)
        # ... and the same camera pixels (the images are not touched)
        for n in range(len(s["camera_names"])):
            p0 = transform_points(invert_rigid(s["cam2ego"][n].astype(np.float64)), c0)
            p1 = transform_points(invert_rigid(r["cam2ego"][n].astype(np.float64)), c1)
            front = p0[:, 2] > 0.5  # corners in front of the camera
            np.testing.assert_allclose(project(p1[front], s["intrinsics"][n])[0], project(p0[front], s["intrinsics"][n])[0],
                                       atol=1e-3)
        # velocity over the ground, in world axes, unchanged
        np.testing.assert_allclose(r["ego2world"][:3, :3] @ b1["velocity"], s["ego2world"][:3, :3] @ b0["velocity"], atol=1e-6)
    np.testing.assert_allclose(r["ego2world"][:3, :3] @ r["labels"]["ego_velocity"],
                               s["ego2world"][:3, :3] @ s["labels"]["ego_velocity"], atol=1e-6)
    lane0, lane1 = (np.asarray(x["labels"]["lanes3d"][0]["points"]) for x in (s, r))
    np.testing.assert_allclose(transform_points(r["ego2world"], lane1), transform_points(s["ego2world"], lane0), atol=1e-6)
    assert s["labels"]["boxes3d"][0]["center"] == [10.0, 3.0, 0.8]  # the input is not modified


def test_raster_turns_with_the_frame():
    """A quarter turn left (theta = +90 deg) puts what was ahead (top rows) on the left (first columns)."""
    raster = np.random.default_rng(1).integers(0, 255, (3, *GRID.shape), dtype=np.uint8)
    quarter, inside = rotate_raster(raster, GRID, np.pi / 2)
    np.testing.assert_array_equal(quarter, np.rot90(raster, 1, axes=(1, 2)))
    assert inside.all()
    np.testing.assert_array_equal(rotate_raster(raster, GRID, 0.0)[0], raster)
    theta = 0.3  # any other yaw: every destination cell by hand (nearest source cell, 0 outside)
    turned, inside = rotate_raster(raster, GRID, theta)
    X, Y = GRID.shape
    expected = np.zeros_like(raster)
    expected_inside = np.zeros(GRID.shape, bool)
    for r in range(X):
        for c in range(Y):
            x, y = 16.0 - (r + 0.5) * 0.5, 16.0 - (c + 0.5) * 0.5
            xo, yo = np.cos(theta) * x + np.sin(theta) * y, -np.sin(theta) * x + np.cos(theta) * y
            ro, co = int(np.floor((16.0 - xo) / 0.5)), int(np.floor((16.0 - yo) / 0.5))
            if 0 <= ro < X and 0 <= co < Y:
                expected[:, r, c] = raster[:, ro, co]
                expected_inside[r, c] = True
    assert (turned != expected).any(0).mean() < 0.002  # only ties at cell borders may differ
    assert (inside != expected_inside).mean() < 0.002 and 0.8 < inside.mean() < 0.95
    assert (turned[:, 0, 0] == 0).all() and (turned[:, X // 2, Y // 2] == raster[:, X // 2, Y // 2]).all()


def test_a_box_on_the_raster_stays_on_its_box():
    """The object cell of the raster and the box centre turn together."""
    s = _sample()
    s["bev"] = np.zeros((3, *GRID.shape), np.uint8)
    x, y, _ = s["labels"]["boxes3d"][0]["center"]
    r0, c0 = np.floor(GRID.to_cell(np.array([x, y])) + 0.5).astype(int)
    s["bev"][2, r0 - 1:r0 + 2, c0 - 1:c0 + 2] = 1
    r = rotate_sample(s, 0.7, GRID)
    x1, y1, _ = r["labels"]["boxes3d"][0]["center"]
    r1, c1 = np.floor(GRID.to_cell(np.array([x1, y1])) + 0.5).astype(int)
    assert r["bev"][2, r1, c1] == 1


def test_augmenter_turns_every_frame_of_a_clip_alike_and_is_seeded():
    aug = Augmenter(photometric=False, geometric=False, bev_rotation_deg=30.0, bev_raster_grid=GRID)
    assert aug.active
    a, b = _sample(0), _sample(1)  # two frames of one clip share the item key
    ra, rb = aug(a, (0, 3, 17)), aug(b, (0, 3, 17))
    R_a = ra["cam2ego"][0, :3, :3] @ a["cam2ego"][0, :3, :3].T
    R_b = rb["cam2ego"][0, :3, :3] @ b["cam2ego"][0, :3, :3].T
    np.testing.assert_allclose(R_a, R_b, atol=1e-5)
    yaw = np.arctan2(R_a[1, 0], R_a[0, 0])
    assert 0 < abs(yaw) <= np.deg2rad(30.0) + 1e-6
    other = aug(a, (0, 3, 18))["cam2ego"][0, :3, :3] @ a["cam2ego"][0, :3, :3].T
    assert not np.allclose(other, R_a)  # another item, another yaw
    assert not Augmenter(photometric=False, geometric=False).active
    with pytest.raises(ValueError, match="bev_rotation_deg"):
        Augmenter(bev_rotation_deg=-1.0)


def test_bevmap_ignores_cells_turned_in_from_outside():
    """The corners a turn brings in from outside the raster are unknown: bevmap's targets mark them
    invalid instead of teaching "no road" there."""
    from hydranet.tasks.bevmap import BevMapTask

    task = BevMapTask(8, BevGrid((-16.0, 16.0), (-16.0, 16.0), 2.0), GRID)  # 16 x 16 cells over the 64 x 64 raster
    s = _sample()
    s["bev"] = np.full((3, *GRID.shape), 255, np.uint8)  # road everywhere
    assert task.build_targets(s)["valid"].all()
    t = task.build_targets(rotate_sample(s, np.deg2rad(30.0), GRID))
    valid, road = t["valid"][0], t["mask"][0, 0]
    assert not valid[0, 0] and not valid[-1, -1] and valid[8, 8]  # corners unknown, centre known
    assert road[valid].all()  # every known cell is still road
