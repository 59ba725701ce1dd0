"""nuScenes reader (hydranet/data/nuscenes.py): sim -> nuScenes tables -> reader gives the sim's
labels back, and the official devkit's `get_sample_data` boxes for every camera."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dataset_fixtures import make_sim, write_nuscenes
from devkit import HAVE_DEVKIT, needs_devkit
from hydranet.data.reader import DatasetError
from hydranet.data.sim_reader import SimDataset
from hydranet.data.nuscenes import CATEGORY_MAP, CLASSES, NuScenesDataset
from hydranet.data.reader import NEAR, box_in_camera, project_box_2d
from hydranet.geometry import invert_rigid
from sim.nuscenes_export import CATEGORY, token

if HAVE_DEVKIT:
    from nuscenes.nuscenes import NuScenes
    from nuscenes.utils.geometry_utils import BoxVisibility, view_points
    from pyquaternion import Quaternion


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("nusc_reader")
    sim = make_sim(root / "sim")
    return SimDataset(sim, channels=("images",)), write_nuscenes(sim, root / "nusc")


@pytest.fixture(scope="module")
def ds(fixture):
    return NuScenesDataset(fixture[1])


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def test_round_trip_gives_back_the_sim_labels(fixture, ds):
    sim, _ = fixture
    assert len(ds) == len(sim) and ds.camera_names == sim.rig.names
    assert [s["name"] for s in ds.scenes] == [s["name"] for s in sim.scenes]
    moving_checked = 0
    for i in range(len(sim)):
        truth, got = sim.load(i), ds[i]
        assert got["scene"] == truth["scene"] and got["frame_index"] == truth["frame_index"]
        assert got["supervises"] == {"det2d", "det3d"}
        np.testing.assert_allclose(got["intrinsics"], truth["intrinsics"], atol=1e-5)  # exact up to the tables' 6 decimals
        np.testing.assert_allclose(got["cam2ego"], truth["cam2ego"], atol=1e-5)
        np.testing.assert_allclose(got["ego2world"], truth["ego2world"], atol=1e-5)
        np.testing.assert_array_equal(got["images"], truth["images"])  # the same JPEG bytes
        kept = {b["track_id"]: b for b in truth["labels"]["boxes3d"] if b["num_pixels"] > 0}
        by_inst = {token("instance", truth["scene"], tid): b for tid, b in kept.items()}
        assert len(got["labels"]["boxes3d"]) == len(kept)
        for b in got["labels"]["boxes3d"]:
            t = by_inst[b["instance_token"]]
            assert b["class"] == CATEGORY_MAP[CATEGORY[t["class"]]] == (t["class"])
            np.testing.assert_allclose(b["center"], t["center"], atol=0.01)
            np.testing.assert_allclose(b["size"], t["size"], atol=0.01)
            assert abs(_wrap(b["yaw"] - t["yaw"])) < 0.01
            assert b["num_points"] == t["num_pixels"]
            if t["class"] in ("car", "truck", "bus", "pedestrian", "construction_vehicle"):
                assert b["attributes"]["moving"] == t["attributes"]["moving"]
            if t["class"] == "cyclist":
                assert b["attributes"]["has_rider"] is True
            ann = ds._ann[b["annotation_token"]]
            if t["attributes"].get("moving") and ann["prev"] and ann["next"]:
                # centred differences over 1 s: within the finite-difference error of the sim's speed
                assert np.linalg.norm(np.array(b["velocity"][:2]) - np.array(t["velocity"][:2])) < 1.0
                moving_checked += 1
            elif not (ann["prev"] or ann["next"]):
                assert np.isnan(b["velocity"]).all()  # as the devkit: no neighbour, no velocity
    assert moving_checked > 3


@needs_devkit
def test_boxes_equal_the_devkit_for_every_camera(fixture, ds):
    nusc = NuScenes(version="v1.0-mini", dataroot=str(fixture[1]), verbose=False)
    compared = with_2d = 0
    for i in range(len(ds)):
        s = ds[i]
        sample = nusc.get("sample", s["sample_token"])
        ours = {b["annotation_token"]: b for b in s["labels"]["boxes3d"]}
        for n, cam in enumerate(s["camera_names"]):
            sd = sample["data"][cam]
            _, boxes, K = nusc.get_sample_data(sd, box_vis_level=BoxVisibility.NONE)
            np.testing.assert_array_equal(np.asarray(K, np.float32), s["intrinsics"][n])
            ego2cam = invert_rigid(s["cam2ego"][n].astype(np.float64))
            visible = {b.token for b in nusc.get_sample_data(sd, box_vis_level=BoxVisibility.ANY)[1]}
            b2 = {b["track_id"]: b["bbox"] for b in s["labels"]["cameras"][cam]["boxes2d"]}
            assert len(boxes) == len(ours)
            for box in boxes:
                b = ours[box.token]
                corners = box_in_camera(b["center"], b["size"], b["yaw"], ego2cam)  # (8, 3)
                np.testing.assert_allclose(corners.mean(0), box.center, atol=1e-3)
                # devkit corners: same box, own corner order; compare as sets
                dk = box.corners().T  # (8, 3)
                d = np.linalg.norm(corners[:, None] - dk[None], axis=-1).min(1)
                assert d.max() < 2e-3
                # get_sample_data leaves Box.velocity NaN: take box_velocity (world) into the camera as it does
                sdr = nusc.get("sample_data", sd)
                R = (Quaternion(nusc.get("calibrated_sensor", sdr["calibrated_sensor_token"])["rotation"]).inverse *
                     Quaternion(nusc.get("ego_pose", sdr["ego_pose_token"])["rotation"]).inverse).rotation_matrix
                v = ego2cam[:3, :3] @ np.asarray(b["velocity"])
                np.testing.assert_allclose(v, R @ nusc.box_velocity(box.token), atol=1e-3, equal_nan=True)
                compared += 1
                if box.token in visible:  # the devkit sees a corner in the image: we have a 2D box ...
                    W, H = ds.rig.cameras[n].width, ds.rig.cameras[n].height
                    uv = view_points(dk.T, np.asarray(K), normalize=True)[:2]
                    seen = (dk[:, 2] > NEAR) & (uv[0] > 0) & (uv[0] < W) & (uv[1] > 0) & (uv[1] < H)
                    # ... unless all its corners in the image lie in the outer half pixel: the devkit takes the
                    # image as [0, W], pixel centres at integers make it [-0.5, W - 0.5] here
                    deep = seen & (uv[0] <= W - 0.5) & (uv[1] <= H - 0.5)
                    assert b["track_id"] in b2 or not deep.any()
                    with_2d += b["track_id"] in b2
                if b["track_id"] in b2 and (dk[:, 2] > NEAR).all():
                    uv = view_points(dk.T, np.asarray(K), normalize=True)[:2]  # (2, 8)
                    ext = np.array([uv[0].min(), uv[1].min(), uv[0].max(), uv[1].max()]) + 0.5
                    W, H = ds.rig.cameras[n].width, ds.rig.cameras[n].height
                    clipped = np.clip(ext, 0, [W, H, W, H])
                    got = np.asarray(b2[b["track_id"]])
                    # the hull clipped to the image lies inside the corners' clipped extent, equal when inside
                    assert (got[:2] >= clipped[:2] - 1e-3).all() and (got[2:] <= clipped[2:] + 1e-3).all()
                    if (ext == clipped).all():
                        np.testing.assert_allclose(got, ext, atol=1e-3)
    assert compared > 50 and with_2d > 20


def test_project_box_2d_rule():
    K = np.array([[100.0, 0, 79.5], [0, 100.0, 47.5], [0, 0, 1]])
    # a 2 m cube 10 m ahead: corners project to 79.5 +- 100 * 1 / (10 -+ 1)
    corners = box_in_camera([0, 0, 10], [2, 2, 2], 0.0, np.eye(4))
    bbox, inside = project_box_2d(corners, K, 160, 96)
    np.testing.assert_allclose(bbox, [79.5 - 100 / 9 + 0.5, 47.5 - 100 / 9 + 0.5, 79.5 + 100 / 9 + 0.5,
                                      47.5 + 100 / 9 + 0.5])
    assert inside == pytest.approx(1.0)
    assert project_box_2d(box_in_camera([0, 0, -10], [2, 2, 2], 0.0, np.eye(4)), K, 160, 96) is None  # behind
    # straddling the camera plane: cut at NEAR, the visible part fills the image edge
    bbox, inside = project_box_2d(box_in_camera([2, 0, 0.5], [2, 2, 2], 0.0, np.eye(4)), K, 160, 96)
    np.testing.assert_allclose(bbox, [79.5 + 100 * 1 / 1.5 + 0.5, 0, 160, 96])  # left edge: x = 1 m at z = 1.5 m
    assert inside < 0.1
    assert project_box_2d(box_in_camera([50, 0, 10], [2, 2, 2], 0.0, np.eye(4)), K, 160, 96) is None  # outside


def test_camera_subset_clips_and_channels(fixture):
    ds = NuScenesDataset(fixture[1], cameras=["CAM_BACK", "CAM_FRONT"], split="all", channels=())
    s = ds[2]
    assert s["camera_names"] == ["CAM_BACK", "CAM_FRONT"] and "images" not in s
    assert set(s["labels"]["cameras"]) == {"CAM_BACK", "CAM_FRONT"} and s["intrinsics"].shape == (2, 3, 3)
    clip = ds.clip(3, 3)
    assert [c["frame_index"] for c in clip] == [1, 2, 3] and len({c["scene"] for c in clip}) == 1
    assert ds.meta["classes"] == list(CLASSES) and ds.rig.names == ["CAM_BACK", "CAM_FRONT"]
    with pytest.raises(DatasetError, match="unknown camera 'CAM_TOP'"):
        NuScenesDataset(fixture[1], cameras=["CAM_TOP"])
    assert any("map expansion is not installed" in n for n in ds.notes)


def _copy(fixture, tmp_path):
    dst = tmp_path / "nusc"
    shutil.copytree(fixture[1], dst)
    return dst


def test_bad_input_is_one_line_naming_the_file(fixture, tmp_path):
    root = _copy(fixture, tmp_path)
    with pytest.raises(DatasetError, match=r"unknown nuScenes version 'v1.0-trainval'.*v1.0-mini"):
        NuScenesDataset(root, version="v1.0-trainval")
    with pytest.raises(DatasetError, match="unknown split 'nope'"):
        NuScenesDataset(root, split="nope")
    (root / "v1.0-mini" / "splits.json").write_text(json.dumps({"empty": []}))
    with pytest.raises(DatasetError, match="split 'empty' has no samples"):
        NuScenesDataset(root, split="empty")
    cats = json.loads((root / "v1.0-mini" / "category.json").read_text())
    cats[0]["name"] = "vehicle.spaceship"
    (root / "v1.0-mini" / "category.json").write_text(json.dumps(cats))
    with pytest.raises(DatasetError, match=r"category.json: category 'vehicle.spaceship'"):
        NuScenesDataset(root)
    (root / "v1.0-mini" / "visibility.json").unlink()
    with pytest.raises(DatasetError, match=r"visibility.json: file is missing"):
        NuScenesDataset(root)


def test_missing_image_raises_or_is_skipped(fixture, tmp_path):
    root = _copy(fixture, tmp_path)
    ds = NuScenesDataset(root)
    victim = next((root / "samples" / "CAM_FRONT").glob("*.jpg"))
    victim.unlink()
    bad = next(i for i in range(len(ds)) if ds._sd[ds.sample_token(i)]["CAM_FRONT"]["filename"].endswith(victim.name))
    with pytest.raises(DatasetError, match=f"{victim.name}: image is missing") as e:
        ds[bad]
    assert "\n" not in str(e.value)
    skip = NuScenesDataset(root, on_bad_frame="skip")
    assert skip[bad]["sample_token"] == skip.sample_token((bad + 1) % len(skip))
    assert skip.skipped == [str(victim)]


def test_batched_projection_equals_one_by_one():
    from hydranet.data.reader import boxes_in_camera, project_boxes_2d
    rng = np.random.default_rng(0)
    K = np.array([[100.0, 0, 79.5], [0, 100.0, 47.5], [0, 0, 1]])
    boxes = [{"center": rng.uniform([-5, -20, -1], [40, 20, 2]).tolist(), "size": rng.uniform(0.5, 5, 3).tolist(),
              "yaw": float(rng.uniform(-3, 3))} for _ in range(300)]
    ego2cam = np.array([[0, -1, 0, 0], [0, 0, -1, 1.5], [1, 0, 0, -1.0], [0, 0, 0, 1]], np.float64)
    got = project_boxes_2d(boxes_in_camera(boxes, ego2cam), K, 160, 96)
    kinds = set()
    for b, g in zip(boxes, got):
        want = project_box_2d(box_in_camera(b["center"], b["size"], b["yaw"], ego2cam), K, 160, 96)
        assert (g is None) == (want is None)
        if g is not None:
            np.testing.assert_allclose(g[0], want[0], atol=1e-6)
            assert g[1] == pytest.approx(want[1], abs=1e-6)
            kinds.add(g[1] == 1.0)
    assert kinds == {True, False} and any(g is None for g in got)


def test_a_bad_annotation_fails_its_frame_only_and_is_skipped_once(fixture, tmp_path):
    """A NaN size is a one-line error naming table, token and field; under skip only its sample is
    skipped (counted once), the others read; a dangling calibrated_sensor is fatal (table level)."""
    root = _copy(fixture, tmp_path)
    path = root / "v1.0-mini" / "sample_annotation.json"
    anns = json.loads(path.read_text())
    ds = NuScenesDataset(root)
    victim = next(a for a in anns if CATEGORY_MAP[ds.instance_category(a["instance_token"])] is not None)
    victim["size"] = [float("nan"), 1.0, 2.0]
    path.write_text(json.dumps(anns))
    ds = NuScenesDataset(root)
    bad = next(i for i in range(len(ds)) if ds.sample_token(i) == victim["sample_token"])
    with pytest.raises(DatasetError, match=f"sample_annotation {victim['token']}: field 'size' must be 3 positive "
                                           r"finite numbers, got \[nan, 1.0, 2.0\]") as e:
        ds.load(bad)
    assert "\n" not in str(e.value) and "on_bad_frame=skip" in str(e.value)
    skip = NuScenesDataset(root, on_bad_frame="skip")
    got = [skip[i]["sample_token"] for i in range(len(skip))]
    assert victim["sample_token"] not in got and len(skip.skipped) == 1 and victim["token"] in skip.skipped[0]
    sd_path = root / "v1.0-mini" / "sample_data.json"
    rows = json.loads(sd_path.read_text())
    rows[0]["calibrated_sensor_token"] = "f" * 32
    sd_path.write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=f"sample_data {rows[0]['token']}: field 'calibrated_sensor_token'.*dangling"):
        NuScenesDataset(root, on_bad_frame="skip")
