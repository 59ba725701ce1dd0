"""`hydranet eval` / `hydranet viz` on a tiny trained checkpoint: metrics JSON for every head,
baselines, det2d COCO JSON that pycocotools loads, the prediction picture."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import cv2
import pytest

from hydranet.cli import main
from hydranet.models.config import ALL_TASKS
from hydranet.train import load_experiment, train

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    tmp = tmp_path_factory.mktemp("eval")
    data = generate_dataset(tmp / "sim", SimConfig(image_width=160, image_height=96, frames_per_scene=2), scenes=2,
                            seed=1, progress=False)
    cfg = load_experiment(REPO / "configs" / "tiny.yaml",
                          [f"data.root={data}", "data.cameras=[CAM_FRONT]", "num_workers=0", "batch_size=2",
                           "steps=2", "checkpoint_every=2"])
    train(cfg, tmp / "run", progress=False)
    return tmp, data


def test_eval_writes_metrics_for_every_head_and_coco_json(run, capsys):
    tmp, data = run
    out, preds = tmp / "metrics.json", tmp / "preds"
    assert main(["eval", "--checkpoint", str(tmp / "run"), "--data", str(data), "--out", str(out),
                 "--save-predictions", str(preds), "--quiet"]) == 0
    table = capsys.readouterr().out
    metrics = json.loads(out.read_text())
    assert set(metrics["model"]) == set(ALL_TASKS) == set(metrics["baseline"]) == set(metrics["beats_baseline"])
    assert metrics["baseline"]["det2d"]["mAP"] == 0.0  # the empty detection set
    for task in ALL_TASKS:
        assert task in table
    from pycocotools.coco import COCO

    dets = json.loads((preds / "det2d_predictions.json").read_text())
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(preds / "det2d_gt.json"))
        if dets:  # pycocotools refuses an empty result list
            assert len(gt.loadRes(str(preds / "det2d_predictions.json")).getAnnIds()) == len(dets)
    assert len(gt.getImgIds()) == 4 and gt.getAnnIds()


def test_viz_writes_predictions_next_to_ground_truth(run):
    tmp, data = run
    assert main(["viz", "--checkpoint", str(tmp / "run" / "checkpoint.pt"), "--data", str(data),
                 "--out", str(tmp / "viz.png")]) == 0
    img = cv2.imread(str(tmp / "viz.png"))
    assert img.shape == (96, 6 * 160, 3)  # one camera: truth | prediction | depth x2 | normals x2


def test_eval_of_a_missing_checkpoint_is_one_line(run, capsys):
    tmp, data = run
    assert main(["eval", "--checkpoint", str(tmp / "nope.pt"), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.pt does not exist" in err


def test_on_outputs_sees_raw_outputs_and_leaves_the_metrics_unchanged(run):
    """evaluate(on_outputs=...) gets every batch's raw head tensors and targets; the metrics equal a
    run without it (the probe path decodes as mode "predict" does)."""
    from hydranet.evaluate import evaluate_checkpoint

    tmp, data = run
    seen = []
    probed = evaluate_checkpoint(tmp / "run", data, tmp / "probed.json", progress=False,
                                 on_outputs=lambda raw, batch: seen.append((set(raw), batch["images"].shape[0])))
    plain = evaluate_checkpoint(tmp / "run", data, tmp / "plain.json", progress=False)
    assert sum(b for _, b in seen) == probed["frames"] == 4
    assert all(keys == set(ALL_TASKS) for keys, _ in seen)
    assert json.dumps(probed["model"], sort_keys=True) == json.dumps(plain["model"], sort_keys=True)
