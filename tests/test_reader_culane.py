"""CULane reader (hydranet/data/culane.py): each line of a .lines.txt becomes a lanes2d polyline cut at the
image's edges, the lanes head's target is drawn where the lanes are, splits from CULane's list files, bad input.
Fixtures: tests/lane_road_fixtures.py (the official layout)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from hydranet.data.culane import CULaneDataset
from hydranet.data.formats import check_dataset, detect_format
from hydranet.data.reader import DatasetError
from lane_road_fixtures import CULANE_HW, CULANE_LANES, write_culane

FIRST, SECOND, NIGHT = CULANE_LANES


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_culane(tmp_path_factory.mktemp("culane") / "cl")


def _lanes(sample) -> list:
    return [(lane["lane_id"], np.round(lane["points"], 6).tolist()) for lane in
            sample["labels"]["cameras"]["CAM_FRONT"]["lanes2d"]]


def test_lanes_become_polylines_cut_at_the_edge(root):
    ds = CULaneDataset(root)
    assert detect_format(root) == "culane" and len(ds) == 3 and ds.split == "all"
    by_path = {ds.frame_ids[i][1]: ds[i] for i in range(len(ds))}
    assert set(by_path) == set(CULANE_LANES)
    # the second lane leaves the 164 px wide image between (150, 48) and (170, 38): it ends on x = 163, y = 41.5
    assert _lanes(by_path[FIRST]) == [(1, [[20.5, 58.0], [40.0, 48.0], [60.25, 38.0]]),
                                      (2, [[120.0, 58.0], [150.0, 48.0], [163.0, 41.5]])]
    # the second lane starts below the last row and left of the image: it enters at x = 0 on row 53
    assert _lanes(by_path[SECOND]) == [(1, [[80.0, 58.0], [82.0, 48.0], [84.0, 38.0], [86.0, 28.0]]),
                                       (2, [[0.0, 53.0], [4.0, 49.0], [14.0, 39.0]])]
    assert _lanes(by_path[NIGHT]) == []  # an empty .lines.txt: a frame without lanes, still a labelled frame
    s = by_path[FIRST]
    assert s["supervises"] == {"lanes"} and s["images"].shape == (1,) + CULANE_HW + (3,)
    assert ("driver_23_30frame_05151649_0422_00000", FIRST) in ds.frame_ids
    r = check_dataset(root)
    assert r["supervises"] == ["lanes"] and not r["bad"] and r["classes"] == [] and r["frames"] == 3


def test_lane_target_is_drawn_where_the_lanes_are(root):
    """The lanes head's target at the image's own size: the reader's polylines drawn by the task, the cut lane
    reaching the right edge."""
    from hydranet.loader import LabelledFrames
    from hydranet.tasks.lanes import LanesTask

    ds = CULaneDataset(root)
    frames = LabelledFrames(ds, {"lanes": LanesTask(8)}, CULANE_HW)
    i = [f for _, f in ds.frame_ids].index(FIRST)
    mask = frames[i]["targets"]["lanes"]["mask"][0, 0]  # (59, 164)
    assert mask[48, 40] and mask[48, 150] and mask[42, 162]  # both lanes, and the cut one up to the edge
    assert not mask[10, 80] and not mask[55, 90]  # the sky; the road between the lanes


def test_splits(root, tmp_path):
    assert [f for _, f in CULaneDataset(root, "test").frame_ids] == [SECOND, NIGHT]
    assert [f for _, f in CULaneDataset(root, "test8_night").frame_ids] == [NIGHT]
    with pytest.raises(DatasetError, match=r"unknown CULane split 'val' \(no list/val_gt.txt\); choose 'all' or one of "
                                           r"the list files there \['test', 'test8_night'\]$"):
        CULaneDataset(root, "val")
    with pytest.raises(DatasetError, match=r"split '../test' is not a list file's name"):
        CULaneDataset(root, "../test")
    bare = shutil.copytree(root, tmp_path / "bare")
    shutil.rmtree(bare / "list")
    with pytest.raises(DatasetError, match=r"list: no CULane list file, so no split 'test'; unzip list.tar.gz into the "
                                           r"root, or use split 'all'"):
        CULaneDataset(bare, "test")
    (bare / "list").mkdir()
    (bare / "list" / "val.txt").write_text(f"/{FIRST}\n")  # CULane's val.txt (images only), without val_gt.txt
    assert [f for _, f in CULaneDataset(bare, "val").frame_ids] == [FIRST]


def test_bad_input(root, tmp_path):
    bad = shutil.copytree(root, tmp_path / "cl")
    labels = bad / SECOND.replace(".jpg", ".lines.txt")
    labels.write_text("80 58 82 48\n80 58 82\n")
    i = [f for _, f in CULaneDataset(bad).frame_ids].index(SECOND)
    with pytest.raises(DatasetError, match=f"{labels}:2: a lane must be 2 or more points 'x y x y ...' of finite "
                                           "numbers, got '80 58 82'"):
        CULaneDataset(bad)[i]
    labels.write_text("80 58 nan 48\n")
    with pytest.raises(DatasetError, match=f"{labels}:1: a lane must be"):
        CULaneDataset(bad)[i]
    labels.write_text("80 58 82 48\n10 300 12 290\n")  # an annotation of the 590-row original on a 59-row image
    with pytest.raises(DatasetError, match=f"{labels}:2: row 300 lies outside the 164x59 image \\(was the image "
                                           "resized without its annotation\\?\\)"):
        CULaneDataset(bad)[i]
    labels.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 9\n")
    with pytest.raises(DatasetError, match=f"{labels}: a Git LFS pointer, not the file itself; fetch the file itself"):
        CULaneDataset(bad)[i]
    lanes_only = CULaneDataset(bad, channels=())  # images not decoded: the size comes from the header
    (bad / SECOND).unlink()
    with pytest.raises(DatasetError, match=f"{bad / SECOND}: image is missing"):
        lanes_only[i]
    labels.unlink()
    with pytest.raises(DatasetError, match=f"{labels}: the annotation of {SECOND} is missing"):
        CULaneDataset(bad, "test")[0]
    skip = CULaneDataset(bad, "test", on_bad_frame="skip")  # the frame is skipped and counted, not replaced
    assert skip[0]["scene"] == "driver_161_90frame_06030819_0755_00090" and len(skip.skipped) == 1
    (bad / "list" / "test.txt").write_text("/../../etc/x.jpg\n")
    with pytest.raises(DatasetError, match=r"list/test.txt:1: image path"):
        CULaneDataset(bad, "test")
    (bad / "list" / "test.txt").write_text(f"/{SECOND.replace('.jpg', '.lines.txt')}\n")
    with pytest.raises(DatasetError, match=r"list/test.txt:1: image path '.*00030.lines.txt' is not an image"):
        CULaneDataset(bad, "test")
    with pytest.raises(DatasetError, match="no such folder"):
        CULaneDataset(tmp_path / "nowhere")
    with pytest.raises(DatasetError, match="CULane has one camera"):
        CULaneDataset(root, cameras=["CAM_BACK"])
