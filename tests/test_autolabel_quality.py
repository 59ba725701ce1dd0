"""benchmarks/autolabel.py's quality measures of auto-labels on hand-made frames: tracking through TrackEval
(HOTA, CLEAR MOT, IDF1) of perfect, swapped and class-confused tracks, the 3D labels' nuScenes metrics against
the same boxes through `evaluate_boxes` (an independent path), and the BEV map label's IoU against its raster."""
from __future__ import annotations

import numpy as np
import pytest
from benchmark_scripts import load

pytest.importorskip("trackeval", reason="TrackEval is installed by `make test` (pip --no-deps: pyproject.toml)")


@pytest.fixture(scope="module")
def al():
    return load("autolabel")


@pytest.fixture(scope="module")
def metrics(al):
    return al.tracking_metrics()


def obj(tid, x, cls="car", **extra):
    return {"track_id": tid, "bbox": [x, 10.0, x + 20.0, 30.0], "class": cls, "center": [x, 0.0, 0.0], **extra}


def truth_frames(T: int = 4) -> list[list[dict]]:
    """Two cars moving apart, ids 1 and 2, over T frames."""
    return [[obj(1, 10.0 + 2 * t), obj(2, 60.0 - 2 * t)] for t in range(T)]


def scores(al, metrics, frames, similarity="iou_same_class") -> dict[str, float]:
    data = al.track_sequence(frames, getattr(al, similarity))
    return al.track_values([al.sequence_results(data, metrics)], metrics)


def test_perfect_tracks_score_one(al, metrics):
    gt = truth_frames()
    label = [[obj(7, o["bbox"][0]), obj(9, p["bbox"][0])] for o, p in gt]  # other ids, same objects
    got = scores(al, metrics, list(zip(gt, label)))
    assert got["HOTA"] == pytest.approx(1.0) and got["MOTA"] == pytest.approx(1.0) and got["IDF1"] == pytest.approx(1.0)
    assert got["IDSW"] == 0


def test_an_identity_swap_is_counted_and_lowers_association(al, metrics):
    gt = truth_frames()
    label = [[obj(7 if t < 2 else 9, o["bbox"][0]), obj(9 if t < 2 else 7, p["bbox"][0])] for t, (o, p) in enumerate(gt)]
    got = scores(al, metrics, list(zip(gt, label)))
    assert got["IDSW"] == 2 and got["MOTA"] == pytest.approx(1 - 2 / 8)
    assert got["DetA"] == pytest.approx(1.0) and got["AssA"] < 0.75 and got["IDF1"] == pytest.approx(0.5)


def test_another_class_or_no_track_is_not_the_same_object(al, metrics):
    gt = truth_frames()
    label = [[obj(7, o["bbox"][0], cls="truck"), obj(None, p["bbox"][0])] for o, p in gt]
    got = scores(al, metrics, list(zip(gt, label)))
    # the truck never matches the car (a miss and a false positive each frame); the untracked boxes match but each
    # is an object of its own: an identity switch at every frame after the first
    assert got["DetA"] < 0.5 and got["IDSW"] == 3
    iou = al.iou_same_class([obj(1, 0.0)], [obj(2, 10.0), obj(3, 10.0, cls="bus")])
    np.testing.assert_allclose(iou, [[10 * 20 / (30 * 20), 0.0]])
    close = al.closeness_same_class([obj(1, 0.0)], [obj(2, 1.0), obj(3, 5.0), obj(4, 0.0, cls="bus")])
    np.testing.assert_allclose(close, [[1 - 1.0 / al.TRACK_DIST_M, 0.0, 0.0]])


def box3d(cls, x, y, v, conf=None):
    b = {"center": [x, y, 0.8], "size": [4.5, 1.9, 1.5], "yaw": 0.0, "velocity": [v[0], v[1], 0.0], "class": cls}
    return {**b, "confidence": conf} if conf is not None else {**b, "num_pixels": 500, "attributes": {"moving": v[0] > 0}}


def test_det3d_metrics_of_the_labels_equal_evaluate_boxes(al):
    """det3d_state + det3d_values against evaluate_boxes over the same GT and predictions (the submission path)."""
    from hydranet.metrics.nuscenes_detection import DetectionConfig, evaluate_boxes
    from hydranet.nuscenes_results import frame_eval_boxes, frame_results, result_eval_boxes

    classes = ["car", "pedestrian"]
    pose = np.eye(4)
    pose[:3, 3] = [100.0, -20.0, 0.0]
    frames = [({"boxes3d": [box3d("car", 10.0, 2.0, (5.0, 0.0)), box3d("pedestrian", 8.0, -3.0, (0.0, 0.0))]},
               {"boxes3d": [box3d("car", 10.4, 2.0, (3.0, 0.0), 0.9), box3d("car", 30.0, 5.0, (0.0, 0.0), 0.4)]}),
              ({"boxes3d": [box3d("car", 12.0, 2.0, (5.0, 0.0))]}, {"boxes3d": [box3d("car", 12.0, 2.1, (5.0, 1.0), 0.8)]})]
    states = [al.det3d_state(lab, tr, pose, classes, f"s{k}") for k, (tr, lab) in enumerate(frames)]
    got = al.det3d_values(states)
    cfg = DetectionConfig()
    gt, pred = {}, {}
    for k, (tr, lab) in enumerate(frames):
        arr = np.array([[*b["center"], *b["size"], b["yaw"], *b["velocity"][:2]] for b in lab["boxes3d"]])
        entries = frame_results(arr, [b["confidence"] for b in lab["boxes3d"]],
                                [classes.index(b["class"]) for b in lab["boxes3d"]], classes, pose, f"s{k}")
        gt[f"s{k}"], pred[f"s{k}"] = frame_eval_boxes(tr, pose, f"s{k}", cfg), result_eval_boxes(entries, pose, cfg)
    m = evaluate_boxes(gt, pred, cfg)[0]
    assert got["NDS"] == pytest.approx(m.nd_score) and got["mAP"] == pytest.approx(m.mean_ap)
    assert got["mAVE"] == pytest.approx(m.tp_errors["vel_err"]) and got["mATE"] == pytest.approx(m.tp_errors["trans_err"])
    assert 0 < got["mAVE"] < 2  # the car's two matches: 2.0 and 1.0 m/s off


def test_bevmap_label_iou_against_its_raster(al):
    from hydranet.bevgrid import BevGrid
    from hydranet.tasks.bevmap import BevMapTask, ChannelIoU

    src, grid = BevGrid((-4.0, 4.0), (-4.0, 4.0), 0.5), BevGrid((-4.0, 4.0), (-4.0, 4.0), 1.0)
    task = BevMapTask(1, grid, src)
    raster = np.zeros((3, 16, 16), np.uint8)
    raster[0, :8] = 255  # drivable: the rear half (x < 0)
    raster[2, 8:10, 8:10] = 3  # one object cell at (0.5 m, 0.5 m)
    pred = np.zeros((1, 3, 8, 8), np.float16)
    pred[0, 0, :4] = 0.9  # drivable right
    pred[0, 0, 4:6] = 0.6  # over the threshold: drawn, and wrong
    pred[0, 0, 6:] = 0.5  # at the threshold: not drawn (the head decodes p > threshold)
    st = al.bevmap_state({"bevmap": pred}, raster, task, 0.5)
    iou = ChannelIoU(task.channels).compute_states([st])
    assert iou["iou/drivable"] == pytest.approx(4 / 6) and iou["iou/objects"] == 0.0
    assert np.isnan(iou["iou/lanes"]) and iou["mIoU"] == pytest.approx((4 / 6 + 0.0) / 2)
    assert al.bevmap_state(None, raster, task, 0.5) is None


def test_clip_bootstrap_point_and_interval(al):
    per_clip = [[1.0, 1.0], [3.0], [5.0, 5.0, 5.0]]
    got = al.clip_bootstrap(per_clip, lambda xs: {"mean": float(np.mean(xs))}, 200, 0)
    assert got["mean"]["value"] == pytest.approx(20 / 6)
    lo, hi = got["mean"]["interval"]
    assert 1.0 <= lo < 20 / 6 < hi <= 5.0
