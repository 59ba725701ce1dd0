"""Fault rows of the torch-free runtime and what runs it (`hydranet eval` of an ONNX model, `hydranet engine
shadow`): a model whose outputs hold NaN or Inf (a NaN or Inf weight set in the ONNX file after its export
parity check) is an error naming the output, never 0 boxes, an empty or full mask, or signals of 0 marked
ok; a model whose metadata lists no heads, or whose image size is not its graph's, is refused at load. One
row per case through the real CLI, then the same guarantees below it (runtime, decoders, signals).

The rows share one untrained tiny model (CAM_FRONT at 64x64, every camera head) exported from the fault
dataset, and copies of it edited with the onnx package (module fixture `rt_env`, a few seconds)."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from faultlib import Case, Env, no_temp_left, params, run_case, with_metadata

REPO = Path(__file__).resolve().parents[2]
ENV: dict = {}
BAD_WEIGHT = "model.heads.det2d.head.heatmap.2.bias"  # the last conv of det2d's heatmap: output det2d.heatmap


def with_initializer(src: Path, dst: Path, name: str, value: float) -> Path:
    """A copy of the ONNX model `src` whose initializer `name` is all `value` (NaN, Inf)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src))
    init = next(i for i in m.graph.initializer if i.name == name)
    init.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(init), value), name))
    onnx.save(m, str(dst))
    return dst


@pytest.fixture(scope="module")
def rt_env(fault_env: Env, tmp_path_factory) -> dict:
    from deploy.export import export_model, sim_frames
    from hydranet.experiment import load_experiment
    from hydranet.models import build_model

    root = tmp_path_factory.mktemp("runtime_faults")
    cfg = load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={fault_env.dataset}", "data.cameras=[CAM_FRONT]",
                                                          "data.image_size=[64,64]", "device=cpu"])
    meta = json.loads((fault_env.dataset / "dataset.json").read_text())
    good = root / "model.onnx"
    export_model(build_model(cfg.model, meta), cfg, meta, good, sim_frames(cfg, fault_env.dataset, 1), verbose=False)
    return {
        "model": good,
        "nan": with_initializer(good, root / "nan.onnx", BAD_WEIGHT, float("nan")),
        "inf": with_initializer(good, root / "inf.onnx", BAD_WEIGHT, float("inf")),
        "noheads": with_metadata(good, root / "noheads.onnx", lambda md: md.update(heads={})),
        "size": with_metadata(good, root / "size.onnx", lambda md: md["rig"].update(image_size=[48, 64])),
    }


@pytest.fixture(autouse=True)
def _rt(rt_env):
    ENV.update(rt_env)


def shadow(tmp: Path, env: Env, model: str = "model", *extra) -> list:
    return ["engine", "shadow", "--onnx", ENV[model], "--data", env.dataset, "--catalog", tmp / "c.db", "--quiet", *extra]


def eval_onnx(model: str):
    return lambda tmp, env: ["eval", "--checkpoint", ENV[model], "--data", env.dataset, "--out", tmp / "m.json", "--quiet"]


def shadow_twice(tmp: Path, env: Env) -> list:
    """The NaN model's run already in the catalog (its clip done): the rerun must say it again."""
    from data_engine.shadow import BadClipsError, run_shadow

    with pytest.raises(BadClipsError):
        run_shadow(ENV["nan"], env.dataset, tmp / "c.db", workers=1, progress=False)
    return shadow(tmp, env, "nan")


def clip_marked_bad(tmp: Path) -> None:
    """check: every frame of the fleet is in the catalog with status 'bad', the error naming the output, no
    signal (NULL, never 0.0), no predictions and no embedding; the clip is done and counts them."""
    from data_engine.signals import SIGNALS

    db = sqlite3.connect(str(tmp / "c.db"))
    try:
        rows = db.execute(f"SELECT status, error, {', '.join(SIGNALS)}, predictions FROM signals").fetchall()
        assert len(rows) == 2, rows
        for status, error, *values, predictions in rows:
            assert status == "bad" and "det2d.heatmap" in error and "non-finite" in error, (status, error)
            assert all(v is None for v in values) and predictions == "{}", "signals stored for a NaN model"
        assert db.execute("SELECT count(*) FROM embeddings").fetchone() == (0,)
        assert db.execute("SELECT frames, corrupt FROM shadow_clips").fetchall() == [(2, 2)]
    finally:
        db.close()


def no_quantized_model(tmp: Path) -> None:
    assert not (tmp / "q.onnx").exists(), "a NaN model was quantized"
    no_temp_left(tmp)


def nothing_written(tmp: Path) -> None:
    assert not (tmp / "m.json").exists(), "metrics written for a refused model"


CASES = [
    # non-finite outputs: an error naming the output (before: shadow stored signals of 0.0 marked ok, exit 0)
    Case("shadow-nan-model", lambda t, e: shadow(t, e, "nan"), 2,
         ("1 of 1 clip(s) bad", "output det2d.heatmap non-finite (nan)", "camera cam_front", "--onnx", "nan.onnx",
          "export it again"), check=clip_marked_bad),
    Case("shadow-nan-model-rerun", shadow_twice, 2, ("1 of 1 clip(s) bad", "det2d.heatmap"), check=clip_marked_bad),
    Case("shadow-inf-model", lambda t, e: shadow(t, e, "inf"), 2, ("clip(s) bad", "det2d.heatmap non-finite (inf)")),
    Case("shadow-nan-candidate", lambda t, e: shadow(t, e, "model", "--candidate-onnx", ENV["nan"]), 2,
         ("1 of 1 clip(s) bad", "det2d.heatmap", "--candidate", "nan.onnx")),
    Case("shadow-control", lambda t, e: shadow(t, e), 0, stdout=("2 frames, 0 corrupt",)),
    # (before: eval of the NaN model scored no boxes and wrote its metrics, exit 0)
    Case("eval-onnx-nan-model", eval_onnx("nan"), 2, ("nan.onnx", "output det2d.heatmap is non-finite", "camera CAM_FRONT",
                                                      "export it again"), check=nothing_written),
    Case("eval-onnx-inf-model", eval_onnx("inf"), 2, ("inf.onnx", "det2d.heatmap", "non-finite (inf"),
         check=nothing_written),
    # a model the runtime cannot use is refused at load (before: no heads -> exit 0 with nothing scored;
    # a wrong image size -> a raw onnxruntime error at the first frame)
    Case("eval-onnx-no-heads", eval_onnx("noheads"), 2, ("noheads.onnx", "lists no heads", "re-export"),
         check=nothing_written),
    Case("eval-onnx-image-size-not-the-graphs", eval_onnx("size"), 2,
         ("size.onnx", "64x48", "[1, 1, 3, 64, 64]", "re-export"), check=nothing_written),
    Case("shadow-no-heads", lambda t, e: shadow(t, e, "noheads"), 2, ("noheads.onnx", "lists no heads", "re-export")),
    Case("shadow-image-size-not-the-graphs", lambda t, e: shadow(t, e, "size"), 2, ("size.onnx", "64x48", "re-export")),
    Case("eval-onnx-control", eval_onnx("model"), 0),
    # (before: onnxruntime's quantizer stopped with a raw "AssertionError: scale issue")
    Case("quantize-nan-model", lambda t, e: ["quantize", "--onnx", ENV["nan"], "--data", e.dataset, "--out",
                                             t / "q.onnx"], 2,
         ("nan.onnx", "det2d.heatmap", "non-finite"), check=no_quantized_model),
]


@pytest.mark.parametrize("case", params(CASES))
def test_runtime_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


# -- below the CLI ---------------------------------------------------------------------------------
def _image(fault_env: Env) -> list[np.ndarray]:
    from hydranet.data import SimDataset

    return list(SimDataset(fault_env.dataset, cameras=["CAM_FRONT"], channels=("images",))[0]["images"])


@pytest.mark.parametrize("model, value", [("nan", "NaN"), ("inf", "Inf")])
def test_runtime_never_decodes_non_finite_outputs(model, value, fault_env):
    """The runtime raised nothing: a NaN det2d heatmap decoded to 0 boxes. Now `rt(...)`, `rt.run` and
    `rt.decode` of outputs that did not come from `run` all raise naming the output and the camera."""
    from deploy.runtime import DeployError, HydraRuntime, NonFiniteOutput

    rt = HydraRuntime(ENV[model])
    with pytest.raises(NonFiniteOutput, match=rf"output det2d\.heatmap is non-finite \({value} at camera CAM_FRONT\)") as e:
        rt(_image(fault_env))
    assert (e.value.output, e.value.value, e.value.camera, e.value.item) == ("det2d.heatmap", value, "CAM_FRONT", 0)
    assert isinstance(e.value, DeployError)
    raw = dict(zip(rt.output_names, rt.session.run(None, rt.feeds(rt.preprocess(_image(fault_env))))))  # unchecked
    with pytest.raises(NonFiniteOutput, match="det2d.heatmap"):
        rt.decode(raw)
    good = HydraRuntime(ENV["model"])
    assert set(good(_image(fault_env))) == set(good.heads)  # the control


def test_decoders_refuse_non_finite_outputs():
    """`hydranet.decoding.decode` (the torch tasks' decode too): a NaN mask logit gave a mask and a NaN
    heatmap no boxes, results that look valid; now each is a NonFiniteError naming the output."""
    from hydranet.decoding import NonFiniteError, decode

    logits = np.zeros((2, 1, 8, 8), np.float32)
    logits[1, 0, 3, 3] = np.nan
    with pytest.raises(NonFiniteError, match=r"output 'logits' of a 'binary_mask' head holds NaN \(item 1\)"):
        decode("binary_mask", {"logits": logits}, {"threshold": 0.5})
    heat, box = np.zeros((1, 3, 8, 8), np.float32), np.zeros((1, 4, 8, 8), np.float32)
    box[0, 2, 0, 0] = np.inf
    with pytest.raises(NonFiniteError, match="output 'box' .* holds Inf"):
        decode("centernet", {"heatmap": heat, "box": box},
               {"stride": 4, "score_threshold": 0.1, "nms_iou": 0.5, "max_detections": 10})
    assert decode("binary_mask", {"logits": np.zeros((1, 1, 4, 4), np.float32)}, {"threshold": 0.5})[0]["mask"].shape == (4, 4)


def test_signals_refuse_non_finite_heatmaps():
    """`frame_signals` of a NaN heatmap read entropy 0.0, uncertain 0, margin 0.0 ("certain"); now an error."""
    from data_engine.signals import ClipState, ModelInfo, frame_signals
    from hydranet.decoding import NonFiniteError

    info = ModelInfo(["CAM_FRONT"], (32, 32), np.eye(3)[None], np.eye(4)[None], {"det2d": {}})
    with pytest.raises(NonFiniteError, match="output det2d.heatmap holds NaN"):
        frame_signals(info, {"det2d.heatmap": np.full((1, 3, 8, 8), np.nan, np.float32)}, {}, None, 0, ClipState())
    sig, _ = frame_signals(info, {"det2d.heatmap": np.full((1, 3, 8, 8), -5.0, np.float32)}, {}, None, 0, ClipState())
    assert sig["det2d_entropy"] == 0.0  # the control: no peak above 0.05 in a finite heatmap still reads 0


def two_clip_fleet(fault_env: Env, out: Path) -> Path:
    """The fault dataset with a second clip (a copy of the first, scene_0001)."""
    shutil.copytree(fault_env.dataset, out)
    meta = json.loads((out / "dataset.json").read_text())
    first = meta["scenes"][0]
    shutil.copytree(out / "scenes" / first["name"], out / "scenes" / "scene_0001")
    scene = json.loads((out / "scenes" / "scene_0001" / "scene.json").read_text())
    scene["name"] = "scene_0001"
    (out / "scenes" / "scene_0001" / "scene.json").write_text(json.dumps(scene))
    meta["scenes"] = [first, {**first, "name": "scene_0001"}]
    (out / "dataset.json").write_text(json.dumps(meta))
    return out


def test_a_nan_mid_clip_makes_only_that_clip_bad(fault_env, tmp_path, monkeypatch):
    """Outputs that turn NaN at the 2nd frame of one clip (an overflow on that input): that clip's frames
    are all 'bad' (the video state carried them on), the other clip keeps its signals; the run ends with
    BadClipsError after writing every clip, naming the frame, and its stats count the bad clip."""
    import onnxruntime as ort

    from data_engine.catalog import Catalog
    from data_engine.shadow import BadClipsError, run_shadow

    fleet = two_clip_fleet(fault_env, tmp_path / "fleet")
    real, calls = ort.InferenceSession.run, []

    def poisoned(self, names, feeds, *args, **kwargs):  # the 4th frame shadowed (scene_0001's 2nd) overflows
        out = real(self, names, feeds, *args, **kwargs)
        calls.append(1)
        if len(calls) == 4:
            out[[o.name for o in self.get_outputs()].index("det2d.heatmap")][...] = np.nan
        return out

    monkeypatch.setattr(ort.InferenceSession, "run", poisoned)
    with pytest.raises(BadClipsError, match=r"1 of 2 clip\(s\) bad: output det2d\.heatmap non-finite \(NaN\) at frame 1, "
                                            r"camera CAM_FRONT .*\(clip scene_0001\)") as e:
        run_shadow(ENV["model"], fleet, tmp_path / "c.db", workers=1, progress=False)
    st = e.value.stats
    assert (st["frames"], st["corrupt"], st["bad_clips"]) == (4, 0, 1) and st["bad"][0][0] == "scene_0001"
    with Catalog(tmp_path / "c.db") as cat:
        run = cat.latest_run()
        ok = cat.table(run)
        assert list(ok["clip"]) == ["scene_0000", "scene_0000"] and np.isfinite(ok["det2d_entropy"]).all()
        everything = cat.table(run, status=None)
        assert sorted(zip(everything["clip"], everything["status"])) == [
            ("scene_0000", "ok"), ("scene_0000", "ok"), ("scene_0001", "bad"), ("scene_0001", "bad")]
        assert np.isnan(everything["det2d_entropy"][everything["status"] == "bad"]).all()
        assert cat.db.execute("SELECT count(*) FROM embeddings").fetchone() == (2,)
