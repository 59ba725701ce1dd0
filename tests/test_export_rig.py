"""`hydranet export --rig FLEET_OR_RIG`: a checkpoint exported for another rig's calibration with the same
weights. Tiny: a 1-scene, 2-frame 96x64 sim (nuscenes6), a 1-step BEV checkpoint (LUT view transform, 2-frame
video queue, det3d + bevmap) and a 1-step camera-only one; the other rig is the sim's with CAM_FRONT moved
0.5 m forward, as a fleet folder (dataset.json)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from deploy.export import ATOL, RTOL, export_checkpoint, rig_line, sim_frames
from deploy.metadata import ModelRig, read_metadata
from hydranet.checkpoint import config_from_checkpoint, load_checkpoint, model_for_rig, model_from_checkpoint
from hydranet.cli import main
from hydranet.rig import RigError, load_rig, rig_from_dict, rig_from_path

REPO = Path(__file__).resolve().parents[1]
MOVED = "CAM_FRONT"
TRAIN = ["num_workers=0", "batch_size=1", "steps=1", "checkpoint_every=1", "optim.warmup_steps=1", "device=cpu",
         "data.image_size=[64,96]"]
BEV = ["model.neck_width=16", "model.bev.channels=16", "model.bev.heights=[0.0,1.0]", "model.bev.video_frames=2",
       "model.bev.video_fuse_depth=1", "model.bev.encoder_depth=1",
       "model.tasks=[{name: det3d, options: {width: 16}}, {name: bevmap, options: {width: 16}}]"]


def _moved_fleet(data: Path, out: Path) -> Path:
    """A copy of the sim dataset whose rig has CAM_FRONT mounted 0.5 m further forward."""
    shutil.copytree(data, out)
    meta = json.loads((out / "dataset.json").read_text())
    cam = next(c for c in meta["rig"]["cameras"] if c["name"] == MOVED)
    cam["cam2ego"][0][3] += 0.5
    (out / "dataset.json").write_text(json.dumps(meta))
    return out


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    from hydranet.experiment import load_experiment
    from hydranet.train import train
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    root = tmp_path_factory.mktemp("export_rig")
    data = generate_dataset(root / "sim", SimConfig(image_width=96, image_height=64, frames_per_scene=2), scenes=1,
                            seed=0, progress=False)
    train(load_experiment(REPO / "configs" / "bev.yaml", [f"data.root={data}", *TRAIN, *BEV]), root / "bev", progress=False)
    train(load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={data}", *TRAIN, "data.cameras=[CAM_FRONT,CAM_BACK]",
                                                                         "model.tasks=[{name: drivable}]"]),
          root / "cam", progress=False)
    fleet = _moved_fleet(data, root / "moved_fleet")
    rig = rig_from_path(data)
    scaled = root / "scaled.yaml"  # the same rig recorded at twice the resolution
    scaled.write_text(yaml.safe_dump(rig.resized(192, 128).to_dict(), sort_keys=False))
    export_checkpoint(root / "bev", root / "a.onnx", data, frames=1, simplify=False, verbose=False)
    return {"root": root, "data": data, "fleet": fleet, "scaled": scaled}


@pytest.fixture(scope="module")
def rebound(env) -> dict:
    """b.onnx: the BEV checkpoint exported through the CLI for the moved fleet's rig."""
    out = env["root"] / "b.onnx"
    assert main(["export", str(env["root"] / "bev"), "--out", str(out), "--data", str(env["data"]),
                 "--rig", str(env["fleet"])]) == 0
    return {"onnx": out}


def _tables(model) -> dict[str, torch.Tensor]:
    v = model.fusion.view
    return {n: getattr(v, n) for n in v.table_names}


def test_weights_are_untouched_and_tables_follow_the_calibration(env):
    ckpt = load_checkpoint(env["root"] / "bev")
    cfg = config_from_checkpoint(ckpt)
    base = model_from_checkpoint(ckpt, cfg)
    moved, meta = model_for_rig(ckpt, cfg, rig_from_path(env["fleet"]), "fleet")
    scaled, _ = model_for_rig(ckpt, cfg, rig_from_path(env["scaled"]), "scaled")
    for m in (moved, scaled):  # every parameter and running statistic is the checkpoint's
        ref = dict(base.state_dict())
        got = m.state_dict()
        assert set(got) == set(ref)
        assert all(torch.equal(got[k], ref[k]) for k in ref), [k for k in ref if not torch.equal(got[k], ref[k])][:3]
        assert all(torch.equal(p, q) for p, q in zip(m.parameters(), base.parameters()))
    t0, t1, t2 = _tables(base), _tables(moved), _tables(scaled)
    assert any(t0[n].shape != t1[n].shape or not torch.equal(t0[n], t1[n]) for n in t0)  # another calibration
    assert all(torch.equal(t0[n], t2[n]) for n in t0)  # the same calibration at another resolution
    H, W = cfg.data.image_size
    assert meta["rig"]["cameras"][0]["width"] == W and meta["source_rig"]["cameras"][0]["width"] == 96


def test_check_rig_refuses_the_original_export_and_accepts_the_rebound_one(env, rebound):
    from data_engine.fleet import Fleet, FleetError

    fleet = Fleet(env["fleet"])
    a, b = read_metadata(env["root"] / "a.onnx"), read_metadata(rebound["onnx"])
    with pytest.raises(FleetError, match=f"camera {MOVED}: mounted 50.0 cm"):
        fleet.check_rig(ModelRig.from_metadata(a, "a.onnx"), "a.onnx", bev=True)
    fleet.check_rig(ModelRig.from_metadata(b, "b.onnx"), "b.onnx", bev=True)
    assert b["rig"]["names"] == a["rig"]["names"]
    assert b["rig"]["image_size"] == a["rig"]["image_size"] == [64, 96]
    src = b["source"]["rig"]
    assert src["from"] == str(env["fleet"]) and src["trained_rig"] == a["rig"]["name"] and 0 < src["bev_coverage"] <= 1
    assert src["change"][MOVED]["moved_m"] == pytest.approx(0.5)
    assert all(max(d.values()) < 1e-6 for cam, d in src["change"].items() if cam != MOVED)
    assert f"largest change: {MOVED} moved 50.0 cm, turned 0.00 deg" in rig_line(b["source"])
    n = b["rig"]["names"].index(MOVED)
    assert np.isclose(b["rig"]["cam2ego"][n][0][3] - a["rig"]["cam2ego"][n][0][3], 0.5)
    assert b["meta"]["rig"]["cameras"][n]["cam2ego"][0][3] == pytest.approx(b["rig"]["cam2ego"][n][0][3])


def test_rebound_graph_matches_an_eager_model_fed_the_new_calibration(env, rebound):
    """onnxruntime on b.onnx vs the ORIGINAL eager model given the moved rig as batch calibration (its own table
    built on the fly: an independent path), within the export's parity tolerance; the BEV outputs differ from
    a.onnx's (the tables matter), the camera outputs do not."""
    import onnxruntime as ort

    ckpt = load_checkpoint(env["root"] / "bev")
    cfg = config_from_checkpoint(ckpt)
    model = model_from_checkpoint(ckpt, cfg).eval()
    H, W = cfg.data.image_size
    K, T, _ = rig_from_path(env["fleet"]).resized(W, H).calibration()
    sess_a = ort.InferenceSession(str(env["root"] / "a.onnx"), providers=["CPUExecutionProvider"])
    sess_b = ort.InferenceSession(str(rebound["onnx"]), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess_b.get_outputs()]
    frame = sim_frames(cfg, env["fleet"], 1)[0]
    v = model.fusion.video
    feed = {"images": frame["images"][None], "ego_motion": np.eye(4, dtype=np.float32)[None],
            "prev_bev": np.zeros((1, v.frames - 1, v.channels, *v.grid.shape), np.float32)}
    got_a = dict(zip(names, sess_a.run(names, feed)))
    got_b = dict(zip(names, sess_b.run(names, feed)))
    with torch.no_grad():
        out = model({"images": torch.from_numpy(feed["images"]), "prev_bev": torch.from_numpy(feed["prev_bev"]),
                     "ego_motion": torch.from_numpy(feed["ego_motion"]),
                     "intrinsics": torch.from_numpy(K[None].astype(np.float32)),
                     "cam2ego": torch.from_numpy(T[None].astype(np.float32))}, "tensor")
    ref = {f"{h}.{k}": out[h][k].numpy() for h in model.heads for k in out[h]}
    ref["embedding"], ref["bev_state.bev_queue"] = out["embedding"].numpy(), out["bev_state"]["bev_queue"].numpy()
    for n in names:
        err = float(np.abs(got_b[n] - ref[n]).max())
        assert err <= ATOL + RTOL * float(np.abs(ref[n]).max()), (n, err)
    assert not np.allclose(got_a["bevmap.logits"], got_b["bevmap.logits"], atol=1e-6)
    np.testing.assert_array_equal(got_a["embedding"], got_b["embedding"])


def test_rebound_model_runs_in_shadow_mode_on_that_fleet(env, rebound, tmp_path):
    from data_engine.fleet import FleetError
    from data_engine.shadow import run_shadow
    from deploy.runtime import HydraRuntime

    with pytest.raises(FleetError, match=f"camera {MOVED}"):
        run_shadow(env["root"] / "a.onnx", env["fleet"], tmp_path / "a.db", workers=1, progress=False)
    counts = run_shadow(rebound["onnx"], env["fleet"], tmp_path / "b.db", workers=1, progress=False)
    assert counts, counts
    rt = HydraRuntime(rebound["onnx"])
    imgs = [np.zeros((64, 96, 3), np.uint8)] * rt.num_cameras
    assert "det3d" in rt(imgs, ego2world=np.eye(4))


def test_camera_only_model_checks_the_cameras_and_records_the_rig(env, tmp_path):
    res = export_checkpoint(env["root"] / "cam", tmp_path / "c.onnx", env["data"], frames=1, simplify=False,
                            verbose=False, rig=env["fleet"])
    md = read_metadata(res.path)
    assert md["bev"] is None and md["source"]["rig"]["bev_coverage"] is None
    assert md["rig"]["names"] == ["CAM_FRONT", "CAM_BACK"]
    moved = rig_from_path(env["fleet"]).select(["CAM_FRONT", "CAM_BACK"]).resized(96, 64)
    np.testing.assert_allclose(md["rig"]["cam2ego"], np.stack([c.cam2ego for c in moved.cameras]), atol=1e-8)
    lacking = rig_from_dict({"name": "front_only", "cameras": [rig_from_path(env["data"]).select(["CAM_FRONT"])
                                                               .to_dict()["cameras"][0]]})
    (tmp_path / "front.yaml").write_text(yaml.safe_dump(lacking.to_dict()))
    with pytest.raises(RigError, match="lacks camera CAM_BACK of the model"):
        export_checkpoint(env["root"] / "cam", tmp_path / "d.onnx", env["data"], verbose=False, rig=tmp_path / "front.yaml")
    assert not (tmp_path / "d.onnx").exists()


def test_rig_from_path_reads_yaml_presets_sim_and_recorded_fleets(env, tmp_path):
    sim = rig_from_path(env["data"])
    assert rig_from_path("nuscenes6").names == load_rig("nuscenes6").names
    assert rig_from_path(env["scaled"]).cameras[0].width == 192
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "fleet.json").write_text(json.dumps({"format": "hydranet-fleet", "version": 1,
                                                             "rig": sim.to_dict(), "clips": []}))
    assert rig_from_path(tmp_path / "rec").names == sim.names
    (tmp_path / "other" / "x").mkdir(parents=True)
    with pytest.raises(RigError, match="neither a sim dataset/fleet .* nor a recorded fleet"):
        rig_from_path(tmp_path / "other")


@pytest.mark.parametrize("method", ["lut", "lss"])
def test_both_view_transforms_rebuild_their_tables_from_meta_for_rig(method):
    """Without training: a model of each view transform rebuilt for a moved rig (tables differ) and for the same
    rig at twice the resolution (tables equal), the weights loaded unchanged."""
    import dataclasses

    from fake_samples import BEV_META, TINY_BEV, TINY_BEV_CONFIG
    from hydranet.checkpoint import meta_for_rig
    from hydranet.experiment import DataConfig, ExperimentConfig
    from hydranet.models import build_model

    mcfg = dataclasses.replace(TINY_BEV, bev=dataclasses.replace(TINY_BEV_CONFIG, method=method))
    rig = load_rig("nuscenes6")
    meta = {**BEV_META, "rig": rig.resized(96, 64).to_dict()}
    cfg = ExperimentConfig(data=DataConfig(image_size=(64, 96)), model=mcfg)
    base = build_model(mcfg, meta)
    d = rig.to_dict()
    d["cameras"][0]["cam2ego"][0][3] += 0.5
    for other, same in ((rig_from_dict(d), False), (rig.resized(192, 128), True)):
        m = build_model(mcfg, meta_for_rig(cfg, meta, other, "rig"))
        m.load_weights(base.state_dict())
        assert all(torch.equal(p, q) for p, q in zip(m.parameters(), base.parameters()))
        equal = [torch.equal(getattr(m.fusion.view, n), getattr(base.fusion.view, n)) for n in base.fusion.view.table_names]
        assert all(equal) if same else not all(equal)


def test_another_lens_is_named_not_called_the_trained_calibration():
    """A fleet whose CAM_FRONT is a fisheye at the same mount and K: the tables are rebuilt for its lens, and the
    line says so (it said "the trained calibration (tables unchanged)")."""
    import dataclasses

    from hydranet.geometry import Distortion
    from hydranet.rig import calibration_difference, load_rig

    trained = load_rig("nuscenes6")
    front = trained.cameras[0]
    fisheye = dataclasses.replace(front, distortion=Distortion("fisheye", (0.05, 0.01, 0.0, 0.0)))
    other = dataclasses.replace(trained, cameras=(fisheye, *trained.cameras[1:]))
    change = calibration_difference(trained, other)
    assert change[front.name]["lens"] == 1.0 and all(d["lens"] == 0.0 for c, d in change.items() if c != front.name)
    line = rig_line({"rig": {"name": "dash", "from": "fleet", "trained_rig": trained.name, "bev_coverage": 0.5,
                             "change": change}})
    assert f"another lens on {front.name}" in line and "tables unchanged" not in line


def test_camera_heads_on_a_subset_of_the_cameras(env, tmp_path):
    """`export --cameras CAM_FRONT` (issue 32: a one-camera dashcam from a multi-camera model): the camera heads alone,
    on that camera, with the same weights: its outputs on CAM_FRONT equal the full export's CAM_FRONT outputs; the BEV
    heads and the fusion are dropped; a camera the model lacks, or a model without camera heads, is refused."""
    from deploy.runtime import HydraRuntime
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    full = export_checkpoint(env["root"] / "cam", tmp_path / "full.onnx", env["data"], frames=1, simplify=False,
                             verbose=False).path
    assert main(["export", str(env["root"] / "cam"), "--out", str(tmp_path / "front.onnx"), "--data", str(env["data"]),
                 "--cameras", "CAM_FRONT"]) == 0
    md = read_metadata(tmp_path / "front.onnx")
    assert md["rig"]["names"] == ["CAM_FRONT"] and md["source"]["cameras"] == ["CAM_FRONT"]
    img = np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8)
    a, b = HydraRuntime(full), HydraRuntime(tmp_path / "front.onnx")
    out_full = a.run(a.feeds(a.preprocess([img, np.zeros_like(img)])))
    out_front = b.run(b.feeds(b.preprocess([img])))
    np.testing.assert_allclose(out_front["drivable.logits"][0], out_full["drivable.logits"][0], rtol=RTOL, atol=ATOL)
    # a model with camera and BEV heads: the BEV heads need every camera and are left out
    both = [*BEV[:-1], "model.tasks=[{name: drivable}, {name: det3d, options: {width: 16}}]"]
    train(load_experiment(REPO / "configs" / "bev.yaml", [f"data.root={env['data']}", *TRAIN, *both]), tmp_path / "both",
          progress=False)
    assert main(["export", str(tmp_path / "both"), "--out", str(tmp_path / "both.onnx"), "--data", str(env["data"]),
                 "--cameras", "CAM_BACK"]) == 0
    md = read_metadata(tmp_path / "both.onnx")
    assert list(md["heads"]) == ["drivable"] and md["bev"] is None and md["rig"]["names"] == ["CAM_BACK"]
    with pytest.raises(ValueError, match="no camera 'CAM_SIDE'"):
        export_checkpoint(env["root"] / "cam", tmp_path / "x.onnx", env["data"], verbose=False, cameras=["CAM_SIDE"])
    with pytest.raises(ValueError, match="no camera head"):
        export_checkpoint(env["root"] / "bev", tmp_path / "y.onnx", env["data"], verbose=False, cameras=["CAM_FRONT"])
    assert not (tmp_path / "x.onnx").exists() and not (tmp_path / "y.onnx").exists()
