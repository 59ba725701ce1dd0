"""`hydranet eval` / `hydranet viz` on a tiny trained checkpoint: metrics JSON for every head,
baselines, det2d COCO JSON that pycocotools loads, the prediction picture."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import cv2
import pytest

from hydranet.cli import main
from hydranet.tasks import TASKS
from hydranet.experiment import load_experiment
from hydranet.train import train

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
    assert set(metrics["model"]) == set(TASKS) == set(metrics["baseline"]) == set(metrics["beats_baseline"])
    assert metrics["baseline"]["det2d"]["mAP"] == 0.0  # the empty detection set
    for task in TASKS:
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
    assert all(keys == set(TASKS) | {"embedding"} for keys, _ in seen)  # every head + the pooled trunk feature
    assert json.dumps(probed["model"], sort_keys=True) == json.dumps(plain["model"], sort_keys=True)


def test_new_head_is_evaluated_and_drawn(run):
    """A head defined outside the package (the worked example of docs/adding_a_head.md) gets its
    metric, its baseline row, its primary-metric verdict and its picture panel from the generic
    evaluator and picture code: nothing in hydranet/evaluate.py or viz.py names it."""
    from doc_head import doc_head

    with doc_head():
        _new_head_is_evaluated_and_drawn(run)


def _new_head_is_evaluated_and_drawn(run):
    from hydranet.data import SimDataset
    from hydranet.evaluate import evaluate, evaluation_frames, format_table
    from hydranet.models import ModelConfig, TaskConfig, build_model
    from hydranet.stream import predict_frame
    from hydranet.viz import prediction_picture

    _, data = run
    cfg = load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={data}", "data.cameras=[CAM_FRONT]"])
    pictures = {}
    for heads in (("det2d",), ("det2d", "sky")):
        mcfg = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1, tasks=tuple(TaskConfig(h) for h in heads))
        model = build_model(mcfg, SimDataset(data, cameras=["CAM_FRONT"], channels=()).meta)
        frames = evaluation_frames(model, cfg, data)
        results = evaluate(model, frames)
        sample, pred = predict_frame(model, frames, 0)
        pictures[heads] = prediction_picture(model, sample, pred, frames.data.meta)
    assert set(results["model"]["sky"]) == {"iou"} and 0.0 <= results["model"]["sky"]["iou"] <= 1.0
    assert results["baseline"]["sky"] == {"iou": 0.0}  # "no sky" never overlaps the sky
    assert results["baseline_kind"]["sky"] == "no sky" and results["primary"]["sky"] == "iou"
    assert results["beats_baseline"]["sky"] == (results["model"]["sky"]["iou"] > 0.01)
    assert "sky" in format_table(results) and "no sky" in format_table(results)
    # the sky panel is one more tile in the camera's row
    assert pictures[("det2d", "sky")].shape[1] == pictures[("det2d",)].shape[1] + 160


def test_evaluate_keeps_per_frame_states_that_recompute_every_head(run):
    """evaluate(keep_states=True): per frame every head's metric states; recomputed over all frames they
    equal the metrics computed directly, and one scene's frames give that scene's metric alone."""
    import math

    from hydranet.checkpoint import load_model
    from hydranet.evaluate import evaluate, evaluation_frames, metric_of_states, plain_json

    tmp, data = run
    model, cfg, _ = load_model(tmp / "run" / "checkpoint.pt")
    frames = evaluation_frames(model, cfg, data)
    r = evaluate(model, frames, keep_states=True)
    assert len(r["frame_ids"]) == r["frames"] == 4 and {s for s, _ in r["frame_ids"]} == {"scene_0000", "scene_0001"}
    for head, task in model.heads.items():
        states = r["states"][head]
        assert states is not None and len(states) == 4, head
        again = metric_of_states(task, states)
        for key, v in again.items():
            ref = r["model"][head][key]
            assert (math.isnan(v) and math.isnan(ref)) or abs(v - ref) < 1e-9, (head, key, v, ref)
    plain = evaluate(model, frames)  # without states: the same metrics, no states in the results
    assert plain_json(plain["model"]) == plain_json(r["model"])
    assert "states" not in plain and "frame_ids" not in plain


def test_eval_and_viz_without_out_write_beside_the_model_not_into_the_working_folder(run, tmp_path, monkeypatch,
                                                                                     capsys):
    """No --out: eval writes RUN/eval/<dataset folder>/metrics.json (its prediction files beside it), viz
    RUN/viz/<dataset folder>-frame<N>.png; nothing lands in the folder the command was run from. Another dataset
    of the same folder name is refused (its figures are not replaced), a model that does not exist is one line."""
    tmp, data = run
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--checkpoint", str(tmp / "run"), "--data", str(data), "--quiet"]) == 0
    metrics = tmp / "run" / "eval" / data.name / "metrics.json"
    assert json.loads(metrics.read_text())["model"]["det2d"]
    assert (metrics.parent / "det2d_predictions.json").exists()
    assert main(["eval", "--checkpoint", str(tmp / "run"), "--data", str(data), "--quiet", "--fit", "crop"]) == 0
    assert (tmp / "run" / "eval" / f"{data.name}-fit-crop" / "metrics.json").is_file()
    assert main(["viz", "--checkpoint", str(tmp / "run" / "checkpoint.pt"), "--data", str(data), "--frame", "1"]) == 0
    assert cv2.imread(str(tmp / "run" / "viz" / f"{data.name}-frame1.png")).shape == (96, 6 * 160, 3)
    assert list(tmp_path.iterdir()) == []
    twin = tmp_path / "elsewhere" / data.name  # another dataset under the same folder name
    twin.parent.mkdir()
    shutil.copytree(data, twin)
    before = metrics.read_text()
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(tmp / "run"), "--data", str(twin), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(metrics) in err[0] and "--out" in err[0]
    assert metrics.read_text() == before
    for argv in (["eval", "--checkpoint", str(tmp / "gone"), "--data", str(data)],
                 ["viz", "--checkpoint", str(tmp / "gone"), "--data", str(data)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "gone does not exist" in err[0]
    assert not (tmp / "gone").exists() and not (tmp / "viz").exists()


def test_default_outputs_name_the_model_file_dataset_split_and_fit(tmp_path):
    """`fill_default_outputs` without running anything: an ONNX file and its INT8 twin in one folder get their own
    evaluation folders; a run folder and its checkpoint.pt the same one; eval-nuscenes writes beside its results."""
    import argparse

    from hydranet.cli.paths import fill_default_outputs

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"")
    for name in ("model.onnx", "model.int8.onnx"):
        (tmp_path / name).write_bytes(b"")
    data = tmp_path / "val"

    def out(command: str, **kw) -> Path:
        args = argparse.Namespace(**{"out": None, "checkpoint": None, "onnx": None, "data": [data], "split": None,
                                     "fit": None, **kw})
        fill_default_outputs(args, command)
        return args.out.relative_to(tmp_path)

    runs = {out("eval", checkpoint=tmp_path / "run"), out("eval", checkpoint=tmp_path / "run" / "checkpoint.pt")}
    assert runs == {Path("run/eval/val/metrics.json")}
    assert out("eval", onnx=tmp_path / "model.onnx") == Path("eval/model-val/metrics.json")
    assert out("eval", onnx=tmp_path / "model.int8.onnx") == Path("eval/model.int8-val/metrics.json")
    args = argparse.Namespace(out=None, checkpoint=tmp_path / "run", onnx=None, data=[data], split="mini_val", fit="camera")
    fill_default_outputs(args, "eval")
    assert args.out == tmp_path / "run" / "eval" / "val-mini_val-fit-camera" / "metrics.json"
    args = argparse.Namespace(out=None, results=tmp_path / "sub" / "nuscenes_results.json")
    fill_default_outputs(args, "eval-nuscenes")
    assert args.out == tmp_path / "sub" / "nuscenes_results_metrics.json"
