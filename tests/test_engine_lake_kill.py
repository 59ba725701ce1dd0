"""Real kill -9 of a lake shadow run (`hydranet engine shadow --workers 2` on a lake catalog, in its own process group),
then a rerun of the same command: the catalog's rows and the selections of several mining strategies equal a
single-writer uninterrupted run's (no frame lost, none twice), no temp is left, every done clip has one part, and the
parts that were whole when the kill landed are committed, never rewritten. The kill points (tests/lake_kill_hook.py
pauses the processes there; data_engine knows nothing of it):

- group: the driver inside the transaction of clip 2's done marker and a worker half way through clip 3's part, clip
  4's part written but not committed; the whole group killed;
- worker: the worker half way through clip 3's part killed alone; the driver stops with one line (no traceback)
  after committing the clips done;
- driver: the driver killed alone while a worker is half way through clip 3's part: the workers end by themselves
  (an orphaned worker went on writing parts, then waited forever);
- poll: the plain CLI, no pause, the group killed as soon as a first part exists;
- compact: every clip done, the compaction that ends the run (blocks of two clips here) half way through its first
  block; the whole group killed. The rerun shadows nothing, compacts, and reads every frame once.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_fixtures import REPO, make_fleet

from data_engine.lake import frames_path

pytest.importorskip("duckdb", reason="the lake backend needs the engine extra (duckdb)")
pytest.importorskip("pyarrow", reason="the lake backend needs the engine extra (pyarrow)")

CLIPS = 4
STRATEGIES = (("random", "frame", 5), ("uncertainty", "frame", 5), ("diversity", "frame", 5), ("hybrid", "frame", 5),
              ("uncertainty", "clip", 2))
WAIT_S = 120  # the killed run must reach its kill point within this (a few seconds here)


def untrained_model(root: Path, fleet: Path) -> Path:
    """configs/engine_tiny.yaml, untrained (seeded), exported for the fleet: every signal, the embedding, the video
    queue; seconds instead of a training run."""
    import torch

    from deploy.export import export_model, sim_frames
    from hydranet.experiment import load_experiment
    from hydranet.models import build_model

    cfg = load_experiment(REPO / "configs" / "engine_tiny.yaml", [f"data.root={fleet}", "device=cpu"])
    meta = json.loads((fleet / "dataset.json").read_text())
    torch.manual_seed(0)
    export_model(build_model(cfg.model, meta), cfg, meta, root / "model.onnx", sim_frames(cfg, fleet, 1), simplify=False,
                 verbose=False)
    return root / "model.onnx"


def cli(*args: str) -> str:
    """`hydranet ARGS` in this process; its stdout."""
    import contextlib
    import io

    from hydranet.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(a) for a in args]) == 0, out.getvalue()
    return out.getvalue()


def shadow_args(env: dict, lake: Path) -> list[str]:
    return ["engine", "shadow", "--onnx", str(env["model"]), "--data", str(env["fleet"]), "--catalog", str(lake),
            "--workers", "2", "--quiet"]


def mine_all(lake: Path, out: Path) -> dict[str, bytes]:
    out.mkdir(exist_ok=True)
    files = {}
    for strategy, unit, budget in STRATEGIES:
        f = out / f"{strategy}-{unit}.json"
        cli("engine", "mine", "--catalog", lake, "--budget", budget, "--strategy", strategy, "--unit", unit, "--out", f)
        files[f.name] = f.read_bytes()
    return files


def snapshot(lake: Path) -> dict:
    """What the catalog holds: its SQLite rows (clips, frames, done markers without their time) and every row of its
    runs' parts (clip parts and blocks; a frame in two would show twice), by frame id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    db = sqlite3.connect(f"file:{lake / 'catalog.db'}?mode=ro", uri=True)
    try:
        tables = {t: db.execute(f"SELECT * FROM {t} ORDER BY id").fetchall() for t in ("clips", "frames")}
        done = db.execute("SELECT run_id, clip_id, frames, corrupt FROM shadow_clips ORDER BY run_id, clip_id").fetchall()
    finally:
        db.close()
    parts = sorted({p for run, _, _, _ in done for p in (lake / "parts" / "frames" / f"run={run}").glob("*.parquet")})
    rows = pa.concat_tables([pq.read_table(p) for p in parts]).sort_by("frame_id").to_pylist() if parts else []
    return {"tables": tables, "done": done, "rows": rows}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    """A fleet of 4 clips x 3 frames, the model, and the single-writer reference: one uninterrupted `--workers 1` run
    on a lake catalog, its snapshot and its selection files."""
    root = tmp_path_factory.mktemp("lake_kill")
    fleet = make_fleet(root / "fleet", clips=CLIPS, frames=3)
    env = {"root": root, "fleet": fleet, "model": untrained_model(root, fleet)}
    ref = root / "ref"
    cli("engine", "catalog", "create", "--out", ref, "--backend", "lake")
    cli("engine", "shadow", "--onnx", env["model"], "--data", fleet, "--catalog", ref, "--workers", "1", "--quiet")
    env["ref"] = snapshot(ref)
    assert len(env["ref"]["done"]) == CLIPS and len(env["ref"]["rows"]) == 3 * CLIPS
    env["selections"] = mine_all(ref, root / "ref_sel")
    return env


def group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(d))
    return out


def wait_for(what: str, ready, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the shadow run ended (rc {proc.returncode}) before {what}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the shadow run did not reach {what} within {WAIT_S} s")
        time.sleep(0.01)


def run_dir(lake: Path) -> Path:
    return lake / "parts" / "frames" / "run=1"


def whole_parts(lake: Path) -> dict[Path, tuple[int, int]]:
    d = run_dir(lake)
    return {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in d.glob("clip=*.parquet")} if d.is_dir() else {}


def done_clips(lake: Path) -> set[int]:
    db = sqlite3.connect(f"file:{lake / 'catalog.db'}?mode=ro", uri=True)
    try:
        return {c for (c,) in db.execute("SELECT clip_id FROM shadow_clips WHERE run_id = 1")}
    finally:
        db.close()


@pytest.mark.parametrize("kill", ["group", "worker", "driver", "poll", "compact"])
def test_kill_9_then_rerun_equals_a_single_writer_run(env, tmp_path, kill, monkeypatch):
    lake = tmp_path / "lake"
    cli("engine", "catalog", "create", "--out", lake, "--backend", "lake")
    sig = tmp_path / "signals"
    sig.mkdir()
    hook = {"dir": str(sig), "worker": 3, "driver": 2 if kill == "group" else None}
    if kill == "compact":
        hook = {"dir": str(sig), "block_rows": 6, "compact": True}
    pythonpath = os.pathsep.join(p for p in (str(REPO / "tests"), os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-c", "import lake_kill_hook; lake_kill_hook.main()"] if kill != "poll" else \
        [sys.executable, "-m", "hydranet.cli"]
    proc = subprocess.Popen([*cmd, *shadow_args(env, lake)], cwd=REPO, start_new_session=True, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": pythonpath, "LAKE_KILL_HOOK": json.dumps(hook)})
    pgid = proc.pid
    part = run_dir(lake)
    try:
        if kill == "poll":
            wait_for("a first part", lambda: any(part.glob("clip=*.parquet")) if part.is_dir() else False, proc)
            os.killpg(pgid, signal.SIGKILL)
        elif kill == "compact":
            wait_for("its first block", lambda: (sig / "compact").exists(), proc)
            assert [p.name for p in part.glob("block=*")] == [f"block=1-2.parquet.tmp-{(sig / 'compact').read_text()}"]
            os.killpg(pgid, signal.SIGKILL)
        else:
            wait_for("its kill point", lambda: (sig / "worker-3").exists() and frames_path(lake, 1, 4).exists()
                     and (kill != "group" or (sig / "driver-2").exists()), proc)
            assert [p.name for p in part.glob("clip=3.parquet*")] == [f"clip=3.parquet.tmp-{(sig / 'worker-3').read_text()}"]
            if kill == "group":
                os.killpg(pgid, signal.SIGKILL)
            elif kill == "worker":
                os.kill(int((sig / "worker-3").read_text()), signal.SIGKILL)
            else:
                os.kill(proc.pid, signal.SIGKILL)
        err = proc.communicate(timeout=WAIT_S)[1] if kill == "worker" else ""
        proc.wait(timeout=WAIT_S)
        (sig / "go").write_text("")  # a worker that outlived its driver would finish its part now, and go on
        deadline = time.monotonic() + 30
        while group(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not group(pgid), f"processes of the killed run still alive (orphaned workers): {group(pgid)}"
    finally:
        if group(pgid):
            os.killpg(pgid, signal.SIGKILL)
        proc.stderr.close()
    if kill == "worker":  # the driver outlived its worker: one line, the finished clips committed
        assert proc.returncode == 2 and "Traceback" not in err, err
        assert "error: a shadow worker process died (killed, or out of memory)" in err and "rerun the same command" in err
        assert done_clips(lake) == {1, 2, 4}
    else:
        assert proc.returncode == -signal.SIGKILL

    # the killed state: only marked clips are read, whole parts only, a half part is a temp
    done, before = done_clips(lake), whole_parts(lake)
    if kill == "compact":
        assert done == {1, 2, 3, 4} and set(before) == {frames_path(lake, 1, c) for c in (1, 2, 3, 4)}
    elif kill != "poll":
        assert done <= {1, 2, 4} and set(before) == {frames_path(lake, 1, c) for c in (1, 2, 4)}
        assert kill != "group" or 2 not in done  # the marker's transaction died with the driver
    from data_engine.catalog import Catalog

    with Catalog(lake) as cat:
        table = cat.table(1, status=None)
    names = {name for cid, _, name, _ in env["ref"]["tables"]["clips"] if cid in done}
    assert sorted(table["frame_id"].tolist()) == [r["frame_id"] for r in env["ref"]["rows"] if r["clip"] in names]

    if kill == "compact":  # the rerun compacts as the killed run would have
        import data_engine.lake as lake_mod

        monkeypatch.setattr(lake_mod, "BLOCK_ROWS", 6)
    out = cli(*shadow_args(env, lake))  # the rerun, to completion
    left = len(before)
    assert f"{CLIPS - left} of {CLIPS} clips shadowed now ({left} done before)" in out, out
    files = sorted(p.name for p in run_dir(lake).iterdir())  # no temp
    if kill == "compact":
        assert files == ["block=1-2.parquet", "block=3-4.parquet"]
    else:
        assert files == [f"clip={c}.parquet" for c in range(1, CLIPS + 1)]
        assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in before} == before  # committed, never rewritten
    got = snapshot(lake)
    ids = [r["frame_id"] for r in got["rows"]]
    assert len(ids) == len(set(ids)) == 3 * CLIPS  # no frame lost, none twice
    assert got == env["ref"]  # row for row, value for value, the single writer's
    assert mine_all(lake, tmp_path / "sel") == env["selections"]  # byte-identical selection files
