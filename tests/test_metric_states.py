"""Per-item metric states (issue 25.1): every registered head's metric recomputed from the states of
the items it saw equals the metric computed directly, and a subset's states give the metric of that
subset alone (what the gate's bootstrap resamples). Detection heads get predictions that are their
truth jittered plus false positives, so AP, NDS and accuracy are neither 0 nor 1."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fake_samples import BEV_META, FAKE_META, bev_sample, make_sample
from hydranet.bevgrid import BevGrid
from hydranet.rig import load_rig
from hydranet.tasks import BEV_TASKS, TASKS, build_task

WIDTH, H, W = 16, 64, 96
BEV_GRID = BevGrid((-32.0, 32.0), (-32.0, 32.0), 2.0)


def _noisy_detections(targets, rng: np.random.Generator, num_classes: int) -> list[dict[str, torch.Tensor]]:
    """Per item: the truth jittered (some labels swapped, some boxes dropped) plus false positives."""
    out = []
    for gb, gl in zip(targets["gt_boxes"], targets["gt_labels"], strict=True):
        gb, gl = np.asarray(gb, np.float64), np.asarray(gl, np.int64)
        dim = gb.shape[1]
        keep = rng.random(len(gb)) > 0.2
        boxes, labels = gb[keep].copy(), gl[keep].copy()
        if dim == 4:  # xyxy pixels
            boxes += rng.normal(0, 2.5, boxes.shape)
            extra = gb + np.array([25.0, 10.0, 25.0, 10.0])
        else:  # x, y, z, l, w, h, yaw, vx, vy
            boxes[:, :2] += rng.normal(0, 0.8, (len(boxes), 2))
            boxes[:, 6] += rng.normal(0, 0.3, len(boxes))
            boxes[:, 7:] += rng.normal(0, 0.5, (len(boxes), 2))
            extra = gb + np.array([6.0, 3.0] + [0.0] * 7)
        swap = rng.random(len(labels)) < 0.2
        labels[swap] = rng.integers(0, num_classes, int(swap.sum()))
        boxes = np.concatenate([boxes, extra]).astype(np.float32)
        labels = np.concatenate([labels, gl])
        scores = rng.random(len(boxes)).astype(np.float32)
        out.append({"boxes": torch.from_numpy(boxes), "scores": torch.from_numpy(scores),
                    "labels": torch.from_numpy(labels)})
    return out


def _run(name: str):
    """The task's metric fed 2 batches of 2 frames; returns (task, metric, [(decoded, targets)] per batch)."""
    bev = name in BEV_TASKS
    task = build_task(name, {**BEV_META, "bev_grid": BEV_GRID.as_dict()} if bev else FAKE_META, WIDTH)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    metric, batches = task.metric(), []
    for b in range(2):
        frames = ([bev_sample(load_rig("nuscenes6"), seed=2 * b + i) for i in range(2)] if bev else
                  [make_sample(num_cameras=2, height=H, width=W, seed=2 * b + i, num_boxes=6) for i in range(2)])
        targets = task.collate([task.build_targets(f) for f in frames])
        if "gt_boxes" in targets:
            decoded = _noisy_detections(targets, rng, len(task.classes))
        else:
            with torch.no_grad():
                feats = (torch.randn(2, WIDTH, *BEV_GRID.shape) if bev else
                         [torch.randn(4, WIDTH, H // s, W // s) for s in (8, 16, 32)])
                decoded = task.decode(task(feats))
        metric.update(decoded, targets)
        batches.append((decoded, targets))
    return task, metric, batches


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", sorted({**TASKS, **BEV_TASKS}))
def test_metric_from_all_states_equals_the_metric(name):
    task, metric, _ = _run(name)
    states = metric.states()
    assert states is not None, f"head {name} keeps no per-item states (the gate would fall back): give it states"
    direct, again = metric.compute(), metric.compute_states(states)
    assert task.primary_metric.name in again
    assert not math.isnan(direct[task.primary_metric.name])
    for key, v in again.items():
        assert _same(v, direct[key]), (name, key, v, direct[key])


@pytest.mark.parametrize("name", sorted({**TASKS, **BEV_TASKS}))
def test_states_of_a_subset_give_that_subset_s_metric(name):
    """The second batch's states alone equal a fresh metric fed only the second batch; repeated states
    (a bootstrap resample) are what a metric fed the batch twice gives."""
    task, metric, batches = _run(name)
    states = metric.states()
    half = len(states) // 2
    alone = task.metric()
    alone.update(*batches[1])
    twice = task.metric()
    twice.update(*batches[1])
    twice.update(*batches[1])
    cases = [(alone.compute(), metric.compute_states(states[half:]))]
    if name != "det3d":  # the nuScenes metric keys frames by sample token: the same frame twice counts once there
        cases.append((twice.compute(), metric.compute_states(states[half:] * 2)))
    for ref, got in cases:
        for key, v in got.items():
            assert _same(v, ref[key]), (name, key, v, ref[key])


def test_states_are_json_values():
    import json

    for name in sorted({**TASKS, **BEV_TASKS}):
        _, metric, _ = _run(name)
        states = metric.states()
        assert json.loads(json.dumps(states)) == states, name


def test_det2d_states_match_pycocotools_with_crowd_regions():
    """COCO matching with ignore (crowd) regions and several classes, against pycocotools itself."""
    from hydranet.tasks.det2d import coco_dicts, coco_image_state, coco_map, coco_map_states

    rng = np.random.default_rng(5)
    gts, preds = [], []
    for _ in range(6):
        m = int(rng.integers(0, 6))
        xy = rng.uniform(0, 200, (m, 2))
        gb = np.concatenate([xy, xy + rng.uniform(8, 60, (m, 2))], 1)
        gl = rng.integers(0, 3, m)
        ib = np.array([[0.0, 0.0, 60.0, 60.0]])[: int(rng.integers(0, 2))]
        il = np.zeros(len(ib), np.int64)
        pb = np.concatenate([gb + rng.normal(0, 6, gb.shape), rng.uniform(0, 50, (3, 2)).repeat(2, 1) + [0, 0, 20, 20]])
        ps = np.round(rng.random(len(pb)), 1)  # ties in score
        pl = np.concatenate([gl, rng.integers(0, 3, 3)])
        gts.append((gb, gl, ib, il))
        preds.append((pb, ps, pl))
    ref = coco_map(*coco_dicts(gts, preds, ["a", "b", "c"]))
    got = coco_map_states([coco_image_state(g, p, 3) for g, p in zip(gts, preds)], 3)
    assert got["mAP"] == pytest.approx(ref["mAP"], abs=1e-12) and got["mAP50"] == pytest.approx(ref["mAP50"], abs=1e-12)
    assert 0 < got["mAP"] < got["mAP50"] < 1


@pytest.mark.parametrize("name", sorted({**TASKS, **BEV_TASKS}))
def test_merged_states_give_the_same_metric(name):
    """`merge_states` (what the gate applies to each clip before resampling) changes nothing."""
    _, metric, _ = _run(name)
    states = metric.states()
    half = len(states) // 2
    parts = [metric.merge_states(states[:half]), metric.merge_states(states[half:])]
    flat = [s for p in parts for s in (p if isinstance(p, list) else [p])]
    ref = metric.compute_states(states)
    for key, v in metric.compute_states(flat).items():
        assert _same(v, ref[key]), (name, key, v, ref[key])
