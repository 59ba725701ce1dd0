"""benchmarks/det3d_matches.py: per class, what a detection list can match and where nuScenes' 10% floors cut it."""
from __future__ import annotations

import numpy as np
import pytest

from benchmark_scripts import load
from hydranet.tasks import det3d

dm = load("det3d_matches")


def box(x: float, y: float) -> np.ndarray:
    return np.array([x, y, 0, 1, 1, 1, 0, 0, 0], np.float32)


@pytest.fixture
def frames():
    # class 0: 10 true boxes along y = 10 (one per frame); each frame's detections: a decoy at score 0.9 far away,
    # and the box's detection 1.5 m off at score 0.5 (frames 0-4) or none (5-9)
    out = []
    for f in range(10):
        gt = np.stack([box(f, 10)])
        dets = [box(f, -20)] + ([box(f + 1.5, 10)] if f < 5 else [])
        scores = np.array([0.9] + ([0.5] if f < 5 else []), np.float32)
        out.append((np.stack(dets), scores, np.zeros(len(dets), int), gt, np.zeros(1, int)))
    return out


def test_recall_reach_and_the_first_counted_precision(frames):
    row = dm.class_row(frames, 0)
    assert row["gt"] == 10 and row["detections"] == 15
    assert row[0.5][0] == 0 and row[1.0][0] == 0  # 1.5 m off: out of reach under 2 m
    hits, top, precision = row[2.0]
    assert hits == 5 and top == 0  # the 10 top-ranked are the decoys
    # ranked: 10 decoys (0.9), then the 5 hits: recall 0.11 first reached at the 12th detection (2 hits), and the
    # highest precision from there on is at the 15th, 5 / 15
    assert precision == pytest.approx(5 / 15)
    assert row[4.0][:2] == (5, 0)


def test_the_first_counted_precision_decides_whether_ap_is_above_zero(frames):
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, num_gt = int(rng.integers(1, 30)), int(rng.integers(1, 20))
        scores, tp = rng.random(n), rng.random(n) < rng.random()
        tp[np.cumsum(tp) > num_gt] = False  # no more hits than true boxes
        p = det3d.first_counted_precision(scores, tp, num_gt)
        assert (p > 0.1) == (det3d.average_precision(scores, tp, num_gt) > 0)
    scores, hits, _ = det3d.centre_matches(frames, 0, 2.0)
    assert det3d.average_precision(scores, hits, 10) > 0  # the fixture's 5 / 15 is over the 0.10 floor
    # one hit of 10 true boxes at precision 1: recall 0.11 is never reached, so AP is 0 and so is the precision
    assert det3d.first_counted_precision(np.array([0.9]), np.array([True]), 10) == 0.0


def test_centre_matches_is_greedy_by_score_and_feeds_the_metric():
    # two detections near one true box: the surer one takes it, the other is a false positive even inside 2 m;
    # a second true box 3 m from its only detection is a hit at 4 m only
    f = [(np.stack([box(0.5, 0), box(0.2, 0), box(13, 0)]), np.array([0.8, 0.9, 0.7], np.float32), np.zeros(3, int),
          np.stack([box(0, 0), box(10, 0)]), np.zeros(2, int))]
    scores, hits, dist = det3d.centre_matches(f, 0, 2.0)
    assert scores.tolist() == pytest.approx([0.9, 0.8, 0.7]) and hits.tolist() == [True, False, False]
    assert dist == pytest.approx([0.2])
    assert det3d.centre_matches(f, 0, 4.0)[1].tolist() == [True, False, True]
    m = det3d.CenterDistanceAP(["car"])
    m.frames = f
    out = m.compute()
    assert out["mATE"] == pytest.approx(0.2)
    expected = np.mean([det3d.average_precision(*det3d.centre_matches(f, 0, th)[:2], 2) for th in m.THRESHOLDS])
    assert out["AP/car"] == pytest.approx(expected) and out["AP/car"] > 0


def test_a_class_without_true_boxes_has_no_reach():
    f = [(np.stack([box(0, 0)]), np.array([0.5], np.float32), np.array([1]), np.zeros((0, 9), np.float32),
          np.zeros(0, int))]
    row = dm.class_row(f, 1)
    assert row["gt"] == 0 and row["detections"] == 1 and row[4.0][0] == 0 and np.isnan(row[4.0][2])


def test_each_true_box_names_its_nearest_detection(frames):
    rows = dm.nearest(frames, 0)
    assert len(rows) == 10
    found = sorted(r for r in rows if r[2] == pytest.approx(0.5))
    assert len(found) == 5 and all(d == pytest.approx(1.5) for _, d, _ in found)
    # frames 5-9: the nearest is the decoy, 30 m away
    far = [r for r in rows if r[2] > 0.8]
    assert len(far) == 5 and all(d == pytest.approx(30.0) for _, d, _ in far)


def test_a_missing_data_folder_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no such folder"):
        dm.main(["--checkpoint", str(tmp_path / "run"), "--data", str(tmp_path / "nothing")])


def test_the_pass_over_a_run_sees_what_the_evaluation_scores(tmp_path, capsys):
    from dataset_fixtures import make_sim, train_tiny_bev

    from hydranet.evaluate import evaluate_checkpoint

    sim = make_sim(tmp_path / "sim")
    run = train_tiny_bev(sim, tmp_path / "run", tasks="{name: det3d, options: {width: 16}}")
    with pytest.raises(SystemExit, match="--class unicorn: not a det3d class"):
        dm.collect(str(run), str(sim), "unicorn")
    frames, classes = dm.collect(str(run), str(sim))
    res = evaluate_checkpoint(run, sim, progress=False)
    assert len(frames) == res["labelled_frames"]["det3d"]
    for k, name in enumerate(classes):
        row = dm.class_row(frames, k)
        if row["gt"]:  # the evaluation's per-class AP is above 0 exactly where one distance's first counted precision is
            assert (res["model"]["det3d"][f"AP/{name}"] > 0) == any(row[th][2] > 0.1 for th in dm.THRESHOLDS)
    assert sum(dm.class_row(frames, k)["gt"] for k in range(len(classes))) > 0
    dm.main(["--checkpoint", str(run), "--data", str(sim), "--class", classes[0]])
    out = capsys.readouterr().out
    assert f"{len(frames)} frames" in out and f"{classes[0]}: range m, nearest detection m, its score" in out
