"""deploy/: one ONNX graph per checkpoint with parity, the torch-free runtime, INT8, TensorRT checks.
Tiny: a 2-step checkpoint of configs/tiny.yaml on a 1-scene 160x96 sim (2 cameras); a BEV model
with the video module built directly at 64x96."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from hydranet.experiment import DataConfig, ExperimentConfig, load_experiment
from hydranet.checkpoint import load_checkpoint, model_from_checkpoint
from hydranet.train import train
from deploy.export import ExportError, export_checkpoint, export_model
from deploy.metadata import read_metadata, set_metadata
from deploy.runtime import DeployError, HydraRuntime, NonFiniteOutput
from deploy.trt_check import check_tensorrt
from deploy.tensorrt import tensorrt_available
from hydranet.tasks import BEV_TASKS, TASKS

REPO = Path(__file__).resolve().parents[1]
HAS_TRT, TRT_WHY = tensorrt_available()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    root = tmp_path_factory.mktemp("deploy")
    data = generate_dataset(root / "sim", SimConfig(image_width=160, image_height=96, frames_per_scene=3), scenes=1,
                            seed=0, progress=False)
    cfg = load_experiment(REPO / "configs" / "tiny.yaml",
                          [f"data.root={data}", "num_workers=0", "batch_size=1", "steps=2", "checkpoint_every=2",
                           "optim.warmup_steps=1", "device=cpu"])
    train(cfg, root / "run", progress=False)
    res = export_checkpoint(root / "run", root / "model.onnx", data, frames=2, verbose=False)
    return {"root": root, "data": data, "ckpt": root / "run", "onnx": root / "model.onnx", "export": res}


def _predict(ckpt: Path, images: np.ndarray) -> dict:
    c = load_checkpoint(ckpt)
    model = model_from_checkpoint(c).eval()
    with torch.no_grad():
        return model({"images": torch.from_numpy(images).permute(0, 3, 1, 2)[None].float() / 255}, "predict")


def _frame(data: Path, i: int = 0) -> np.ndarray:
    from hydranet.data import SimDataset

    return SimDataset(data, cameras=["CAM_FRONT", "CAM_BACK"], channels=("images",))[i]["images"]  # (N, H, W, 3)


def assert_results_equal(got: dict, ref: dict) -> None:
    """Runtime (numpy) results vs the torch predict path (tensors), head by head."""
    assert set(got) == set(ref)
    for head in ref:
        assert len(got[head]) == len(ref[head]), head
        for g, r in zip(got[head], ref[head]):
            assert set(g) == set(r), head
            if "scores" in r:
                assert_detections_match(g, r, head)
                continue
            for k in r:
                rv, gv = r[k].cpu().numpy(), np.asarray(g[k])
                if k == "labels":
                    np.testing.assert_array_equal(gv, rv, err_msg=f"{head}.{k}")
                elif rv.dtype == bool:
                    assert gv.shape == rv.shape and (gv != rv).mean() < 1e-3, f"{head}.{k}"
                elif k == "instances":
                    assert ((gv > 0) != (rv > 0)).mean() < 1e-3, f"{head}.{k}"
                else:
                    np.testing.assert_allclose(gv, rv, atol=1e-2, rtol=1e-3, err_msg=f"{head}.{k}")


def assert_detections_match(g: dict, r: dict, head: str) -> None:
    """Same detections up to the order of (nearly) tied scores: every reference detection has a
    runtime one of the same class, score within 1e-3 and box within 1e-2 px; at most one may
    differ, where a tie sits at the max-detections cut."""
    rs, rb, rl = (r[k].cpu().numpy() for k in ("scores", "boxes", "labels"))
    gs, gb, gl = (np.asarray(g[k]) for k in ("scores", "boxes", "labels"))
    assert abs(len(gs) - len(rs)) <= 1, head
    used = np.zeros(len(gs), bool)
    missed = 0
    for s_, b_, l_ in zip(rs, rb, rl):
        ok = (~used) & (gl == l_) & (np.abs(gs - s_) < 1e-3) & (np.abs(gb - b_).reshape(len(gb), -1).max(1) < 1e-2)
        if ok.any():
            used[np.flatnonzero(ok)[0]] = True
        else:
            missed += 1
    assert missed <= 1, f"{head}: {missed} of {len(rs)} detections differ"


# -- export ---------------------------------------------------------------------------------------
def test_export_is_one_checked_graph_with_every_head_and_metadata(run):
    m = onnx.load(str(run["onnx"]))
    onnx.checker.check_model(m, full_check=True)
    md = read_metadata(m)
    ckpt_heads = list(json.loads(json.dumps(md["head_names"])))
    outputs = [o.name for o in m.graph.output]
    assert [i.name for i in m.graph.input] == ["images"]
    assert m.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 2, 3, 96, 160]  # static
    assert "det2d.heatmap" in outputs and "det2d.box" in outputs and "depth.logits" in outputs
    for head in ckpt_heads:
        assert md["heads"][head]["outputs"] and all(o in outputs for o in md["heads"][head]["outputs"])
        assert md["heads"][head]["decoding"]["kind"]
    assert md["heads"]["det2d"]["decoding"]["params"]["stride"] == 4
    assert md["rig"]["names"] == ["CAM_FRONT", "CAM_BACK"] and np.asarray(md["rig"]["K"]).shape == (2, 3, 3)
    assert md["normalization"]["input_dtype"] == "uint8" and md["classes"]
    assert md["dynamic_batch"] is False
    rows = run["export"].parity
    assert {r["output"] for r in rows} == set(outputs) and all(r["ok"] and r["max_abs"] < 1e-3 for r in rows)
    assert run["export"].trt_report.ok, run["export"].trt_report.errors


def test_parity_failure_fails_the_export_and_leaves_no_file(run, tmp_path):
    from deploy.export import sim_frames
    from hydranet.checkpoint import config_from_checkpoint

    c = load_checkpoint(run["ckpt"])
    cfg = config_from_checkpoint(c)
    out = tmp_path / "bad.onnx"
    with pytest.raises(ExportError, match="differs from PyTorch"):
        export_model(model_from_checkpoint(c, cfg), cfg, json.loads(c["meta"]), out, sim_frames(cfg, run["data"], 1),
                     atol=-1.0, rtol=0.0, verbose=False)
    assert list(tmp_path.iterdir()) == []


def test_dynamic_batch_runs_two_frames_at_once(run, tmp_path):
    res = export_checkpoint(run["ckpt"], tmp_path / "dyn.onnx", run["data"], frames=1, dynamic_batch=True, verbose=False)
    assert all(r["ok"] for r in res.parity) and res.trt_report.ok
    rt = HydraRuntime(tmp_path / "dyn.onnx")
    f0, f1 = _frame(run["data"], 0), _frame(run["data"], 1)
    out = rt(np.stack([f0, f1]))  # (B=2, N, H, W, 3)
    assert len(out["det2d"]) == 4 and len(out["depth"]) == 4
    raw = rt.run(rt.feeds(rt.preprocess(np.stack([f0, f1]))))
    raw["lanes.logits"][3, 0, 2, 2] = np.nan  # row b*N + n = 3: camera 1 of frame 1
    with pytest.raises(NonFiniteOutput, match=r"output lanes\.logits is non-finite \(NaN at camera CAM_BACK of batch frame 1\)"):
        rt.decode(raw)


# -- runtime --------------------------------------------------------------------------------------
def test_runtime_imports_no_torch():
    code = ("import sys, deploy.runtime, hydranet.decoding; bad = [m for m in sys.modules if m == 'torch' or "
            "m.startswith('torch.') or m == 'torchvision']; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_runtime_decoding_equals_the_predict_path(run):
    rt = HydraRuntime(run["onnx"])
    for i in range(2):
        images = _frame(run["data"], i)
        assert_results_equal(rt(list(images)), _predict(run["ckpt"], images))
    assert set(rt.timings) == {"preprocess", "inference", "postprocess"}


def test_runtime_resizes_native_camera_size_and_accepts_a_dict(run):
    rt = HydraRuntime(run["onnx"])
    images = _frame(run["data"])
    by_name = dict(zip(rt.camera_names, images))
    assert rt.preprocess(by_name).shape == (1, 2, 3, 96, 160)


def test_runtime_bad_input_says_what_it_expected(run, tmp_path):
    rt = HydraRuntime(run["onnx"])
    img = _frame(run["data"])
    with pytest.raises(DeployError, match=r"got 1 camera image\(s\); the model expects 2 camera image\(s\) \(CAM_FRONT, CAM_BACK\)"):
        rt([img[0]])
    with pytest.raises(DeployError, match="camera CAM_BACK: image is 100x50; the model takes 160x96"):
        rt([img[0], np.zeros((50, 100, 3), np.uint8)])
    with pytest.raises(DeployError, match="camera CAM_FRONT: image is float32"):
        rt([img[0].astype(np.float32), img[1]])
    with pytest.raises(DeployError, match="keyed"):
        rt({"CAM_FRONT": img[0]})
    # a model without the metadata
    m = onnx.load(str(run["onnx"]))
    del m.metadata_props[:]
    onnx.save(m, str(tmp_path / "bare.onnx"))
    with pytest.raises(DeployError, match="no HydraNet metadata .*hydranet export"):
        HydraRuntime(tmp_path / "bare.onnx")
    # a truncated file, a missing file
    blob = run["onnx"].read_bytes()
    (tmp_path / "cut.onnx").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DeployError, match="not a readable ONNX model"):
        HydraRuntime(tmp_path / "cut.onnx")
    with pytest.raises(DeployError, match="does not exist"):
        HydraRuntime(tmp_path / "none.onnx")


def test_non_finite_outputs_are_never_decoded_and_name_the_camera(run):
    """A NaN or Inf in any output (head, embedding) is a DeployError naming the output and the camera of
    its row, raised by `run` (and by `decode` for outputs that did not come from `run`), never results."""
    rt = HydraRuntime(run["onnx"])
    feeds = rt.feeds(rt.preprocess(list(_frame(run["data"]))))
    raw = rt.run(feeds)
    for name, row, value, camera in [("depth.logits", 1, np.inf, "CAM_BACK"), ("det2d.box", 0, np.nan, "CAM_FRONT"),
                                     ("embedding", 1, -np.inf, "CAM_BACK")]:
        bad = {k: v.copy() for k, v in raw.items()}
        bad[name][row].flat[7] = value
        what = "NaN" if np.isnan(value) else "Inf"
        with pytest.raises(NonFiniteOutput, match=rf"model\.onnx: output {name} is non-finite \({what} at camera {camera}\)"
                                                  ".*export it again") as e:
            rt.check_finite(bad)
        assert (e.value.output, e.value.camera, e.value.item) == (name, camera, 0)
        if name != "embedding":  # a head's output: decode refuses it too
            with pytest.raises(NonFiniteOutput, match=name):
                rt.decode(bad)
    rt.check_finite(raw)  # the control: the model's own outputs are finite
    assert set(rt.decode(raw, checked=True)) == set(rt.heads)


def test_a_model_whose_metadata_does_not_fit_its_graph_is_refused_at_load(run, tmp_path):
    """No heads, a head without outputs, another image size or camera count than the graph's input: one
    DeployError at load naming the file and `re-export`, not a raw onnxruntime error at the first frame."""
    def edited(name, edit):
        m = onnx.load(str(run["onnx"]))
        md = read_metadata(m)
        edit(md)
        set_metadata(m, {"hydranet." + k: json.dumps(v) for k, v in md.items()})
        onnx.save(m, str(tmp_path / name))
        return tmp_path / name

    def one_camera(md):
        for key in ("names", "K", "cam2ego", "source_sizes"):
            md["rig"][key] = md["rig"][key][:1]

    cases = [("noheads.onnx", lambda md: md.update(heads={}), "lists no heads"),
             ("nooutputs.onnx", lambda md: md["heads"]["det2d"].update(outputs=[]), "head 'det2d' lists no outputs"),
             ("size.onnx", lambda md: md["rig"].update(image_size=[64, 160]), r"2 camera\(s\) at 160x64 .*\[1, 2, 3, 96, 160\]"),
             ("cams.onnx", one_camera, r"1 camera\(s\) at 160x96 .*\[1, 2, 3, 96, 160\]"),
             ("badsize.onnx", lambda md: md["rig"].update(image_size=[96]), "image_size")]
    for name, edit, words in cases:
        with pytest.raises(DeployError, match=rf"{name}: .*{words}.*re-export"):
            HydraRuntime(edited(name, edit))


def test_numpy_nms_equals_torchvision():
    from torchvision.ops import batched_nms

    from hydranet.decoding import batched_nms as np_batched_nms

    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 80, (200, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(4, 30, (200, 2))], 1).astype(np.float32)
    scores = rng.uniform(0, 1, 200).astype(np.float32)
    classes = rng.integers(0, 4, 200)
    ref = batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores), torch.from_numpy(classes), 0.5).numpy()
    np.testing.assert_array_equal(np_batched_nms(boxes, scores, classes, 0.5), ref)


# -- BEV fusion with the video module: state as explicit inputs/outputs ---------------------------------
def test_bev_video_model_exports_with_explicit_state_and_runtime_carries_it(tmp_path):
    from fake_samples import BEV_META as META, TINY_BEV as TINY, TINY_BEV_CONFIG as BEV, bev_sample as _sample
    from hydranet.models.config import TaskConfig
    from hydranet.models import build_model
    from hydranet.rig import load_rig

    torch.manual_seed(0)
    rig = load_rig("nuscenes6")
    # det3d with both per-cell priors, filled (they are 0 until fitted): the graph carries them
    det3d = TaskConfig("det3d", options={"width": 16, "cell_prior": True, "heading_prior": True})
    mcfg = dataclasses.replace(TINY, bev=dataclasses.replace(BEV, video_frames=2), tasks=(det3d, *TINY.tasks[1:]))
    meta = {**META, "rig": rig.resized(96, 64).to_dict()}
    model = build_model(mcfg, meta).eval()
    for prior in (model.heads["det3d"].head.cell_prior, model.heads["det3d"].head.heading_prior):
        prior.copy_(torch.randn_like(prior))
    cfg = ExperimentConfig(data=DataConfig(image_size=(64, 96)), model=mcfg)
    samples = [_sample(rig.resized(96, 64), seed=s) for s in range(2)]
    frames = [{"images": np.ascontiguousarray(s["images"].transpose(0, 3, 1, 2)), "ego2world": s["ego2world"],
               "scene": "s0"} for s in samples]
    res = export_model(model, cfg, meta, tmp_path / "bev.onnx", frames, verbose=False)
    assert all(r["ok"] for r in res.parity)
    m = onnx.load(str(tmp_path / "bev.onnx"))
    assert [i.name for i in m.graph.input] == ["images", "prev_bev", "ego_motion"]
    outs = [o.name for o in m.graph.output]
    assert {"det3d.heatmap", "det3d.vel", "bevmap.logits", "bev_state.bev_queue"} <= set(outs)
    rt = HydraRuntime(tmp_path / "bev.onnx")
    assert rt.state_spec == {"input": "prev_bev", "output": "bev_state.bev_queue", "motion": "ego_motion"}
    with torch.no_grad():
        from hydranet.stream import relative_motion

        x0, x1 = (torch.from_numpy(f["images"])[None].float() / 255 for f in frames)
        ref0 = model({"images": x0}, "predict")
        motion = torch.from_numpy(relative_motion(samples[0]["ego2world"][None], samples[1]["ego2world"][None]))
        ref1 = model({"images": x1, "prev_bev": ref0["bev_state"]["bev_queue"], "ego_motion": motion}, "predict")
    got0 = rt(list(samples[0]["images"]), ego2world=samples[0]["ego2world"])
    with pytest.raises(DeployError, match="video module"):
        rt(list(samples[1]["images"]))
    got1 = rt(list(samples[1]["images"]), ego2world=samples[1]["ego2world"])
    for got, ref in ((got0, ref0), (got1, ref1)):
        assert_results_equal(got, {k: v for k, v in ref.items() if k != "bev_state"})


def test_every_registered_head_is_exported(run, tmp_path):
    """The tiny checkpoint covers every camera head, the BEV test above every BEV head."""
    assert set(read_metadata(run["onnx"])["head_names"]) == set(TASKS)
    assert set(BEV_TASKS) == {"det3d", "bevmap"}


def test_bench_with_a_given_int8_model_reports_its_quantization(run, tmp_path):
    """The demo's path: run_bench with the int8 model it quantized (read its metadata, time every backend)."""
    from deploy.bench import run_bench
    from deploy.quantize import QuantizeConfig, quantize_model

    int8 = tmp_path / "model.int8.onnx"
    quantize_model(run["onnx"], run["data"], int8, QuantizeConfig(calibration_frames=2), verbose=False)
    res = run_bench(run["ckpt"], tmp_path / "bench", run["data"], runs=2, warmup=1, int8_model=int8)
    assert {"torch eager fp32", "ORT fp32", "ORT int8"} <= set(res["backends"])
    assert res["quantization"]["per_channel"] and (tmp_path / "bench" / "latency.md").is_file()


# -- INT8 -----------------------------------------------------------------------------------------
def test_int8_quantization_and_evaluation_on_the_same_metrics(run, tmp_path):
    from deploy.onnx_eval import evaluate_any, primary_drop
    from deploy.quantize import QuantizeConfig, quantize_model

    out = tmp_path / "model.int8.onnx"
    rec = quantize_model(run["onnx"], run["data"], out, QuantizeConfig(calibration_frames=3, keep_float=("*/depth/*",)),
                         verbose=False)
    q = onnx.load(str(out))
    ops = {n.op_type for n in q.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    md = read_metadata(q)
    assert md["quantization"]["per_channel"] and any("/depth/" in n for n in md["quantization"]["kept_float_nodes"])
    assert rec["kept_float_nodes"] == md["quantization"]["kept_float_nodes"]
    assert check_tensorrt(q).ok  # Q/DQ are TensorRT ops (explicit quantization)
    ref = evaluate_any(run["ckpt"], run["data"], progress=False)
    got = evaluate_any(out, run["data"], progress=False)
    assert set(got["model"]) == set(ref["model"]) and got["frames"] == ref["frames"]
    for head in ref["model"]:
        assert set(got["model"][head]) == set(ref["model"][head])
    rows = primary_drop(ref, got)
    assert {r["head"] for r in rows} == set(TASKS)


def test_cli_eval_accepts_an_onnx_model(run, tmp_path):
    from hydranet.cli import main

    out = tmp_path / "m.json"
    assert main(["eval", "--checkpoint", str(run["onnx"]), "--data", str(run["data"]), "--out", str(out), "--quiet"]) == 0
    assert set(json.loads(out.read_text())["model"]) == set(TASKS)


# -- TensorRT -------------------------------------------------------------------------------------
def _graph(op: str, domain: str = "", in_type=TensorProto.FLOAT, dims=(1, 3, 8, 8)) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", in_type, list(dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(op, ["x"], ["y"], domain=domain)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=opsets)


@pytest.mark.parametrize("op, ok", [("ScatterElements", True), ("ScatterND", False)])
def test_trt_check_flags_reducing_scatters(op, ok):
    """A reducing ScatterElements (the LSS splat) needs TensorRT's bundled plugin: a warning; a
    reducing ScatterND would lose its reduction in TensorRT's parser: an error."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    idx = helper.make_tensor("idx", TensorProto.INT64, [2, 1] if op == "ScatterND" else [2], [1, 1])
    upd = helper.make_tensor("upd", TensorProto.FLOAT, [2], [1.0, 2.0])
    node = helper.make_node(op, ["x", "idx", "upd"], ["y"], reduction="add")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [idx, upd]), opset_imports=[helper.make_opsetid("", 17)])
    rep = check_tensorrt(model)
    assert rep.ok == ok
    assert any("scatterElements plugin" in w for w in rep.warnings) == ok
    assert any("#957" in e for e in rep.errors) != ok
    assert not any("scatter" in w for w in check_tensorrt(_graph("Relu")).warnings)


def test_trt_check_catches_unsupported_ops_dynamic_shapes_and_int64():
    assert check_tensorrt(_graph("Relu")).ok
    rep = check_tensorrt(_graph("Det", dims=(3, 3)))
    assert not rep.ok and "operator Det is not supported" in rep.errors[0]
    rep = check_tensorrt(_graph("Gelu2", domain="com.microsoft"))
    assert any("custom-domain" in e for e in rep.errors)
    assert not check_tensorrt(_graph("Relu", dims=("batch", 3, "height", 8))).ok  # only batch gets a profile
    assert check_tensorrt(_graph("Relu", dims=("batch", 3, 8, 8))).ok
    rep = check_tensorrt(_graph("Relu", in_type=TensorProto.INT64))
    assert any("int64" in e for e in rep.errors)


@pytest.mark.skipif(HAS_TRT, reason="TensorRT is installed: the engine is built instead of the trtexec script")
def test_export_tensorrt_without_tensorrt_writes_trtexec_commands(run, tmp_path, capsys):
    from hydranet.cli import main

    engine = tmp_path / "trt" / "model.engine"
    assert main(["export", "--checkpoint", str(run["ckpt"]), "--out", str(engine), "--data", str(run["data"]),
                 "--format", "tensorrt"]) == 0
    msg = capsys.readouterr().out
    assert "TensorRT is not installed here" in msg
    script = (tmp_path / "trt" / "model.trtexec.sh").read_text()
    assert "trtexec --onnx=model.onnx --saveEngine=model.fp16.engine --fp16" in script and "--timingCacheFile" in script
    assert (tmp_path / "trt" / "model.onnx").is_file()


@pytest.mark.skipif(not HAS_TRT, reason=f"TensorRT is not installed here ({TRT_WHY}); runs on a Jetson / GPU machine")
def test_tensorrt_engine_builds_and_matches_onnx_runtime(run, tmp_path):
    from deploy.tensorrt import TrtRunner, build_engine

    engine = build_engine(run["onnx"], tmp_path / "model.fp16.engine", fp16=True)
    rt = HydraRuntime(run["onnx"])
    feeds = rt.feeds(rt.preprocess(list(_frame(run["data"]))))
    ref, got = rt.run(feeds), TrtRunner(engine)(feeds)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], atol=5e-2, rtol=5e-2)


@pytest.mark.skipif(not HAS_TRT, reason=f"TensorRT is not installed here ({TRT_WHY}); runs on a Jetson / GPU machine")
def test_tensorrt_int8_engine_from_qdq_model(run, tmp_path):
    from deploy.quantize import QuantizeConfig, quantize_model
    from deploy.tensorrt import TrtRunner, build_engine

    q = tmp_path / "model.int8.trt.onnx"
    quantize_model(run["onnx"], run["data"], q, QuantizeConfig(target="tensorrt", calibration_frames=3), verbose=False)
    engine = build_engine(q, tmp_path / "model.int8.engine", fp16=True, int8=True)
    rt = HydraRuntime(run["onnx"])
    out = TrtRunner(engine)(rt.feeds(rt.preprocess(list(_frame(run["data"])))))
    assert set(out) == set(rt.output_names)


def test_cli_export_bad_checkpoint_is_one_line(tmp_path, capsys):
    from hydranet.cli import main

    assert main(["export", "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: checkpoint") and "\n" not in err
    assert not (tmp_path / "m.onnx").exists()


def test_metadata_roundtrip_helpers(run, tmp_path):
    m = onnx.load(str(run["onnx"]))
    set_metadata(m, {"hydranet.extra": json.dumps({"a": 1})})
    assert read_metadata(m)["extra"] == {"a": 1} and "heads" in read_metadata(m)
