"""BEV tasks end to end: training on clips lowers the det3d and bevmap losses, `hydranet eval`
writes nuScenes submission files that `eval-nuscenes` scores on the export of the same dataset,
pictures show the BEV, and a 5-camera rig of mixed resolutions trains, evaluates and exports with
no code change. Tiny: 64x96 images, 2 cameras, 4 m cells on a 64 m grid."""
from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from hydranet.cli import main
from hydranet.data import SimDataset
from hydranet.evaluate import evaluate_checkpoint, viz_checkpoint
from hydranet.metrics import DETECTION_NAMES, DetectionConfig, category_to_detection_name, evaluate_boxes, evaluate_nuscenes
from hydranet.nuscenes_results import (DETECTION_NAME, frame_eval_boxes, frame_results, sample_token, token,
                                       write_results)
from hydranet.experiment import load_experiment
from hydranet.checkpoint import load_checkpoint, model_from_checkpoint
from hydranet.train import build_training_data, train
from sim.config import SimConfig
from sim.generate import generate_dataset
from sim.nuscenes_export import CATEGORY, export_nuscenes
from sim.nuscenes_export import token as sim_token

REPO = Path(__file__).resolve().parents[1]
BEV_YAML = REPO / "configs" / "bev.yaml"
SIM = SimConfig(image_width=96, image_height=64, frames_per_scene=4, bev_range=32.0)
SMALL = ["num_workers=0", "batch_size=2", "optim.warmup_steps=2", "augment.photometric=false", "data.image_size=[64,96]",
         "model.neck_width=16", "model.bev.downsample=8", "model.bev.channels=16", "model.bev.heights=[0.0,1.0]",
         "model.tasks=[{name: det3d, options: {width: 16}}, {name: bevmap, weight: 0.5, options: {width: 16}}]"]
RIG5 = """name: custom5
cameras:
  - {name: FRONT_TELE, width: 192, height: 128, hfov_deg: 40.0, translation: [2.0, 0.0, 1.4], ypr_deg: [0, 0, 0]}
  - {name: FRONT_WIDE, width: 160, height: 96, hfov_deg: 110.0, translation: [2.0, 0.1, 1.4], ypr_deg: [0, 3, 0]}
  - {name: LEFT, width: 144, height: 96, hfov_deg: 100.0, translation: [1.0, 0.9, 1.2], ypr_deg: [95, 5, 0]}
  - {name: RIGHT, width: 144, height: 96, hfov_deg: 100.0, translation: [1.0, -0.9, 1.2], ypr_deg: [-95, 5, 0]}
  - {name: REAR, width: 96, height: 64, hfov_deg: 90.0, translation: [-1.0, 0.0, 1.3], ypr_deg: [180, 8, 0]}
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("bev") / "sim", SIM, scenes=2, seed=0, progress=False)


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    """A short clip training (video_frames 2) of det3d + bevmap; its per-step losses."""
    cfg = load_experiment(BEV_YAML, [f"data.root={data}", "data.cameras=[CAM_FRONT,CAM_BACK]", "steps=8",
                                     "checkpoint_every=8", "model.bev.video_frames=2", "optim.lr=0.005", *SMALL])
    losses: list[dict[str, float]] = []
    out = tmp_path_factory.mktemp("run") / "run"
    train(cfg, out, progress=False, on_step=lambda step, l: losses.append(l))
    return out, losses


@pytest.fixture(scope="module")
def export(data, tmp_path_factory) -> Path:
    return export_nuscenes(data, tmp_path_factory.mktemp("nusc") / "nusc", progress=False)


def test_training_on_clips_lowers_det3d_and_bevmap_losses(data, run):
    out, losses = run
    assert len(losses) == 8
    for head in ("det3d", "bevmap"):
        first, last = np.mean([l[head] for l in losses[:2]]), np.mean([l[head] for l in losses[-2:]])
        assert last < 0.9 * first, (head, [round(l[head], 3) for l in losses])
    ckpt = load_checkpoint(out)
    model = model_from_checkpoint(ckpt)
    assert model.fusion.video.frames == 2 and json.loads(ckpt["meta"])["rig"]["cameras"][0]["width"] == 96
    frames = build_training_data(load_experiment(BEV_YAML, [f"data.root={data}", "data.cameras=[CAM_FRONT,CAM_BACK]",
                                                            "model.bev.video_frames=2", *SMALL]), model)
    item = frames[0]  # a clip: (T, N, 3, H, W) images, poses per frame, targets of the last frame
    assert item["images"].shape == (2, 2, 3, 64, 96) and item["ego2world"].shape == (2, 4, 4)
    assert item["intrinsics"].shape == (2, 2, 3, 3) and len(frames) == len(SimDataset(data))  # every frame, starts padded
    start = frames[0]  # frame 0 of a scene: its clip repeats it
    torch.testing.assert_close(start["images"][0], start["images"][1])


def test_mapping_and_tokens_follow_the_exporter():
    assert sample_token("scene-0001", "000003") == sim_token("sample", "scene-0001", "000003") == token("sample", "scene-0001", "000003")
    for cls, cat in CATEGORY.items():
        assert DETECTION_NAME.get(cls) == category_to_detection_name(cat), cls  # debris: None on both sides
    assert "debris" not in DETECTION_NAME


def _gt_submission(data: Path) -> tuple[dict, dict, dict]:
    """Every labelled box (as det3d decodes: ego x, y, z, l, w, h, yaw, vx, vy) written as a prediction."""
    ds = SimDataset(data, channels=())
    classes = list(CATEGORY)
    results, gt, pred = {}, {}, {}
    for i in range(len(ds)):
        s = ds.load(i)
        kept = [b for b in s["labels"]["boxes3d"] if b["class"] in CATEGORY and b["num_pixels"] > 0]  # the export's GT
        boxes = np.array([[*b["center"], *b["size"], b["yaw"], *b["velocity"][:2]] for b in kept]).reshape(-1, 9)
        tok = sample_token(*ds.frame_ids[i])
        results[tok] = frame_results(boxes, np.ones(len(kept)), np.array([classes.index(b["class"]) for b in kept]),
                                     classes, s["ego2world"], tok)
        gt[tok] = frame_eval_boxes(s["labels"], s["ego2world"], tok)
    return results, gt, pred


def test_ground_truth_as_predictions_scores_perfectly_with_eval_nuscenes(data, export, tmp_path, capsys):
    results, gt, _ = _gt_submission(data)
    path = write_results(tmp_path / "R.json", results)
    assert main(["eval-nuscenes", "--data", str(export), "--version", "v1.0-mini", "--split", "all",
                 "--results", str(path), "--out", str(tmp_path / "m.json")]) == 0
    assert "NDS" in capsys.readouterr().out
    m = evaluate_nuscenes(export, "v1.0-mini", "all", path)
    present = {b.detection_name for bs in gt.values() for b in bs}
    assert present
    for c in DETECTION_NAMES:  # AP 1 for every class present; absent classes count 0 (the devkit's mean over 10)
        assert m.mean_dist_aps[c] == (pytest.approx(1.0) if c in present else 0.0), c
    assert m.mean_ap == pytest.approx(len(present) / len(DETECTION_NAMES))
    for c in present:  # exact position, size, heading; velocity: labels' instantaneous vs the export's centred difference
        e = m.label_tp_errors[c]
        assert e["trans_err"] < 1e-4 and e["scale_err"] < 1e-4 and (math.isnan(e["orient_err"]) or e["orient_err"] < 1e-3), (c, e)
    # `hydranet eval`'s in-memory GT (from labels, filtered as the exporter does) gives the same AP
    from hydranet.nuscenes_results import result_eval_boxes

    ds = SimDataset(data, channels=())
    pred = {t: result_eval_boxes(results[t], ds.load(i)["ego2world"]) for i, t in enumerate(results)}
    ours, _ = evaluate_boxes(gt, pred, DetectionConfig())
    assert ours.mean_ap == pytest.approx(m.mean_ap) and ours.label_tp_errors["car"]["trans_err"] < 1e-4


def test_eval_reports_nuscenes_metrics_and_writes_a_submission(data, run, export, tmp_path, capsys):
    out, _ = run
    assert main(["eval", "--checkpoint", str(out), "--data", str(data), "--out", str(tmp_path / "metrics.json"),
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "nuscenes/NDS" in text and "nuscenes/mAVE" in text and "iou/drivable" in text and "nuscenes_results.json" in text
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    det = metrics["model"]["det3d"]
    assert all(k in det for k in ("nuscenes/mAP", "nuscenes/NDS", "nuscenes/mATE", "nuscenes/mAAE"))
    assert {"iou/drivable", "iou/lanes", "iou/objects", "mIoU"} <= set(metrics["model"]["bevmap"])
    sub = json.loads((tmp_path / "nuscenes_results.json").read_text())
    ds = SimDataset(data, channels=())
    assert set(sub["results"]) == {sample_token(*f) for f in ds.frame_ids}  # every frame, streamed through the queue
    m = evaluate_nuscenes(export, "v1.0-mini", "all", tmp_path / "nuscenes_results.json")
    assert 0.0 <= m.nd_score <= 1.0 and not math.isnan(m.nd_score)


def test_viz_shows_the_bev_panels(data, run, tmp_path):
    out, _ = run
    png = viz_checkpoint(out, data, tmp_path / "v.png", frame=3)
    img = cv2.imread(str(png))
    assert img.shape[1] > 2 * 96 + img.shape[0]  # 2 camera columns + two square BEV panels
    bev = img[:, 2 * 96:]
    assert (bev.reshape(-1, 3).std(0) > 5).all()  # something drawn there


@pytest.mark.parametrize("method", ["lut", "lss"])
def test_custom_rig_of_mixed_resolutions_trains_evaluates_and_exports(tmp_path, method):
    """5 cameras of 4 sizes from a calibration YAML: resized to one model input; no code change;
    both view transforms (projection tables, depth-distribution splat with depth supervision), with
    BEV rotation augmentation."""
    rig = tmp_path / "rig5.yaml"
    rig.write_text(RIG5)
    data = generate_dataset(tmp_path / "sim", SimConfig(rig=str(rig), frames_per_scene=2, bev_range=32.0), scenes=1,
                            seed=1, progress=False)
    assert len({img.shape for img in SimDataset(data)[0]["images"]}) == 4
    cfg = load_experiment(BEV_YAML, [f"data.root={data}", "steps=2", "checkpoint_every=2", "model.bev.video_frames=2",
                                     *SMALL, "batch_size=1", f"model.bev.method={method}",
                                     "augment.bev_rotation_deg=30", f"model.bev.depth_weight={float(method == 'lss')}"])
    train(cfg, tmp_path / "run", progress=False)
    res = evaluate_checkpoint(tmp_path / "run", data, tmp_path / "metrics.json", progress=False)
    assert "nuscenes/NDS" in res["model"]["det3d"] and res["frames"] == 2
    try:
        from deploy.export import export_checkpoint
    except ImportError as e:  # the deploy package is optional here
        pytest.skip(f"deploy.export not importable: {e}")
    pytest.importorskip("onnxruntime")
    r = export_checkpoint(tmp_path / "run", tmp_path / "model.onnx", data, frames=1, simplify=False, verbose=False)
    assert r.path.is_file() and all(row["ok"] for row in r.parity)


def test_rig_that_sees_none_of_the_grid_fails_at_model_build(data, tmp_path):
    far = tmp_path / "far.yaml"
    far.write_text("name: far\ncameras:\n"
                   "  - {name: CAM_A, width: 96, height: 64, hfov_deg: 60.0, translation: [200.0, 0.0, 1.5], ypr_deg: [0, 5, 0]}\n")
    from hydranet.models import build_model
    from hydranet.rig import load_rig

    cfg = load_experiment(BEV_YAML, [f"data.root={data}", *SMALL])
    meta = {**SimDataset(data, channels=()).meta, "rig": load_rig(far).to_dict()}
    with pytest.raises(ValueError, match=r"no camera of the rig \(CAM_A\) sees any cell of the BEV grid"):
        build_model(cfg.model, meta)
