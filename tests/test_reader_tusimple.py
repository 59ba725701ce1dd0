"""TuSimple reader (hydranet/data/tusimple.py) and the benchmark's score (hydranet/metrics/tusimple.py): lanes
become lanes2d polylines, the lanes head's target is drawn where the lanes are at the model's resolution,
splits, bad input. Fixtures: tests/lane_road_fixtures.py (the official layout)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hydranet.data.formats import check_dataset, detect_format
from hydranet.data.reader import DatasetError
from hydranet.data.tusimple import TuSimpleDataset
from hydranet.metrics.tusimple import lanes_at_rows, tusimple_accuracy
from lane_road_fixtures import H_SAMPLES, TUSIMPLE_POLYLINES, TUSIMPLE_RECORDS, write_tusimple


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_tusimple(tmp_path_factory.mktemp("tusimple") / "ts")


def test_lanes_become_polylines(root):
    ds = TuSimpleDataset(root)
    assert detect_format(root) == "tusimple" and len(ds) == 3 and ds.split == "all"
    for i in range(len(ds)):
        s = ds[i]
        lanes = s["labels"]["cameras"]["CAM_FRONT"]["lanes2d"]
        # a lane with a gap is two polylines of one lane id; a lane with no point gives none
        assert [(l_["lane_id"], l_["points"]) for l_ in lanes] == TUSIMPLE_POLYLINES[ds.frame_ids[i][1]]
        assert s["supervises"] == {"lanes"} and s["images"].shape == (1, 72, 128, 3)
    assert ds.frame_ids[0] == ("0313-1_60", "clips/0313-1/60/20.jpg")
    r = check_dataset(root)
    assert r["supervises"] == ["lanes"] and not r["bad"] and r["classes"] == []


def test_lane_target_is_drawn_where_the_lanes_are(root):
    """The lanes head's target at the model's resolution (36x64, half the images'): the reader's polylines
    scaled as every reader's (pixel centres kept) and drawn by the task."""
    from hydranet.loader import LabelledFrames
    from hydranet.tasks.lanes import LanesTask, draw_lanes, line_width

    task = LanesTask(8)
    frames = LabelledFrames(TuSimpleDataset(root), {"lanes": task}, (36, 64))
    mask = frames[0]["targets"]["lanes"]["mask"][0, 0]  # (36, 64)
    half = lambda pts: [[0.5 * (x + 0.5) - 0.5, 0.5 * (y + 0.5) - 0.5] for x, y in pts]  # noqa: E731
    lanes = [[np.array(half(p)) for k, p in TUSIMPLE_POLYLINES["clips/0313-1/60/20.jpg"] if k == lane] for lane in (1, 2)]
    np.testing.assert_array_equal(mask, draw_lanes(lanes, (36, 64), line_width(36, task.line_width_frac)).any(0))
    assert mask[25, 15] and mask[20, 10] and mask[15, 30]  # (30, 50), (20, 40), (60, 30) of the 128x72 image
    assert not mask[5, 5] and not mask[25, 31]  # the sky; the gap of lane 2 between rows 40 and 60


def test_splits(root):
    assert len(TuSimpleDataset(root, "train")) == 3
    one = TuSimpleDataset(root, "label_data_0531")
    assert one.frame_ids == [("0531_1492626047222176976_0", "clips/0531/1492626047222176976_0/20.jpg")]
    with pytest.raises(DatasetError, match=r"unknown TuSimple split 'val'; choose one of \['train', 'test', 'all'\] or "
                                           r"a label file's name \['label_data_0313', 'label_data_0531'\]"):
        TuSimpleDataset(root, "val")
    with pytest.raises(DatasetError, match=r"split 'test' has no label file \(test_label.json\)"):
        TuSimpleDataset(root, "test")


def _copy_with(tmp_path, root, line: str, n: int = 2) -> tuple:
    bad = shutil.copytree(root, tmp_path / "ts")
    path = bad / "label_data_0313.json"
    lines = path.read_text().splitlines()
    lines.insert(n - 1, line)
    path.write_text("\n".join(lines) + "\n")
    return bad, path


def test_bad_input(root, tmp_path):
    bad, path = _copy_with(tmp_path, root, '{"raw_file": "clips/x/20.jpg", "lanes": [[1, 2]], "h_samp')
    with pytest.raises(DatasetError, match=f"{path}:2: not a JSON object .* fix or remove that line"):
        TuSimpleDataset(bad)
    path.write_text(json.dumps({"raw_file": "clips/0313-1/60/20.jpg", "lanes": []}) + "\n")
    with pytest.raises(DatasetError, match=f"{path}:1: field 'h_samples' is missing"):
        TuSimpleDataset(bad)
    path.write_text(json.dumps({"raw_file": "../outside.jpg", "lanes": [], "h_samples": []}) + "\n")
    with pytest.raises(DatasetError, match="outside"):
        TuSimpleDataset(bad)
    rec = dict(TUSIMPLE_RECORDS["label_data_0313.json"][0])
    for lanes, words in (([[1, 2, 3]], r"lanes\[0\] has 3 points, h_samples 5"),
                         ([[1, 2, 3, 4, 500]], r"lanes\[0\] point \(500, 70\) lies outside the 128x72 image"),
                         ([[1, 2, "x", 4, 5]], r"field 'lanes\[0\]' must be a list of finite numbers")):
        path.write_text(json.dumps({**rec, "lanes": lanes}) + "\n")
        with pytest.raises(DatasetError, match=f"{path}:1: {words}"):
            TuSimpleDataset(bad)[0]
    path.write_text(json.dumps({**rec, "raw_file": "clips/none/20.jpg"}) + "\n")
    with pytest.raises(DatasetError, match="clips/none/20.jpg: image is missing; .*label_data_0313.json line 1"):
        TuSimpleDataset(bad, "label_data_0313")[0]
    skip = TuSimpleDataset(bad, on_bad_frame="skip")
    assert len(skip) == 2 and skip[0]["scene"] == "0531_1492626047222176976_0" and len(skip.skipped) == 1


def test_tusimple_accuracy_by_hand():
    ys = H_SAMPLES
    gt = [[-2, 20, 30, 40, -2], [60, 62, 64, 66, 68]]
    assert tusimple_accuracy(gt, gt, ys) == (1.0, 0.0, 0.0)
    # lane 2 predicted 30 px off (beyond 20 / cos(angle)): a miss and a false positive; lane 1 exact
    acc, fp, fn = tusimple_accuracy([gt[0], [x + 30 for x in gt[1]]], gt, ys)
    assert (acc, fp, fn) == (pytest.approx((1.0 + 0.0) / 2), 0.5, 0.5)
    # 4 of 5 rows within the threshold: 0.8 < 0.85, not found, but its accuracy counts
    near = [60, 62, 64, 66, 100]
    assert tusimple_accuracy([gt[0], near], gt, ys) == (pytest.approx((1.0 + 0.8) / 2), 0.5, 0.5)
    assert tusimple_accuracy([], gt, ys) == (0.0, 0.0, 1.0)
    assert tusimple_accuracy([gt[0]] * 5, gt, ys) == (0.0, 0.0, 1.0)  # more than lanes + 2 predictions


def test_lanes_at_rows_reads_a_decoded_mask():
    inst = np.zeros((36, 64), np.int32)  # a 128x72 image at half resolution
    inst[:, 10] = 1  # the column whose centre is x = 2 * (10 + 0.5) - 0.5 = 20.5
    inst[20:, 40:42] = 2  # columns 40 and 41: mean 40.5, x = 2 * (40.5 + 0.5) - 0.5 = 81.5
    got = lanes_at_rows(inst, H_SAMPLES, (128, 72))
    assert got[0] == [20.5] * 5
    assert got[1] == [-2.0, 81.5, 81.5, 81.5, 81.5]  # rows 30 -> mask row 15 (no lane 2 there), 40 -> 20, ...
    assert tusimple_accuracy(got, [[20, 20, 20, 20, 20], [-2, 81, 82, 81, 82]], H_SAMPLES) == (1.0, 0.0, 0.0)
