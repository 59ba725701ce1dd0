"""`hydranet train` and `hydranet eval` on a nuScenes folder (issue 13.2): the submission JSON that eval
writes uses the dataset's own sample tokens, and the project's metrics (`hydranet eval-nuscenes`) and
the official devkit score it equally (every figure within 1e-3)."""
from __future__ import annotations

import json
import math

import pytest
import torch

from dataset_fixtures import make_sim, write_nuscenes
from devkit import needs_devkit
from hydranet.cli import main
from hydranet.data.nuscenes import NuScenesDataset
from hydranet.metrics import evaluate_nuscenes
from hydranet.tasks.det3d import Det3dMetric

VERSION = "v1.0-mini"
SPLIT = "fixture_all"
TASKS = [{"name": "det3d", "options": {"score_threshold": 0.05, "max_detections": 60}}]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    base = tmp_path_factory.mktemp("nus_eval")
    root = write_nuscenes(make_sim(base / "sim"), base / "nusc")
    scenes = [s["name"] for s in json.loads((root / VERSION / "scene.json").read_text())]
    (root / VERSION / "splits.json").write_text(json.dumps({SPLIT: scenes}))
    run = base / "run"
    sets = [f"data.root={root}", "data.cameras=[CAM_FRONT,CAM_BACK]", "data.image_size=[64,96]", f"model.tasks={json.dumps(TASKS)}",
            "model.neck_width=16", "model.neck_repeats=1", "model.bev.channels=16", "steps=1", "batch_size=2",
            "num_workers=0", "augment.photometric=false", "augment.geometric=false"]
    assert main(["train", "--config", "tiny", "--out", str(run), "--quiet", *[a for s in sets for a in ("--set", s)]]) == 0
    assert main(["eval", "--checkpoint", str(run), "--data", str(root), "--split", SPLIT,
                 "--out", str(base / "eval" / "metrics.json"), "--quiet"]) == 0
    # the same path with near-perfect boxes (the untrained model matches nothing): what the metric is handed
    # becomes each frame's true boxes moved 0.3 m, so the submission has true positives to score
    orig = Det3dMetric.update

    def update(self, decoded, targets):
        fake = [{"boxes": torch.nan_to_num(gb) + torch.tensor([0.3, -0.2] + [0.0] * 7), "scores": torch.linspace(0.9, 0.5, len(gb)),
                 "labels": gl} for gb, gl in zip(targets["gt_boxes"], targets["gt_labels"])]
        orig(self, fake, targets)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Det3dMetric, "update", update)
        assert main(["eval", "--checkpoint", str(run), "--data", str(root), "--split", SPLIT,
                     "--out", str(base / "near_gt" / "metrics.json"), "--quiet"]) == 0
    return root, base


def test_eval_on_nuscenes_writes_a_submission_with_the_datasets_sample_tokens(evaluated):
    root, base = evaluated
    out = base / "eval"
    sub = json.loads((out / "nuscenes_results.json").read_text())
    tokens = {NuScenesDataset(root, VERSION, SPLIT, channels=()).sample_token(i)
              for i in range(len(NuScenesDataset(root, VERSION, SPLIT, channels=())))}
    assert set(sub["results"]) == tokens
    assert sum(len(v) for v in sub["results"].values()) > 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["format"] == "nuscenes" and metrics["split"] == SPLIT


@needs_devkit
@pytest.mark.parametrize("run", ["eval", "near_gt"])
def test_project_metrics_and_devkit_score_the_submission_equally(evaluated, run, tmp_path):
    from nuscenes.eval.detection.config import config_factory
    from nuscenes.eval.detection.evaluate import DetectionEval
    from nuscenes.nuscenes import NuScenes

    root, base = evaluated
    results = base / run / "nuscenes_results.json"
    ours = evaluate_nuscenes(root, VERSION, SPLIT, results).serialize()
    nusc = NuScenes(VERSION, str(root), verbose=False)
    theirs = DetectionEval(nusc, config_factory("detection_cvpr_2019"), str(results), SPLIT,
                           output_dir=str(tmp_path / "devkit"), verbose=False).evaluate()[0].serialize()

    def flat(s):
        f = {"mean_ap": s["mean_ap"], "nd_score": s["nd_score"], **{f"tp/{k}": v for k, v in s["tp_errors"].items()}}
        for c, d in s["label_aps"].items():
            f.update({f"ap/{c}/{float(t)}": v for t, v in d.items()})
        for c, d in s["label_tp_errors"].items():
            f.update({f"tp/{c}/{m}": v for m, v in d.items()})
        return f

    a, b = flat(ours), flat(theirs)
    assert set(a) == set(b)
    bad = {k: (a[k], b[k]) for k in a if not (math.isnan(a[k]) and math.isnan(b[k])) and not abs(a[k] - b[k]) <= 1e-3}
    assert not bad, bad
    if run == "near_gt":
        assert a["mean_ap"] > 0.5 and 0.0 < a["tp/trans_err"] < 0.6
