"""BDD100K reader (hydranet/data/bdd100k.py) and metrics (hydranet/metrics/bdd100k.py)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from dataset_fixtures import BDD_CATEGORY, make_sim, write_bdd100k
from hydranet.data.bdd100k import BDD100KDataset, poly_points
from hydranet.data.reader import DatasetError
from hydranet.data.sim_reader import SimDataset
from hydranet.metrics.bdd100k import DrivableIoU, LaneFScore, coco_detection_ap


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("bdd_reader")
    sim = make_sim(root / "sim")
    return SimDataset(sim, cameras=["CAM_FRONT"], channels=("images", "semantic")), write_bdd100k(sim, root / "bdd")


def test_round_trip_gives_back_the_sim_labels(fixture):
    sim, root = fixture
    got_frames = {}
    for split in ("train", "val"):
        ds = BDD100KDataset(root, split)
        for i in range(len(ds)):
            got_frames[ds.frame_ids[i][1]] = ds[i]
    assert len(got_frames) == len(sim)
    mapped = {v: k for k, v in BDD_CATEGORY.items()}
    for i in range(len(sim)):
        truth = sim.load(i)
        got = got_frames["{}-{}.jpg".format(*sim.frame_ids[i])]
        assert got["supervises"] == {"det2d", "signs_lights", "drivable", "lanes"}
        np.testing.assert_array_equal(got["images"], truth["images"])
        np.testing.assert_array_equal(got["drivable"], truth["drivable"])
        assert np.isnan(got["intrinsics"]).all()  # no calibration
        want = [b for b in truth["labels"]["cameras"]["CAM_FRONT"]["boxes2d"]
                if b["class"] in BDD_CATEGORY and b["class"] != "construction_vehicle"]  # that one is an ignore region
        boxes = got["labels"]["cameras"]["CAM_FRONT"]["boxes2d"]
        assert len(boxes) == len(want)
        for w, g in zip(want, boxes):
            assert g["bbox"] == pytest.approx(w["bbox"])  # exact
            assert mapped[g["attributes"]["bdd100k_category"]] == w["class"]
            if w["class"] == "traffic_light":
                assert g["attributes"]["light_state"] == w["attributes"].get("light_state", "unknown")
        lanes = got["labels"]["cameras"]["CAM_FRONT"]["lanes2d"]
        assert [l_["points"] for l_ in lanes] == [l_["points"] for l_ in truth["labels"]["cameras"]["CAM_FRONT"]["lanes2d"]]


def test_bezier_lanes_are_sampled():
    pts = poly_points({"vertices": [[0, 0], [0, 10], [10, 10], [10, 0]], "types": "LCCL"}, samples=4)
    assert len(pts) == 5 and pts[0].tolist() == [0, 0] and pts[-1].tolist() == [10, 0]
    assert pts[2].tolist() == pytest.approx([5, 7.5])  # the cubic's midpoint


def test_bad_input(fixture, tmp_path):
    _, src = fixture
    root = tmp_path / "bdd"
    shutil.copytree(src, root)
    with pytest.raises(DatasetError, match="unknown BDD100K split 'dev'"):
        BDD100KDataset(root, "dev")
    det = root / "labels" / "det_20" / "det_val.json"
    frames = json.loads(det.read_text())
    (root / "images" / "100k" / "val" / frames[0]["name"]).unlink()
    with pytest.raises(DatasetError, match=frames[0]["name"] + ": image is missing"):
        BDD100KDataset(root, "val")[0]
    frames[0]["labels"].append({"category": "spaceship", "box2d": {"x1": 0, "y1": 0, "x2": 1, "y2": 1}})
    det.write_text(json.dumps(frames))
    with pytest.raises(DatasetError, match="det_val.json: frame .* has category 'spaceship'"):
        BDD100KDataset(root, "val")
    det.write_text("[]")
    with pytest.raises(DatasetError, match="split 'val' has no images"):
        BDD100KDataset(root, "val")
    det.unlink()
    with pytest.raises(DatasetError, match="det_val.json: file is missing"):
        BDD100KDataset(root, "val")
    shutil.rmtree(root / "labels" / "drivable")
    ds = BDD100KDataset(root, "train")
    assert "drivable" not in ds[0]["supervises"] and any("no drivable masks" in n for n in ds.notes)


def _frames(n=4):
    gts = [{"name": f"{k}.jpg", "labels": [{"category": "car", "bbox": [10.0, 10.0, 60.0, 40.0]},
                                            {"category": "pedestrian", "bbox": [100.0, 20.0, 120.0, 80.0]}]}
           for k in range(n)]
    return gts


def test_detection_ap_perfect_and_perturbed():
    gts = _frames()
    perfect = [{"name": f["name"], "labels": [dict(l_, score=0.9) for l_ in f["labels"]]} for f in gts]
    r = coco_detection_ap(gts, perfect, classes=("car", "pedestrian"))
    assert r["AP"] == pytest.approx(1.0) and r["per_class"] == {"car": pytest.approx(1.0), "pedestrian": pytest.approx(1.0)}
    # pedestrian boxes shifted by 10 of 60 rows: IoU = 50 / 70 = 0.714 -> TP at IoU 0.5..0.7 (5 of 10 thresholds)
    shifted = [{"name": f["name"], "labels": [perfect[0]["labels"][0],
                                              {"category": "pedestrian", "bbox": [100.0, 30.0, 120.0, 90.0], "score": 0.9}]}
               for f in gts]
    r = coco_detection_ap(gts, shifted, classes=("car", "pedestrian"))
    assert r["per_class"]["pedestrian"] == pytest.approx(0.5) and r["AP"] == pytest.approx(0.75)


def test_drivable_iou_and_lane_fscore_by_hand():
    gt = np.full((10, 10), 2, np.uint8)
    gt[5:] = 0
    m = DrivableIoU()
    m.update(gt, gt)
    assert m.compute()["mIoU"] == 1.0 and np.isnan(m.compute()["alternative"])
    pred = gt.copy()
    pred[4] = 0  # one background row called direct: direct 50/60, background 40/50
    m = DrivableIoU()
    m.update(pred, gt)
    r = m.compute()
    assert r["direct"] == pytest.approx(50 / 60) and r["background"] == pytest.approx(40 / 50)
    assert r["mIoU"] == pytest.approx((50 / 60 + 40 / 50) / 2)
    lane = [np.array([[10.0, 50.0], [90.0, 50.0]])]
    f = LaneFScore()
    f.update(lane, lane, (100, 100))
    assert f.compute()["F"] == 1.0
    f = LaneFScore()
    f.update([lane[0] + [0, 3]], lane, (100, 100))  # 3 px off: outside 1 and 2 px, inside 5 and 10
    r = f.compute()
    assert (r["F@1px"], r["F@2px"], r["F@5px"], r["F@10px"], r["F"]) == (0.0, 0.0, 1.0, 1.0, 0.5)


def test_boxes_are_checked_against_the_real_image_size(fixture, tmp_path):
    """The fixture's images are 160x96 (not BDD100K's 1280x720): the rig says so, and a box at x
    1500-1600 (inside 1280x720) is refused naming the frame; under skip its frame is skipped once."""
    import cv2

    from hydranet.data.image import image_size

    _, src = fixture
    root = shutil.copytree(src, tmp_path / "bdd")
    ds = BDD100KDataset(root, "val")
    assert (ds.rig.cameras[0].width, ds.rig.cameras[0].height) == (160, 96)
    for ext in (".jpg", ".png"):
        cv2.imwrite(str(tmp_path / f"x{ext}"), np.zeros((37, 53, 3), np.uint8))
        assert image_size(tmp_path / f"x{ext}") == (53, 37)
    path = root / "labels" / "det_20" / "det_val.json"
    frames = json.loads(path.read_text())
    frames[0]["labels"][0]["box2d"] = {"x1": 1500.0, "y1": 10.0, "x2": 1600.0, "y2": 20.0}
    path.write_text(json.dumps(frames))
    with pytest.raises(DatasetError, match=f"frame {frames[0]['name']} label 0 .*box2d.*outside the 160x96 image"):
        BDD100KDataset(root, "val")[0]
    skip = BDD100KDataset(root, "val", on_bad_frame="skip")
    assert [skip[i]["scene"] for i in range(len(skip))].count(frames[0]["name"][:-4]) == 0
    assert len(skip.skipped) == 1
