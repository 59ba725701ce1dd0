"""Fault rows of `hydranet engine suites | gate | promote | rollback | registry`: bad suite configs, an
existing or foreign --out, suites folders that are missing, corrupt or modified, missing or corrupt
checkpoints and ONNX files, a gate rule that cannot hold, catalogs without (or with a vanished)
production, rollback past the first model, an old registry layout. One row per case, through the CLI."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from faultlib import Case, Env, foreign_sqlite, junk, params, run_case

REPO = Path(__file__).resolve().parents[2]
ENV: dict = {}


@pytest.fixture(scope="module")
def gate_env(fault_env: Env, tmp_path_factory) -> dict:
    """A one-slice suites folder (1 clip, 2 frames, 64x48) and a tiny checkpoint (1 step, CAM_FRONT; det2d, drivable,
    depth: heads a 2-frame suite always has something to score for)."""
    from data_engine.fleet import FleetConfig
    from data_engine.suites import SliceSpec, SuitesConfig, generate_suites
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    root = tmp_path_factory.mktemp("gate_faults")
    suites = generate_suites(root / "suites", SuitesConfig(clips=1, frames=2, image_width=64, image_height=48,
                                                           slices={"day": SliceSpec()}), FleetConfig(), progress=False)
    cfg = load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={fault_env.dataset}", "data.cameras=[CAM_FRONT]",
                                                          "data.image_size=[64,64]", "device=cpu", "steps=1",
                                                          "checkpoint_every=1", "batch_size=1", "optim.warmup_steps=1",
                                                          # heads every 2-frame suite can score (a sign may be absent)
                                                          "model.tasks=[{name: det2d}, {name: drivable}, {name: depth}]"])
    train(cfg, root / "run", progress=False)
    return {"suites": suites, "run": root / "run"}


@pytest.fixture(autouse=True)
def _gate(gate_env):
    ENV.update(gate_env)


def run_copy(tmp: Path, name: str = "run") -> Path:
    shutil.copytree(ENV["run"], tmp / name)
    return tmp / name


def suites_copy(tmp: Path) -> Path:
    shutil.copytree(ENV["suites"], tmp / "s")
    return tmp / "s"


def suites(tmp: Path, *extra) -> list:
    return ["engine", "suites", "--out", tmp / "out", "--quiet", "--clips", "1", "--set", "suites.frames=1",
            "--set", "suites.slices={day: {}}", *extra]


def gate(tmp: Path, *extra, candidate=None, suites_dir=None) -> list:
    return ["engine", "gate", "--candidate", candidate or ENV["run"], "--suites", suites_dir or ENV["suites"], "--quiet",
            "--out", tmp / "g", *extra]


def training_fleet_suites(tmp: Path, env) -> list:
    """A slice frozen from the fault dataset, the very data ENV["run"] trained on (its data.root)."""
    from hydranet.cli import main

    assert main(["engine", "suites", "--from-fleet", str(env.dataset), "--out", str(tmp / "fs"), "--quiet",
                 "--slice", "all=clip:scene_0000"]) == 0
    return gate(tmp, "--production", ENV["run"], suites_dir=tmp / "fs")


def catalog(tmp: Path, *runs: Path) -> Path:
    """A catalog whose registry promoted `runs` in order."""
    from data_engine.registry import promote

    for r in runs:
        promote(tmp / "c.db", r)
    return tmp / "c.db"


def edited_jpg(tmp: Path) -> Path:
    s = suites_copy(tmp)
    jpg = next((s / "day").rglob("CAM_FRONT.jpg"))
    jpg.write_bytes(jpg.read_bytes() + b"\0")
    return s


def without_slice(tmp: Path) -> Path:
    s = suites_copy(tmp)
    shutil.rmtree(s / "day")
    return s


def corrupt_index(tmp: Path) -> Path:
    s = suites_copy(tmp)
    (s / "suites.json").write_text("{not json")
    return s


def nan_checkpoint(tmp: Path) -> Path:
    import torch

    run = run_copy(tmp)
    ckpt = torch.load(run / "checkpoint.pt", weights_only=True)
    k = next(iter(ckpt["model"]))
    ckpt["model"][k] = ckpt["model"][k].float() * float("nan")
    torch.save(ckpt, run / "checkpoint.pt")
    return run


def changed(path: Path) -> Path:
    with open(path / "checkpoint.pt", "ab") as f:
        f.write(b"\0")
    return path


def vanished_previous(tmp: Path, env: Env) -> list:
    a, b = run_copy(tmp, "a"), run_copy(tmp, "b")
    changed(b)  # another sha256: another model
    cat = catalog(tmp, a, b)
    shutil.rmtree(a)
    return ["engine", "rollback", "--catalog", cat]


def old_layout_registry(tmp: Path) -> Path:
    from data_engine.catalog import Catalog

    with Catalog(tmp / "c.db", create=True) as c:  # a version-1 catalog whose registry placeholder holds a row
        c.db.execute("DROP TABLE registry")
        c.db.execute("CREATE TABLE registry (id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL, role TEXT NOT NULL, "
                     "previous_id INTEGER, promoted REAL)")
        c.db.execute("INSERT INTO registry (model_id, role) VALUES (1, 'production')")
        c.db.execute("PRAGMA user_version = 1")
    return tmp / "c.db"


def empty_catalog(tmp: Path) -> Path:
    from data_engine.catalog import Catalog

    Catalog(tmp / "c.db", create=True).close()
    return tmp / "c.db"


def production_is(name: str):
    """check: the catalog's production is still the run `name` under tmp."""
    def check(tmp: Path) -> None:
        from data_engine.registry import production

        assert production(tmp / "c.db", verify=False)["checkpoint"] == str((tmp / name / "checkpoint.pt").resolve())
    return check


def untouched(tmp: Path) -> None:
    assert (tmp / "plain" / "keep.txt").read_text() == "x" and not list(tmp.glob("*.tmp-*"))


CASES = [
    # engine suites
    Case("suites-clips-zero", lambda t, e: suites(t, "--clips", "0"), words=("--clips", "at least 1")),
    Case("suites-config-clips-zero", lambda t, e: ["engine", "suites", "--out", t / "o", "--set", "suites.clips=0"],
         words=("suites.clips", "at least 1")),
    Case("suites-out-exists", lambda t, e: suites(t, "--out", suites_copy(t)), words=("exists", "--overwrite")),
    Case("suites-overwrite-foreign-folder", lambda t, e: (t / "plain").mkdir() or (t / "plain" / "keep.txt").write_text("x")
         and suites(t, "--out", t / "plain", "--overwrite"), words=("not a suites folder", "not replaced"), check=untouched),
    Case("suites-overwrite-corrupt-index", lambda t, e: suites(t, "--out", corrupt_index(t), "--overwrite"),
         words=("unreadable suites.json", "move or delete")),
    Case("suites-unknown-key", lambda t, e: suites(t, "--set", "suites.clip=1"), words=("suites.clip", "allowed keys")),
    Case("suites-unknown-rare", lambda t, e: suites(t, "--set", "suites.slices={x: {rare: [meteor]}}"),
         words=("meteor", "cones_on_road")),
    Case("suites-unknown-weather", lambda t, e: suites(t, "--set", "suites.slices={x: {weather: snow}}"),
         words=("snow", "clear")),
    Case("suites-slice-named-unit-tests", lambda t, e: suites(t, "--set", "suites.slices={unit_tests: {}}"),
         words=("unit_tests",)),
    Case("suites-night-crossing-by-day", lambda t, e: suites(t, "--set",
                                                             "suites.slices={x: {rare: [night_pedestrian_crossing]}}"),
         words=("night_pedestrian_crossing", "time_of_day: night")),
    Case("suites-empty-slices", lambda t, e: suites(t, "--set", "suites.slices={}"), words=("suites.slices", "empty")),
    Case("suites-half-image-size", lambda t, e: suites(t, "--set", "suites.image_width=64"),
         words=("image_width", "image_height")),
    Case("suites-bad-fleet-config", lambda t, e: suites(t, "--fleet-set", "sim.wheels=3"), words=("wheels",)),
    # engine gate
    Case("gate-slice-from-the-training-fleet", training_fleet_suites, words=("slice 'all'", "trained on", "not held out"),
         check=lambda t: None if not (t / "g").exists() else pytest.fail("a gate report was written")),
    Case("gate-suites-missing", lambda t, e: gate(t, "--production", ENV["run"], suites_dir=t / "none"),
         words=("none", "does not exist", "engine suites")),
    Case("gate-suites-not-a-suites-folder", lambda t, e: gate(t, "--production", ENV["run"], suites_dir=e.dataset),
         words=("suites.json", "not a suites folder")),
    Case("gate-suites-index-corrupt", lambda t, e: gate(t, "--production", ENV["run"], suites_dir=corrupt_index(t)),
         words=("suites.json", "not valid JSON", "--overwrite")),
    Case("gate-suite-modified", lambda t, e: gate(t, "--production", ENV["run"], suites_dir=edited_jpg(t)),
         words=("suite day", "modified", "--overwrite")),
    Case("gate-suite-slice-deleted", lambda t, e: gate(t, "--production", ENV["run"], suites_dir=without_slice(t)),
         words=("suite day", "missing")),
    Case("gate-candidate-missing", lambda t, e: gate(t, "--production", ENV["run"], candidate=t / "nope"),
         words=("nope", "does not exist")),
    Case("gate-candidate-corrupt", lambda t, e: gate(t, "--production", ENV["run"], candidate=junk(t, "bad.pt")),
         words=("bad.pt", "could not be read")),
    Case("gate-candidate-nan-weights", lambda t, e: gate(t, "--production", ENV["run"], candidate=nan_checkpoint(t)),
         words=("non-finite",)),
    Case("gate-production-missing", lambda t, e: gate(t, "--production", t / "gone"), words=("gone", "does not exist")),
    Case("gate-no-production", lambda t, e: gate(t), words=("--production", "--catalog")),
    Case("gate-catalog-missing", lambda t, e: gate(t, "--catalog", t / "c.db"), words=("c.db", "does not exist")),
    Case("gate-catalog-without-production", lambda t, e: gate(t, "--catalog", empty_catalog(t)),
         words=("c.db", "no production model", "engine promote")),
    Case("gate-promote-without-catalog", lambda t, e: gate(t, "--production", ENV["run"], "--promote"),
         words=("--promote", "--catalog")),
    Case("gate-onnx-without-promote", lambda t, e: gate(t, "--production", ENV["run"], "--onnx", t / "m.onnx"),
         words=("--onnx", "--promote")),
    Case("gate-production-not-the-catalogs", lambda t, e: gate(t, "--production", changed(run_copy(t, "other")), "--promote",
                                                               "--catalog", catalog(t, ENV["run"])),
         words=("not the production model",)),
    Case("gate-catalog-production-changed", lambda t, e: catalog(t, run_copy(t)) and changed(t / "run")
         and gate(t, "--catalog", t / "c.db"), words=("changed since it was promoted",)),
    Case("gate-targeted-unknown-slice", lambda t, e: gate(t, "--production", ENV["run"], "--set", "gate.targeted=[dusk]"),
         words=("gate.targeted", "dusk", "not a suite")),
    Case("gate-negative-tolerance", lambda t, e: gate(t, "--production", ENV["run"], "--set", "gate.tolerance=-1"),
         words=("gate.tolerance", ">= 0")),
    Case("gate-nan-min-gain", lambda t, e: gate(t, "--production", ENV["run"], "--set", "gate.min_gain=.nan"),
         words=("gate.min_gain", "finite")),
    Case("gate-unknown-summary-head", lambda t, e: gate(t, "--production", ENV["run"], "--set", "gate.summary_head=wings"),
         words=("summary_head", "wings")),
    Case("gate-catalog-is-a-folder", lambda t, e: (t / "cdir").mkdir() or gate(t, "--production", ENV["run"], "--catalog",
                                                                               t / "cdir"), words=("cdir", "folder")),
    Case("gate-same-model-promotes", lambda t, e: gate(t, "--production", ENV["run"]), status=0,
         stdout=("verdict: PROMOTE", "gate.json")),
    # the noise-aware rule's settings (issue 25)
    Case("gate-confidence-one", lambda t, e: gate(t, "--production", ENV["run"], "--set", "gate.confidence=1.0"),
         words=("gate.confidence", "[0.5, 1)")),
    Case("gate-resamples-too-few", lambda t, e: gate(t, "--production", ENV["run"], "--set", "gate.resamples=10"),
         words=("gate.resamples", ">= 100")),
    Case("gate-resamples-zero-is-point-estimates", lambda t, e: gate(t, "--production", ENV["run"], "--set",
                                                                     "gate.resamples=0"), status=0,
         stdout=("verdict: PROMOTE", "point estimates")),
    Case("gate-same-model-states-its-confidence", lambda t, e: gate(t, "--production", ENV["run"]), status=0,
         stdout=("interval", "95%")),
    # what is resampled (issue 34 item 2): clips in blocks of block_s seconds; a slice of few units is undecided
    Case("gate-block-negative", lambda t, e: gate(t, "--production", ENV["run"], "--set", "gate.block_s=-1"),
         words=("gate.block_s", ">= 0")),
    Case("gate-min-units-one", lambda t, e: gate(t, "--production", ENV["run"], "--set", "gate.min_units=1"),
         words=("gate.min_units", ">= 2")),
    Case("gate-few-clips-are-undecided", lambda t, e: gate(t, "--production", ENV["run"]), status=0,
         stdout=("undecided (too few independent clips)", "verdict: PROMOTE")),
    # engine promote | rollback | registry
    Case("promote-checkpoint-missing", lambda t, e: ["engine", "promote", "--catalog", t / "c.db", "--checkpoint", t / "x"],
         words=("does not exist",)),
    Case("promote-checkpoint-corrupt", lambda t, e: ["engine", "promote", "--catalog", t / "c.db", "--checkpoint",
                                                     junk(t, "bad.pt")], words=("bad.pt", "could not be read"),
         check=lambda t: not (t / "c.db").exists() or pytest.fail("catalog created for a refused promotion")),
    Case("promote-nan-weights", lambda t, e: ["engine", "promote", "--catalog", t / "c.db", "--checkpoint", nan_checkpoint(t)],
         words=("non-finite",)),
    Case("promote-onnx-missing", lambda t, e: ["engine", "promote", "--catalog", t / "c.db", "--checkpoint", ENV["run"],
                                               "--onnx", t / "m.onnx"], words=("--onnx", "m.onnx", "does not exist")),
    Case("promote-onnx-not-onnx", lambda t, e: ["engine", "promote", "--catalog", t / "c.db", "--checkpoint", ENV["run"],
                                                "--onnx", junk(t, "m.onnx")], words=("m.onnx", "not a HydraNet ONNX")),
    Case("promote-foreign-sqlite", lambda t, e: ["engine", "promote", "--catalog", foreign_sqlite(t), "--checkpoint",
                                                 ENV["run"]], words=("not a hydranet catalog",)),
    Case("promote-old-registry-layout", lambda t, e: ["engine", "promote", "--catalog", old_layout_registry(t),
                                                      "--checkpoint", ENV["run"]], words=("older layout", "recreate")),
    Case("promote-twice-is-one-entry", lambda t, e: catalog(t, ENV["run"]) and ["engine", "promote", "--catalog", t / "c.db",
                                                                                 "--checkpoint", ENV["run"]],
         status=0, stdout=("registry entry 1",)),
    Case("rollback-missing-catalog", lambda t, e: ["engine", "rollback", "--catalog", t / "none.db"],
         words=("none.db", "does not exist")),
    Case("rollback-without-production", lambda t, e: ["engine", "rollback", "--catalog", empty_catalog(t)],
         words=("c.db", "no production model")),
    Case("rollback-past-the-first", lambda t, e: ["engine", "rollback", "--catalog", catalog(t, ENV["run"])],
         words=("no previous production",)),
    Case("rollback-to-a-vanished-model", vanished_previous, words=("previous production", "no longer exists"),
         check=production_is("b")),
    Case("registry-missing-catalog", lambda t, e: ["engine", "registry", "--catalog", t / "none.db"],
         words=("none.db", "does not exist")),
    Case("registry-shows-changed-files", lambda t, e: catalog(t, run_copy(t)) and changed(t / "run")
         and ["engine", "registry", "--catalog", t / "c.db"], status=0, stdout=("checkpoint changed",)),
]


@pytest.mark.parametrize("case", params(CASES))
def test_gate_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_rejecting_gate_exits_1_with_the_failing_slice(tmp_path, capsys):
    """A reject is not an error: the table on stdout, gate.json written, exit status 1 (SystemExit, as `data check`)."""
    from hydranet.cli import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in gate(tmp_path, "--production", ENV["run"], "--set", "gate.targeted=[day]")])
    assert e.value.code == 1
    out = capsys.readouterr().out
    assert "**verdict: REJECT** (failing: day;" in out
    assert json.loads((tmp_path / "g" / "gate.json").read_text())["failing"] == ["day"]
