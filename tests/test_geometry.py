"""hydranet.geometry against independent references (cv2.projectPoints, closed forms) and the
GL projection of sim/render.py against the pinhole model K."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from hydranet.geometry import (Camera, box_corners, camera_rotation, invert_rigid, make_transform,
                               matrix_to_quaternion, project, quaternion_to_matrix, rot_z, transform_points,
                               unproject, yaw_pitch_roll, yaw_to_quaternion)
from sim.render import FAR, NEAR, projection


def random_K(rng: np.random.Generator, width=800, height=450, skew: bool = False) -> np.ndarray:
    """Random intrinsics; zero skew unless asked (cv2.projectPoints reads only fx, fy, cx, cy)."""
    fx = rng.uniform(200, 1500)
    return np.array([[fx, rng.uniform(-2, 2) if skew else 0.0, rng.uniform(0.3, 0.7) * width],
                     [0, fx * rng.uniform(0.9, 1.1), rng.uniform(0.3, 0.7) * height],
                     [0, 0, 1]])


def random_pose(rng: np.random.Generator) -> np.ndarray:
    R = camera_rotation(rng.uniform(-np.pi, np.pi), rng.uniform(-0.6, 0.6), rng.uniform(-0.3, 0.3))
    return make_transform(R, rng.normal(0, 2, 3))


def points_in_front(rng, cam2ego, n=200):
    """Ego-frame points with camera-frame z in [1, 80]."""
    pc = np.stack([rng.uniform(-30, 30, n), rng.uniform(-20, 20, n), rng.uniform(1, 80, n)], 1)
    return transform_points(cam2ego, pc)


@pytest.mark.parametrize("seed", range(5))
def test_project_matches_cv2_project_points(seed):
    rng = np.random.default_rng(seed)
    K = random_K(rng)
    cam2ego = random_pose(rng)
    pts_ego = points_in_front(rng, cam2ego)
    cam = Camera("CAM", K, cam2ego, 800, 450)
    uv, z = cam.project_ego(pts_ego)
    ego2cam = invert_rigid(cam2ego)
    rvec, _ = cv2.Rodrigues(ego2cam[:3, :3])
    ref, _ = cv2.projectPoints(pts_ego.reshape(-1, 1, 3), rvec, ego2cam[:3, 3].copy(), K, None)
    np.testing.assert_allclose(uv, ref.reshape(-1, 2), atol=1e-6, rtol=0)
    np.testing.assert_allclose(z, transform_points(ego2cam, pts_ego)[:, 2], atol=1e-9)
    assert (z > 0.99).all()


def test_project_unproject_round_trip():
    rng = np.random.default_rng(1)
    K = random_K(rng, skew=True)
    pc = np.stack([rng.uniform(-10, 10, 500), rng.uniform(-5, 5, 500), rng.uniform(0.5, 100, 500)], 1)
    uv, z = project(pc, K)
    np.testing.assert_allclose(unproject(uv, z, K), pc, atol=1e-9, rtol=1e-9)
    # and the other way: pixels -> points -> the same pixels, with batch dims kept
    uv2 = rng.uniform(0, 800, (4, 7, 2))
    d = rng.uniform(1, 50, (4, 7))
    p = unproject(uv2, d, K)
    assert p.shape == (4, 7, 3)
    back, zz = project(p, K)
    np.testing.assert_allclose(back, uv2, atol=1e-8)
    np.testing.assert_allclose(zz, d, atol=1e-12)


def test_invert_rigid():
    rng = np.random.default_rng(2)
    T = np.stack([random_pose(rng) for _ in range(6)]).reshape(2, 3, 4, 4)
    inv = invert_rigid(T)
    np.testing.assert_allclose(inv @ T, np.broadcast_to(np.eye(4), T.shape), atol=1e-12)
    np.testing.assert_allclose(inv[0, 1], np.linalg.inv(T[0, 1]), atol=1e-12)


def test_quaternion_round_trip():
    rng = np.random.default_rng(3)
    for _ in range(50):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        R = quaternion_to_matrix(q)
        assert np.allclose(R @ R.T, np.eye(3), atol=1e-12) and np.isclose(np.linalg.det(R), 1)
        q2 = matrix_to_quaternion(R)
        assert q2[0] >= 0
        np.testing.assert_allclose(q2, q * np.sign(q[0]), atol=1e-9)
        np.testing.assert_allclose(quaternion_to_matrix(q2), R, atol=1e-12)
    # branches of matrix_to_quaternion where the trace is negative (rotations near 180 deg)
    for axis in np.eye(3):
        q = np.concatenate([[0.01], axis])
        q /= np.linalg.norm(q)
        np.testing.assert_allclose(quaternion_to_matrix(matrix_to_quaternion(quaternion_to_matrix(q))),
                                   quaternion_to_matrix(q), atol=1e-12)


@pytest.mark.parametrize("yaw", [-3.0, -1.2, 0.0, 0.4, 2.5, np.pi - 1e-3])
def test_yaw_to_quaternion_matches_rot_z(yaw):
    np.testing.assert_allclose(yaw_to_quaternion(yaw), matrix_to_quaternion(rot_z(yaw)), atol=1e-12)
    np.testing.assert_allclose(quaternion_to_matrix(yaw_to_quaternion(yaw)), rot_z(yaw), atol=1e-12)


def test_yaw_pitch_roll_inverts_camera_rotation():
    rng = np.random.default_rng(4)
    for _ in range(100):
        ypr = (rng.uniform(-np.pi + 0.01, np.pi - 0.01), rng.uniform(-1.4, 1.4), rng.uniform(-np.pi + 0.01, np.pi - 0.01))
        np.testing.assert_allclose(yaw_pitch_roll(camera_rotation(*ypr)), ypr, atol=1e-9)


def test_camera_axes_for_zero_yaw():
    R = camera_rotation(0.0)
    np.testing.assert_allclose(R @ [0, 0, 1], [1, 0, 0], atol=1e-12)  # optical axis = ego +x
    np.testing.assert_allclose(R @ [1, 0, 0], [0, -1, 0], atol=1e-12)  # image right = ego -y
    np.testing.assert_allclose(R @ [0, 1, 0], [0, 0, -1], atol=1e-12)  # image down = ego -z
    # a positive yaw turns the camera to the left (ego +y); positive pitch tilts it down
    np.testing.assert_allclose(camera_rotation(np.pi / 2) @ [0, 0, 1], [0, 1, 0], atol=1e-12)
    assert (camera_rotation(0.0, 0.2) @ [0, 0, 1])[2] < 0
    # seen from a front camera 1.5 m up, a point ahead and to the left sits left of centre and a
    # point on the ground below the horizon
    K = np.array([[500.0, 0, 400], [0, 500, 225], [0, 0, 1]])
    cam = Camera("CAM_FRONT", K, make_transform(R, [0, 0, 1.5]), 800, 450)
    uv, z = cam.project_ego(np.array([[10.0, 2.0, 1.5], [10.0, 0.0, 0.0]]))
    assert uv[0, 0] < 400 and abs(uv[0, 1] - 225) < 1e-9 and z[0] == pytest.approx(10)
    assert uv[1, 1] > 225 and abs(uv[1, 0] - 400) < 1e-9


def test_camera_scaled_keeps_projection():
    rng = np.random.default_rng(5)
    cam = Camera("CAM", random_K(rng, 1600, 900), random_pose(rng), 1600, 900)
    pts = points_in_front(rng, cam.cam2ego)
    uv, z = cam.project_ego(pts)
    for w, h in [(160, 96), (800, 450), (321, 177)]:
        small = cam.scaled(w, h)
        assert (small.width, small.height) == (w, h)
        uv2, z2 = small.project_ego(pts)
        s = np.array([w / 1600, h / 900])
        # pixel centres at integer coordinates: pixel u covers [u-0.5, u+0.5]
        np.testing.assert_allclose(uv2, (uv + 0.5) * s - 0.5, atol=1e-8)
        np.testing.assert_allclose(z2, z)
    # the image corners map onto the image corners
    small = cam.scaled(160, 96)
    corner_rays = unproject(np.array([[-0.5, -0.5], [1599.5, 899.5]]), np.ones(2), cam.K)
    np.testing.assert_allclose(project(corner_rays, small.K)[0], [[-0.5, -0.5], [159.5, 95.5]], atol=1e-8)


def test_camera_scaled_keeps_projection_with_skew():
    rng = np.random.default_rng(6)
    cam = Camera("CAM", random_K(rng, 1600, 900, skew=True), random_pose(rng), 1600, 900)
    pts = points_in_front(rng, cam.cam2ego)
    uv, _ = cam.project_ego(pts)
    uv2, _ = cam.scaled(160, 96).project_ego(pts)
    np.testing.assert_allclose(uv2, (uv + 0.5) * [0.1, 96 / 900] - 0.5, atol=1e-8)


@pytest.mark.parametrize("seed", range(3))
def test_gl_projection_matches_K(seed):
    rng = np.random.default_rng(seed)
    W, H = 320, 192
    K = random_K(rng, W, H, skew=True)
    P = projection(K, W, H)
    pc = np.stack([rng.uniform(-5, 5, 100), rng.uniform(-3, 3, 100), rng.uniform(NEAR + 0.1, FAR - 1, 100)], 1)
    clip = np.concatenate([pc, np.ones((100, 1))], 1) @ P.T
    assert (clip[:, 3] > 0).all()
    ndc = clip[:, :3] / clip[:, 3:]
    # viewport transform with the documented convention: pixel centre u sits at
    # NDC x = 2 (u + 0.5) / W - 1, and image row v at framebuffer row v (NDC y = 2 (v + 0.5) / H - 1)
    u = (ndc[:, 0] + 1) * W / 2 - 0.5
    v = (ndc[:, 1] + 1) * H / 2 - 0.5
    uv_ref, z = project(pc, K)
    np.testing.assert_allclose(np.stack([u, v], 1), uv_ref, atol=1e-6)
    # depth: near -> -1, far -> +1, monotonic in z in between
    assert (np.abs(ndc[:, 2]) <= 1).all()
    ends = np.array([[0, 0, NEAR, 1], [0, 0, FAR, 1]]) @ P.T
    np.testing.assert_allclose(ends[:, 2] / ends[:, 3], [-1, 1], atol=1e-9)
    order = np.argsort(z)
    assert (np.diff(ndc[order, 2]) >= 0).all()


def test_box_corners():
    c = box_corners([1.0, 2.0, 0.75], [4.0, 2.0, 1.5], np.pi / 2)
    assert c.shape == (8, 3)
    np.testing.assert_allclose(c.mean(0), [1, 2, 0.75], atol=1e-12)
    # yaw 90 deg: length along ego y
    np.testing.assert_allclose(np.ptp(c, 0), [2, 4, 1.5], atol=1e-12)
    np.testing.assert_allclose(c[:4, 2], 0.0, atol=1e-12)  # bottom face first
    np.testing.assert_allclose(c[0], [1 - 1, 2 + 2, 0], atol=1e-12)  # front-left: front = +y after the turn


def test_boxes_corners_is_box_corners_per_row():
    """The batched corners (the engine's signals) in the same order as one box's (labels, pictures)."""
    from hydranet.geometry import boxes_corners

    rows = np.array([[1.0, 2.0, 0.75, 4.0, 2.0, 1.5, 0.3, 9.9], [-3.0, 0.5, 1.0, 1.0, 0.6, 1.8, -2.0, 0.0]])
    got = boxes_corners(rows)
    assert got.shape == (2, 8, 3)
    for r, c in zip(rows, got):
        np.testing.assert_allclose(c, box_corners(r[:3], r[3:6], r[6]), atol=1e-12)
