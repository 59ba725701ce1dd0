"""Fault rows below the CLI: the trtexec script with hostile file names, counted skips, overrides that
YAML 1.1 misreads, a real unreadable file (skipped as root), the writer's refusals. One row per case."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from faultlib import copy_dataset, edit_json, frame_dir

HOSTILE = ["my model.onnx", "$(touch pwned).onnx", "`touch pwned2`.onnx", "a;touch pwned3;.onnx", "it's.onnx",
           "new\nline.onnx", "$HOME.onnx"]


@pytest.mark.parametrize("name", HOSTILE)
def test_trtexec_script_quotes_hostile_names(name, tmp_path):
    from deploy.tensorrt import trtexec_commands, write_trtexec_script

    folder = tmp_path / "out dir $(touch pwned4)"
    folder.mkdir()
    lines = trtexec_commands(folder / name, folder / f"e {name}.engine", {"images": [1, 6, 3, 48, 64]},
                             int8_onnx=folder / f"q {name}", dynamic_batch=True)
    script = write_trtexec_script(folder / "build.trtexec.sh", lines, f"for {name}")
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    for line in lines:  # one argument each, exactly the file name: never split
        args = shlex.split(line)
        assert args[0] == "trtexec"
        onnx = [a for a in args if a.startswith(("--onnx=", "--loadEngine="))]
        assert len(onnx) == 1 and name.replace("\n", "") in onnx[0].replace("\n", "")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "trtexec").write_text('#!/bin/bash\nprintf "%s\\0" "$@" >> "$(dirname "$0")/args"\n')
    (fake / "trtexec").chmod(0o755)
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    assert r.returncode == 0, r.stderr
    assert not [p for p in tmp_path.rglob("pwned*")], "a file name ran as a command"
    args = (fake / "args").read_text().split("\0")
    assert f"--onnx={name}" in args and f"--saveEngine=e {name}.fp16.engine" in args


def _bad_frame0(root: Path, how: str) -> None:
    if how == "jpeg-corrupt-middle":
        p = frame_dir(root) / "CAM_FRONT.jpg"
        d = bytearray(p.read_bytes())
        d[len(d) // 2:len(d) // 2 + 20] = bytes(20)
        p.write_bytes(bytes(d))
    elif how == "bbox-nan":
        edit_json(frame_dir(root) / "labels.json",
                  lambda lab: next(b for c in lab["cameras"].values() for b in c["boxes2d"]).update(bbox=[float("nan")] * 4))
    elif how == "box3d-inverted-size":
        edit_json(frame_dir(root) / "labels.json", lambda lab: lab["boxes3d"][0].update(size=[-4.0, -2.0, -1.5]))


@pytest.mark.parametrize("how, words", [("jpeg-corrupt-middle", "CAM_FRONT.jpg"), ("bbox-nan", "labels.json"),
                                        ("box3d-inverted-size", "labels.json")])
def test_skip_mode_counts_and_names_the_bad_frame(how, words, fault_env, tmp_path):
    """on_bad_frame='skip': the bad frame is skipped, counted once and named; 'raise' raises naming it."""
    from hydranet.data import DatasetError, SimDataset

    root = copy_dataset(tmp_path, fault_env)
    _bad_frame0(root, how)
    with pytest.raises(DatasetError, match=words.replace(".", r"\.")):
        SimDataset(root)[0]
    ds = SimDataset(root, on_bad_frame="skip")
    s = ds[0]
    assert s["frame_index"] == 1  # the next good frame, never the bad one
    assert len(ds.skipped) == 1 and words in ds.skipped[0]
    ds[0]
    assert len(ds.skipped) == 1  # counted once


@pytest.mark.parametrize("cameras, words", [([], "non-empty"), (["CAM_FRONT", "CAM_FRONT"], "distinct"),
                                             (["../CAM_FRONT"], "unknown camera")])
def test_camera_selection_is_never_all_by_accident(cameras, words, fault_env):
    from hydranet.data import DatasetError, SimDataset

    with pytest.raises(DatasetError, match=words):
        SimDataset(fault_env.dataset, cameras=cameras)


@pytest.mark.parametrize("override, value", [("optim.lr=1e-4", 1e-4), ("optim.lr=5E-3", 5e-3), ("optim.lr=-2e+1", -20.0),
                                             ("optim.lr=1.5e-4", 1.5e-4), ("optim.lr=5.0e1", 50.0), ("optim.lr=.5e1", 5.0),
                                             ("optim.lr=3", 3), ("optim.name=1e", "1e"),
                                             ("optim.lr=.inf", float("inf"))])
def test_overrides_read_numbers_as_numbers(override, value):
    from hydranet.config import apply_overrides

    assert apply_overrides({}, [override])["optim"][override.split("=")[0].split(".")[1]] == value


def test_config_file_reads_scientific_floats(tmp_path):
    from hydranet.config import load_config
    from sim.config import SimConfig

    (tmp_path / "c.yaml").write_text("frame_rate_hz: 2e1\nbev_range: 5.0e1\n")
    cfg = load_config(SimConfig, tmp_path / "c.yaml")
    assert cfg.frame_rate_hz == 20.0 and cfg.bev_range == 50.0


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as root: chmod 000 does not stop root from reading "
                                              "(the CLI rows simulate EACCES instead)")
def test_real_unreadable_file_says_permission_denied(fault_env, tmp_path, capsys):
    from hydranet.cli import main

    root = copy_dataset(tmp_path, fault_env)
    (frame_dir(root) / "labels.json").chmod(0)
    try:
        assert main(["sim", "preview", "--data", str(root), "--out", str(tmp_path / "p.png")]) == 2
    finally:
        (frame_dir(root) / "labels.json").chmod(0o644)
    assert "permission denied" in capsys.readouterr().err.lower()


@pytest.mark.parametrize("field, value", [("scene", "../x"), ("dir", "../../x"), ("dir", "/abs"), ("camera", "../x")])
def test_writer_refuses_unsafe_names(field, value, tmp_path):
    """The writer itself never builds a path from an unsafe name (whoever calls it)."""
    from sim.writer import DatasetWriter

    meta = {"rig": {"cameras": [{"name": value if field == "camera" else "CAM", "width": 4, "height": 4}]},
            "classes": [], "semantic_classes": [], "sign_classes": [], "light_states": [], "lane_types": [],
            "bev": {"x_range": [-1, 1], "y_range": [-1, 1], "resolution": 1.0}, "frame_rate_hz": 10, "seed": 0,
            "sim_config": {}}
    with pytest.raises(ValueError, match="cannot be used as a file name"):
        with DatasetWriter(tmp_path / "ds", meta) as w:
            frames = [{"index": 0, "dir": value if field == "dir" else "000000", "timestamp_us": 0,
                       "ego2world": None}]
            w.write_scene({"name": value if field == "scene" else "s", "frames": frames})
    assert not (tmp_path / "ds").exists() and not list(tmp_path.glob("*.tmp-*"))
    assert not (tmp_path.parent / "x").exists() and not Path("/abs").exists()
    shutil.rmtree(tmp_path, ignore_errors=True)
