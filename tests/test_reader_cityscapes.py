"""Cityscapes reader (hydranet/data/cityscapes.py): boxes from a hand-made instance map, road -> drivable, the
class map onto the sim's classes, bad input. Fixtures: tests/lane_road_fixtures.py (the official layout)."""
from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest

from hydranet.data.cityscapes import CityscapesDataset, instance_boxes
from hydranet.data.formats import check_dataset, detect_format
from hydranet.data.reader import DatasetError
from lane_road_fixtures import K_CITY, city_frame, city_stem, write_cityscapes


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_cityscapes(tmp_path_factory.mktemp("cityscapes") / "cs", [city_frame(0), city_frame(1)])


def _by_box(boxes):
    return sorted((b["bbox"], b["class"], b["attributes"]["cityscapes_label"]) for b in boxes)


def test_boxes_from_a_hand_made_instance_map():
    f = city_frame()
    boxes, ignore = instance_boxes(f["instance_ids"], "x")
    assert sorted((b["bbox"], b["class"], b["name"]) for b in boxes) == sorted(f["boxes"])
    # the car seen in two parts around the pole is one box over both; the train and each group region ignored
    assert sorted(ignore) == sorted(f["dontcare"])
    assert instance_boxes(np.full((4, 4), 7, np.uint16), "x") == ([], [])  # road only: nothing


def test_reader_gives_the_boxes_the_road_and_the_intrinsics(root):
    ds = CityscapesDataset(root, "val")
    assert detect_format(root) == "cityscapes" and len(ds) == 2 and ds.rig.cameras[0].width == 96
    assert ds.frame_ids[1] == (city_stem("bremen", 1), f"bremen/{city_stem('bremen', 1)}_leftImg8bit.png")
    for i in range(2):
        f, s = city_frame(i), ds[i]
        cam = s["labels"]["cameras"]["CAM_FRONT"]
        assert _by_box(cam["boxes2d"]) == sorted(f["boxes"])
        assert sorted(cam["dontcare"]) == sorted(b for _, b in f["dontcare"])
        np.testing.assert_array_equal(s["drivable"][0], f["road"])  # exactly the road pixels (label id 7)
        np.testing.assert_array_equal(s["images"][0], f["image"])
        assert s["supervises"] == {"det2d", "drivable"}
        K = s["intrinsics"][0]
        assert (K[0, 0], K[1, 1], K[0, 2], K[1, 2]) == pytest.approx(
            (K_CITY["fx"], K_CITY["fy"], K_CITY["u0"], K_CITY["v0"]))
        assert np.isnan(s["cam2ego"]).all()
    r = check_dataset(root)
    assert r["supervises"] == ["det2d", "drivable"] and not r["bad"]
    assert ("car", "car", 4) in r["classes"] and ("person", "pedestrian", 2) in r["classes"]
    assert ("cargroup", None, 4) in r["classes"] and ("train", None, 2) in r["classes"]


def test_class_map_onto_the_sim(root):
    from hydranet.data import cityscapes
    from hydranet.data.formats import SIM_CLASSES
    from hydranet.data.sources import SIM_COUNTERPART, cross_class_map

    assert set(SIM_COUNTERPART["cityscapes"]) == set(cityscapes.CLASSES)
    assert {c for _, c in cityscapes.INSTANCE_LABELS.values()} - {None} == set(cityscapes.CLASSES)
    assert cross_class_map(cityscapes.CLASSES, SIM_CLASSES) == {"rider": None, "bicycle": "cyclist"}


def test_without_drivable_channel_or_camera_files(root, tmp_path):
    ds = CityscapesDataset(root, "val", channels=("images",))
    assert "drivable" not in ds[0] and ds[0]["supervises"] == {"det2d"}
    bare = shutil.copytree(root, tmp_path / "cs")
    shutil.rmtree(bare / "camera")
    ds = CityscapesDataset(bare, "val")
    assert np.isnan(ds[0]["intrinsics"]).all() and any("no camera files" in n for n in ds.notes)


def test_test_split_has_images_only(tmp_path):
    root = write_cityscapes(tmp_path / "cs", [city_frame()], split="test", camera=False)
    shutil.rmtree(root / "gtFine")
    s = CityscapesDataset(root, "test")[0]
    assert s["supervises"] == set() and s["labels"]["cameras"]["CAM_FRONT"]["boxes2d"] == []


def test_bad_input(root, tmp_path):
    with pytest.raises(DatasetError, match=r"unknown Cityscapes split 'dev'; choose one of \['train', 'val', 'test'\]"):
        CityscapesDataset(root, "dev")
    with pytest.raises(DatasetError, match=r"leftImg8bit/train: folder is missing"):
        CityscapesDataset(root, "train")
    bad = shutil.copytree(root, tmp_path / "cs")
    city = bad / "gtFine" / "val" / "aachen"
    label = city / f"{city_stem('aachen', 0)}_gtFine_labelIds.png"
    label.unlink()
    with pytest.raises(DatasetError, match=f"{label.name}: image is missing; the image leftImg8bit/val/aachen/.* needs it"):
        CityscapesDataset(bad, "val")[0]
    skip = CityscapesDataset(bad, "val", on_bad_frame="skip")
    assert [skip[i]["scene"] for i in range(len(skip))] == [city_stem("bremen", 1)] * 2 and len(skip.skipped) == 1
    cv2.imwrite(str(label), np.full((10, 10), 7, np.uint8))
    with pytest.raises(DatasetError, match=f"{label.name}: expected 48x96"):
        CityscapesDataset(bad, "val")[0]
    cv2.imwrite(str(label), np.full((48, 96), 7, np.uint8))
    inst = city / f"{city_stem('aachen', 0)}_gtFine_instanceIds.png"
    cv2.imwrite(str(inst), np.full((48, 96), 7000, np.uint16))
    with pytest.raises(DatasetError, match=f"{inst.name}: instance id 7000 is label 7, which has no instances"):
        CityscapesDataset(bad, "val")[0]
    cv2.imwrite(str(inst), np.full((48, 96), 7, np.uint16))
    cam = bad / "camera" / "val" / "aachen" / f"{city_stem('aachen', 0)}_camera.json"
    cam.write_text(json.dumps({"intrinsic": {"fx": 0, "fy": 1, "u0": 2, "v0": 3}}))
    with pytest.raises(DatasetError, match=f"{cam.name}: field 'intrinsic' must hold finite fx, fy > 0"):
        CityscapesDataset(bad, "val")
