"""Shadow mode end to end on a tiny fleet with the deployed artifact: the embedding output, the
torch-free shadow path that never opens the fleet's truth file, idempotent reruns, kill -9 in the
middle then a rerun equal to an uninterrupted run, pool == in-process rows, corrupt frames recorded,
mining within budget and without repeats, similarity search."""
from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from engine_fixtures import REPO, make_fleet, make_model

from data_engine.catalog import Catalog
from data_engine.mining import OFFLINE, STRATEGIES, mine, similar
from data_engine.shadow import run_shadow
from data_engine.signals import SIGNALS

HAS_RAY = __import__("importlib.util").util.find_spec("ray") is not None and \
    __import__("importlib.util").util.find_spec("pyarrow") is not None


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("engine")
    fleet = make_fleet(root / "fleet")
    model = make_model(root, fleet)
    cat = root / "ref.db"
    run_shadow(model, fleet, cat, workers=1, progress=False)
    return {"root": root, "fleet": fleet, "model": model, "catalog": cat}


def rows(path: Path) -> list[tuple]:
    db = sqlite3.connect(str(path))
    try:
        sig = db.execute(f"SELECT frame_id, status, {', '.join(SIGNALS)} FROM signals ORDER BY frame_id").fetchall()
        emb = db.execute("SELECT frame_id, vec FROM embeddings ORDER BY frame_id").fetchall()
        return sig, emb
    finally:
        db.close()


def assert_same_rows(a: Path, b: Path) -> None:
    (sa, ea), (sb, eb) = rows(a), rows(b)
    assert [r[:2] for r in sa] == [r[:2] for r in sb]
    np.testing.assert_allclose(np.array([r[2:] for r in sa], float), np.array([r[2:] for r in sb], float), rtol=1e-4, atol=1e-5)
    assert [f for f, _ in ea] == [f for f, _ in eb]
    np.testing.assert_allclose(np.stack([np.frombuffer(v, np.float32) for _, v in ea]),
                               np.stack([np.frombuffer(v, np.float32) for _, v in eb]), rtol=1e-4, atol=1e-5)


def test_export_declares_the_embedding(env):
    from deploy.metadata import read_metadata
    from deploy.runtime import HydraRuntime

    md = read_metadata(env["model"])
    assert md["embedding"]["output"] == "embedding" and 64 <= md["embedding"]["dim"] <= 256
    assert md["outputs"]["embedding"]["shape"] == [6, md["embedding"]["dim"]]  # (B*N, C), 6 cameras
    rt = HydraRuntime(env["model"])
    assert "embedding" in rt.output_names and rt.state_spec  # the video queue is carried in shadow mode


def test_catalog_holds_every_frame_with_signals_and_embeddings(env):
    with Catalog(env["catalog"]) as cat:
        t = cat.table(cat.latest_run())
        assert len(t["frame_id"]) == 9 and set(t["status"]) == {"ok"}
        assert np.isfinite(t["det2d_entropy"]).all() and np.isfinite(t["det3d_entropy"]).all()
        assert np.isnan(t["flicker"][t["idx"] < 2]).all() and np.isfinite(t["flicker"][t["idx"] == 2]).all()
        ids, emb = cat.embeddings(cat.latest_run())
        assert emb.shape[0] == 9 and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)


SHADOW_SCRIPT = """
import sys, json
opened = []
sys.addaudithook(lambda ev, args: opened.append(str(args[0])) if ev == "open" and args and isinstance(args[0], str) else None)
from data_engine.shadow import run_shadow
from data_engine.mining import mine
from data_engine.triggers import build_triggers, fire_all
run_shadow(sys.argv[1], sys.argv[2], sys.argv[3], workers=1, progress=False)
fire_all(sys.argv[3], build_triggers())
for s in ("random", "uncertainty", "diversity", "hybrid", "triggers"):
    mine(sys.argv[3], 3, s)
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision") or m in ("sim.render", "moderngl"))
print(json.dumps({"bad": bad, "truth": [p for p in opened if "truth" in p]}))
"""


def test_shadow_and_mining_are_torch_free_and_blind_to_the_truth(env, tmp_path):
    res = subprocess.run([sys.executable, "-c", SHADOW_SCRIPT, str(env["model"]), str(env["fleet"]), str(tmp_path / "c.db")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"bad": [], "truth": []}
    assert (env["fleet"] / "truth" / "scenarios.json").is_file()


def test_rerun_is_idempotent(env, tmp_path):
    cat = tmp_path / "c.db"
    shutil.copy(env["catalog"], cat)
    st = run_shadow(env["model"], env["fleet"], cat, workers=1, progress=False)
    assert st["done_before"] == 3 and st["frames"] == 0
    assert_same_rows(cat, env["catalog"])


def test_process_pool_gives_the_same_rows(env, tmp_path):
    cat = tmp_path / "pool.db"
    run_shadow(env["model"], env["fleet"], cat, workers=2, progress=False)
    assert_same_rows(cat, env["catalog"])


@pytest.mark.skipif(not HAS_RAY, reason="Ray Data is not installed (pip install 'ray[data]', in the dev extra); "
                    "the local executor is tested")
def test_ray_gives_the_same_rows(env, tmp_path, capfd):
    """Ray Data map_batches on a local instance (ray.init(num_cpus=2)), an actor pool of 2 ONNX Runtime
    sessions: the same catalog rows as the in-process run, and the instance is shut down after. Quiet
    (progress=False, `--quiet`): no Ray log line reaches stderr (the driver's core worker logs an
    error-level "max_restarts > 0 ... the actor restart will fail" line per actor otherwise)."""
    import ray

    from data_engine.shadow import RAY_LOG_LINE

    cat = tmp_path / "ray.db"
    capfd.readouterr()
    st = run_shadow(env["model"], env["fleet"], cat, executor="ray", workers=2, progress=False)
    err = capfd.readouterr().err
    assert not [ln for ln in err.splitlines() if RAY_LOG_LINE.match(ln) or "core_worker" in ln or "(raylet)" in ln], err
    assert st["frames"] == 9 and st["corrupt"] == 0
    assert_same_rows(cat, env["catalog"])
    with Catalog(cat) as c:  # every clip written whole, with its done marker
        assert c.db.execute("SELECT count(*), sum(frames) FROM shadow_clips").fetchone() == (3, 9)
    assert not ray.is_initialized()


KILL_SCRIPT = """
import sys, time
from data_engine.catalog import Catalog
orig = Catalog._insert_signals
def slow(self, sql, values):  # inside the clip's transaction: a kill here must lose the whole clip
    orig(self, sql, values)
    print("inserted", flush=True)
    time.sleep(3)
Catalog._insert_signals = slow
from data_engine.shadow import run_shadow
run_shadow(sys.argv[1], sys.argv[2], sys.argv[3], workers=1, progress=False)
"""


def test_kill_9_mid_shadow_then_rerun_equals_an_uninterrupted_run(env, tmp_path):
    cat = tmp_path / "killed.db"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(env["model"]), str(env["fleet"]), str(cat)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = 0
        deadline = time.time() + 120
        while seen < 2 and time.time() < deadline:  # the 2nd clip's rows are inserted, not committed
            line = proc.stdout.readline()
            seen += line.startswith("inserted")
        assert seen == 2, proc.stderr.read()[-2000:]
    finally:
        proc.kill()  # SIGKILL
        proc.wait()
    with Catalog(cat) as c:
        done = c.db.execute("SELECT count(*) FROM shadow_clips").fetchone()[0]
        n = c.db.execute("SELECT count(*) FROM signals").fetchone()[0]
    assert done == 1 and n == 3  # the first clip whole, nothing of the second
    st = run_shadow(env["model"], env["fleet"], cat, workers=1, progress=False)
    assert st["done_before"] == 1 and st["frames"] == 6
    assert_same_rows(cat, env["catalog"])


def test_corrupt_frame_is_recorded_and_skipped(env, tmp_path):
    fleet = tmp_path / "fleet"
    shutil.copytree(env["fleet"], fleet)
    jpg = fleet / "scenes" / "clip_00001" / "000001" / "CAM_BACK.jpg"
    jpg.write_bytes(jpg.read_bytes()[:100])
    st = run_shadow(env["model"], fleet, tmp_path / "c.db", workers=1, progress=False)
    assert st["frames"] == 9 and st["corrupt"] == 1
    with Catalog(tmp_path / "c.db") as c:
        status, error = c.db.execute("SELECT status, error FROM signals WHERE status != 'ok'").fetchone()
        assert status == "corrupt" and "CAM_BACK.jpg" in error
        assert len(c.table(c.latest_run())["frame_id"]) == 8


def _with_nan_weight(src: Path, dst: Path, head: str) -> Path:
    """A copy of the ONNX model whose last bias of `head`'s heatmap branch is NaN (set after the export's
    parity check, as a broken file would carry it)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src))
    init = [i for i in m.graph.initializer if f"heads.{head}." in i.name and "heatmap." in i.name and i.name.endswith(".bias")][-1]
    init.CopyFrom(numpy_helper.from_array(np.full_like(numpy_helper.to_array(init), np.nan), init.name))
    onnx.save(m, str(dst))
    return dst


@pytest.mark.parametrize("head, where, workers", [("det2d", "at frame 0, camera CAM_FRONT of --onnx", 1),
                                                  ("det3d", "at frame 0 of --onnx", 2)])
def test_a_nan_model_marks_every_clip_bad_and_stores_no_signals(env, tmp_path, head, where, workers):
    """Shadow of a model with a NaN weight stored signals of 0.0 marked ok ("9 frames, 0 corrupt"). Now
    every clip is bad (status 'bad', the error naming the output; no signals, predictions, embeddings),
    the run ends with BadClipsError naming the output after writing every clip, and a rerun says it
    again without shadowing anything. A camera head's error names the camera, a BEV head's does not."""
    from data_engine.shadow import BadClipsError

    bad = _with_nan_weight(env["model"], tmp_path / "nan.onnx", head)
    cat = tmp_path / "c.db"
    with pytest.raises(BadClipsError, match=rf"3 of 3 clip\(s\) bad: output {head}\.heatmap non-finite \(NaN\) {where} "
                                            r".*nan\.onnx \(clip clip_00000, the first\).*export it again") as e:
        run_shadow(bad, env["fleet"], cat, workers=workers, progress=False)
    st = e.value.stats
    assert (st["frames"], st["corrupt"], st["bad_clips"]) == (9, 0, 3)
    with Catalog(cat) as c:
        run = c.latest_run()
        assert len(c.table(run)["frame_id"]) == 0  # nothing for triggers or mining to read
        everything = c.table(run, status=None)
        assert list(everything["status"]) == ["bad"] * 9
        assert all(np.isnan(everything[s]).all() for s in SIGNALS)
        assert c.db.execute("SELECT count(*) FROM embeddings").fetchone() == (0,)
        assert c.db.execute("SELECT count(*) FROM signals WHERE predictions != '{}' OR error NOT LIKE ?",
                            (f"output {head}.heatmap non-finite%",)).fetchone() == (0,)
    with pytest.raises(BadClipsError, match=r"3 of 3 clip\(s\) bad") as e:
        run_shadow(bad, env["fleet"], cat, workers=1, progress=False)
    assert (e.value.stats["done_before"], e.value.stats["frames"]) == (3, 0)


def test_a_refused_nan_run_is_not_the_default_run(env, tmp_path):
    """After a good run, a NaN model's refused run (every frame 'bad') is not what mine, report and triggers
    read by default: the last good run is; named with --run it is still there."""
    from data_engine.shadow import BadClipsError

    cat = tmp_path / "c.db"
    run_shadow(env["model"], env["fleet"], cat, workers=1, progress=False)
    with pytest.raises(BadClipsError):
        run_shadow(_with_nan_weight(env["model"], tmp_path / "nan.onnx", "det2d"), env["fleet"], cat, workers=1,
                   progress=False)
    with Catalog(cat) as c:
        runs = [r for (r,) in c.db.execute("SELECT id FROM shadow_runs ORDER BY id")]
        assert len(runs) == 2 and c.latest_run() == runs[0] and c.latest_run(runs[1]) == runs[1]


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s not in OFFLINE])  # offline: test_engine_intervals.py
@pytest.mark.parametrize("unit", ["frame", "clip"])
def test_mining_respects_the_budget_without_repeats(env, tmp_path, strategy, unit):
    cat = tmp_path / "c.db"
    shutil.copy(env["catalog"], cat)
    budget = 4 if unit == "frame" else 2
    sel = mine(cat, budget, strategy, unit=unit)
    ids = [it["frame_id"] for it in sel["items"]]
    assert len(ids) == budget and len(set(ids)) == budget
    assert all(it["reason"]["strategy"].startswith(("random", "uncertainty", "diversity", "hybrid", "triggers"))
               for it in sel["items"])
    if unit == "clip":
        assert all(len(it["frame_ids"]) == 3 for it in sel["items"])
    with Catalog(cat) as c:
        assert c.db.execute("SELECT count(*) FROM selection_items").fetchone()[0] == budget
    mine(cat, budget, strategy, unit=unit)  # same name again: replaced, not added
    with Catalog(cat) as c:
        assert c.db.execute("SELECT count(*) FROM selection_items").fetchone()[0] == budget


def test_similarity_returns_the_query_first(env):
    with Catalog(env["catalog"]) as c:
        ids = c.table(c.latest_run())["frame_id"]
    for q in ids[[0, 4, 8]]:
        res = similar(env["catalog"], int(q), k=5)
        assert res[0]["frame_id"] == q and len(res) == 5 and len({r["frame_id"] for r in res}) == 5
        assert res[0]["similarity"] == pytest.approx(1.0, abs=1e-5)
        assert all(a["similarity"] >= b["similarity"] - 1e-6 for a, b in zip(res[1:], res[2:]))


def test_quiet_keeps_ray_log_lines_off_stderr_and_everything_else_on(capfd):
    import os

    from data_engine.shadow import without_ray_log_lines

    ray_line = (b"[2026-12-02 14:10:59,582 E 11609 11609] core_worker.cc:2465: Actor with class name: 'MapWorker' has "
                b"constructor arguments in the object store and max_restarts > 0. the actor restart will fail.\n")
    with without_ray_log_lines(True):
        os.write(2, ray_line)
        os.write(2, b"UserWarning: kept\n")
        os.write(2, b"[2026-12-02 14:11:00,001 W 1 2] raylet_client.cc:7: another\n")
    assert capfd.readouterr().err == "UserWarning: kept\n"
    with without_ray_log_lines(False):  # not quiet: Ray's lines pass
        os.write(2, ray_line)
    assert capfd.readouterr().err == ray_line.decode()
