"""Fault rows of `hydranet engine ...`: a missing or foreign fleet, models that are not hydranet ONNX
or lack the embedding, a fleet of another rig, catalogs that are corrupt, foreign or newer, bad
budgets, strategies, triggers, executors and frames. One row per case, through the real CLI."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from faultlib import ENGINE, Case, Env, cat_copy, foreign_sqlite, junk, mine, params, run_case

REPO = Path(__file__).resolve().parents[2]


ENV = ENGINE  # filled by conftest's engine_env (an untrained exported model, shadowed over the fault dataset)
pytestmark = pytest.mark.usefixtures("engine_env")


def shadow(tmp: Path, env: Env, model=None, fleet=None, *extra) -> list:
    return ["engine", "shadow", "--onnx", model or ENV["model"], "--data", fleet or env.dataset, "--catalog", tmp / "c.db",
            "--quiet", *extra]


def newer(tmp: Path) -> Path:
    p = cat_copy(tmp)
    db = sqlite3.connect(str(p))
    db.execute("PRAGMA user_version = 7")
    db.close()
    return p


def version_1(tmp: Path, placeholder_row: bool = False, version: int = 1) -> Path:
    """The engine catalog as schema version 1 left it: the registry an (empty) 5-column placeholder."""
    p = cat_copy(tmp)
    db = sqlite3.connect(str(p))
    db.execute("DROP TABLE registry")
    db.execute("CREATE TABLE registry (id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL, role TEXT NOT NULL, "
               "previous_id INTEGER, promoted REAL)")
    if placeholder_row:
        db.execute("INSERT INTO registry (model_id, role) VALUES (1, 'production')")
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()
    return p


def upgraded(tmp: Path) -> None:
    db = sqlite3.connect(str(tmp / "c.db"))
    version, cols = db.execute("PRAGMA user_version").fetchone()[0], [r[1] for r in db.execute("PRAGMA table_info(registry)")]
    db.close()
    assert version == 4 and "checkpoint" in cols, (version, cols)
    assert json.loads((tmp / "sel.json").read_text())["items"], "nothing mined from the upgraded catalog"


def left_as_version_1(tmp: Path) -> None:
    db = sqlite3.connect(str(tmp / "c.db"))
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1 and db.execute("SELECT count(*) FROM registry").fetchone()[0]
    db.close()


def no_metadata_onnx(tmp: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g), str(tmp / "plain.onnx"))
    return tmp / "plain.onnx"


def other_rig_fleet(tmp: Path, env: Env) -> Path:
    dst = tmp / "other"
    shutil.copytree(env.dataset, dst)
    meta = json.loads((dst / "dataset.json").read_text())
    meta["rig"]["cameras"] = [c for c in meta["rig"]["cameras"] if c["name"] != "CAM_FRONT"]
    (dst / "dataset.json").write_text(json.dumps(meta))
    return dst


def labelled_selection_then_remine(tmp: Path, env) -> list:
    """Selection 'sel' holds frame Q with a label job; re-mining 'sel' now picks only the other frame P."""
    from data_engine.catalog import Catalog
    from data_engine.label_queue import create_jobs
    from data_engine.labels import open_catalog
    from hydranet.cli import main

    cat = cat_copy(tmp)
    assert main([str(a) for a in mine(tmp, cat, "--budget", "1", "--strategy", "uncertainty", "--name", "probe")]) == 0
    picked = {it["frame_id"] for it in json.loads((tmp / "sel.json").read_text())["items"]}
    with Catalog(cat) as c:
        rows = c.db.execute("SELECT f.id, c.name, f.idx FROM frames f JOIN clips c ON f.clip_id = c.id").fetchall()
    other = next(r for r in rows if r[0] not in picked)
    (tmp / "labelled.json").write_text(json.dumps({"name": "sel", "frames": [{"clip": other[1], "frame": other[2]}]}))
    with open_catalog(cat) as c:
        assert create_jobs(c, tmp / "labelled.json", "oracle")["created"] == 1
    return mine(tmp, cat, "--budget", "1", "--strategy", "uncertainty", "--name", "sel")


def job_kept(tmp: Path) -> None:
    from data_engine.catalog import Catalog

    with Catalog(tmp / "c.db") as c:
        n = c.db.execute("SELECT count(*) FROM selection_items i JOIN selections s ON i.selection_id = s.id "
                         "WHERE s.name = 'sel'").fetchone()[0]
    assert n == 0, "the labelled selection was replaced"


CASES = [
    Case("trigger-threshold-nan", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--strategy", "triggers", "--set",
                                                    "triggers.det2d_uncertain.threshold=.nan"),
         words=("det2d_uncertain", "threshold")),
    Case("trigger-threshold-string", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--strategy", "triggers", "--set",
                                                       "triggers.det2d_uncertain.threshold=high"),
         words=("det2d_uncertain", "threshold")),
    Case("remine-labelled-selection", labelled_selection_then_remine, words=("'sel'", "label jobs", "new --name"),
         check=job_kept),
    Case("shadow-missing-fleet", lambda t, e: shadow(t, e, fleet=t / "nope"), words=("nope", "does not exist", "engine fleet")),
    Case("shadow-fleet-not-a-dataset", lambda t, e: (t / "empty").mkdir() or shadow(t, e, fleet=t / "empty"),
         words=("dataset.json", "missing")),
    Case("shadow-model-missing", lambda t, e: shadow(t, e, model=t / "none.onnx"), words=("none.onnx", "does not exist")),
    Case("shadow-model-not-onnx", lambda t, e: shadow(t, e, model=junk(t, "junk.onnx")), words=("junk.onnx", "not a readable")),
    Case("shadow-model-without-metadata", lambda t, e: shadow(t, e, model=no_metadata_onnx(t)),
         words=("plain.onnx", "no hydranet metadata")),
    Case("shadow-model-without-embedding", lambda t, e: shadow(t, e, model=ENV["noemb"]), words=("noemb.onnx", "embedding",
                                                                                              "re-export")),
    Case("shadow-candidate-without-embedding", lambda t, e: shadow(t, e, None, None, "--candidate-onnx", ENV["noemb"]),
         words=("--candidate", "embedding")),
    Case("shadow-fleet-of-another-rig", lambda t, e: shadow(t, e, fleet=other_rig_fleet(t, e)), words=("CAM_FRONT", "rig")),
    Case("shadow-unknown-executor", lambda t, e: shadow(t, e, None, None, "--executor", "spark"), words=("spark", "local")),
    Case("shadow-workers-zero", lambda t, e: shadow(t, e, None, None, "--workers", "0"), words=("--workers", "at least 1")),
    Case("shadow-corrupt-catalog", lambda t, e: junk(t, "c.db") and shadow(t, e), words=("c.db", "not a readable catalog")),
    Case("mine-missing-catalog", lambda t, e: mine(t, t / "none.db", "--budget", "1"), words=("none.db", "does not exist")),
    Case("mine-corrupt-catalog", lambda t, e: mine(t, junk(t, "bad.db"), "--budget", "1"), words=("bad.db", "not a readable")),
    Case("mine-foreign-sqlite", lambda t, e: mine(t, foreign_sqlite(t), "--budget", "1"), words=("not a hydranet catalog",)),
    Case("mine-newer-schema", lambda t, e: mine(t, newer(t), "--budget", "1"), words=("schema version 7", "newer")),
    Case("mine-version-1-catalog-upgraded", lambda t, e: mine(t, version_1(t), "--budget", "1"), status=0, check=upgraded),
    Case("mine-version-1-placeholder-rows", lambda t, e: mine(t, version_1(t, placeholder_row=True), "--budget", "1"),
         words=("c.db", "registry rows of an older layout", "recreate"), check=left_as_version_1),
    Case("mine-schema-version-0", lambda t, e: mine(t, version_1(t, version=0), "--budget", "1"),
         words=("schema version 0", "cannot upgrade", "recreate")),
    Case("mine-budget-zero", lambda t, e: mine(t, cat_copy(t), "--budget", "0"), words=("--budget", "at least 1")),
    Case("mine-budget-negative", lambda t, e: mine(t, cat_copy(t), "--budget", "-3"), words=("--budget", "at least 1")),
    Case("mine-budget-above-pool", lambda t, e: mine(t, cat_copy(t), "--budget", "500"), words=("500", "larger than the pool")),
    Case("mine-unknown-strategy", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--strategy", "best"),
         words=("best", "hybrid")),
    Case("mine-unknown-unit", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--unit", "scene"), words=("scene", "clip")),
    Case("mine-min-gap-negative", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--set", "mining.min_gap_s=-0.5"),
         words=("mining.min_gap_s", ">= 0", "-0.5")),
    Case("mine-min-gap-nan", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--set", "mining.min_gap_s=.nan"),
         words=("mining.min_gap_s", "finite")),
    Case("mine-min-gap-string", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--set", "mining.min_gap_s=soon"),
         words=("mining.min_gap_s",)),
    Case("mine-unknown-trigger", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--strategy", "triggers", "--set",
                                                  "triggers.sparkle.threshold=1"), words=("sparkle", "known triggers")),
    Case("mine-unknown-run", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--run", "42"), words=("no shadow run 42",)),
    Case("triggers-empty-catalog", lambda t, e: ["engine", "triggers", "--catalog", t / "e.db"],
         words=("e.db", "does not exist")),
    Case("similar-unknown-frame", lambda t, e: ["engine", "similar", "--catalog", cat_copy(t), "--frame", "999"],
         words=("frame 999", "not in shadow run")),
    Case("similar-k-zero", lambda t, e: ["engine", "similar", "--catalog", cat_copy(t), "--frame", "1", "--k", "0"],
         words=("--k", "at least 1")),
    Case("fleet-zero-clips", lambda t, e: ["engine", "fleet", "--out", t / "f", "--clips", "0", "--quiet"], words=("--clips",)),
    Case("fleet-unknown-key", lambda t, e: ["engine", "fleet", "--out", t / "f", "--set", "sim.wheels=3", "--quiet"],
         words=("wheels",)),
    Case("fleet-bad-rate", lambda t, e: ["engine", "fleet", "--out", t / "f", "--set", "rare.cones_on_road=2", "--quiet"],
         words=("cones_on_road",)),
]


@pytest.mark.parametrize("case", params(CASES))
def test_engine_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_ray_executor_without_ray_names_the_package(tmp_path, fault_env, monkeypatch, capsys):
    import importlib.util

    if importlib.util.find_spec("ray") is not None:
        pytest.skip("ray is installed here: the missing-package message cannot be shown")
    run_case(Case("shadow-ray-missing", lambda t, e: shadow(t, e, None, None, "--executor", "ray"),
                  words=("ray", "pip install")), tmp_path, fault_env, monkeypatch, capsys)
