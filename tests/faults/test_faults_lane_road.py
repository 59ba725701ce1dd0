"""Fault rows: the Cityscapes, TuSimple and CULane readers (hydranet/data/cityscapes.py, tusimple.py, culane.py;
issue 32 item 1)
through `hydranet eval` and `hydranet data check`: a sim-trained model scored on each (Cityscapes: det2d and
drivable, through the class map; TuSimple: lanes; the other heads left out with a note), an image without its
gtFine labels (an error naming the file, or a skipped and counted frame under data.on_bad_frame=skip), label
images of another size or with impossible instance ids, a broken camera.json, an unknown split, a label file
line that is not JSON, lanes that do not fit h_samples or the image, a raw_file leaving the root; CULane: a lane
line that is not pairs of numbers, a frame without its .lines.txt, a list line leaving the root, an unknown split.

The folders: tests/lane_road_fixtures.py (two 48x96 Cityscapes val frames; three 128x72 TuSimple frames in
label_data_0313.json and label_data_0531.json; three 164x59 CULane frames). One row per case; see faultlib.py."""
from __future__ import annotations

import copy
import json
import shutil

import cv2
import numpy as np
import pytest
import yaml
from faultlib import Case, params, run_case

from hydranet.cli import main
from lane_road_fixtures import (CULANE_LANES, TUSIMPLE_RECORDS, city_frame, city_stem, write_culane, write_cityscapes,
                                write_tusimple)

SKIP = "on_bad_frame=skip"
STEM = city_stem("aachen", 0)
NOTE = "not scored: no frame of this dataset has its labels"


@pytest.fixture(scope="module")
def lane_road(fault_env, tmp_path_factory):
    """Two 1-step det2d + drivable + lanes runs on the fault suite's sim dataset (data.on_bad_frame raise and skip:
    eval reads with the run's policy), and the two folders."""
    base = tmp_path_factory.mktemp("lane_road")
    runs = {}
    for policy in ("raise", "skip"):
        cfg = {"data": {"root": str(fault_env.dataset), "cameras": ["CAM_FRONT"], "image_size": [64, 64],
                        "on_bad_frame": policy},
               "model": {"backbone": "tiny", "neck_width": 16, "neck_repeats": 1,
                         "tasks": [{"name": "det2d"}, {"name": "drivable"}, {"name": "lanes"}]},
               "steps": 1, "batch_size": 2, "num_workers": 0, "augment": {"photometric": False, "geometric": False}}
        (base / f"{policy}.yaml").write_text(yaml.safe_dump(cfg))
        assert main(["train", "--config", str(base / f"{policy}.yaml"), "--out", str(base / policy), "--quiet"]) == 0
        runs[policy] = base / policy
    return {"runs": runs, "cityscapes": write_cityscapes(base / "cs", [city_frame(0), city_frame(1)]),
            "tusimple": write_tusimple(base / "ts"), "culane": write_culane(base / "cl")}


def scored(**labelled):
    """check: the metrics JSON counts these labelled frames per head."""
    def check(tmp):
        res = json.loads((tmp / "eval" / "m.json").read_text())
        assert {h: res["labelled_frames"][h] for h in labelled} == labelled, res["labelled_frames"]
    return check


def case(id, fmt, words=(), edit=None, command="eval", status=2, policy="raise", stdout=(), extra=(), check=None):
    """`hydranet eval` (or `data check`) on a copy of the `fmt` folder after `edit(root)`."""
    def build(tmp, env):
        root = shutil.copytree(env.lane_road[fmt], tmp / fmt)
        if edit is not None:
            edit(root)
        if command == "check":
            return ["data", "check", "--data", root, "--quiet", *extra]
        return ["eval", "--checkpoint", env.lane_road["runs"][policy], "--data", root, "--out", tmp / "eval" / "m.json",
                "--quiet", *extra]
    return Case(id, build, status, words, stdout=stdout, check=check)


# -- edits ------------------------------------------------------------------------------------------------
def gtfine(suffix):
    return lambda root: root / "gtFine" / "val" / "aachen" / f"{STEM}_gtFine_{suffix}.png"


def remove_labels(root):
    gtfine("labelIds")(root).unlink()


def small_labels(root):
    cv2.imwrite(str(gtfine("labelIds")(root)), np.full((10, 20), 7, np.uint8))


def stuff_instance_id(root):
    cv2.imwrite(str(gtfine("instanceIds")(root)), np.full((48, 96), 7001, np.uint16))


def corrupt_camera(root):
    (root / "camera" / "val" / "aachen" / f"{STEM}_camera.json").write_text('{"intrinsic": {"fx": 22')


def label_line(text, n=2):
    """label_data_0313.json with `text` as line n."""
    def edit(root):
        path = root / "label_data_0313.json"
        lines = path.read_text().splitlines()
        lines.insert(n - 1, text)
        path.write_text("\n".join(lines) + "\n")
    return edit


def first_record(**kw):
    """label_data_0313.json's first line with fields replaced."""
    rec = {**TUSIMPLE_RECORDS["label_data_0313.json"][0], **kw}
    return label_line(json.dumps(rec), 1)


def remove_first_image(root):
    (root / TUSIMPLE_RECORDS["label_data_0313.json"][0]["raw_file"]).unlink()


LFS_POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 123456\n"
CULANE_FIRST = list(CULANE_LANES)[1]  # 00030.jpg: the first frame of list/test.txt


def culane_lines(text):
    """That CULane frame's .lines.txt replaced by `text`."""
    return lambda root: (root / CULANE_FIRST.replace(".jpg", ".lines.txt")).write_text(text)


def remove_culane_lines(root):
    (root / CULANE_FIRST.replace(".jpg", ".lines.txt")).unlink()


def culane_list(text):
    return lambda root: (root / "list" / "test.txt").write_text(text)


CASES = [
    # the heads each genuine format labels are scored; the others are left out with a note
    case("eval-sim-model-on-cityscapes", "cityscapes", status=0, check=scored(det2d=2, drivable=2, lanes=0),
         stdout=("mAP50", "drivable", "iou", NOTE, "renamed bicycle -> cyclist",
                 "dataset rider")),
    case("eval-sim-model-on-tusimple", "tusimple", status=0, check=scored(det2d=0, drivable=0, lanes=3),
         stdout=("pixel_iou", NOTE)),
    # --fit: Cityscapes' camera.json lets a frame be resampled to the model's camera; TuSimple has no intrinsics
    case("eval-fit-camera-on-cityscapes", "cityscapes", status=0, check=scored(det2d=2, drivable=2),
         stdout=("mAP50", "drivable"), extra=("--fit", "camera")),
    case("eval-fit-camera-on-tusimple", "tusimple", ("data.fit=camera", "camera CAM_FRONT", "has no intrinsics",
                                                     "use data.fit=crop"), extra=("--fit", "camera")),
    case("eval-fit-crop-on-tusimple", "tusimple", status=0, check=scored(lanes=3), extra=("--fit", "crop")),
    case("check-cityscapes", "cityscapes", command="check", status=0,
         stdout=("format cityscapes, split val", "supervises: det2d, drivable", "bicycle -> bicycle: 2",
                 "cargroup -> (not used): 4", "every checked frame is readable")),
    case("check-tusimple", "tusimple", command="check", status=0,
         stdout=("format tusimple, split all", "frames: 3", "supervises: lanes")),
    # Cityscapes: an image without its gtFine labels, label images that do not fit, an unknown split
    case("cityscapes-gtfine-missing", "cityscapes", (f"{STEM}_gtFine_labelIds.png", "image is missing",
                                                     f"leftImg8bit/val/aachen/{STEM}_leftImg8bit.png", SKIP), remove_labels),
    case("cityscapes-gtfine-missing-check", "cityscapes", ("1 bad file(s)", f"{STEM}_gtFine_labelIds.png"), remove_labels,
         command="check", stdout=("image is missing",)),
    case("cityscapes-gtfine-missing-skipped", "cityscapes", (), remove_labels, status=0, policy="skip",
         stdout=("SKIPPED 1 bad frame", f"{STEM}_gtFine_labelIds.png"), check=scored(det2d=1, drivable=1)),
    case("cityscapes-labels-other-size", "cityscapes", (f"{STEM}_gtFine_labelIds.png", "expected 48x96", "got 10x20"),
         small_labels),
    case("cityscapes-instance-id-of-stuff", "cityscapes", (f"{STEM}_gtFine_instanceIds.png", "instance id 7001",
                                                           "label 7, which has no instances"), stuff_instance_id),
    case("cityscapes-camera-json-corrupt", "cityscapes", (f"{STEM}_camera.json", "corrupt json", "camera_trainvaltest"),
         corrupt_camera, command="check"),
    case("cityscapes-unknown-split", "cityscapes", ("unknown cityscapes split 'dev'", "['train', 'val', 'test']"),
         extra=("--split", "dev")),
    case("cityscapes-split-folder-missing", "cityscapes", ("leftImg8bit/train", "folder is missing", "gtFine_trainvaltest"),
         extra=("--split", "train")),
    # TuSimple: label file lines, lanes that do not fit, a raw_file leaving the root, an unknown split
    case("tusimple-json-line-malformed", "tusimple", ("label_data_0313.json:2", "not a JSON object",
                                                      "fix or remove that line"), label_line('{"raw_file": "clips/x/20.jpg", "la')),
    case("tusimple-json-line-malformed-check", "tusimple", ("label_data_0313.json:2", "not a JSON object"),
         label_line("[1, 2"), command="check"),
    case("tusimple-field-missing", "tusimple", ("label_data_0313.json:2", "field 'h_samples' is missing"),
         label_line('{"raw_file": "clips/0313-1/60/20.jpg", "lanes": []}')),
    case("tusimple-lane-length", "tusimple", ("label_data_0313.json:1", "lanes[0] has 3 points, h_samples 5", SKIP),
         first_record(lanes=[[1, 2, 3]])),
    case("tusimple-point-outside", "tusimple", ("label_data_0313.json:1", "(500, 70)", "outside the 128x72 image"),
         first_record(lanes=[[1, 2, 3, 4, 500]])),
    case("tusimple-raw-file-dotdot", "tusimple", ("label_data_0313.json:1", "raw_file", "'../../x.jpg'", "leaves"),
         first_record(raw_file="../../x.jpg"), command="check"),
    case("tusimple-image-missing-skipped", "tusimple", (), remove_first_image, status=0, policy="skip",
         stdout=("SKIPPED 1 bad frame", "clips/0313-1/60/20.jpg"), check=scored(lanes=2)),
    case("tusimple-unknown-split", "tusimple", ("unknown tusimple split 'val'", "label_data_0313", "label_data_0531"),
         extra=("--split", "val")),
    case("tusimple-test-split-without-labels", "tusimple", ("split 'test' has no label file", "test_label.json"),
         extra=("--split", "test")),
    # CULane: scored on lanes; lane lines that are not pairs of numbers, a missing annotation, lists, splits
    case("eval-sim-model-on-culane", "culane", status=0, check=scored(det2d=0, drivable=0, lanes=3),
         stdout=("pixel_iou", NOTE)),
    case("eval-fit-crop-on-culane", "culane", status=0, check=scored(lanes=3), extra=("--fit", "crop")),
    case("eval-fit-camera-on-culane", "culane", ("data.fit=camera", "camera CAM_FRONT", "has no intrinsics"),
         extra=("--fit", "camera")),
    case("check-culane", "culane", command="check", status=0,
         stdout=("format culane, split all", "frames: 3", "supervises: lanes", "every checked frame is readable")),
    case("culane-lane-odd-count", "culane", ("00030.lines.txt:2", "a lane must be 2 or more points", "'1 2 3'", SKIP),
         culane_lines("20 58 40 48\n1 2 3\n")),
    case("culane-lane-not-a-number", "culane", ("00030.lines.txt:1", "'20 58 x 48'"), culane_lines("20 58 x 48\n"),
         command="check"),
    # "all" is every annotated frame; a list names frames, so a listed frame without its annotation is an error
    case("culane-annotation-missing", "culane", ("00030.lines.txt", "the annotation of", "is missing", SKIP),
         remove_culane_lines, extra=("--split", "test")),
    case("culane-annotation-missing-skipped", "culane", (), remove_culane_lines, status=0, policy="skip",
         stdout=("SKIPPED 1 bad frame", "00030.lines.txt"), check=scored(lanes=1), extra=("--split", "test")),
    case("culane-list-leaves-root", "culane", ("list/test.txt:1", "image path", "leaves"), culane_list("/../../x.jpg\n"),
         extra=("--split", "test")),
    case("culane-unknown-split", "culane", ("unknown CULane split 'val'", "'test'", "'test8_night'"),
         extra=("--split", "val")),
    case("culane-annotation-of-another-size", "culane", ("00030.lines.txt:1", "row 300 lies outside the 164x59 image",
                                                         "resized without its annotation"),
         culane_lines("10 300 12 290\n"), command="check"),
    case("culane-list-git-lfs-pointer", "culane", ("list/test.txt", "git lfs pointer", "git lfs pull"),
         culane_list(LFS_POINTER), extra=("--split", "test")),
    case("tusimple-label-file-git-lfs-pointer", "tusimple", ("label_data_0313.json", "git lfs pointer", "git lfs pull"),
         lambda root: (root / "label_data_0313.json").write_text(LFS_POINTER), command="check"),
]


@pytest.mark.parametrize("case", params(CASES))
def test_lane_road_fault(case, fault_env, lane_road, tmp_path, monkeypatch, capsys):
    env = copy.copy(fault_env)
    env.lane_road = lane_road
    run_case(case, tmp_path, env, monkeypatch, capsys)
