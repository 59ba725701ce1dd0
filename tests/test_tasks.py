"""Every registered task: forward, loss, gradients, target round trips and metrics."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO

from doc_head import doc_head
from fake_samples import BEV_META, FAKE_META, bev_sample, make_batch, make_sample
from hydranet.bevgrid import BevGrid
from hydranet.rig import load_rig
from hydranet.models import ModelConfig, TaskConfig, build_model
from hydranet.tasks import BEV_TASKS, TASKS, build_task
from hydranet.tasks.det2d import coco_dicts, coco_map, write_coco_json

WIDTH, H, W = 16, 64, 96
DOC = Path(__file__).resolve().parents[1] / "docs" / "adding_a_head.md"


def _pyramid(batch: int = 2) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(batch, WIDTH, H // s, W // s, requires_grad=True) for s in (8, 16, 32)]  # [(B*N, C, h, w)]


@pytest.fixture(scope="module")
def sample():
    return make_sample(num_cameras=2, height=H, width=W, seed=3)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_forward_loss_backward_decode_metric(name, sample):
    task = build_task(name, FAKE_META, WIDTH)
    feats = _pyramid()
    out = task(feats)
    assert isinstance(out, dict) and out
    for v in out.values():
        assert v.shape[0] == 2 and torch.isfinite(v).all()
        assert v.shape[-2:] in {(H, W), (H // 4, W // 4)}
    targets = task.collate([task.build_targets(sample)])
    losses = task.loss(out, targets)
    assert losses and all(v.dim() == 0 and torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    assert [n for n, p in task.named_parameters() if p.grad is None] == []
    assert all(f.grad is not None for f in feats)
    decoded = task.decode(out)
    assert len(decoded) == 2
    metric = task.metric()
    metric.update(decoded, targets)
    values = metric.compute()
    assert values and all(isinstance(v, float) for v in values.values())


BEV_GRID = BevGrid((-32.0, 32.0), (-32.0, 32.0), 2.0)  # (32, 32) cells over BEV_META's raster


@pytest.mark.parametrize("name", sorted(BEV_TASKS))
def test_bev_task_forward_loss_backward_decode_metric(name):
    """The BEV heads under the same contract as the camera heads: raw finite outputs (B, ..., X, Y),
    finite losses, a gradient for every parameter and the input, B decoded frames, a metric."""
    task = build_task(name, {**BEV_META, "bev_grid": BEV_GRID.as_dict()}, WIDTH)
    torch.manual_seed(0)
    bev = torch.randn(2, WIDTH, *BEV_GRID.shape, requires_grad=True)  # (B, C, X, Y)
    out = task(bev)
    assert out and all(v.shape[0] == 2 and v.shape[-2:] == BEV_GRID.shape and torch.isfinite(v).all()
                       for v in out.values())
    frames = [bev_sample(load_rig("nuscenes6"), seed=s) for s in range(2)]
    targets = task.collate([task.build_targets(f) for f in frames])
    losses = task.loss(out, targets)
    assert losses and all(v.dim() == 0 and torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    assert [n for n, p in task.named_parameters() if p.grad is None] == [] and bev.grad is not None
    decoded = task.decode(out)
    assert len(decoded) == 2
    metric = task.metric()
    metric.update(decoded, targets)
    assert metric.compute()


@pytest.mark.parametrize("name", sorted(TASKS) + sorted(BEV_TASKS))
def test_every_task_declares_what_the_evaluator_judges(name, sample):
    """Every registered head has a primary metric among its metric's keys, a named baseline that its
    own metric scores, and a picture hook: what the generic evaluator reads (hydranet/evaluate.py)."""
    meta = {**BEV_META, "bev_grid": BEV_GRID.as_dict()} if name in BEV_TASKS else FAKE_META
    task = build_task(name, meta, WIDTH)
    frames = [bev_sample(load_rig("nuscenes6"), seed=s) for s in range(2)] if name in BEV_TASKS else [sample]
    targets = task.collate([task.build_targets(f) for f in frames])
    with torch.no_grad():
        out = task(torch.randn(len(frames), WIDTH, *BEV_GRID.shape) if name in BEV_TASKS else _pyramid(2))
    metric = task.metric()
    metric.update(task.decode(out), targets)
    keys = set(metric.compute())
    base = task.baseline([targets])
    assert task.primary_metric.name in keys and set(base) == keys, (task.primary_metric, keys, set(base))
    assert task.baseline_name and callable(task.draw)


def test_head_returns_logits_not_probabilities():
    task = build_task("drivable", FAKE_META, WIDTH)
    with torch.no_grad():
        task.head.out.bias.fill_(5.0)
    logits = task(_pyramid())["logits"]
    assert logits.min() > 1.0  # a sigmoid in the head would cap it at 1


def _outputs_from_det_targets(t: dict) -> dict:
    """Head outputs that a perfect CenterNet would produce for these targets."""
    p = t["heatmap"].clamp(1e-6, 1 - 1e-6)
    return {"heatmap": torch.log(p / (1 - p)), "box": t["box"]}


@pytest.mark.parametrize("name", ["det2d", "signs_lights"])
def test_det_targets_decode_back_to_ground_truth(name, sample):
    task = build_task(name, FAKE_META, WIDTH, {"score_threshold": 0.5})
    t = task.collate([task.build_targets(sample)])
    decoded = task.decode(_outputs_from_det_targets(t))
    for det, gb, gl in zip(decoded, t["gt_boxes"], t["gt_labels"]):
        assert len(gb) > 0
        order_p = np.lexsort(det["boxes"].numpy().T[::-1])
        order_g = np.lexsort(gb.numpy().T[::-1])
        np.testing.assert_allclose(det["boxes"].numpy()[order_p], gb.numpy()[order_g], atol=1e-3)
        assert det["labels"].numpy()[order_p].tolist() == gl.numpy()[order_g].tolist()
    metric = task.metric()
    metric.update(decoded, t)
    values = metric.compute()
    key = "mAP" if name == "det2d" else "accuracy"
    assert values[key] == pytest.approx(1.0)


def test_signs_lights_classes_come_from_attributes(sample):
    task = build_task("signs_lights", FAKE_META, WIDTH)
    assert task.classes[:2] == ["sign:stop", "sign:yield"] and task.classes[-3] == "light:green"
    assert task.classes[-2:] == ["sign:back", "light:back"]
    t = task.build_targets(sample)
    boxes = sample["labels"]["cameras"]["CAM_0"]["boxes2d"]
    sign = next(b for b in boxes if b["class"] == "traffic_sign")
    assert task.classes.index(f"sign:{sign['attributes']['sign_class']}") in t["gt_labels"][0].tolist()
    assert len(t["gt_labels"][0]) == sum(b["class"] in ("traffic_sign", "traffic_light") for b in boxes)
    bad = json.loads(json.dumps(sample["labels"]))
    bad["cameras"]["CAM_0"]["boxes2d"][0]["attributes"] = {}
    with pytest.raises(ValueError, match="traffic_sign box .*sign_class=None"):
        task.build_targets({**sample, "labels": bad})


def test_signs_lights_back_views_get_the_back_class(sample):
    """A sign / light seen from behind (attributes.view == "back", no sign_class / light_state)
    is trained as "sign:back" / "light:back", never as a front class, and scored apart."""
    task = build_task("signs_lights", FAKE_META, WIDTH, {"score_threshold": 0.5})
    labels = json.loads(json.dumps(sample["labels"]))
    backs = []
    for b in labels["cameras"]["CAM_0"]["boxes2d"]:
        if b["class"] in ("traffic_sign", "traffic_light") and len(backs) < 2:
            b["attributes"] = {"view": "back"}
            backs.append(b)
    assert backs
    t = task.build_targets({**sample, "labels": labels})
    want = [task.classes.index("sign:back" if b["class"] == "traffic_sign" else "light:back") for b in backs]
    assert sorted(set(want)) == sorted(set(want) & set(t["gt_labels"][0].tolist()))
    tt = task.collate([t])
    metric = task.metric()
    metric.update(task.decode(_outputs_from_det_targets(tt)), tt)
    values = metric.compute()
    assert values["accuracy"] == pytest.approx(1.0) and values["back_accuracy"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="reserved for back views"):
        build_task("signs_lights", {**FAKE_META, "sign_classes": ["stop", "back"]}, WIDTH)


def _gt_and_preds(shift: float = 0.0):
    rng = np.random.default_rng(0)
    gts, preds = [], []
    for _ in range(3):
        xy = rng.uniform(0, 200, (5, 2))
        boxes = np.concatenate([xy, xy + rng.uniform(20, 60, (5, 2))], 1).astype(np.float32)
        labels = rng.integers(0, 10, 5)
        gts.append((boxes, labels))
        preds.append((boxes + np.float32(shift), np.ones(5, np.float32), labels))
    return gts, preds


def test_coco_ground_truth_as_predictions_scores_one_and_shifted_lower(tmp_path):
    gts, preds = _gt_and_preds()
    perfect = coco_map(*coco_dicts(gts, preds, FAKE_META["classes"]))
    assert perfect == {"mAP": pytest.approx(1.0), "mAP50": pytest.approx(1.0)}
    shifted = coco_map(*coco_dicts(*_gt_and_preds(shift=8.0), FAKE_META["classes"]))
    assert shifted["mAP"] < 0.9 and shifted["mAP"] < perfect["mAP"]
    write_coco_json(gts, preds, FAKE_META["classes"], tmp_path / "gt.json", tmp_path / "pred.json")
    coco = COCO(str(tmp_path / "gt.json"))  # the files load with pycocotools' own readers
    res = coco.loadRes(str(tmp_path / "pred.json"))
    assert len(coco.getAnnIds()) == 15 and len(res.getAnnIds()) == 15
    assert [c["name"] for c in coco.loadCats(coco.getCatIds())] == FAKE_META["classes"]
    assert math.isnan(coco_map(*coco_dicts([(np.zeros((0, 4)), np.zeros(0))], [(np.zeros((0, 4)), [], [])],
                                           ["car"]))["mAP"])


def _logits_from_mask(mask: torch.Tensor) -> torch.Tensor:
    return (mask * 2 - 1) * 10.0


def test_dense_targets_decode_to_perfect_metrics(sample):
    lanes = build_task("lanes", FAKE_META, WIDTH)
    t = lanes.collate([lanes.build_targets(sample)])
    assert t["mask"].shape == (2, 1, H, W) and t["mask"].sum() > 0 and len(t["lanes"]) == 2
    m = lanes.metric()
    m.update(lanes.decode({"logits": _logits_from_mask(t["mask"])}), t)
    assert m.compute()["pixel_iou"] == 1.0 and m.compute()["f1"] == 1.0

    drivable = build_task("drivable", FAKE_META, WIDTH)
    t = drivable.collate([drivable.build_targets(sample)])
    m = drivable.metric()
    m.update(drivable.decode({"logits": _logits_from_mask(t["mask"])}), t)
    assert m.compute()["iou"] == 1.0

    depth = build_task("depth", FAKE_META, WIDTH)
    t = depth.collate([depth.build_targets(sample)])
    logits = t["depth"].clamp(min=0.1).log()
    assert float(depth.loss({"logits": logits}, t)["silog"]) < 1e-3
    m = depth.metric()
    m.update(depth.decode({"logits": logits}), t)
    v = m.compute()
    assert v["abs_rel"] < 1e-5 and v["rmse"] < 1e-3 and v["delta1"] == 1.0

    normals = build_task("normals", FAKE_META, WIDTH)
    t = normals.collate([normals.build_targets(sample)])
    assert float(normals.loss({"logits": t["normals"] * 3.0}, t)["cosine"]) < 1e-6
    m = normals.metric()
    m.update(normals.decode({"logits": t["normals"]}), t)
    v = m.compute()
    assert v["mean_angle_deg"] < 0.1 and v["under_11.25"] == 1.0


def test_lane_f1_counts_a_missing_lane():
    lanes = build_task("lanes", FAKE_META, WIDTH)
    s = make_sample(num_cameras=1, height=H, width=W)
    t = lanes.collate([lanes.build_targets(s)])
    assert len(t["lanes"][0]) == 2
    only_first = lanes.collate([lanes.build_targets({**s, "labels": {"cameras": {"CAM_0": {
        "lanes2d": s["labels"]["cameras"]["CAM_0"]["lanes2d"][:1]}}}})])
    m = lanes.metric()
    m.update(lanes.decode({"logits": _logits_from_mask(only_first["mask"])}), t)
    assert m.compute()["f1"] == pytest.approx(2 / 3)  # tp 1, fn 1


def test_missing_sample_key_and_unknown_class_are_errors(sample):
    with pytest.raises(ValueError, match="task 'depth' needs sample key 'depth'"):
        build_task("depth", FAKE_META, WIDTH).build_targets({k: v for k, v in sample.items() if k != "depth"})
    labels = json.loads(json.dumps(sample["labels"]))
    labels["cameras"]["CAM_1"]["boxes2d"][0]["class"] = "spaceship"
    with pytest.raises(ValueError, match="camera CAM_1 has a box of class 'spaceship'"):
        build_task("det2d", FAKE_META, WIDTH).build_targets({**sample, "labels": labels})
    with pytest.raises(ValueError, match="unknown task 'nope'; known tasks: .*'depth'"):
        build_task("nope", FAKE_META, WIDTH)
    with pytest.raises(ValueError, match="unknown option 'max_dpth'; allowed options: .*max_depth"):
        build_task("depth", FAKE_META, WIDTH, {"max_dpth": 50.0})


def test_adding_a_head_doc(doc_head_registered):
    assert "register_task(\"sky\", SkyTask.from_meta)" in DOC.read_text()
    torch.manual_seed(0)
    cfg = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1,
                      tasks=(TaskConfig("det2d"), TaskConfig("sky", 0.5, {"width": 16})))
    model = build_model(cfg, FAKE_META)
    batch = make_batch(model.heads, [make_sample(num_cameras=1, seed=s) for s in range(2)])
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    history = []
    for _ in range(15):
        losses = model(batch, "loss")
        history.append(losses["sky"].item())
        opt.zero_grad()
        model.backward(losses)
        opt.step()
    assert history[-1] < 0.7 * history[0]
    preds = model(batch, "predict")["sky"]
    metric = model.heads["sky"].metric()
    metric.update(preds, batch["targets"]["sky"])
    assert metric.compute()["iou"] > 0.5


def test_tiny_or_hidden_boxes_are_ignore_regions():
    """Boxes under det2d's min_size or min_visibility are not trained on, and a detection on
    one is neither a hit nor a false positive (pycocotools iscrowd)."""
    task = build_task("det2d", FAKE_META, 64, {"min_size": 6.0, "min_visibility": 0.2})
    cam = {"boxes2d": [{"bbox": [10, 10, 40, 30], "class": "car", "visible_fraction": 0.9},
                       {"bbox": [50, 10, 54, 14], "class": "car", "visible_fraction": 1.0},
                       {"bbox": [60, 10, 90, 40], "class": "bus", "visible_fraction": 0.1}]}
    boxes, labels, ignore, trained = task.camera_boxes(cam, "camera CAM")
    assert ignore.tolist() == [False, True, True] and trained.tolist() == [True, False, False]
    small = build_task("det2d", FAKE_META, 64, {"min_size": 6.0, "min_visibility": 0.2, "train_min_size": 0.0})
    _, _, still_ignored, trained = small.camera_boxes(cam, "camera CAM")  # the 4 px car trained, still not scored
    assert still_ignored.tolist() == [False, True, True] and trained.tolist() == [True, True, False]
    sample = {"images": np.zeros((1, 64, 128, 3), np.uint8), "camera_names": ["CAM"], "labels": {"cameras": {"CAM": cam}}}
    peaks = [int((t["heatmap"] == 1.0).sum()) for t in (task.build_targets(sample), small.build_targets(sample))]
    assert peaks == [1, 2]
    gt = (boxes[~ignore], labels[~ignore], boxes[ignore], labels[ignore])
    hit = (boxes[:1], np.ones(1), labels[:1])
    assert coco_map(*coco_dicts([gt], [hit], FAKE_META["classes"]))["mAP"] == pytest.approx(1.0)
    on_ignored = (boxes, np.array([0.9, 0.95, 0.99]), labels)  # higher scores on the ignored boxes
    assert coco_map(*coco_dicts([gt], [on_ignored], FAKE_META["classes"]))["mAP"] == pytest.approx(1.0)
    not_ignored = (boxes, np.array([0.9, 0.95, 0.99]), labels)  # the same detections without ignore regions
    assert coco_map(*coco_dicts([gt[:2]], [not_ignored], FAKE_META["classes"]))["mAP"] < 1.0


@pytest.fixture
def doc_head_registered():
    """The doc's head registered with its one line (`register_task`), every registry restored after."""
    with doc_head() as sky:
        yield sky


def test_doc_head_decodes_on_the_runtime_and_signals_in_shadow(doc_head_registered, tmp_path):
    """The doc's head, defined in its one file: exported, the torch-free runtime decodes it with the
    spec's numpy decoder (equal to eager `predict`), shadow mode's signals carry its column, and the
    derived tuples know it, with no edit anywhere else."""
    from data_engine.signals import ClipState, ModelInfo, frame_signals
    from deploy.export import export_model
    from deploy.runtime import HydraRuntime
    from hydranet.experiment import DataConfig, ExperimentConfig
    from hydranet.heads import HEADS, heads_where

    sky = doc_head_registered
    assert HEADS["sky"] is sky.Sky and sky.Sky.__module__ == "hydranet.heads.sky"
    assert "sky" in heads_where("channels") and "sky" not in heads_where("human_labels")
    torch.manual_seed(0)
    rig = load_rig("nuscenes6").resized(96, 64)
    mcfg = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1, tasks=(TaskConfig("det2d"), TaskConfig("sky")))
    meta = {**FAKE_META, "rig": rig.to_dict()}
    model = build_model(mcfg, meta).eval()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 255, (len(rig.cameras), 64, 96, 3), dtype=np.uint8)  # (N, H, W, 3)
    cfg = ExperimentConfig(data=DataConfig(image_size=(64, 96)), model=mcfg)
    export_model(model, cfg, meta, tmp_path / "sky.onnx", [{"images": images.transpose(0, 3, 1, 2).copy(), "scene": "s"}],
                 simplify=False, verbose=False)
    rt = HydraRuntime(tmp_path / "sky.onnx")
    assert rt.heads["sky"]["decoding"] == {"kind": "sky_mask", "params": {"threshold": 0.5}}
    res = rt(list(images))
    with torch.no_grad():
        eager = model({"images": torch.from_numpy(images).permute(0, 3, 1, 2)[None].float() / 255}, "predict")["sky"]
    assert len(res["sky"]) == len(rig.cameras) and res["sky"][0]["mask"].shape == (64, 96)
    agree = np.mean([(r["mask"] == e["mask"].numpy()).mean() for r, e in zip(res["sky"], eager)])
    assert agree > 0.999  # ONNX vs eager logits differ by ~1e-5: a pixel at the threshold may flip
    raw = rt.run(rt.feeds(rt.preprocess(list(images))))
    sig, per_cam = frame_signals(ModelInfo.from_runtime(rt), raw, rt.decode(raw), None, 0, ClipState())
    expect = [float(r["mask"].mean()) for r in rt.decode(raw)["sky"]]
    assert per_cam["sky_fraction"] == pytest.approx(expect) and sig["sky_fraction"] == pytest.approx(np.mean(expect))
    assert np.isfinite(sig["det2d_entropy"])  # the built-in heads' signals are still there
    bad = {**raw, "sky.logits": np.full_like(raw["sky.logits"], np.nan)}
    with pytest.raises(ValueError, match="sky.logits holds NaN"):
        frame_signals(ModelInfo.from_runtime(rt), bad, rt.decode(raw), None, 0, ClipState())
