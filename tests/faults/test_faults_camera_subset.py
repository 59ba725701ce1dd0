"""A fleet with only some of a model's cameras (issue 32 item 3: a one-camera dashcam under a six-camera HydraNet;
deploy/runtime.py `HydraRuntime(cameras=)`, data_engine/shadow.py `runtime_for_fleet`). The camera heads run on the
cameras the fleet has, without re-exporting, and equal the full graph's outputs there; the BEV heads are not run and
said so in one line; shadow mode, mining, the report, the offline uncertainty and the auto-labeller run. Fault rows:
a model without camera heads (refused naming the camera the fleet lacks, no catalog written) and a candidate that
runs on other cameras than the model.

Untrained exports (faultlib.export_untrained, 32x64) on the fault dataset's six cameras: six.onnx and six_b.onnx
(configs/engine_tiny.yaml: det2d, the dense heads, det3d and the video queue; seeds 0 and 1), bev.onnx (det3d
alone) and back.onnx (the camera heads on CAM_BACK alone)."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from faultlib import REPO, Case, Env, export_untrained, params, run_case

from hydranet.cli import main

SIX = ("CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_BACK_RIGHT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_FRONT_LEFT")
_M: dict[str, Path] = {}


def _subset_fleet(data: Path, out: Path, cameras: tuple[str, ...]) -> Path:
    """A copy of the dataset whose rig (dataset.json) has only `cameras`: a fleet recorded by fewer cameras."""
    shutil.copytree(data, out)
    meta = json.loads((out / "dataset.json").read_text())
    meta["rig"]["cameras"] = [c for c in meta["rig"]["cameras"] if c["name"] in cameras]
    (out / "dataset.json").write_text(json.dumps(meta))
    return out


@pytest.fixture(scope="module", autouse=True)
def models(fault_env: Env, tmp_path_factory) -> dict[str, Path]:
    root, ds = tmp_path_factory.mktemp("camera_subset"), fault_env.dataset
    _M.update(six=export_untrained(ds, root / "six.onnx", "engine_tiny.yaml", 0, cameras=None, dynamic_batch=True),
              six_b=export_untrained(ds, root / "six_b.onnx", "engine_tiny.yaml", 1, cameras=None),
              bev=export_untrained(ds, root / "bev.onnx", "engine_tiny.yaml", 2, cameras=None,
                                   overrides=("model.tasks=[{name: det3d, options: {width: 16}}]",)),
              back=export_untrained(ds, root / "back.onnx", "tiny.yaml", 3, cameras=("CAM_BACK",)),
              front=_subset_fleet(ds, root / "front_fleet", ("CAM_FRONT",)),
              two=_subset_fleet(ds, root / "two_fleet", ("CAM_FRONT", "CAM_BACK")))
    return _M


def test_camera_heads_on_a_subset_equal_the_full_graphs():
    from deploy.runtime import DeployError, HydraRuntime

    full, sub = HydraRuntime(_M["six"]), HydraRuntime(_M["six"], cameras=["CAM_BACK", "CAM_FRONT"])
    assert tuple(full.camera_names) == SIX and sub.camera_names == ["CAM_BACK", "CAM_FRONT"]
    assert sub.skipped_heads == ["det3d"] and "det3d" not in sub.heads and "det2d" in sub.heads
    assert full.runs_bev and not sub.runs_bev and full.state_spec and sub.state_spec is None
    assert list(sub.rig.names) == ["CAM_BACK", "CAM_FRONT"]
    np.testing.assert_array_equal(sub.rig.cam2ego[0], full.rig.cam2ego[3])
    line = sub.subset_line()
    assert "det3d not run" in line and all(c in line for c in SIX) and "run on CAM_BACK, CAM_FRONT" in line
    images = np.random.default_rng(0).integers(0, 255, (6, 32, 64, 3), dtype=np.uint8)
    raw_full = full.run(full.feeds(full.preprocess(images)))
    raw_sub = sub.run(sub.feeds(sub.preprocess([images[3], images[0]])))  # the other slots hold CAM_BACK's image
    assert set(raw_sub) == set(sub.output_names) and "embedding" in raw_sub and not any(o.startswith("det3d.") for o in raw_sub)
    for name, a in raw_sub.items():  # a head that mixed its cameras would differ: its other slots see other images
        np.testing.assert_allclose(a, raw_full[name][[3, 0]], rtol=1e-5, atol=1e-5, err_msg=name)
    dec_full, dec_sub = full.decode(raw_full), sub.step({"CAM_BACK": images[3], "CAM_FRONT": images[0]})
    assert set(dec_sub) == set(sub.heads) and len(dec_sub["det2d"]) == 2
    np.testing.assert_allclose(dec_sub["det2d"][1]["boxes"], dec_full["det2d"][0]["boxes"], atol=1e-3)
    batch = np.stack([images, images[::-1]])  # (2, 6, H, W, 3): rows b*N + n of the graph -> b*k + i
    raw2_full = full.run(full.feeds(full.preprocess(batch)))
    raw2_sub = sub.run(sub.feeds(sub.preprocess(batch[:, [3, 0]])))
    for name, a in raw2_sub.items():
        np.testing.assert_allclose(a, raw2_full[name][[3, 0, 9, 6]], rtol=1e-5, atol=1e-5, err_msg=name)
    # every camera in another order: every head runs (BEV too), the camera heads' rows in that order
    rev = HydraRuntime(_M["six"], cameras=list(SIX[::-1]))
    assert rev.runs_bev and not rev.skipped_heads and rev.subset_line() == "" and rev.state_spec
    raw_rev = rev.run(rev.feeds(rev.preprocess(images[::-1])))
    for name, a in raw_rev.items():
        want = raw_full[name][::-1] if full.meta["outputs"][name]["space"] == "image" else raw_full[name]
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5, err_msg=name)
    assert HydraRuntime(_M["six"], cameras="CAM_BACK").camera_names == ["CAM_BACK"]  # one name as it is
    with pytest.raises(DeployError, match="has no camera 'CAM_SIDE'"):
        HydraRuntime(_M["six"], cameras=["CAM_SIDE"])
    with pytest.raises(DeployError, match="no camera head to run on CAM_FRONT"):
        HydraRuntime(_M["bev"], cameras=["CAM_FRONT"])
    with pytest.raises(DeployError, match="got 6 camera image"):
        sub.preprocess(images)


def test_a_six_camera_model_runs_the_engine_on_a_one_camera_fleet(tmp_path, capsys):
    """`engine shadow`, `mine`, `report` and the auto-labeller's ensemble of the six-camera model on CAM_FRONT alone."""
    from data_engine.autolabel.ensemble import load_ensemble
    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet

    cat = tmp_path / "cat.db"
    assert main(["engine", "shadow", "--onnx", str(_M["six"]), "--data", str(_M["front"]), "--catalog", str(cat),
                 "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "BEV head(s) det3d not run" in out and "run on CAM_FRONT" in out
    with sqlite3.connect(cat) as db:
        rows = db.execute("SELECT status, det2d_entropy, predictions FROM signals").fetchall()
        cams = db.execute("SELECT cameras FROM embeddings").fetchall()
    assert len(rows) == 2 and all(r[0] == "ok" and np.isfinite(r[1]) for r in rows)
    assert all(len(json.loads(r[2])["det2d"]) == 1 and "det3d" not in json.loads(r[2]) for r in rows)
    assert [c[0] for c in cams] == [1, 1]
    with Catalog(cat) as c:
        assert c.run_model(1) == (str(_M["six"].resolve()), ["CAM_FRONT"])
    assert main(["engine", "mine", "--catalog", str(cat), "--budget", "2", "--out", str(tmp_path / "sel.json")]) == 0
    assert main(["engine", "report", "--catalog", str(cat), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "contact_sheet.png").is_file()
    ens, warnings = load_ensemble([_M["six"], _M["six_b"]], Fleet(_M["front"]))
    assert ens.cameras == ("CAM_FRONT",) and "det3d" not in ens.heads and "det2d" in ens.heads
    assert len(warnings) == 2 and all("det3d not run" in w for w in warnings)


def test_the_offline_uncertainty_runs_on_two_of_six_cameras():
    from data_engine.fleet import Fleet
    from data_engine.uncertainty import pool_signals

    fleet = Fleet(_M["two"])
    frames = [(c, f["dir"]) for c in fleet.clip_names for f in fleet.clip(c).frames]
    cols = pool_signals([_M["six"], _M["six_b"]], _M["two"], frames)
    assert cols and all(len(v) == len(frames) and np.isfinite(v).all() for v in cols.values())


def _shadow(tmp: Path, model: str, fleet: str, *extra) -> list:
    return ["engine", "shadow", "--onnx", _M[model], "--data", _M[fleet], "--catalog", tmp / "c.db", "--quiet", *extra]


def _no_catalog(tmp: Path) -> None:
    assert not (tmp / "c.db").exists(), "a refused shadow run left a catalog"


CASES = [
    Case("shadow-bev-model-on-some-cameras", lambda t, e: _shadow(t, "bev", "front"),
         words=("bev.onnx", "lacks camera CAM_FRONT_RIGHT", "no camera head", "own rig"), check=_no_catalog),
    Case("shadow-candidate-on-other-cameras", lambda t, e: _shadow(t, "six", "two", "--candidate-onnx", _M["back"]),
         words=("back.onnx", "['CAM_BACK']", "['CAM_FRONT', 'CAM_BACK']", "one rig"), check=_no_catalog),
    Case("shadow-model-on-some-cameras", lambda t, e: _shadow(t, "six", "two"), 0,
         stdout=("det3d not run", "run on CAM_FRONT, CAM_BACK", "2 frames")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_fault(case, tmp_path, monkeypatch, capsys):
    run_case(case, tmp_path, Env(dataset=_M["front"]), monkeypatch, capsys)


def test_onnx_eval_scores_the_camera_heads_on_a_one_camera_dataset(tmp_path, capsys):
    """`hydranet eval --onnx` of the six-camera model on a labelled one-camera dataset (the sim's `dashcam` rig, whose
    one camera is CAM_FRONT, as KITTI's and Cityscapes' readers name theirs): its camera heads scored there, the BEV
    heads not scored and said so."""
    dash = tmp_path / "dash"
    assert main(["sim", "generate", "--out", str(dash), "--rig", "dashcam", "--scenes", "1", "--seed", "0", "--quiet",
                 "--set", "frames_per_scene=2", "--set", "image_width=64", "--set", "image_height=48"]) == 0
    assert main(["eval", "--onnx", str(_M["six"]), "--data", str(dash), "--out", str(tmp_path / "m.json"), "--quiet"]) == 0
    assert "det3d not run" in capsys.readouterr().out
    got = json.loads((tmp_path / "m.json").read_text())
    assert got["cameras"] == ["CAM_FRONT"] and got["skipped_heads"] == ["det3d"]
    assert "det3d" not in got["model"] and {"det2d", "drivable"} <= set(got["model"])
    assert all(np.isfinite(v) for v in got["model"]["drivable"].values() if isinstance(v, float))


def test_a_two_camera_run_keeps_its_cameras_in_truth_search_and_labels(tmp_path):
    """On a sim fleet recorded by CAM_FRONT and CAM_BACK (the truth file kept), the run's per-camera rows are those two
    cameras' everywhere they are read back: the fleet's truth (per-frame errors), `engine similar --image --camera
    CAM_BACK` (the frame whose CAM_BACK image is given comes first) and the labelling jobs' pre-annotations."""
    import cv2

    from data_engine.catalog import Catalog
    from data_engine.evaluation import load_run_truth
    from data_engine.fleet import FleetConfig, generate_fleet, read_frame
    from data_engine.label_exchange import with_predictions
    from data_engine.label_queue import create_jobs, load_jobs
    from data_engine.shadow import run_shadow
    from data_engine.similar import similar_image
    from hydranet.config import load_config

    cfg = load_config(FleetConfig, "fleet", ["sim.image_width=64", "sim.image_height=48", "sim.frames_per_scene=2"])
    fleet = _subset_fleet(generate_fleet(tmp_path / "fleet6", cfg, 1, 0, progress=False), tmp_path / "fleet",
                          ("CAM_FRONT", "CAM_BACK"))
    cat = tmp_path / "cat.db"
    st = run_shadow(_M["six"], fleet, cat, workers=1, progress=False)
    assert st["notes"] and "run on CAM_FRONT, CAM_BACK" in st["notes"][0]
    with Catalog(cat) as c:
        truth, why = load_run_truth(c, st["run_id"])
        assert truth is not None, why
        assert len(truth.errors) == 2 and all(np.isfinite(e) for e in truth.errors.values())
        frame = c.table(st["run_id"])
    clip, idx = str(frame["clip"][1]), int(frame["idx"][1])
    fdir = next(f["dir"] for f in json.loads((fleet / "scenes" / clip / "scene.json").read_text())["frames"] if f["index"] == idx)
    back = read_frame(fleet, clip, fdir, ["CAM_BACK"])[0]
    cv2.imwrite(str(tmp_path / "back.png"), cv2.cvtColor(back, cv2.COLOR_RGB2BGR))
    hits = similar_image(cat, _M["six"], tmp_path / "back.png", camera="CAM_BACK", k=2)
    assert (hits[0]["clip"], hits[0]["frame"]) == (clip, idx) and hits[0]["similarity"] > 0.999
    assert main(["engine", "mine", "--catalog", str(cat), "--budget", "2", "--out", str(tmp_path / "sel.json")]) == 0
    with Catalog(cat) as c:
        create_jobs(c, tmp_path / "sel.json", "files")
        jobs = with_predictions(c, load_jobs(c, None, ("queued",)))
    assert jobs and all(set(j.predictions) == {"CAM_FRONT", "CAM_BACK"} for j in jobs)


def test_frames_of_other_sizes_are_resized_when_no_view_transform_runs(tmp_path):
    """A recording whose frames differ in size (KITTI's do: 1224x370 to 1242x375) runs the camera heads on each frame
    resized; a run with the view transform refuses any size (its calibration is the model's)."""
    import cv2

    from data_engine.shadow import run_shadow
    from deploy.runtime import DeployError, HydraRuntime

    fleet = tmp_path / "fleet"
    shutil.copytree(_M["front"], fleet)
    first = sorted((fleet / "scenes" / "scene_0000").iterdir())[0] / "CAM_FRONT.jpg"
    img = cv2.imread(str(first))
    cv2.imwrite(str(first), cv2.resize(img, (80, 50)))  # one frame at 80x50, the other at the rig's 64x48
    st = run_shadow(_M["six"], fleet, tmp_path / "cat.db", workers=1, progress=False)
    assert st["frames"] == 2 and st["corrupt"] == 0
    with pytest.raises(DeployError, match="view transform is bound"):
        HydraRuntime(_M["six"]).allow_sizes({}, any_size=True)
    rt = HydraRuntime(_M["six"], cameras=["CAM_FRONT"])
    with pytest.raises(DeployError, match="other sizes would break the calibration"):
        rt.preprocess([np.zeros((50, 80, 3), np.uint8)])
    rt.allow_sizes({}, any_size=True)
    assert rt.preprocess([np.zeros((50, 80, 3), np.uint8)]).shape == (1, 1, 3, 32, 64)


def test_checkpoint_eval_scores_the_camera_heads_on_a_one_camera_dataset(fault_env, tmp_path, capsys):
    """`hydranet eval --checkpoint` of a six-camera HydraNet (camera heads and det3d) on a labelled one-camera dataset
    scores its camera heads there (`model_for_cameras`, the same weights) and says which BEV heads it leaves out."""
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    cfg = load_experiment(REPO / "configs" / "engine_tiny.yaml", [
        f"data.root={fault_env.dataset}", "data.image_size=[32,64]", "device=cpu", "num_workers=0", "batch_size=1",
        "steps=1", "checkpoint_every=1", "optim.warmup_steps=1"])
    train(cfg, tmp_path / "run", progress=False)
    dash = tmp_path / "dash"
    assert main(["sim", "generate", "--out", str(dash), "--rig", "dashcam", "--scenes", "1", "--seed", "0", "--quiet",
                 "--set", "frames_per_scene=2", "--set", "image_width=64", "--set", "image_height=48"]) == 0
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(tmp_path / "run"), "--data", str(dash), "--out", str(tmp_path / "m.json"),
                 "--quiet"]) == 0
    assert "BEV head(s) det3d not run" in capsys.readouterr().out
    got = json.loads((tmp_path / "m.json").read_text())
    assert got["cameras"] == ["CAM_FRONT"] and "det3d" not in got["model"] and "det2d" in got["model"]
    assert "det3d not run" in got["note"]
    # the picture too: the camera heads' panels on CAM_FRONT, said so; the same rig moved is refused, not drawn
    assert main(["viz", "--checkpoint", str(tmp_path / "run"), "--data", str(dash), "--out", str(tmp_path / "v.png")]) == 0
    assert "det3d not run" in capsys.readouterr().out and (tmp_path / "v.png").stat().st_size > 0
    moved = tmp_path / "moved"
    shutil.copytree(fault_env.dataset, moved)
    meta = json.loads((moved / "dataset.json").read_text())
    next(c for c in meta["rig"]["cameras"] if c["name"] == "CAM_BACK")["cam2ego"][0][3] += 0.5
    (moved / "dataset.json").write_text(json.dumps(meta))
    assert main(["viz", "--checkpoint", str(tmp_path / "run"), "--data", str(moved), "--out", str(tmp_path / "w.png")]) == 2
    assert "CAM_BACK's calibration differs" in capsys.readouterr().err and not (tmp_path / "w.png").exists()


def test_ray_actors_run_the_subset_as_the_local_pool_does(tmp_path):
    """Ray Data's actors hold the camera subset's sessions: the same signal rows as the in-process run."""
    pytest.importorskip("ray.data", reason="Ray Data is not installed (the [ray] extra)")
    from data_engine.shadow import run_shadow

    rows = {}
    for executor in ("local", "ray"):
        cat = tmp_path / f"{executor}.db"
        run_shadow(_M["six"], _M["front"], cat, executor=executor, workers=1, progress=False)
        with sqlite3.connect(cat) as db:
            rows[executor] = db.execute("SELECT frame_id, status, det2d_entropy, predictions FROM signals "
                                        "ORDER BY frame_id").fetchall()
    assert rows["ray"] == rows["local"] and len(rows["local"]) == 2
