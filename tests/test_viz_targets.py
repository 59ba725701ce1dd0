"""`hydranet viz --targets`: a training item as the network sees it. The picture holds the item's input
image as the loader gives it (pixel for pixel) and a panel per dense target; wrong flags are one-line
errors."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from dataset_fixtures import make_sim

from hydranet.checkpoint import model_meta
from hydranet.cli import main
from hydranet.data.sources import open_sources, run_dataset
from hydranet.experiment import load_experiment
from hydranet.models import build_model
from hydranet.train import build_training_data
from hydranet.viz_targets import dense_targets, targets_picture

SETS = ["data.cameras=[CAM_FRONT,CAM_BACK]", "data.image_size=[64,96]", "model.neck_width=16", "model.bev.downsample=8",
        "model.bev.channels=16", "model.bev.heights=[0.0,1.0]", "model.bev.video_frames=2", "num_workers=0"]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return make_sim(tmp_path_factory.mktemp("vt") / "sim")


def test_picture_shows_the_loader_item(sim, tmp_path, capsys):
    out = tmp_path / "t.png"
    assert main(["viz", "--targets", "--config", "full", "--set", f"data.root={sim}", *sum([["--set", s] for s in SETS], []),
                 "--frame", "1", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    picture = cv2.cvtColor(cv2.imread(str(out)), cv2.COLOR_BGR2RGB)
    cfg = load_experiment("full", [f"data.root={sim}", *SETS])
    data = run_dataset(open_sources(cfg.data))
    model = build_model(cfg.model, model_meta(cfg, data))
    item = build_training_data(cfg, model, data=data)[(0, 1)]
    assert np.array_equal(picture, targets_picture(model, item, ["CAM_FRONT", "CAM_BACK"]))
    # row 0: CAM_FRONT's past frame, its input (below the 12-px name), then one panel per dense target
    H, W = 64, 96
    panels = 2 + sum(len(dense_targets(item["targets"][n])) for n, t in model.heads.items() if t.space == "image")
    assert picture.shape[1] == panels * W and picture.shape[0] == 3 * H  # 2 cameras + the BEV row
    current = item["images"][-1, 0].permute(1, 2, 0).numpy()  # (H, W, 3) the network's input
    same = (picture[16:H, W:2 * W] == current[16:]).all(-1).mean()  # the head's 2D boxes are drawn on it
    assert same > 0.8, f"the input tile is not the loader's image ({same:.0%} of its pixels are)"


@pytest.mark.parametrize("argv, words", [
    (["viz", "--targets", "--out", "x.png"], ("--targets", "--config", "--checkpoint")),
    (["viz", "--checkpoint", "run"], ("--checkpoint", "--data")),
    (["viz", "--targets", "--config", "full"], ("--config", "--out")),  # no run folder to write beside
    (["viz", "--targets", "--config", "full", "--frame", "9999", "--out", "x.png"], ("--frame 9999", "outside")),
])
def test_bad_flags_are_one_line_errors(sim, tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    argv = argv + (["--set", f"data.root={sim}", *sum([["--set", s] for s in SETS], [])] if "full" in argv else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error:") and all(w in err[-1] for w in words), err
    assert not (tmp_path / "x.png").exists()
    torch.set_num_threads(torch.get_num_threads())
