"""Fault rows of names that escape and a registry that could lie: clip and frame names of a fleet (in
dataset.json, scene.json, a symlink) that would read outside it, label jobs whose names would write outside
--out; `engine promote` of an ONNX exported from another checkpoint or of a gate-rejected candidate;
two `engine run` on one folder and two shadows on one catalog; `engine run --rounds 0`."""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultlib import ENGINE as ENV
from faultlib import RUNS, Case, copy_dataset, edit_json, params, run_case

pytestmark = pytest.mark.usefixtures("engine_env", "two_runs")
HELD: list = []  # lock files held open by a row's patch (another holder of the lock, as a second process would be)


@pytest.fixture(scope="module", autouse=True)
def _release_held_locks():
    yield
    for f in HELD:
        f.close()


# -- names that escape --------------------------------------------------------------------------------------
def shadow(tmp: Path, fleet: Path) -> list:
    return ["engine", "shadow", "--onnx", ENV["model"], "--data", fleet, "--catalog", tmp / "c.db", "--quiet"]


def fleet_clip_outside(tmp: Path, env) -> list:
    """dataset.json names clip '../../x' and tmp/x holds a readable clip: shadowing it would read outside."""
    root = copy_dataset(tmp, env, "fleet")
    shutil.copytree(root / "scenes" / "scene_0000", tmp / "x")
    edit_json(root / "dataset.json", lambda m: m["scenes"][0].update(name="../../x"))
    return shadow(tmp, root)


def fleet_clip_symlink(tmp: Path, env) -> list:
    """scenes/scene_0000 is a symlink to a clip outside the fleet."""
    root = copy_dataset(tmp, env, "fleet")
    shutil.move(root / "scenes" / "scene_0000", tmp / "outside")
    (root / "scenes" / "scene_0000").symlink_to(tmp / "outside", target_is_directory=True)
    return shadow(tmp, root)


def fleet_frame_outside(tmp: Path, env) -> list:
    root = copy_dataset(tmp, env, "fleet")
    shutil.copytree(root / "scenes" / "scene_0000" / "000000", tmp / "f")
    edit_json(root / "scenes" / "scene_0000" / "scene.json", lambda s: s["frames"][0].update(dir="../../../f"))
    return shadow(tmp, root)


def fleet_image_symlink(tmp: Path, env) -> list:
    """A camera image that is a symlink to a file outside the fleet."""
    root = copy_dataset(tmp, env, "fleet")
    img = root / "scenes" / "scene_0000" / "000000" / "CAM_FRONT.jpg"
    shutil.move(img, tmp / "outside.jpg")
    img.symlink_to(tmp / "outside.jpg")
    return shadow(tmp, root)


def nothing_shadowed(tmp: Path) -> None:
    import sqlite3

    if (tmp / "c.db").exists():
        db = sqlite3.connect(str(tmp / "c.db"))
        assert db.execute("SELECT count(*) FROM signals").fetchone()[0] == 0, "signals stored for a fleet that escapes"
        db.close()


# -- the registry ----------------------------------------------------------------------------------------------
def promote(tmp: Path, run: str, onnx=None, *extra) -> list:
    return ["engine", "promote", "--catalog", tmp / "c.db", "--checkpoint", RUNS[run],
            *(["--onnx", onnx] if onnx is not None else []), *extra]


def rejected_by_gate(tmp: Path, run: str = "b") -> None:
    """The catalog records a gate decision that rejected `run` against `a` (what `engine gate --catalog` writes)."""
    import json

    from data_engine.registry import model_id, open_registry
    from hydranet.io import file_sha256

    with open_registry(tmp / "c.db", create=True) as cat, cat.transaction():
        ids = [model_id(cat, RUNS[r] / "checkpoint.pt", file_sha256(RUNS[r] / "checkpoint.pt")) for r in (run, "a")]
        cat.db.execute("INSERT INTO gate_results (candidate_id, production_id, suite, metrics, verdict, created) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (*ids, str(tmp / "suites"),
                                                     json.dumps({"verdict": "reject", "failing": ["night"]}), "reject",
                                                     time.time()))


def registry_actions(tmp: Path) -> list[str]:
    from data_engine.registry import history

    return [r["action"] for r in history(tmp / "c.db")] if (tmp / "c.db").exists() else []


def no_production(tmp: Path) -> None:
    assert registry_actions(tmp) == [], "the registry changed on a refused promotion"


def forced(tmp: Path) -> None:
    assert registry_actions(tmp) == ["force-promote"]


# -- locks -----------------------------------------------------------------------------------------------------
def hold(path: Path) -> None:
    """Take the lock at `path` as another holder would (flock is per open file: this process's CLI call must wait)."""
    f = open(path, "a+")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write(f"{os.getpid()}\n")
    f.flush()
    HELD.append(f)


def loop_locked(tmp: Path, env) -> list:
    shutil.copytree(RUNS["a"], tmp / "prod")
    (tmp / "loop").mkdir()
    hold(tmp / "loop" / ".lock")
    return ["engine", "run", "--out", tmp / "loop", "--production", tmp / "prod", "--quiet"]


def shadow_locked(tmp: Path, env) -> list:
    hold(tmp / "c.db.lock")
    return ["engine", "shadow", "--onnx", ENV["model"], "--data", env.dataset, "--catalog", tmp / "c.db", "--quiet"]


def no_journal(tmp: Path) -> None:
    assert not (tmp / "loop" / "loop.json").exists(), "loop.json written by a refused run"


def release_held(tmp: Path) -> None:
    while HELD:
        HELD.pop().close()


CASES = [
    Case("fleet-clip-name-outside", fleet_clip_outside, words=("dataset.json", "scenes[0].name", "'../../x'"),
         check=nothing_shadowed),
    Case("fleet-clip-symlink-outside", fleet_clip_symlink, words=("scenes/scene_0000", "leaves"), check=nothing_shadowed),
    Case("fleet-frame-dir-outside", fleet_frame_outside, words=("scene.json", "frame dir", "'../../../f'"),
         check=nothing_shadowed),
    Case("promote-onnx-of-another-checkpoint", lambda t, e: promote(t, "b", RUNS["a.onnx"]),
         words=("a.onnx", "another checkpoint", "hydranet export"), check=no_production),
    Case("promote-onnx-without-source", lambda t, e: promote(t, "a", ENV["model"]),
         words=("model.onnx", "does not record", "re-export"), check=no_production),
    Case("promote-control", lambda t, e: promote(t, "a", RUNS["a.onnx"]), status=0, stdout=("production",),
         check=lambda t: registry_actions(t) == ["promote"] or pytest.fail("not promoted")),
    Case("promote-gate-rejected", lambda t, e: (rejected_by_gate(t), promote(t, "b"))[1],
         words=("rejected by the gate", "night", "--force"), check=lambda t: registry_actions(t) == []
         or pytest.fail("promoted a rejected candidate")),
    Case("promote-gate-rejected-forced", lambda t, e: (rejected_by_gate(t), promote(t, "b", None, "--force"))[1],
         status=0, stdout=("forced",), check=forced),
    Case("run-locked-by-another-run", loop_locked, words=("in use by another process", f"pid {os.getpid()}", ".lock"),
         check=lambda t: (no_journal(t), release_held(t))),
    Case("shadow-locked-by-another-shadow", shadow_locked, words=("c.db", "in use by another process", "pid"),
         check=lambda t: (nothing_shadowed(t), release_held(t))),
    Case("run-rounds-zero", lambda t, e: (shutil.copytree(RUNS["a"], t / "prod"),
                                          ["engine", "run", "--out", t / "loop", "--production", t / "prod", "--rounds", "0",
                                           "--quiet"])[1],
         words=("--rounds", "at least 1"), check=lambda t: (no_journal(t), not (t / "loop").exists()
                                                             or pytest.fail("--out created by a refused run"))),
]


@pytest.mark.parametrize("case", params(CASES))
def test_security_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_fleet_image_symlink_out_is_a_bad_frame_never_read(tmp_path, fault_env, capsys):
    """A camera image that links outside the fleet: the frame is refused (corrupt, counted), its pixels never read."""
    from hydranet.cli import main

    argv = [str(a) for a in fleet_image_symlink(tmp_path, fault_env)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "1 corrupt" in out, out


def test_label_job_names_never_leave_the_fleet_or_out(tmp_path):
    """A catalog row (clip or frame dir) naming '..' cannot make a job read or a files export write outside."""
    from data_engine.labeling.base import Job, LabelingError
    from data_engine.labeling.files import FilesBackend

    (tmp_path / "fleet" / "scenes").mkdir(parents=True)
    for clip, fdir in (("../../x", "000000"), ("clip", "../../../x"), ("/etc", "000000")):
        job = Job(1, "sel", 1, clip, 0, fdir, str(tmp_path / "fleet"), ("CAM_FRONT",), ((48, 64),))
        with pytest.raises(LabelingError, match="label job 1"):
            job.image("CAM_FRONT")
        with pytest.raises(LabelingError):
            FilesBackend(out=tmp_path / "out").send([job])
    assert not (tmp_path / "x").exists() and not list(tmp_path.parent.glob("x*"))


def test_path_inside_follows_symlinks_and_refuses_absolute(tmp_path):
    from hydranet.io import PathOutsideRoot, path_inside

    (tmp_path / "root" / "a").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path / "out", target_is_directory=True)
    assert path_inside(tmp_path / "root", "a/../a/f.jpg", "t") == tmp_path / "root" / "a/../a/f.jpg"
    for rel in ("../out", "link/f.jpg", "/etc/passwd", "a/../../out", "", " a", "a\x00b"):
        with pytest.raises(PathOutsideRoot):
            path_inside(tmp_path / "root", rel, "t")


def test_lock_names_a_live_holder_in_another_process_and_frees_after_kill_9(tmp_path):
    """A second process holding the loop's lock: refused naming its pid; after it is killed (-9), the lock is free."""
    from hydranet.io import exclusive_lock

    lock = tmp_path / ".lock"
    code = ("import sys, time; from hydranet.io import exclusive_lock\n"
            f"with exclusive_lock({str(lock)!r}, 'x'):\n    print('held', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeError, match=f"pid {p.pid}"):
            with exclusive_lock(lock, "loop run"):
                pass
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    with exclusive_lock(lock, "loop run"):
        assert lock.read_text().strip() == str(os.getpid())
