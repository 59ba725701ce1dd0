"""The gate's suites and the model registry (docs/data_engine.md "Gate, suites, registry"; the frozen suites themselves
are tests/test_engine_suites.py, the decision on constructed tables tests/test_engine_gate_rule.py): the unit-tests
suite appended in versions, promote/rollback/history with a failure inside promote, and an end-to-end gate of two
tiny trained checkpoints (and a damaged one) through the CLI."""
from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from engine_fixtures import REPO, make_fleet

from data_engine.catalog import Catalog
from data_engine.catalog_schema import CatalogError
from hydranet.io import file_sha256
from data_engine.fleet import FleetConfig
from data_engine.gate import AGGREGATE, GateRule, evaluate_suites, gate
from data_engine.registry import RegistryError, history, production, promote, rollback
from data_engine.suites import (SUITES_FILE, SliceSpec, SuiteError, SuitesConfig, add_unit_tests, generate_suites,
                                load_suites)

TINY = dict(clips=1, frames=2, image_width=96, image_height=64)


# -- the unit-tests suite ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    return make_fleet(tmp_path_factory.mktemp("gate_fleet") / "fleet", clips=2, frames=2, seed=5)


def oracle(frame: Path) -> dict:
    return json.loads((frame / "labels.json").read_text())


def test_unit_tests_append_in_versions_idempotently(fleet, tmp_path, monkeypatch):
    from hydranet.data.sim_reader import SimDataset

    out = generate_suites(tmp_path / "s", SuitesConfig(**TINY, slices={"day": SliceSpec()}), FleetConfig(), progress=False)
    f0, f1 = fleet / "scenes" / "clip_00000" / "000001", fleet / "scenes" / "clip_00001" / "000000"
    got = add_unit_tests(out, [(f0, oracle(f0))])
    assert (got["added"], got["frames"], got["version"]) == (1, 1, 1)
    assert add_unit_tests(out, [(f0, oracle(f0))])["added"] == 0  # the same frame and label: nothing new
    assert json.loads((out / SUITES_FILE).read_text())["unit_tests"]["version"] == 1
    # a kill between writing version 2 and committing it: version 1 stays in force, the orphan is rebuilt next time
    import data_engine.suites as suites_mod

    real = suites_mod._atomic_text
    monkeypatch.setattr(suites_mod, "_atomic_text", lambda p, t: (_ for _ in ()).throw(KeyboardInterrupt())
                        if p.name == SUITES_FILE else real(p, t))
    with pytest.raises(KeyboardInterrupt):
        add_unit_tests(out, [(f1, oracle(f1))])
    monkeypatch.undo()
    assert load_suites(out)["suites"]["unit_tests"]["path"].name == "v0001"
    got = add_unit_tests(out, [(f0, oracle(f0)), (f1, oracle(f1))])
    assert (got["added"], got["existing"], got["frames"], got["version"]) == (1, 1, 2, 2)
    suites = load_suites(out)["suites"]
    assert list(suites) == ["day", "unit_tests"] and suites["unit_tests"]["frames"] == 2
    ds = SimDataset(suites["unit_tests"]["path"])
    labels = sorted(json.dumps(ds[i]["labels"], sort_keys=True) for i in range(len(ds)))
    assert labels == sorted(json.dumps(oracle(f), sort_keys=True) for f in (f0, f1))
    assert np.array_equal(ds[0]["images"][0] if ds.scenes[0]["source"]["frame"] == str(f0.resolve()) else ds[1]["images"][0],
                          SimDataset(fleet)[1]["images"][0])
    # a changed label of the same frame is a new entry (a new version), never a silent replacement
    relabelled = oracle(f0)
    relabelled["cameras"]["CAM_FRONT"]["boxes2d"] = []
    assert add_unit_tests(out, [(f0, relabelled)])["frames"] == 3
    assert sorted(p.name for p in (out / "unit_tests").iterdir()) == ["v0002", "v0003"]  # current and the one before
    # regenerating the frozen slices keeps the unit tests
    generate_suites(out, SuitesConfig(**TINY, slices={"day": SliceSpec()}), FleetConfig(), overwrite=True, progress=False)
    assert load_suites(out)["suites"]["unit_tests"]["frames"] == 3


def test_unit_tests_refuse_partial_labels_and_foreign_folders(fleet, tmp_path):
    out = generate_suites(tmp_path / "s", SuitesConfig(**TINY, slices={"day": SliceSpec()}), FleetConfig(), progress=False)
    f0 = fleet / "scenes" / "clip_00000" / "000000"
    two_d_only = {"cameras": oracle(f0)["cameras"]}
    with pytest.raises(SuiteError, match="has no 'boxes3d'"):
        add_unit_tests(out, [(f0, two_d_only)])
    one_cam = {**oracle(f0), "cameras": {"CAM_FRONT": oracle(f0)["cameras"]["CAM_FRONT"]}}
    with pytest.raises(SuiteError, match="needs a label for every camera"):
        add_unit_tests(out, [(f0, one_cam)])
    bad = oracle(f0)
    bad["boxes3d"] = [{"class": "spaceship", "center": [1, 1, 1], "size": [1, 1, 1], "yaw": 0}]
    with pytest.raises(SuiteError, match="bad label .*spaceship"):
        add_unit_tests(out, [(f0, bad)])
    with pytest.raises(SuiteError, match="is not a frame folder of a fleet"):
        add_unit_tests(out, [(tmp_path, oracle(f0))])
    with pytest.raises(SuiteError, match="not a suites folder"):
        add_unit_tests(fleet, [(f0, oracle(f0))])
    assert json.loads((out / SUITES_FILE).read_text())["unit_tests"] is None  # nothing half-added


# -- registry ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(fleet, tmp_path_factory) -> dict[str, Path]:
    """Two engine_tiny checkpoints (2 steps, seeds 0 and 1) and a damaged copy of the first (its depth output
    shifted by e^6), plus a metadata-only HydraNet ONNX file for the registry."""
    import onnx
    import torch
    from onnx import TensorProto, helper

    from deploy.metadata import FORMAT, FORMAT_VERSION, PREFIX, REQUIRED_KEYS, set_metadata
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    root = tmp_path_factory.mktemp("gate_models")
    out = {}
    for name, seed in (("a", 0), ("b", 1)):
        cfg = load_experiment(REPO / "configs" / "engine_tiny.yaml", [f"data.root={fleet}", "steps=2", "checkpoint_every=2",
                                                                       "batch_size=1", "optim.warmup_steps=1", "device=cpu",
                                                                       f"seed={seed}"])
        train(cfg, root / name, progress=False)
        out[name] = root / name
    ckpt = torch.load(root / "a" / "checkpoint.pt", weights_only=True)
    ckpt["model"]["heads.depth.head.out.bias"] += 6.0
    (root / "damaged").mkdir()
    torch.save(ckpt, root / "damaged" / "checkpoint.pt")
    out["damaged"] = root / "damaged"
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g)
    own = {"format": {"name": FORMAT, "version": FORMAT_VERSION},  # an export of a: promote checks its source
           "source": {"checkpoint_sha256": file_sha256(root / "a" / "checkpoint.pt")}}
    set_metadata(m, {PREFIX + k: json.dumps(own.get(k, {})) for k in (*REQUIRED_KEYS, "source")})
    onnx.save(m, str(root / "a.onnx"))
    out["onnx"] = root / "a.onnx"
    return out


def test_promote_rollback_history(models, tmp_path):
    cat = tmp_path / "cat.db"
    assert production(cat, missing_ok=True) is None
    a = promote(cat, models["a"], onnx=models["onnx"], note="first")
    assert a["checkpoint"] == str((models["a"] / "checkpoint.pt").resolve()) and a["onnx"] == str(models["onnx"].resolve())
    assert production(cat)["id"] == a["id"] and production(cat)["note"] == "first"
    assert promote(cat, models["a"] / "checkpoint.pt", onnx=models["onnx"])["id"] == a["id"]  # already production: no-op
    b = promote(cat, models["b"], note="second")
    assert b["previous_id"] == a["id"] and production(cat)["sha256"] == b["sha256"] != a["sha256"]
    back = rollback(cat)
    assert back["sha256"] == a["sha256"] and back["onnx"] == a["onnx"] and back["action"] == "rollback"
    assert production(cat)["id"] == back["id"]
    with pytest.raises(RegistryError, match="has no previous production to roll back to"):
        rollback(cat)
    h = history(cat)
    assert [(r["role"], r["action"]) for r in h] == [("retired", "promote"), ("rolled_back", "promote"),
                                                      ("production", "rollback")]
    assert all(r["status"] == "ok" for r in h)
    with Catalog(cat) as c:  # exactly one production entry, enforced by the schema
        with pytest.raises(sqlite3.IntegrityError):
            c.db.execute("UPDATE registry SET role = 'production' WHERE id = 1")
    Catalog(tmp_path / "empty.db", create=True).close()
    with pytest.raises(RegistryError, match="has no production model"):
        rollback(tmp_path / "empty.db")
    with pytest.raises(RegistryError, match="has no production model; promote one"):
        production(tmp_path / "empty.db")


def test_failure_inside_promote_leaves_the_old_production(models, tmp_path, monkeypatch):
    import data_engine.registry as reg

    cat = tmp_path / "cat.db"
    a = promote(cat, models["a"])
    real = reg._insert_entry

    def crash(c, entry):
        real(c, entry)  # the new entry is written, then the process fails before COMMIT
        raise RuntimeError("crash inside the promotion (simulated)")

    monkeypatch.setattr(reg, "_insert_entry", crash)
    with pytest.raises(RuntimeError, match="simulated"):
        promote(cat, models["b"])
    monkeypatch.undo()
    assert production(cat)["id"] == a["id"] and len(history(cat)) == 1
    with Catalog(cat) as c:
        assert c.db.execute("SELECT count(*) FROM models").fetchone()[0] == 1


def test_missing_or_changed_production_is_an_error_at_use_time(models, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(models["b"], run)
    cat = tmp_path / "cat.db"
    promote(cat, models["a"])
    promote(cat, run)
    with open(run / "checkpoint.pt", "ab") as f:
        f.write(b"\0")
    with pytest.raises(RegistryError, match=r"production checkpoint .*run/checkpoint.pt .* changed since it was promoted"):
        production(cat)
    assert history(cat)[-1]["status"] == "checkpoint changed"
    (run / "checkpoint.pt").unlink()
    with pytest.raises(RegistryError, match="no longer exists"):
        production(cat)
    assert rollback(cat)["sha256"] == production(cat)["sha256"]  # rolling back to an intact model still works


def test_registry_upgrades_the_placeholder_only_when_empty(models, tmp_path):
    """A version-1 catalog's registry placeholder: upgraded by the catalog's migration when empty (then a
    promotion works), refused when it holds rows."""
    from engine_catalogs import write_v1_catalog

    empty = write_v1_catalog(tmp_path / "empty.db", registry="placeholder", rows=False)
    assert promote(empty, models["a"])["role"] == "production"
    full = write_v1_catalog(tmp_path / "full.db", registry="placeholder", rows=True)
    with pytest.raises(CatalogError, match="registry rows of an older layout"):
        promote(full, models["a"])


# -- end to end: two trained checkpoints on real suites ------------------------------------------------------
@pytest.fixture(scope="module")
def small_suites(fleet, tmp_path_factory) -> Path:
    slices = {k: SuitesConfig().slices[k] for k in ("cones_on_road",)}
    out = generate_suites(tmp_path_factory.mktemp("e2e") / "suites", SuitesConfig(**TINY, slices=slices), FleetConfig(),
                          progress=False)
    f = fleet / "scenes" / "clip_00001" / "000001"
    add_unit_tests(out, [(f, oracle(f))])
    return out


@pytest.fixture(scope="module")
def gated(models, small_suites, tmp_path_factory) -> dict:
    """One catalog in which a, b and the damaged model were gated (so their suite metrics are cached)."""
    cat = tmp_path_factory.mktemp("gated") / "cat.db"
    loose = GateRule(tolerance=1.0, aggregate_tolerance=1.0)
    return {"cat": cat, "ab": gate(models["b"], models["a"], small_suites, loose, catalog=cat),
            "bad": gate(models["damaged"], models["a"], small_suites, catalog=cat)}


def warm_catalog(gated, tmp_path) -> Path:
    cat = tmp_path / "cat.db"
    shutil.copy(gated["cat"], cat)
    return cat


def test_gate_end_to_end_with_cache(models, small_suites, gated, tmp_path, monkeypatch):
    import data_engine.gate as gate_mod

    rep = gated["ab"]
    heads = ["det2d", "lanes", "drivable", "depth", "det3d"]
    assert [(r["slice"], r["head"]) for r in rep["rows"]] == [(s, h) for s in ("cones_on_road", "unit_tests", AGGREGATE)
                                                                             for h in heads]
    assert rep["promote"] and all(math.isfinite(r["candidate"]) and math.isfinite(r["production"]) for r in rep["rows"])
    depth = next(r for r in rep["rows"] if r["slice"] == "cones_on_road" and r["head"] == "depth")
    assert depth["metric"] == "abs_rel" and depth["higher_is_better"] is False
    # the same number as a plain evaluation of the suite
    from hydranet.evaluate import evaluate_checkpoint

    direct = evaluate_checkpoint(models["a"], small_suites / "cones_on_road", None, progress=False)["model"]["depth"]["abs_rel"]
    assert math.isclose(depth["production"], direct)
    # cached by checkpoint sha256 + suite digest: no model is evaluated again
    cat = warm_catalog(gated, tmp_path)
    monkeypatch.setattr(gate_mod, "_evaluate", lambda *a: pytest.fail("evaluated again despite the cache"))
    again = gate(models["b"], models["a"], small_suites, GateRule(tolerance=1.0, aggregate_tolerance=1.0), catalog=cat)
    assert [r["candidate"] for r in again["rows"]] == [r["candidate"] for r in rep["rows"]]
    table = evaluate_suites(models["a"], small_suites, catalog=cat)
    assert table["cones_on_road"]["depth"] == depth["production"] and set(table) == {"cones_on_road", "unit_tests"}
    with Catalog(cat) as c:
        verdicts = [v for (v,) in c.db.execute("SELECT verdict FROM gate_results ORDER BY id")]
    assert verdicts.count("eval") == 6 and verdicts.count("promote") == 2 and verdicts.count("reject") == 1
    with Catalog(cat) as c:  # the cache keeps every frame's clip and metric states (what the bootstrap resamples)
        cached = [json.loads(m) for (m,) in c.db.execute("SELECT metrics FROM gate_results WHERE verdict = 'eval'")]
    assert all(len(m["clips"]) == m["frames"] == len(m["heads"][h]["states"]) for m in cached for h in heads)
    assert all("rule" in rep and "delta_ci" in r for r in rep["rows"] if r["delta"] is not None)


def test_metrics_cache_without_a_catalog_sits_next_to_the_checkpoint(models, small_suites, tmp_path, monkeypatch):
    import data_engine.gate as gate_mod

    run = tmp_path / "run"
    shutil.copytree(models["a"], run)
    calls, loads = [], []

    def fake(ckpt, data, loaded=None):
        calls.append((Path(data).name, loaded))
        return {"frames": 2, "heads": {"depth": {"metric": "abs_rel", "value": 0.5, "higher_is_better": False}}}

    import hydranet.checkpoint

    model = object()  # what load_model gave: every suite's evaluation gets this one
    monkeypatch.setattr(hydranet.checkpoint, "load_model", lambda c: loads.append(c) or model)
    monkeypatch.setattr(gate_mod, "_evaluate", fake)
    first = evaluate_suites(run, small_suites)
    assert first == evaluate_suites(run, small_suites) and sorted(n for n, _ in calls) == ["cones_on_road", "v0001"]
    assert len(loads) == 1 and all(m is model for _, m in calls)  # loaded once for both suites, never when cached
    assert json.loads((run / "checkpoint.pt.suite_metrics.json").read_text())["sha256"] == file_sha256(run / "checkpoint.pt")
    with open(run / "checkpoint.pt", "ab") as f:  # another model under the same path: evaluated afresh
        f.write(b"\0")
    evaluate_suites(run, small_suites)
    assert len(calls) == 4


def test_damaged_candidate_is_rejected_through_the_cli(models, small_suites, gated, tmp_path, capsys):
    from hydranet.cli import main

    cat = warm_catalog(gated, tmp_path)
    promote(cat, models["a"])
    with pytest.raises(SystemExit) as e:
        main(["engine", "gate", "--candidate", str(models["damaged"]), "--suites", str(small_suites), "--catalog", str(cat),
              "--out", str(tmp_path / "g"), "--promote", "--quiet"])
    assert e.value.code == 1
    out = capsys.readouterr().out
    rep = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert not rep["promote"] and {"cones_on_road", "unit_tests", AGGREGATE} <= set(rep["failing"])
    assert all(r["verdict"] == "fail" for r in rep["rows"] if r["head"] == "depth")
    assert "**verdict: REJECT**" in out and "| cones_on_road | depth | abs_rel (lower is better)" in out
    assert production(cat)["sha256"] == file_sha256(models["a"] / "checkpoint.pt")  # production unchanged
    assert gated["bad"]["failing"] == rep["failing"]


def test_passing_gate_promotes_through_the_cli(models, small_suites, gated, tmp_path, capsys):
    from hydranet.cli import main

    cat = warm_catalog(gated, tmp_path)
    promote(cat, models["a"])
    argv = ["engine", "gate", "--candidate", str(models["b"]), "--suites", str(small_suites), "--catalog", str(cat),
            "--out", str(tmp_path / "g"), "--promote", "--quiet", "--set", "gate.tolerance=1", "--set", "gate.aggregate_tolerance=1"]
    assert main(argv) == 0
    assert "**verdict: PROMOTE**" in capsys.readouterr().out
    assert production(cat)["checkpoint"] == str((models["b"] / "checkpoint.pt").resolve())
    assert main(["engine", "rollback", "--catalog", str(cat)]) == 0
    assert production(cat)["checkpoint"] == str((models["a"] / "checkpoint.pt").resolve())
    assert main(["engine", "registry", "--catalog", str(cat)]) == 0
    text = capsys.readouterr().out
    assert text.count("| promote |") == 2 and "| **production** | rollback |" in text
