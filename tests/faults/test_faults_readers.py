"""Fault rows: public-dataset readers refuse what is not a box (issue 21, items 1, 3 and 5). nuScenes: a
sample_data filename or map location leaving the dataroot, NaN/negative/infinite sizes and translations, zero
quaternions, bad intrinsics and calibration, dangling tokens (each naming the table, token and field; a bad
annotation skipped and counted under data.on_bad_frame=skip); BDD100K: null, NaN, inverted and out-of-image
boxes checked against the image's real size; `data check` showing each camera's size range; a sim-trained
model evaluated on BDD100K through the cross-dataset class map. Rows run `hydranet data check` (table-level
errors, fatal) or `hydranet eval` of a tiny sim-trained run (per-frame errors). One row per case; see faultlib.py."""
from __future__ import annotations

import copy
import json
import os
import shutil

import cv2
import pytest
import yaml
from faultlib import Case, params, run_case

from dataset_fixtures import write_bdd100k
from hydranet.cli import main

TOKEN = "<the edited record's token>"  # stands for the token the row's edit touched (filled in by build)
VERSION = "v1.0-mini"


@pytest.fixture(scope="module")
def runs(fault_env, tmp_path_factory):
    """Two 1-step runs on the fault suite's sim dataset (CAM_FRONT, det2d + signs_lights): one with the
    default on_bad_frame=raise, one with skip (eval reads the data with the run's policy)."""
    base = tmp_path_factory.mktemp("reader_runs")
    out = {}
    for policy in ("raise", "skip"):
        cfg = {"data": {"root": str(fault_env.dataset), "cameras": ["CAM_FRONT"], "image_size": [64, 64],
                        "on_bad_frame": policy},
               "model": {"backbone": "tiny", "neck_width": 16, "neck_repeats": 1,
                         "tasks": [{"name": "det2d"}, {"name": "signs_lights"}]},
               "steps": 1, "batch_size": 2, "num_workers": 0, "augment": {"photometric": False, "geometric": False}}
        (base / f"{policy}.yaml").write_text(yaml.safe_dump(cfg))
        assert main(["train", "--config", str(base / f"{policy}.yaml"), "--out", str(base / policy), "--quiet"]) == 0
        out[policy] = base / policy
    return out


@pytest.fixture(scope="module")
def bdd(fault_env, tmp_path_factory):
    """The fault suite's sim frames as a BDD100K val split (64x48 images)."""
    return write_bdd100k(fault_env.dataset, tmp_path_factory.mktemp("reader_bdd") / "bdd", val_every=1)


# -- nuScenes edits: each returns the token it touched ------------------------------------------------
def _table(root, name):
    return json.loads((root / VERSION / f"{name}.json").read_text())


def _save(root, name, rows):
    (root / VERSION / f"{name}.json").write_text(json.dumps(rows))  # NaN/Infinity written as JSON's extension


def _cam_front_keyframe(root):
    rows = _table(root, "sample_data")
    return rows, next(r for r in rows if r["is_key_frame"] and "/CAM_FRONT/" in r["filename"])


def filename(kind):
    def edit(root, tmp):
        rows, sd = _cam_front_keyframe(root)
        outside = tmp / "outside.jpg"
        shutil.copyfile(root / sd["filename"], outside)  # a readable image outside the dataroot: old code used it
        if kind == "dotdot":
            sd["filename"] = os.path.relpath(outside, root)
        elif kind == "absolute":
            sd["filename"] = str(outside)
        else:  # a symlink inside the dataroot that points out of it
            (root / "samples" / "CAM_FRONT" / "link.jpg").symlink_to(outside)
            sd["filename"] = "samples/CAM_FRONT/link.jpg"
        _save(root, "sample_data", rows)
        return sd["token"]
    return edit


def annotation(field, value):
    """An annotation of a mapped category (vehicle.car) gets `field` = value."""
    def edit(root, tmp):
        cats = {c["token"]: c["name"] for c in _table(root, "category")}
        car = {i["token"] for i in _table(root, "instance") if cats[i["category_token"]] == "vehicle.car"}
        rows = _table(root, "sample_annotation")
        a = next(r for r in rows if r["instance_token"] in car)
        a[field] = value
        _save(root, "sample_annotation", rows)
        return a["token"]
    return edit


def camera_calibration(field, value):
    def edit(root, tmp):
        _, sd = _cam_front_keyframe(root)
        rows = _table(root, "calibrated_sensor")
        cs = next(r for r in rows if r["token"] == sd["calibrated_sensor_token"])
        cs[field] = value
        _save(root, "calibrated_sensor", rows)
        return cs["token"]
    return edit


def sample_data_field(field):
    def edit(root, tmp):
        rows, sd = _cam_front_keyframe(root)
        sd[field] = "f" * 32
        _save(root, "sample_data", rows)
        return sd["token"]
    return edit


def ego_pose(field, value):
    def edit(root, tmp):
        _, sd = _cam_front_keyframe(root)
        rows = _table(root, "ego_pose")
        e = next(r for r in rows if r["token"] == sd["ego_pose_token"])
        e[field] = value
        _save(root, "ego_pose", rows)
        return e["token"]
    return edit


def location(value):
    def edit(root, tmp):
        rows = _table(root, "log")
        rows[0]["location"] = value
        _save(root, "log", rows)
        (tmp / "x.json").write_text("{}")  # what maps/expansion/../../../x.json would have read
        return rows[0]["token"]
    return edit


def nus_case(id, words, edit, command="eval", status=2, policy="raise", stdout=()):
    """`edit(root, tmp) -> token` breaks a copy of the fault suite's nuScenes export; the row runs
    `hydranet data check` (table-level errors) or `hydranet eval` of the tiny run (per-frame errors)."""
    case = Case(id, None, status, words, stdout=stdout)

    def build(tmp, env):
        root = shutil.copytree(env.nuscenes, tmp / "nusc", symlinks=True)
        if edit is not None:
            tok = edit(root, tmp)
            case.words = tuple(tok if w == TOKEN else w for w in words)
        if command == "check":
            return ["data", "check", "--data", root, "--quiet"]
        return ["eval", "--checkpoint", env.runs[policy], "--data", root, "--out", tmp / "eval" / "m.json", "--quiet"]
    case.build = build
    return case


# -- BDD100K edits ------------------------------------------------------------------------------------
def bdd_box(box, frame=0):
    """Label 0 of frame `frame` of det_val.json gets box2d = box (a car label is added when it has none)."""
    def edit(root):
        path = root / "labels" / "det_20" / "det_val.json"
        frames = json.loads(path.read_text())
        labels = frames[frame].setdefault("labels", [])
        if not labels:
            labels.append({"id": "1", "category": "car", "attributes": {}})
        labels[0]["box2d"] = box
        path.write_text(json.dumps(frames))
        return frames[frame]["name"]
    return edit


def bdd_extra_labels(root):
    """A bicycle, a rider and a train on frame 0 (inside the 64x48 image)."""
    path = root / "labels" / "det_20" / "det_val.json"
    frames = json.loads(path.read_text())
    for k, cat in enumerate(("bicycle", "rider", "train")):
        frames[0].setdefault("labels", []).append({"id": f"x{k}", "category": cat, "attributes": {},
                                                   "box2d": {"x1": 4.0 + 20 * k, "y1": 10.0, "x2": 17.0 + 20 * k,
                                                             "y2": 40.0}})
    path.write_text(json.dumps(frames))
    return frames[0]["name"]


def bdd_resize_second(root):
    """Frame 1's image (and drivable mask) at 70x50: the split's images differ in size."""
    frames = json.loads((root / "labels" / "det_20" / "det_val.json").read_text())
    name = frames[1]["name"]
    img = cv2.imread(str(root / "images" / "100k" / "val" / name))
    cv2.imwrite(str(root / "images" / "100k" / "val" / name), cv2.resize(img, (70, 50)))
    mask_path = root / "labels" / "drivable" / "masks" / "val" / f"{name[:-4]}.png"
    cv2.imwrite(str(mask_path), cv2.resize(cv2.imread(str(mask_path), cv2.IMREAD_UNCHANGED), (70, 50),
                                           interpolation=cv2.INTER_NEAREST))
    return name


def bdd_name(new):
    """Frame 0 of det_val.json is named `new` (a name that would leave images/100k/val/)."""
    def edit(root):
        path = root / "labels" / "det_20" / "det_val.json"
        frames = json.loads(path.read_text())
        frames[0]["name"] = new
        path.write_text(json.dumps(frames))
        return new
    return edit


def bdd_image_symlink_out(root):
    """Frame 0's image is a symlink to a file outside the dataset."""
    frames = json.loads((root / "labels" / "det_20" / "det_val.json").read_text())
    img = root / "images" / "100k" / "val" / frames[0]["name"]
    shutil.move(img, root.parent / "outside.jpg")
    img.symlink_to(root.parent / "outside.jpg")
    return frames[0]["name"]


def bdd_case(id, words, edit, command="eval", status=2, policy="raise", stdout=()):
    case = Case(id, None, status, words, stdout=stdout)

    def build(tmp, env):
        root = shutil.copytree(env.bdd, tmp / "bdd")
        if edit is not None:
            name = edit(root)
            case.words = tuple(name if w == TOKEN else w for w in words)
            case.stdout = tuple(name if w == TOKEN else w for w in stdout)
        if command == "check":
            return ["data", "check", "--data", root, "--quiet"]
        return ["eval", "--checkpoint", env.runs[policy], "--data", root, "--out", tmp / "eval" / "m.json", "--quiet"]
    case.build = build
    return case


NAN, INF = float("nan"), float("inf")
SKIP = "on_bad_frame=skip"
CASES = [
    # item 1: names from a dataset never leave its folder (nuScenes sample_data filename, log location)
    nus_case("nus-filename-dotdot", ("sample_data", TOKEN, "filename", "leaves"), filename("dotdot")),
    nus_case("nus-filename-absolute", ("sample_data", TOKEN, "filename", "absolute"), filename("absolute")),
    nus_case("nus-filename-symlink-out", ("sample_data", TOKEN, "filename", "leaves"), filename("symlink")),
    nus_case("nus-location-dotdot", ("log.json", "location", "'../../../x'"), location("../../../x"), "check"),
    # item 3: nuScenes boxes (per frame: an error naming table, token, field; skipped and counted with skip)
    nus_case("nus-ann-size-nan", ("sample_annotation", TOKEN, "'size'", "positive finite", SKIP),
             annotation("size", [NAN, 1.0, 2.0])),
    nus_case("nus-ann-size-negative", ("sample_annotation", TOKEN, "'size'", "positive"),
             annotation("size", [1.9, -4.6, 1.8])),
    nus_case("nus-ann-size-inf", ("sample_annotation", TOKEN, "'size'"), annotation("size", [INF, 4.6, 1.8])),
    nus_case("nus-ann-size-null", ("sample_annotation", TOKEN, "'size'"), annotation("size", None)),
    nus_case("nus-ann-translation-nan", ("sample_annotation", TOKEN, "'translation'", "finite"),
             annotation("translation", [NAN, 0.0, 1.0])),
    nus_case("nus-ann-translation-inf", ("sample_annotation", TOKEN, "'translation'"),
             annotation("translation", [19.7, INF, 1.0])),
    nus_case("nus-ann-rotation-zero", ("sample_annotation", TOKEN, "'rotation'", "non-zero quaternion"),
             annotation("rotation", [0.0, 0.0, 0.0, 0.0])),
    nus_case("nus-ann-rotation-nan", ("sample_annotation", TOKEN, "'rotation'"),
             annotation("rotation", [NAN, 0.0, 0.0, 1.0])),
    nus_case("nus-ann-instance-dangling", ("sample_annotation", TOKEN, "instance_token", "dangling"),
             annotation("instance_token", "f" * 32)),
    nus_case("nus-ann-size-nan-skipped", (), annotation("size", [NAN, 1.0, 2.0]), status=0, policy="skip",
             stdout=("SKIPPED 1 bad frame", "sample_annotation", "'size'")),
    nus_case("nus-egopose-translation-nan", ("ego_pose", TOKEN, "'translation'"),
             ego_pose("translation", [NAN, 0.0, 0.0])),
    nus_case("nus-egopose-rotation-zero", ("ego_pose", TOKEN, "'rotation'"), ego_pose("rotation", [0, 0, 0, 0])),
    # table level (fatal whatever the policy): calibration and sample_data's tokens
    nus_case("nus-cs-intrinsic-nan", ("calibrated_sensor", TOKEN, "camera_intrinsic"),
             camera_calibration("camera_intrinsic", [[NAN, 0, 32], [0, 60, 24], [0, 0, 1]]), "check"),
    nus_case("nus-cs-intrinsic-inf", ("calibrated_sensor", TOKEN, "camera_intrinsic"),
             camera_calibration("camera_intrinsic", [[60, 0, INF], [0, 60, 24], [0, 0, 1]]), "check"),
    nus_case("nus-cs-translation-nan", ("calibrated_sensor", TOKEN, "'translation'"),
             camera_calibration("translation", [1.7, NAN, 1.5]), "check"),
    nus_case("nus-cs-rotation-zero", ("calibrated_sensor", TOKEN, "'rotation'", "non-zero"),
             camera_calibration("rotation", [0, 0, 0, 0]), "check"),
    nus_case("nus-cs-intrinsic-nan-eval", ("calibrated_sensor", TOKEN, "camera_intrinsic"),
             camera_calibration("camera_intrinsic", [[NAN, 0, 32], [0, 60, 24], [0, 0, 1]]), policy="skip"),
    nus_case("nus-sd-calibrated-sensor-dangling", ("sample_data", TOKEN, "calibrated_sensor_token", "dangling"),
             sample_data_field("calibrated_sensor_token"), "check"),
    nus_case("nus-sd-ego-pose-dangling", ("sample_data", TOKEN, "ego_pose_token", "dangling"),
             sample_data_field("ego_pose_token"), "check"),
    nus_case("nus-sd-sample-dangling", ("sample_data", TOKEN, "sample_token", "dangling"),
             sample_data_field("sample_token"), "check"),
    nus_case("nus-control", (), None, "check", status=0, stdout=("every checked frame is readable", "CAM_FRONT 64x48")),
    # item 3: BDD100K boxes against the image's real size (64x48 here; the reader once assumed 1280x720)
    bdd_case("bdd-box-outside-real-size", (TOKEN, "box2d", "outside the 64x48 image", SKIP),
             bdd_box({"x1": 1500.0, "y1": 10.0, "x2": 1600.0, "y2": 20.0})),
    bdd_case("bdd-box-below-image", (TOKEN, "box2d", "outside"), bdd_box({"x1": 10.0, "y1": 40.0, "x2": 20.0,
                                                                         "y2": 60.0})),
    bdd_case("bdd-box-inverted", (TOKEN, "box2d", "inverted"), bdd_box({"x1": 30.0, "y1": 10.0, "x2": 20.0,
                                                                       "y2": 20.0})),
    bdd_case("bdd-box-nan", (TOKEN, "box2d", "finite"), bdd_box({"x1": NAN, "y1": 10.0, "x2": 20.0, "y2": 20.0})),
    bdd_case("bdd-box-null", (TOKEN, "box2d", "finite"), bdd_box(None)),
    bdd_case("bdd-box-coordinate-null", (TOKEN, "box2d", "finite"), bdd_box({"x1": None, "y1": 10.0, "x2": 20.0,
                                                                            "y2": 20.0})),
    bdd_case("bdd-box-outside-skipped", (), bdd_box({"x1": 1500.0, "y1": 10.0, "x2": 1600.0, "y2": 20.0}),
             status=0, policy="skip", stdout=("SKIPPED 1 bad frame", TOKEN, "outside the 64x48 image")),
    # item 3: data check reports each camera's size range when frames differ
    bdd_case("bdd-name-dotdot", ("det_val.json", "frames[0].name", "'../../../x.jpg'"), bdd_name("../../../x.jpg"), "check"),
    bdd_case("bdd-name-absolute", ("det_val.json", "frames[0].name", "'/etc/x.jpg'"), bdd_name("/etc/x.jpg"), "check"),
    bdd_case("bdd-image-symlink-out", (TOKEN, "leaves"), bdd_image_symlink_out),
    bdd_case("check-size-range", (), bdd_resize_second, "check", status=0,
             stdout=("CAM_FRONT: 64-70 x 48-50", "every checked frame is readable")),
    bdd_case("check-size-fixed", (), None, "check", status=0, stdout=("cameras: CAM_FRONT 64x48",)),
    # item 5: a sim-trained model scored on BDD100K through the class map (bicycle -> cyclist; rider and
    # train left out, and said so); signs_lights has no counterpart for BDD100K's unnamed signs: n/a
    bdd_case("eval-sim-model-on-bdd100k", (), bdd_extra_labels, status=0,
             stdout=("det2d", "mAP50", "renamed bicycle -> cyclist", "dataset rider, train", "signs_lights",
                     "not scored: the dataset's sign classes ['unknown']")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_reader_fault(case, fault_env, runs, bdd, tmp_path, monkeypatch, capsys):
    env = copy.copy(fault_env)
    env.runs, env.bdd = runs, bdd
    run_case(case, tmp_path, env, monkeypatch, capsys)
