"""nuScenes export (sim/nuscenes_export.py) checked with the official nuscenes-devkit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hydranet.data.sim_reader import SimDataset
from hydranet.geometry import transform_points
from sim.config import SimConfig
from sim.generate import generate_dataset
from sim.nuscenes_export import CATEGORY, TABLES, box_category, export_nuscenes, export_nuscenes_from_sim, token
from sim.writer import DatasetWriteError

from devkit import HAVE_DEVKIT, needs_devkit

if HAVE_DEVKIT:
    from nuscenes.nuscenes import NuScenes
    from nuscenes.utils.geometry_utils import BoxVisibility, view_points
    from nuscenes.utils.splits import get_scenes_of_split

CFG = SimConfig(frames_per_scene=4, image_width=160, image_height=96)
SCENES, SEED, VERSION = 2, 3, "v1.0-mini"


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("nusc")
    sim = generate_dataset(root / "sim", CFG, SCENES, SEED, progress=False)
    out = export_nuscenes(sim, root / "nusc", VERSION, progress=False)
    return SimDataset(sim, channels=()), out


@pytest.fixture(scope="module")
def nusc(export):
    return NuScenes(version=VERSION, dataroot=str(export[1]), verbose=False)


def _track_of(nusc, ds: SimDataset):
    """sample_annotation token -> our track id (through the instance's deterministic key)."""
    inst = {token("instance", name, b["track_id"]): b["track_id"]
            for i, (name, _) in enumerate(ds.frame_ids) for b in ds.load(i)["labels"]["boxes3d"]}
    return {a["token"]: inst[a["instance_token"]] for a in nusc.sample_annotation}


def _samples_in_order(nusc):
    out = []
    for scene in nusc.scene:
        tok = scene["first_sample_token"]
        while tok:
            out.append(nusc.get("sample", tok))
            tok = out[-1]["next"]
    return out


@needs_devkit
def test_devkit_loads_every_table(export, nusc):
    _, out = export
    assert sorted(p.stem for p in (out / VERSION).glob("*.json") if p.name != "splits.json") == sorted(TABLES)
    assert len(nusc.scene) == SCENES and len(nusc.sample) == SCENES * CFG.frames_per_scene
    names = [s["name"] for s in nusc.scene]
    assert sorted(get_scenes_of_split("sim_train", nusc) + get_scenes_of_split("sim_val", nusc)) == sorted(names)
    for sample in nusc.sample:  # every channel present, every file there
        assert set(sample["data"]) == {c.name for c in export[0].rig.cameras} | {"LIDAR_TOP"}
        for sd in sample["data"].values():
            assert Path(nusc.get_sample_data_path(sd)).is_file()
    stamps = [s["timestamp"] for s in _samples_in_order(nusc)]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))


@needs_devkit
def test_annotations_match_labels(export, nusc):
    ds, _ = export
    samples, track = _samples_in_order(nusc), _track_of(nusc, ds)
    assert len(samples) == len(ds)
    for i, sample in enumerate(samples):
        labels = ds.load(i)["labels"]
        kept = {b["track_id"]: b for b in labels["boxes3d"] if b["num_pixels"] > 0}
        anns = [nusc.get("sample_annotation", t) for t in sample["anns"]]
        assert len(anns) == len(kept)
        for ann in anns:
            b = kept[track[ann["token"]]]
            assert ann["category_name"] == box_category(b["class"], b["attributes"])  # children: human.pedestrian.child
            assert ann["num_lidar_pts"] == b["num_pixels"] > 0 and ann["num_radar_pts"] == 0
            assert ann["size"] == pytest.approx([b["size"][1], b["size"][0], b["size"][2]], abs=1e-6)
            attrs = [nusc.get("attribute", t)["name"] for t in ann["attribute_tokens"]]
            if b["class"] == "pedestrian":
                assert attrs == ["pedestrian.moving" if b["attributes"]["moving"] else "pedestrian.standing"]
            elif b["class"] in ("cyclist", "motorcycle"):
                assert attrs == ["cycle.with_rider"]
            elif b["attributes"].get("parked"):
                assert attrs == ["vehicle.parked"] and not b["attributes"]["moving"]
            elif CATEGORY[b["class"]].startswith("vehicle."):
                assert attrs == ["vehicle.moving" if b["attributes"]["moving"] else "vehicle.stopped"]
            vf = max([b2["visible_fraction"] for c in labels["cameras"].values() for b2 in c["boxes2d"]
                      if b2["track_id"] == b["track_id"]], default=0.0)
            lo, hi = {"v0-40": (0, .4), "v40-60": (.4, .6), "v60-80": (.6, .8), "v80-100": (.8, 1.01)}[
                nusc.get("visibility", ann["visibility_token"])["level"]]
            assert lo <= vf < hi
    for inst in nusc.instance:  # first/last/count agree with the prev/next chain
        chain, tok = [], inst["first_annotation_token"]
        while tok:
            chain.append(tok)
            tok = nusc.get("sample_annotation", tok)["next"]
        assert len(chain) == inst["nbr_annotations"] and chain[-1] == inst["last_annotation_token"]


@needs_devkit
def test_boxes_project_where_the_objects_are(export, nusc):
    ds, _ = export
    checked, failed, track = 0, [], _track_of(nusc, ds)
    for i, sample in enumerate(_samples_in_order(nusc)):
        labels = ds.load(i)["labels"]
        for cam in ds.rig.cameras:
            _, boxes, K = nusc.get_sample_data(sample["data"][cam.name], box_vis_level=BoxVisibility.ANY)
            ours = {b["track_id"]: b["bbox"] for b in labels["cameras"][cam.name]["boxes2d"]}
            for box in boxes:
                tid = track[box.token]
                if tid not in ours:
                    continue
                uv = view_points(box.corners(), K, normalize=True)[:2]  # (2, 8)
                ext = [max(uv[0].min(), 0), max(uv[1].min(), 0),  # projected extent clipped to the image
                       min(uv[0].max(), cam.width), min(uv[1].max(), cam.height)]
                # our bbox is [min col, min row, max col + 1, max row + 1] with pixel centres at
                # integer coordinates: its continuous extent is bbox - 0.5
                x0, y0, x1, y1 = np.asarray(ours[tid], np.float64) - 0.5
                iw = max(0.0, min(ext[2], x1) - max(ext[0], x0))
                ih = max(0.0, min(ext[3], y1) - max(ext[1], y0))
                inter = iw * ih
                union = (ext[2] - ext[0]) * (ext[3] - ext[1]) + (x1 - x0) * (y1 - y0) - inter
                cu, cv = (x0 + x1) / 2, (y0 + y1) / 2
                inside = ext[0] <= cu <= ext[2] and ext[1] <= cv <= ext[3]
                checked += 1
                if not (inter / union > 0.3 or inside):
                    failed.append((sample["token"], cam.name, tid, ours[tid], np.round(ext, 1).tolist()))
    assert checked > 20
    assert not failed, f"{len(failed)}/{checked} boxes do not project onto their 2D box: {failed[:5]}"


@needs_devkit
def test_poses_and_calibration_round_trip(export, nusc):
    ds, _ = export
    track = _track_of(nusc, ds)
    for i, sample in enumerate(_samples_in_order(nusc)):
        s = ds.load(i)
        centers = {b["track_id"]: np.array(b["center"]) for b in s["labels"]["boxes3d"]}
        for ch in ("LIDAR_TOP", ds.rig.cameras[0].name):
            sd = nusc.get("sample_data", sample["data"][ch])
            cs = nusc.get("calibrated_sensor", sd["calibrated_sensor_token"])
            pose = nusc.get("ego_pose", sd["ego_pose_token"])
            assert sd["timestamp"] == sample["timestamp"] == pose["timestamp"]
            assert pose["translation"] == pytest.approx(s["ego2world"][:3, 3].tolist(), abs=1e-5)
            _, boxes, _ = nusc.get_sample_data(sd["token"], box_vis_level=BoxVisibility.NONE)
            assert len(boxes) == len(sample["anns"])
            sensor2ego = np.eye(4) if ch == "LIDAR_TOP" else s["cam2ego"][0].astype(np.float64)
            if ch != "LIDAR_TOP":
                assert np.array(cs["camera_intrinsic"]) == pytest.approx(s["intrinsics"][0], abs=1e-4)
            for box in boxes:  # sensor frame -> ego frame, as our labels
                assert transform_points(sensor2ego, box.center) == pytest.approx(centers[track[box.token]], abs=1e-3)


@needs_devkit
def test_box_velocity_matches_labels(export, nusc):
    ds, _ = export
    checked, track = 0, _track_of(nusc, ds)
    for i, sample in enumerate(_samples_in_order(nusc)):
        s = ds.load(i)
        R = s["ego2world"][:3, :3]
        boxes = {b["track_id"]: b for b in s["labels"]["boxes3d"]}
        for ann in (nusc.get("sample_annotation", t) for t in sample["anns"]):
            b = boxes[track[ann["token"]]]
            if not b["attributes"].get("moving"):
                continue
            if nusc.get("instance", ann["instance_token"])["nbr_annotations"] < 3 or not (ann["prev"] and ann["next"]):
                continue  # centred differences only: a one-sided one lags the labelled speed
            v = nusc.box_velocity(ann["token"])
            v_label = R @ np.array(b["velocity"])  # ego axes -> world axes
            assert np.linalg.norm(v - v_label) < 1.0, (b["class"], b["track_id"], v, v_label)
            checked += 1
    assert checked > 5


def test_from_sim_is_deterministic_and_cleans_up(export, tmp_path):
    _, first = export
    out = export_nuscenes_from_sim(tmp_path / "again", CFG, SCENES, SEED, VERSION, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]  # the temporary sim dataset is gone
    files = sorted(p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    for rel in files:
        assert (first / rel).read_bytes() == (out / rel).read_bytes(), rel
    splits = json.loads((out / VERSION / "splits.json").read_text())
    assert splits == {"sim_train": ["scene_0000", "scene_0001"], "sim_val": []}


def test_refuses_existing_output_and_leaves_nothing_on_failure(export, tmp_path):
    ds, _ = export
    (tmp_path / "taken").mkdir()
    with pytest.raises(DatasetWriteError, match="exists"):
        export_nuscenes(ds.root, tmp_path / "taken", progress=False)
    broken = tmp_path / "broken"
    shutil.copytree(ds.root, broken)
    next(broken.glob("scenes/scene_0001/000002/CAM_FRONT.jpg")).unlink()
    with pytest.raises(DatasetWriteError, match="CAM_FRONT.jpg"):
        export_nuscenes(broken, tmp_path / "out", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "taken"]
