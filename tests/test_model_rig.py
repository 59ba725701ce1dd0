"""The typed rigs: `deploy.metadata.ModelRig` (an exported model's `hydranet.rig`, read once by the runtime and
used by the fleet, the signals and the engine's readers) and `hydranet.rig.camera_sizes` (a dataset's or fleet's
camera names and sizes). Tiny: a det2d model on two tesla8 cameras (a pinhole and a fisheye) at 64x96, exported
without training."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from deploy.metadata import MetadataError, ModelRig, read_metadata, set_metadata
from deploy.runtime import DeployError, HydraRuntime
from fake_samples import FAKE_META
from hydranet.rig import RigError, camera_sizes, load_rig

CAMS = ["CAM_MAIN_FORWARD", "CAM_WIDE_FORWARD"]  # a pinhole, a fisheye


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from deploy.export import export_model
    from hydranet.experiment import DataConfig, ExperimentConfig
    from hydranet.models import ModelConfig, TaskConfig, build_model

    root = tmp_path_factory.mktemp("model_rig")
    source = load_rig("tesla8").select(CAMS)
    rig = source.resized(96, 64)
    meta = {**FAKE_META, "rig": rig.to_dict(), "source_rig": source.to_dict()}
    torch.manual_seed(0)
    mcfg = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1, tasks=(TaskConfig("det2d"),))
    model = build_model(mcfg, meta).eval()
    images = np.random.default_rng(0).integers(0, 255, (len(CAMS), 3, 64, 96), dtype=np.uint8)
    cfg = ExperimentConfig(data=DataConfig(image_size=(64, 96)), model=mcfg)
    export_model(model, cfg, meta, root / "m.onnx", [{"images": images, "scene": "s"}], simplify=False, verbose=False)
    return {"root": root, "onnx": root / "m.onnx", "rig": rig, "source": source}


def test_model_rig_round_trips_through_an_exported_models_metadata(exported):
    rig, source = exported["rig"], exported["source"]
    got = ModelRig.from_metadata(read_metadata(exported["onnx"]), str(exported["onnx"]))
    assert got.name == "tesla8" and got.names == tuple(CAMS) and got.image_size == (64, 96)
    assert got.source_sizes == tuple((c.height, c.width) for c in source.cameras) == ((192, 320), (192, 320))
    K, T, _ = rig.calibration()
    np.testing.assert_allclose(got.K, K, atol=1e-6)
    np.testing.assert_allclose(got.cam2ego, T, atol=1e-9)
    assert got.lenses[0] is None and got.lenses[1].model == "fisheye"
    np.testing.assert_allclose(got.lenses[1].coeffs, rig.cameras[1].distortion.coeffs, atol=1e-6)
    for c, want in zip(got.cameras, rig.cameras):  # the project's Camera, at the model's input size
        assert (c.name, c.width, c.height) == (want.name, want.width, want.height)
        np.testing.assert_allclose(c.K, want.K, atol=1e-6)
        np.testing.assert_allclose(c.project_ego(np.array([[20.0, 1.0, 0.5]]))[0], want.project_ego(np.array([[20.0, 1.0, 0.5]]))[0],
                                   atol=1e-3)
    rt = HydraRuntime(exported["onnx"])  # the runtime reads it once, and its attributes come from it
    assert rt.camera_names == list(got.names) and rt.image_size == got.image_size
    assert rt.source_sizes == list(got.source_sizes) and rt.rig.names == got.names


def _edited(src, dst, edit):
    m = onnx.load(str(src))
    md = read_metadata(m)
    edit(md["rig"])
    set_metadata(m, {"hydranet." + k: json.dumps(v) for k, v in md.items()})
    onnx.save(m, str(dst))
    return dst


@pytest.mark.parametrize("name,edit,words", [
    ("nok.onnx", lambda r: r.pop("K"), "rig K has shape"),
    ("badk.onnx", lambda r: r.update(K=[[[1, 0, 0]]]), "rig K has shape"),
    ("noT.onnx", lambda r: r.update(cam2ego="x"), "rig cam2ego has shape"),
    ("names.onnx", lambda r: r.update(names="CAM_MAIN_FORWARD"), "rig names 'CAM_MAIN_FORWARD' is not a list"),
    ("sources.onnx", lambda r: r.update(source_sizes=[[192, 320]]), "rig source_sizes .* per camera"),
    ("lens.onnx", lambda r: r.update(distortion=[[9, 0, 0, 0, 0, 0]] * 2), "rig distortion is not a lens row"),
    ("size.onnx", lambda r: r.update(image_size=[64]), "rig image_size"),
])
def test_a_malformed_metadata_rig_is_one_line_naming_the_model_file(exported, tmp_path, name, edit, words):
    path = _edited(exported["onnx"], tmp_path / name, edit)
    with pytest.raises(MetadataError, match=rf"^{tmp_path / name}: metadata {words}.*re-export") as e:
        ModelRig.from_metadata(read_metadata(path), str(path))
    assert "\n" not in str(e.value)
    with pytest.raises(DeployError, match=rf"^{tmp_path / name}: metadata {words}") as e:  # refused at load
        HydraRuntime(path)
    assert "\n" not in str(e.value)


def test_camera_sizes_reads_a_calibrated_and_an_uncalibrated_rig():
    rig = load_rig("tesla8").select(CAMS).resized(96, 64)
    assert camera_sizes(rig.to_dict()) == {n: (96, 64) for n in CAMS}  # {name: (width, height)} in rig order
    assert list(camera_sizes({"name": "bdd", "cameras": [{"name": "B", "width": 1280, "height": 720},
                                                         {"name": "A", "width": 640, "height": 480}]}).items()) \
        == [("B", (1280, 720)), ("A", (640, 480))]  # BDD100K: names and sizes only
    for bad, words in [({"cameras": []}, "non-empty 'cameras'"), ({"cameras": [{"name": "A"}]}, "needs 'name', 'width'"),
                       ({"cameras": [{"name": "A", "width": 0, "height": 2}]}, "key 'width'"),
                       ({"cameras": [{"name": "A", "width": 2, "height": 2}] * 2}, "unique")]:
        with pytest.raises(RigError, match=rf"^fleet F rig.*{words}"):
            camera_sizes(bad, "fleet F rig")


def test_the_catalog_records_the_model_rig_and_a_fleet_its_camera_sizes_through_the_typed_readers(exported, tmp_path):
    """catalog.add_model reads the camera names through ModelRig (a malformed rig: one MetadataError line naming the
    file and the key, nothing registered) and run_model gives them back; Fleet reads its cameras through camera_sizes
    (a missing or malformed rig: one FleetError line naming dataset.json and the key)."""
    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet, FleetError

    root = tmp_path / "fleet"
    root.mkdir()
    rig = {"name": "bdd", "cameras": [{"name": "CAM_WIDE_FORWARD", "width": 320, "height": 192},
                                      {"name": "CAM_MAIN_FORWARD", "width": 640, "height": 384}]}
    (root / "dataset.json").write_text(json.dumps({"format": "hydranet-sim", "scenes": [], "rig": rig}))
    fleet = Fleet(root)
    assert fleet.rig_name == "bdd"
    assert list(fleet.cameras.items()) == [("CAM_WIDE_FORWARD", (192, 320)), ("CAM_MAIN_FORWARD", (384, 640))]  # (H, W)
    path = exported["onnx"]
    with Catalog(tmp_path / "c.db", create=True) as cat:
        run = cat.add_run(cat.add_model(path, read_metadata(path)), None, cat.add_fleet(fleet)[0])
        assert cat.run_model(run) == (str(path), CAMS)
        for edit, words in [(lambda md: md["rig"].pop("names"), "rig names None is not a list"),
                            (lambda md: md.pop("rig"), "rig is NoneType, not a mapping")]:
            md = read_metadata(path)
            edit(md)
            with pytest.raises(MetadataError, match=rf"^{path}: metadata {words}") as e:
                cat.add_model(path, md)
            assert "\n" not in str(e.value)
        assert cat.db.execute("SELECT COUNT(*) FROM models").fetchone()[0] == 1
    for bad, words in [(None, "expected a mapping with a non-empty 'cameras' list"),
                       ({"name": "x", "cameras": [{"name": "A", "height": 2}]}, r"cameras\[0\]: a camera needs 'name'")]:
        (root / "dataset.json").write_text(json.dumps({"format": "hydranet-sim", "scenes": [], "rig": bad}))
        with pytest.raises(FleetError, match=rf"^{root / 'dataset.json'} rig.*{words}.*regenerate the fleet$") as e:
            Fleet(root)
        assert "\n" not in str(e.value)
