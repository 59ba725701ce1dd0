"""KITTI and BDD100K folders as fleets (`engine ingest --source dataset`): every frame read in place through the
reader, the dataset's own labels as truth, shadow mode on them; BDD100K has no calibration and no ego pose, so its
fleet records none (never NaN in fleet.json) and a BEV model is refused on it."""
from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest
from dataset_fixtures import make_kitti_sim, make_sim, write_bdd100k, write_kitti
from engine_fixtures import REPO

from hydranet.cli import main


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("dataset_fleets")
    sim = make_sim(root / "sim")
    out = {"root": root, "bdd100k": write_bdd100k(sim, root / "bdd"), "kitti": write_kitti(make_kitti_sim(root / "ksim"),
                                                                                           root / "kitti")}
    for fmt in ("bdd100k", "kitti"):
        assert main(["engine", "ingest", "--quiet", "--out", str(root / f"fleet_{fmt}"), "--source", "dataset", "--root",
                     str(out[fmt]), "--format", fmt]) == 0
    return out


@pytest.mark.parametrize("fmt", ["bdd100k", "kitti"])
def test_every_frame_is_read_in_place_with_the_readers_labels_as_truth(world, fmt):
    from data_engine.fleet import Fleet, RecordedFleet
    from hydranet.data.formats import open_dataset

    fleet = Fleet(world["root"] / f"fleet_{fmt}")
    ds = open_dataset(world[fmt], fmt)
    assert isinstance(fleet, RecordedFleet) and sum(len(fleet.clip(c).frames) for c in fleet.clip_names) == len(ds)
    assert json.loads((fleet.root / "fleet.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in fleet.json"))
    i = 0
    for name in fleet.clip_names:
        for f in fleet.clip(name).frames:
            sample = ds.load(i)
            assert np.array_equal(fleet.read(name, f["dir"], ds.rig.names)[0], np.asarray(sample["images"][0]))
            truth = fleet.truth(name, f["dir"])
            assert truth is not None and set(truth["supervises"]) <= set(sample["supervises"])
            assert truth["cameras"]["CAM_FRONT"]["boxes2d"] == json.loads(json.dumps(sample["labels"]["cameras"]["CAM_FRONT"]["boxes2d"]))
            i += 1


def test_bdd100k_fleet_records_no_calibration_and_refuses_a_bev_model(world):
    from data_engine.fleet import Fleet, FleetError
    from deploy.metadata import ModelRig

    meta = json.loads((world["root"] / "fleet_bdd100k" / "fleet.json").read_text())
    assert meta["calibrated"] is False and set(meta["rig"]["cameras"][0]) == {"name", "width", "height"}
    assert all(f["ego2world"] is None for c in meta["clips"] for f in c["frames"])
    kitti = json.loads((world["root"] / "fleet_kitti" / "fleet.json").read_text())
    assert kitti["calibrated"] is True and "K" in kitti["rig"]["cameras"][0]
    fleet = Fleet(world["root"] / "fleet_bdd100k")
    h, w = fleet.cameras["CAM_FRONT"]
    model_rig = ModelRig("m", ("CAM_FRONT",), (h, w), np.eye(3)[None], np.eye(4)[None], ((h, w),), (None,))
    fleet.check_rig(model_rig, "camera.onnx", bev=False)  # a camera-only model: its cameras by name, resized
    with pytest.raises(FleetError, match="no camera calibration.*camera-only model"):
        fleet.check_rig(model_rig, "bev.onnx", bev=True)


def test_shadow_mode_runs_a_camera_model_on_the_bdd100k_and_kitti_fleets(world):
    from deploy.export import export_checkpoint
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    root = world["root"]
    train(load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={root / 'sim'}", "data.cameras=[CAM_FRONT]",
                                                          "data.image_size=[64,64]", "device=cpu", "steps=1",
                                                          "checkpoint_every=1", "batch_size=1", "optim.warmup_steps=1"]),
          root / "run", progress=False)
    export_checkpoint(root / "run", root / "camera.onnx", root / "sim", frames=1, verbose=False)
    for fmt, frames in (("bdd100k", 2), ("kitti", 8)):
        cat = root / f"{fmt}.db"
        assert main(["engine", "shadow", "--onnx", str(root / "camera.onnx"), "--data", str(root / f"fleet_{fmt}"),
                     "--catalog", str(cat), "--quiet", "--workers", "1"]) == 0
        db = sqlite3.connect(cat)
        assert db.execute("SELECT count(*), sum(status = 'ok') FROM signals").fetchone() == (frames, frames)
        db.close()
