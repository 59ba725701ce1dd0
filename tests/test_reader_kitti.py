"""KITTI object reader (hydranet/data/kitti.py): sim -> KITTI files -> reader gives the sim's labels back."""
from __future__ import annotations

import numpy as np
import pytest

from dataset_fixtures import KITTI_TYPE, make_sim, write_kitti
from hydranet.data.dataset import DatasetError, SimDataset
from hydranet.data.kitti import KittiDataset, calibration, label_to_box3d, read_calib


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("kitti_reader")
    sim = make_sim(root / "sim")
    return SimDataset(sim, cameras=["CAM_FRONT"], channels=("images",)), write_kitti(sim, root / "kitti")


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def test_round_trip_gives_back_the_sim_labels(fixture):
    sim, root = fixture
    ds = KittiDataset(root)
    assert len(ds) == len(sim) and ds.camera_names == ["CAM_FRONT"]
    checked = 0
    for i in range(len(sim)):
        truth, got = sim.load(i), ds[i]
        assert got["supervises"] == {"det2d", "det3d"}
        np.testing.assert_array_equal(got["images"], truth["images"])  # PNG of the decoded JPEG: lossless
        np.testing.assert_allclose(got["intrinsics"], truth["intrinsics"], atol=1e-6)  # exact
        np.testing.assert_allclose(got["cam2ego"], truth["cam2ego"], atol=1e-6)
        t3 = {b["track_id"]: b for b in truth["labels"]["boxes3d"]}
        want = [b for b in truth["labels"]["cameras"]["CAM_FRONT"]["boxes2d"] if b["class"] in KITTI_TYPE
                and b["track_id"] in t3]  # a 2D box without a 3D box (beyond the label range) is DontCare
        got2 = got["labels"]["cameras"]["CAM_FRONT"]["boxes2d"]
        assert [b["class"] for b in got2] == [b["class"] for b in want]
        for w, g, g3 in zip(want, got2, got["labels"]["boxes3d"]):
            np.testing.assert_allclose(g["bbox"], w["bbox"], atol=0.01)  # 2 decimals in the file
            t = t3[w["track_id"]]
            np.testing.assert_allclose(g3["center"], t["center"], atol=0.01)
            np.testing.assert_allclose(g3["size"], t["size"], atol=0.01)
            assert abs(_wrap(g3["yaw"] - t["yaw"])) < 0.01
            assert np.isnan(g3["velocity"]).all()
            assert g["attributes"]["kitti_type"] == KITTI_TYPE[w["class"]]
            checked += 1
        n_dc = sum(b["class"] in ("traffic_sign", "traffic_light") for b in truth["labels"]["cameras"]["CAM_FRONT"]["boxes2d"])
        assert len(got["labels"]["cameras"]["CAM_FRONT"]["dontcare"]) >= n_dc
    assert checked > 10


def test_ideal_calibration_gives_the_textbook_yaw():
    calib = {"P2": np.array([700, 0, 600, 0, 0, 700, 180, 0, 0, 0, 1, 0.0]), "R0_rect": np.eye(3).ravel(),
             "Tr_velo_to_cam": np.array([0, -1, 0, 0, 0, 0, -1, 0, 1, 0, 0, 0.0])}
    K, velo2cam, velo2rect = calibration(calib)
    for ry in (0.0, 0.7, -2.0):
        lab = {"dimensions": [1.5, 1.6, 4.0], "location": [2.0, 1.7, 20.0], "rotation_y": ry}
        b = label_to_box3d(lab, np.linalg.inv(velo2rect))
        assert _wrap(b["yaw"] - (-ry - np.pi / 2)) == pytest.approx(0, abs=1e-9)
        np.testing.assert_allclose(b["center"], [20.0, -2.0, -1.7 + 0.75])  # bottom centre + h/2 up
        assert b["size"] == [4.0, 1.6, 1.5]


def test_splits_and_bad_input(fixture, tmp_path):
    import shutil
    _, src = fixture
    root = tmp_path / "kitti"
    shutil.copytree(src, root)
    val = KittiDataset(root, split="val")
    assert val.ids == (root / "ImageSets" / "val.txt").read_text().split()
    with pytest.raises(DatasetError, match=r"ImageSets/nope.txt: split file is missing"):
        KittiDataset(root, split="nope")
    (root / "training" / "calib" / "000001.txt").write_text("P2: 1 2 3\n")
    with pytest.raises(DatasetError, match=r"000001.txt: P2 is missing or has not 12 numbers"):
        KittiDataset(root).load(1)
    (root / "training" / "label_2" / "000002.txt").write_text("Spaceship 0 0 0 1 2 3 4 1 1 1 1 1 1 0\n")
    with pytest.raises(DatasetError, match=r"000002.txt: type 'Spaceship' is not a KITTI object type"):
        KittiDataset(root).load(2)
    (root / "training" / "image_2" / "000003.png").unlink()
    with pytest.raises(DatasetError, match=r"000003.png: image is missing"):
        KittiDataset(root).load(3)
    skip = KittiDataset(root, on_bad_frame="skip")
    skip[1], skip[2], skip[3]
    assert len(skip.skipped) == 3
    shutil.rmtree(root / "training" / "label_2")
    with pytest.raises(DatasetError, match=r"label_2: folder is missing"):
        KittiDataset(root)
    assert read_calib(src / "training" / "calib" / "000000.txt")["P2"].size == 12
