"""Fault rows: training runs (with `--init` and `--overfit-batch`), checkpoints and exported models
(`hydranet train`, `eval`, `export`, `viz`, `bench`, `quantize`), and exact recovery after kill -9. One row
per case; see faultlib.py for the contract.

The rows share one tiny 2-step run of the fault dataset (1 camera at 32x64, data.on_bad_frame=skip), its
ONNX export, and a 1-step single-frame BEV run (session fixture `run_env`, about 20 s on 2 cores)."""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from faultlib import Case, Env, copy_dataset, edit_json, frame_dir, no_temp_left, params, run_case

from hydranet.cli import main


@dataclass
class RunEnv:
    dataset: Path  # the fault dataset: 1 scene, 2 frames, 64x48
    run: Path  # 2-step tiny run on it (checkpoint_every=1, data.on_bad_frame=skip)
    onnx: Path  # that run exported (parity on the dataset)
    bev_run: Path  # 1-step BEV run (det3d + bevmap, one camera, single frame)
    other_rig: Path  # the dataset with CAM_FRONT mounted 0.5 m further forward


def train_argv(ds, out, *sets: str, config: str = "tiny") -> list[str]:
    base = [f"data.root={ds}", "data.cameras=[CAM_FRONT]", "data.image_size=[32,64]", "steps=2", "checkpoint_every=1",
            "batch_size=1", "num_workers=0", "optim.warmup_steps=1", "device=cpu", "data.on_bad_frame=skip"]
    argv = ["train", "--config", config, "--out", str(out), "--quiet"]
    for s in base + list(sets):
        argv += ["--set", s]
    return argv


@pytest.fixture(scope="session")
def run_env(fault_env: Env, tmp_path_factory) -> RunEnv:
    from deploy.export import export_checkpoint

    root = tmp_path_factory.mktemp("runs")
    ds = fault_env.dataset
    assert main(train_argv(ds, root / "tiny")) == 0
    onnx = export_checkpoint(root / "tiny", root / "model.onnx", ds, frames=2, verbose=False).path
    assert main(train_argv(ds, root / "bev", "steps=1", "model.bev.video_frames=1", "data.on_bad_frame=raise",
                           config="bev")) == 0
    other = root / "other_rig"
    shutil.copytree(ds, other)

    def move_front(m):
        cam = next(c for c in m["rig"]["cameras"] if c["name"] == "CAM_FRONT")
        cam["cam2ego"][0][3] += 0.5
    edit_json(other / "dataset.json", move_front)
    return RunEnv(ds, root / "tiny", onnx, root / "bev", other)


def copy_run(tmp: Path, env: RunEnv, name: str = "run") -> Path:
    dst = tmp / name
    shutil.copytree(env.run, dst)
    return dst


def unchanged_checkpoint(name: str = "run"):
    """check: RUN/checkpoint.pt is byte for byte the session run's, and no temp file is left."""
    def check(tmp: Path) -> None:
        assert (tmp / name / "checkpoint.pt").read_bytes() == (tmp / "orig.pt").read_bytes(), "the old run was changed"
        no_temp_left(tmp)
    return check


def keep_original(tmp: Path, run: Path) -> None:
    shutil.copyfile(run / "checkpoint.pt", tmp / "orig.pt")


# -- checkpoints -----------------------------------------------------------------------------------
def nan_checkpoint(tmp: Path, env: RunEnv) -> tuple[Path, str]:
    from hydranet.checkpoint import load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(env.run)
    name = next(k for k, v in ckpt["model"].items() if v.is_floating_point() and v.numel() > 1)
    ckpt["model"][name].view(-1)[0] = float("nan")
    save_checkpoint(tmp / "bad" / "checkpoint.pt", ckpt)
    return tmp / "bad", name


def first_float_weight(env: RunEnv) -> str:
    from hydranet.checkpoint import load_checkpoint

    return next(k for k, v in load_checkpoint(env.run)["model"].items() if v.is_floating_point() and v.numel() > 1)


def eval_nan(tmp, env):
    bad, _ = nan_checkpoint(tmp, env)
    return ["eval", "--checkpoint", bad, "--data", env.dataset, "--out", tmp / "m.json", "--quiet"]


def export_nan(tmp, env):
    bad, _ = nan_checkpoint(tmp, env)
    return ["export", "--checkpoint", bad, "--data", env.dataset, "--out", tmp / "m.onnx"]


def nothing_named(*names: str):
    def check(tmp: Path) -> None:
        found = [str(p) for n in names for p in tmp.rglob(n)]
        assert not found, f"written although refused: {found[:3]}"
    return check


def nan_name_case(id, build):
    """A NaN weight: refused at load, naming the tensor (`test_nan_weight_error_names_the_tensor` checks which)."""
    return Case(id, build, 2, ("non-finite", "nan", "earlier checkpoint"), check=nothing_named("m.json", "m.onnx*"))


CHECKPOINT_CASES = [
    nan_name_case("eval-nan-weight", eval_nan),
    nan_name_case("export-nan-weight", export_nan),
    Case("eval-truncated-checkpoint", lambda tmp, env: [
        "eval", "--checkpoint", truncated(copy_run(tmp, env) / "checkpoint.pt"), "--data", env.dataset,
        "--out", tmp / "m.json", "--quiet"], 2, ("checkpoint.pt", "corrupt")),
]


def truncated(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


# -- training runs ---------------------------------------------------------------------------------
def into_existing(tmp, env):
    run = copy_run(tmp, env)
    keep_original(tmp, run)
    return train_argv(env.dataset, run, "steps=1")


def resume_with(*sets):
    def build(tmp, env):
        run = copy_run(tmp, env)
        keep_original(tmp, run)
        argv = ["train", "--resume", run, "--quiet"]
        for s in sets:
            argv += ["--set", s]
        return argv
    return build


def deny_checkpoint_write(mp, tmp):
    """A read-only run folder (tests run as root, which chmod cannot stop): writing the checkpoint's temp
    file raises EACCES."""
    def save(obj, f, *a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(f))
    mp.setattr(torch, "save", save)


def deny_config_write(mp, tmp):
    import pathlib

    real = pathlib.Path.write_text

    def write_text(self, *a, **k):
        if self.name == "config.json":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self, *a, **k)
    mp.setattr(pathlib.Path, "write_text", write_text)


def stale_temps(tmp, env):
    """A run folder holding a checkpoint temp of a dead process and one of a live process (this test's
    parent, which cannot be writing it, but a live pid's file is never ours to remove)."""
    run = tmp / "run"
    run.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / f"checkpoint.pt.tmp-{dead.pid}").write_bytes(b"half a checkpoint")
    (run / f"checkpoint.pt.tmp-{os.getppid()}").write_bytes(b"someone else's")
    (tmp / "dead_pid").write_text(str(dead.pid))
    return train_argv(env.dataset, run, "steps=1")


def stale_removed_live_kept(tmp):
    run, dead = tmp / "run", (tmp / "dead_pid").read_text()
    assert not (run / f"checkpoint.pt.tmp-{dead}").exists(), "the dead process's temp file is still there"
    assert (run / f"checkpoint.pt.tmp-{os.getppid()}").read_bytes() == b"someone else's", "a live pid's file was removed"
    assert (run / "checkpoint.pt").is_file()


def new_run(*sets):
    return lambda tmp, env: train_argv(env.dataset, tmp / "out", *sets)


def no_out(tmp):
    assert not (tmp / "out").exists(), "a run folder was created for a refused config"



def with_flags(build, *flags):
    """`build`'s argv with extra command-line flags (callables of (tmp, env) give paths)."""
    def wrapped(tmp, env):
        return build(tmp, env) + [f(tmp, env) if callable(f) else f for f in flags]
    return wrapped


def init_from_run(tmp, env):
    return env.run


def unrelated_checkpoint(tmp, env):
    """The session run's checkpoint with every key renamed: a model sharing no weight with the tiny one."""
    from hydranet.checkpoint import load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(env.run)
    ckpt["model"] = {f"other.{k}": v for k, v in ckpt["model"].items()}
    save_checkpoint(tmp / "unrelated" / "checkpoint.pt", ckpt)
    return tmp / "unrelated"


def overwrite_with_bad_init(tmp, env):
    run = copy_run(tmp, env)
    keep_original(tmp, run)
    return train_argv(env.dataset, run, "steps=1", "model.neck_width=32") + ["--overwrite", "--init", env.run]


INIT_CASES = [
    Case("train-init-with-resume", with_flags(resume_with("steps=3"), "--init", init_from_run), 2,
         ("--init", "--resume", "one of them"), check=unchanged_checkpoint()),
    Case("train-init-shape-mismatch", with_flags(new_run("steps=1", "model.neck_width=32"), "--init", init_from_run), 2,
         ("--init", "init_from", "key 'neck.", "in the weights but", "in the model"), check=no_out),
    Case("train-init-overwrite-shape-mismatch", overwrite_with_bad_init, 2, ("--init", "does not fit this model"),
         check=unchanged_checkpoint()),
    Case("train-init-unrelated", with_flags(new_run("steps=1"), "--init", unrelated_checkpoint), 2,
         ("--init", "shares no weight", "not an init"), check=no_out),
    Case("train-init-missing", with_flags(new_run("steps=1"), "--init", lambda tmp, env: tmp / "nope"), 2,
         ("--init", "nope", "does not exist"), check=no_out),
    Case("train-init-and-set-init-from", with_flags(new_run("steps=1"), "--set", "init_from=x", "--init", init_from_run),
         2, ("--init", "--set init_from", "one of them"), check=no_out),
    Case("train-init-control", with_flags(new_run("steps=1", "model.tasks=[{name: det2d}, {name: depth}]"), "--init",
                                          init_from_run), 0,
         stdout=("init from", "matched", "backbone (", "unexpected", "heads.lanes (", "trained steps 1..1"), check=no_temp_left),
    Case("train-overfit-batch-control", with_flags(new_run("steps=2"), "--overfit-batch"), 0,
         stdout=("overfit-batch: frames", "no augmentation", "step 1 -> step 2", "det2d", "trained steps 1..2")),
    Case("resume-overfit-batch", with_flags(resume_with("steps=3"), "--overfit-batch"), 2,
         ("'overfit_batch'", "start a new run"), check=unchanged_checkpoint()),
    Case("train-trunk-steps-with-resume", with_flags(resume_with("steps=3"), "--trunk-steps", "2"), 2,
         ("--trunk-steps", "--resume"), check=unchanged_checkpoint()),
    Case("train-trunk-steps-with-init", with_flags(new_run("steps=1"), "--trunk-steps", "2", "--init", init_from_run), 2,
         ("--trunk-steps", "--init"), check=no_out),
    Case("train-trunk-steps-negative", with_flags(new_run("steps=1"), "--trunk-steps", "-3"), 2,
         ("--trunk-steps -3", "N >= 1"), check=no_out),
    Case("train-trunk-steps-control", with_flags(new_run("steps=1"), "--trunk-steps", "1"), 0,
         stdout=("init from", "trunk", "trained steps 1..1"), check=no_temp_left),
]

TRAIN_CASES = [
    Case("train-into-existing-run", into_existing, 2, ("already holds a run", "--resume", "--overwrite"),
         check=unchanged_checkpoint()),
    Case("resume-override-lr", resume_with("optim.lr=1e-4"), 2, ("'optim.lr'", "start a new run"),
         check=unchanged_checkpoint()),
    Case("resume-override-seed", resume_with("seed=7"), 2, ("'seed'", "start a new run"), check=unchanged_checkpoint()),
    Case("resume-finished-run", resume_with(), 2, ("already at step 2", "steps=N"), check=unchanged_checkpoint()),
    Case("resume-fewer-steps", resume_with("steps=1"), 2, ("already at step 2",), check=unchanged_checkpoint()),
    Case("resume-read-only-checkpoint", resume_with("steps=3"), 2, ("could not write checkpoint", "permission denied",
                                                                    "previous checkpoint", "intact"),
         patch=deny_checkpoint_write, check=unchanged_checkpoint()),
    Case("resume-read-only-config", resume_with("steps=3"), 2, ("config.json", "permission denied"),
         patch=deny_config_write, check=unchanged_checkpoint()),
    Case("resume-device-tpu", resume_with("steps=3", "device=tpu"), 2, ("'device'", "tpu", "auto, cpu or cuda"),
         check=unchanged_checkpoint()),
    Case("train-device-tpu", new_run("device=tpu"), 2, ("'device'", "tpu", "auto, cpu or cuda"), check=no_out),
    Case("train-cameras-empty", new_run("data.cameras=[]"), 2, ("'data.cameras'", "empty list"), check=no_out),
    Case("train-repeat-threshold-negative", new_run("data.repeat_threshold=-0.5"), 2,
         ("'data.repeat_threshold'", "> 0"), check=no_out),
    Case("train-repeat-threshold-control", new_run("steps=1", "data.repeat_threshold=0.5"), 0,
         stdout=("class-balanced sampling", "draws an epoch"), check=no_temp_left),
    Case("train-det2d-box-region-unknown", new_run("model.tasks=[{name: det2d, options: {box_region: ring}}]"), 2,
         ("box_region 'ring'", "centre", "gaussian"), check=no_out),
    Case("train-finest-stride-3", new_run("model.finest_stride=3"), 2,
         ("model.finest_stride 3", "expected one of [4, 8]"), check=no_out),
    Case("train-finest-stride-control", new_run("steps=1", "model.finest_stride=4"), 0,
         stdout=("trained steps 1..1",), check=no_temp_left),
    Case("train-ema-decay-one", new_run("optim.ema_decay=1.0"), 2, ("'optim.ema_decay'", "0 (off) or in (0, 1)"),
         check=no_out),
    Case("train-ema-control", new_run("steps=1", "optim.ema_decay=0.99"), 0, stdout=("trained steps 1..1",),
         check=no_temp_left),
    Case("train-hflip-p-above-one", new_run("augment.hflip_p=1.5"), 2, ("'augment.hflip_p'", "[0, 1]"), check=no_out),
    Case("train-hflip-control", new_run("steps=1", "augment.hflip_p=0.5"), 0, stdout=("trained steps 1..1",),
         check=no_temp_left),
    Case("train-det2d-train-min-size-negative", new_run("model.tasks=[{name: det2d, options: {train_min_size: -1}}]"), 2,
         ("train_min_size -1", "[0, min_size 6]"), check=no_out),
    Case("train-det2d-train-min-size-above-min-size", new_run("model.tasks=[{name: det2d, options: {train_min_size: 8}}]"),
         2, ("train_min_size 8", "untrained"), check=no_out),
    Case("train-stale-temp-removed", stale_temps, 0, check=stale_removed_live_kept),
    Case("train-control", new_run("steps=1"), 0, stdout=("trained steps 1..1",), check=no_temp_left),
]


# -- evaluation and pictures -----------------------------------------------------------------------
def corrupt_first_jpeg(root: Path) -> None:
    p = frame_dir(root) / "CAM_FRONT.jpg"
    d = bytearray(p.read_bytes())
    m = len(d) // 2
    d[m:m + 20] = bytes(20)
    p.write_bytes(bytes(d))


def eval_skip(model: str = "run"):
    def build(tmp, env):
        ds = copy_dataset(tmp, env)
        corrupt_first_jpeg(ds)
        return ["eval", "--checkpoint", getattr(env, model), "--data", ds, "--out", tmp / "m.json", "--quiet"]
    return build


def viz_bad_frame(tmp, env):
    ds = copy_dataset(tmp, env)
    corrupt_first_jpeg(ds)
    return ["viz", "--checkpoint", env.run, "--data", ds, "--out", tmp / "x.png", "--frame", "0"]


def one_frame_less(tmp):
    res = json.loads((tmp / "m.json").read_text())
    assert res["frames"] == 1 and len(res["skipped"]) == 1 and res["skipped"][0].endswith("CAM_FRONT.jpg"), res["skipped"]


def margins_stated(tmp):
    res = json.loads((tmp / "m.json").read_text())
    assert res["frames"] == 2 and res["skipped"] == []
    assert res["margin"] and all(m > 0 for m in res["margin"].values()), res["margin"]


EVAL_CASES = [
    Case("eval-skip-corrupt-jpeg", eval_skip(), 0, stdout=("SKIPPED 1 bad frame", "CAM_FRONT.jpg"), check=one_frame_less),
    Case("eval-onnx-skip-corrupt-jpeg", eval_skip("onnx"), 0, stdout=("SKIPPED 1 bad frame", "CAM_FRONT.jpg"),
         check=one_frame_less),
    Case("viz-skipped-frame", viz_bad_frame, 2, ("frame 0 is bad", "CAM_FRONT.jpg", "another frame"),
         check=nothing_named("x.png")),
    Case("eval-control-margin", lambda tmp, env: ["eval", "--checkpoint", env.run, "--data", env.dataset, "--out",
                                                  tmp / "m.json", "--quiet"], 0, stdout=("baseline by >",),
         check=margins_stated),
    Case("eval-bev-other-rig", lambda tmp, env: ["eval", "--checkpoint", env.bev_run, "--data", env.other_rig, "--out",
                                                 tmp / "m.json", "--quiet"], 2,
         ("CAM_FRONT", "calibration differs", "position by 0.5", "model's rig"), check=nothing_named("m.json")),
    Case("viz-out-without-png", lambda tmp, env: ["viz", "--checkpoint", env.run, "--data", env.dataset, "--out",
                                                  tmp / "x"], 2, ("--out", "png"), check=nothing_named("x")),
    Case("viz-out-jpg", lambda tmp, env: ["viz", "--checkpoint", env.run, "--data", env.dataset, "--out",
                                          tmp / "x.jpg"], 2, ("--out", ".png"), check=nothing_named("x.jpg")),
    Case("viz-control", lambda tmp, env: ["viz", "--checkpoint", env.run, "--data", env.dataset, "--out",
                                          tmp / "x.png"], 0, stdout=("wrote",)),
]


# -- exported models: metadata, truncation, bench, quantize --------------------------------------------
def onnx_with(edit):
    """A copy of the session's model.onnx with its hydranet metadata changed by `edit(props)`."""
    def build(tmp, env):
        import onnx

        from deploy.metadata import set_metadata

        m = onnx.load(str(env.onnx))
        props = {p.key: p.value for p in m.metadata_props}
        edit(props)
        set_metadata(m, props)
        onnx.save(m, str(tmp / "bad.onnx"))
        return ["eval", "--checkpoint", tmp / "bad.onnx", "--data", env.dataset, "--out", tmp / "m.json", "--quiet"]
    return build


def set_version(v):
    def edit(props):
        fmt = json.loads(props["hydranet.format"])
        fmt["version"] = v
        props["hydranet.format"] = json.dumps(fmt)
    return edit


def extra_output(props):
    outs = json.loads(props["hydranet.outputs"])
    outs["det2d.ghost"] = dict(next(iter(outs.values())), key="ghost")
    props["hydranet.outputs"] = json.dumps(outs)


def head_names_ghost(props):
    heads = json.loads(props["hydranet.heads"])
    next(iter(heads.values()))["outputs"].append("det2d.ghost")
    props["hydranet.heads"] = json.dumps(heads)


def truncated_onnx(cmd):
    def build(tmp, env):
        bad = tmp / "bad.onnx"
        shutil.copyfile(env.onnx, bad)
        truncated(bad)
        if cmd == "eval":
            return ["eval", "--checkpoint", bad, "--data", env.dataset, "--out", tmp / "m.json", "--quiet"]
        return ["quantize", "--onnx", bad, "--data", env.dataset, "--out", tmp / "q.onnx", "--frames", "1"]
    return build


def interrupt_quantize(mp, tmp):
    """Ctrl-C while ORT writes the quantized model: a partial file at the path it was given, then KeyboardInterrupt."""
    import onnxruntime.quantization as q

    def quantize_static(model_input, model_output, *a, **k):
        Path(model_output).write_bytes(b"half a model")
        raise KeyboardInterrupt
    mp.setattr(q, "quantize_static", quantize_static)


def no_quantized_model(tmp):
    assert not (tmp / "model.int8.onnx").exists(), "a half-written quantized model was left"
    no_temp_left(tmp)


def bench_runs(n):
    return lambda tmp, env: ["bench", "--checkpoint", env.run, "--data", env.dataset, "--out", tmp / "bench",
                             "--runs", str(n)]


def nothing_exported(tmp):
    assert not (tmp / "bench").exists(), f"bench wrote {sorted(p.name for p in (tmp / 'bench').rglob('*'))} before refusing"


MODEL_CASES = [
    Case("onnx-format-version-1", onnx_with(set_version(1)), 2, ("bad.onnx", "older metadata format", "re-export")),
    Case("onnx-format-version-99", onnx_with(set_version(99)), 2, ("bad.onnx", "newer metadata format", "update")),
    Case("onnx-format-version-string", onnx_with(set_version("2")), 2, ("bad.onnx", "format", "re-export")),
    Case("onnx-metadata-extra-output", onnx_with(extra_output), 2, ("bad.onnx", "det2d.ghost", "re-export")),
    Case("onnx-head-names-missing-output", onnx_with(head_names_ghost), 2, ("bad.onnx", "det2d.ghost", "graph lacks")),
    Case("onnx-metadata-bad-json", onnx_with(lambda p: p.update({"hydranet.heads": "{"})), 2,
         ("bad.onnx", "hydranet.heads", "not valid json")),
    Case("onnx-truncated-eval", truncated_onnx("eval"), 2, ("bad.onnx", "truncated or corrupt")),
    Case("onnx-truncated-quantize", truncated_onnx("quantize"), 2, ("bad.onnx", "truncated or corrupt"),
         check=nothing_named("q.onnx*")),
    Case("bench-runs-0", bench_runs(0), 2, ("--runs", "0", ">= 1"), check=nothing_exported),
    Case("bench-runs-negative", bench_runs(-3), 2, ("--runs", "-3"), check=nothing_exported),
    Case("quantize-interrupted", lambda tmp, env: ["quantize", "--onnx", env.onnx, "--data", env.dataset, "--out",
                                                   tmp / "model.int8.onnx", "--frames", "1"], 130,
         patch=interrupt_quantize, check=no_quantized_model),
]


@pytest.mark.parametrize("case", params(CHECKPOINT_CASES + TRAIN_CASES + INIT_CASES + EVAL_CASES + MODEL_CASES))
def test_fault(case, run_env, tmp_path, monkeypatch, capsys):
    run_case(case, tmp_path, run_env, monkeypatch, capsys)


@pytest.mark.parametrize("cmd", ["eval", "export"])
def test_nan_weight_error_names_the_tensor(cmd, run_env, tmp_path, capsys):
    """The rows above check the words; this checks the tensor named is the one that is NaN."""
    bad, name = nan_checkpoint(tmp_path, run_env)
    argv = ["eval", "--checkpoint", bad, "--data", run_env.dataset, "--out", tmp_path / "m.json", "--quiet"] \
        if cmd == "eval" else ["export", "--checkpoint", bad, "--data", run_env.dataset, "--out", tmp_path / "m.onnx"]
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and f"weight '{name}' has 1 non-finite" in err[-1], err[-1]


def test_export_of_a_model_with_nan_outputs_fails_and_writes_nothing(run_env, tmp_path):
    """Weights that pass the checkpoint check but turn NaN after loading (the parity check is the last
    guard): export_model raises 'NaN or Inf' and leaves no file, no temp."""
    from deploy.export import ExportError, export_model, sim_frames
    from hydranet.checkpoint import load_model

    model, cfg, ckpt = load_model(run_env.run)
    with torch.no_grad():
        next(p for p in model.parameters() if p.dim() >= 2).view(-1)[0] = float("nan")
    frames = sim_frames(cfg, run_env.dataset, 1)
    with pytest.raises(ExportError, match="NaN or Inf"):
        export_model(model, cfg, json.loads(ckpt["meta"]), tmp_path / "m.onnx", frames, verbose=False)
    assert list(tmp_path.iterdir()) == [], f"left behind: {sorted(p.name for p in tmp_path.iterdir())}"


def test_skipped_frame_is_not_scored_in_its_place(run_env, tmp_path, capsys):
    """on_bad_frame=skip: the metrics of a dataset whose frame 0 is corrupt equal those of the dataset
    without frame 0 (the frame read in its place is scored once, not twice)."""
    from hydranet.evaluate import evaluate_checkpoint

    bad = copy_dataset(tmp_path, run_env, "bad")
    corrupt_first_jpeg(bad)
    short = copy_dataset(tmp_path, run_env, "short")
    scene = short / "scenes" / "scene_0000" / "scene.json"
    edit_json(scene, lambda s: s.update(frames=s["frames"][1:]))
    edit_json(short / "dataset.json", lambda m: m["scenes"][0].update(num_frames=1))
    seen: dict[str, int] = {"bad": 0, "short": 0}

    def count(key):
        def on_outputs(raw, batch):
            seen[key] += int(batch["images"].shape[0])
        return on_outputs
    a = evaluate_checkpoint(run_env.run, bad, progress=False, on_outputs=count("bad"))
    b = evaluate_checkpoint(run_env.run, short, progress=False, on_outputs=count("short"))
    assert a["frames"] == b["frames"] == 1 and len(a["skipped"]) == 1 and b["skipped"] == []
    assert seen == {"bad": 1, "short": 1}, f"frames run through the model: {seen}"  # ratios hide a duplicate frame
    assert json.dumps(a["model"], sort_keys=True) == json.dumps(b["model"], sort_keys=True)


def test_beating_the_baseline_needs_more_than_the_margin():
    """NDS 0.0 against a baseline of 0.0 does not beat it (it did before the margin)."""
    from hydranet.tasks.base import PrimaryMetric

    nds = PrimaryMetric("NDS", True, 0.01)
    assert not nds.beats(0.0, 0.0) and not nds.beats(0.005, 0.0) and nds.beats(0.02, 0.0)
    assert not PrimaryMetric("abs_rel", False, 0.01).beats(0.5, 0.505) and not nds.beats(float("nan"), 0.0)


# -- kill -9 during training, then --resume: the same weights as an uninterrupted run ----------------
HOLD_AFTER_CHECKPOINT = """
import sys, time
import hydranet.train as t
from hydranet.cli import main
save = t.save_checkpoint
def hold(path, state):  # the same write, then a pause after step 1 so the parent's kill -9 lands mid-run
    save(path, state)
    time.sleep(120 if state["step"] == 1 else 0)
t.save_checkpoint = hold
sys.exit(main(sys.argv[1:]))
"""
KILL_BUDGET_S = 60  # the killed run must reach its first checkpoint within this, or the test skips (slow machine)


def test_kill_9_then_resume_gives_the_uninterrupted_weights_bit_for_bit(fault_env, tmp_path, capsys):
    """`hydranet train` (tiny, 1 camera at 96x160, steps=4, checkpoint_every=1) killed with SIGKILL in a
    subprocess after its first checkpoint, then `hydranet train --resume`: the final checkpoint equals an
    uninterrupted run's bit for bit (weights and AdamW moments). The reference and the resume run in this
    process (a fresh interpreter costs ~10 s on 2 busy cores); the resume reads everything from disk."""
    from hydranet.checkpoint import load_checkpoint

    argv = train_argv(fault_env.dataset, tmp_path / "run", "data.image_size=[96,160]", "steps=4", "checkpoint_every=1",
                      "data.on_bad_frame=raise")
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-c", HOLD_AFTER_CHECKPOINT, *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        while not (run / "checkpoint.pt").exists():
            assert p.poll() is None, f"training ended before its first checkpoint: {p.stderr.read()[-2000:]}"
            if time.monotonic() - t0 > KILL_BUDGET_S:
                pytest.skip(f"the run to kill took over {KILL_BUDGET_S} s to its first checkpoint on this machine")
            time.sleep(0.05)
        time.sleep(0.2)  # inside the pause after step 1's rename
        p.send_signal(signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(30)
        p.stderr.close()
    assert p.returncode == -signal.SIGKILL
    assert load_checkpoint(run)["step"] == 1
    ref = tmp_path / "ref"
    assert main([str(ref) if a == str(run) else a for a in argv]) == 0  # the same command, never interrupted
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert "trained steps 2..4" in capsys.readouterr().out
    a, b = load_checkpoint(ref), load_checkpoint(run)
    assert a["step"] == b["step"] == 4
    diff = [k for k in a["model"] if not torch.equal(a["model"][k], b["model"][k])]
    assert diff == [], f"weights differ after kill -9 + resume: {diff[:5]}"
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    assert not list(run.glob("*.tmp-*"))
