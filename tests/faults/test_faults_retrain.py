"""Fault rows of `hydranet engine retrain` (data_engine/retrain.py): missing or foreign production and
catalog, no accepted labels, an existing run, bad --mix/--steps/--set, a missing base set or fleet file,
resume refusals; each error row also checks that nothing was left behind (no retrain.json, no accepted
set, no temp folder). Two controls retrain for real (1 step) and resume the finished run. One row per
case; see faultlib.py for the contract.

Rows share one 1-step tiny production run on the fault dataset (CAM_FRONT at 32x64) and build their own
catalog over the fault dataset (the dataset as a fleet, oracle labels)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from faultlib import Case, Env, copy_dataset, no_temp_left, params, run_case

_PROD: dict[str, Path] = {}


@pytest.fixture(scope="module")
def production(fault_env: Env, tmp_path_factory) -> Path:
    from hydranet.cli import main

    out = tmp_path_factory.mktemp("retrain_faults") / "production"
    argv = ["train", "--config", "tiny", "--out", str(out), "--quiet"]
    for s in (f"data.root={fault_env.dataset}", "data.cameras=[CAM_FRONT]", "data.image_size=[32,64]", "steps=1",
              "batch_size=1", "num_workers=0", "optim.warmup_steps=1", "device=cpu", "augment.photometric=false"):
        argv += ["--set", s]
    assert main(argv) == 0
    _PROD["run"] = out
    return out


def _catalog(tmp: Path, fleet: Path, accept: bool = True, name: str = "cat.db") -> Path:
    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet
    from data_engine.label_exchange import import_labels, send
    from data_engine.label_queue import create_jobs, load_jobs
    from data_engine.labeling import build_backend
    from data_engine.labels import open_catalog, transition

    cat = tmp / name
    if cat.exists():  # a row that built it already (an earlier run in the same folder)
        return cat
    with Catalog(cat, create=True) as c:
        c.add_fleet(Fleet(fleet))
    sel = tmp / "selection.json"
    sel.write_text(json.dumps({"name": "sel", "frames": [{"clip": "scene_0000", "frame": f} for f in (0, 1)]}))
    oracle = build_backend("oracle")
    with open_catalog(cat) as c:
        create_jobs(c, sel, "oracle")
        send(c, oracle, "sel")
        import_labels(c, oracle, "sel")
        if accept:
            transition(c, [j.id for j in load_jobs(c, "sel")], "accepted")
    return cat


def _argv(tmp: Path, env: Env, *extra, production=None, catalog=None, out=None) -> list:
    return ["engine", "retrain", "--production", production or _PROD["run"], "--catalog", catalog or _catalog(tmp, env.dataset),
            "--out", out or tmp / "run", "--quiet", *extra]


def nothing_written(tmp: Path) -> None:
    run = tmp / "run"
    left = [p.name for p in (run.iterdir() if run.is_dir() else [])]
    assert not left, f"a refused retrain left {left} in {run}"
    no_temp_left(tmp)


def run_kept(tmp: Path) -> None:
    assert json.loads((tmp / "run" / "retrain.json").read_text())["mix"] == 0.5, "the earlier run's record changed"
    no_temp_left(tmp)


def _second_not_written(tmp: Path) -> None:
    assert not (tmp / "run2").exists(), "a refused retrain wrote its run folder"
    no_temp_left(tmp)


def _earlier_run(tmp: Path, env: Env) -> list:
    from hydranet.cli import main

    argv = _argv(tmp, env, "--steps", "1", "--mix", "0.5")
    assert main([str(a) for a in argv]) == 0
    return argv


def _edited_production(tmp: Path, config=None, meta=None) -> Path:
    """The production checkpoint with its config and meta edited in place (plain JSON in the file)."""
    ckpt = torch.load(_PROD["run"] / "checkpoint.pt", map_location="cpu", weights_only=True)
    for key, fn in (("config", config), ("meta", meta)):
        if fn is not None:
            d = json.loads(ckpt[key])
            fn(d)
            ckpt[key] = json.dumps(d)
    torch.save(ckpt, tmp / "edited.pt")
    return tmp / "edited.pt"


def _production_elsewhere(tmp: Path) -> Path:
    """data.root pointing at a folder that does not exist here."""
    return _edited_production(tmp, config=lambda c: c["data"].update(root=str(tmp / "gone")))


def _one_camera_label(tmp: Path, env: Env) -> list:
    """A file label that covers CAM_FRONT only, accepted: the other cameras would train as 'no objects'."""
    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet
    from data_engine.label_exchange import send
    from data_engine.label_queue import create_jobs, load_jobs
    from data_engine.labeling import FetchedLabel, build_backend
    from data_engine.labels import open_catalog, record_label, transition

    cat = tmp / "cat1.db"
    with Catalog(cat, create=True) as c:
        c.add_fleet(Fleet(env.dataset))
    sel = tmp / "one.json"
    sel.write_text(json.dumps({"name": "one", "frames": [{"clip": "scene_0000", "frame": 0}, {"clip": "scene_0000", "frame": 1}]}))
    with open_catalog(cat) as c:
        create_jobs(c, sel, "files")
        send(c, build_backend("files", out=tmp / "export"), "one")
        for j in load_jobs(c, "one"):
            front = json.loads((j.folder / "labels.json").read_text())["cameras"]["CAM_FRONT"]
            record_label(c, j, FetchedLabel(j.id, {"cameras": {"CAM_FRONT": {"boxes2d": front["boxes2d"]}}}, "file", "me"))
        transition(c, [j.id for j in load_jobs(c, "one")], "accepted")
    shutil.rmtree(tmp / "export")
    return _argv(tmp, env, catalog=cat)


def _one_accepted(tmp: Path, env: Env) -> Path:
    from data_engine.label_queue import load_jobs
    from data_engine.labels import open_catalog, transition

    cat = _catalog(tmp, env.dataset, accept=False)
    with open_catalog(cat) as c:
        transition(c, [load_jobs(c, "sel")[0].id], "accepted")
    return cat


def _fleet_lost_an_image(tmp: Path, env: Env) -> list:
    fleet = copy_dataset(tmp, env, "fleet")
    cat = _catalog(tmp, fleet)
    (fleet / "scenes" / "scene_0000" / "000001" / "CAM_FRONT.jpg").unlink()
    return _argv(tmp, env, catalog=cat)


CASES = [
    Case("production-missing", lambda t, e: _argv(t, e, production=t / "nope"), 2, ("production checkpoint", "does not exist"),
         check=nothing_written),
    Case("production-not-a-checkpoint", lambda t, e: (t / "p.pt").write_text("no") and _argv(t, e, production=t / "p.pt"), 2,
         ("p.pt", "corrupt"), check=nothing_written),
    Case("catalog-missing", lambda t, e: _argv(t, e, catalog=t / "none.db"), 2, ("catalog", "does not exist"), check=nothing_written),
    Case("catalog-not-sqlite", lambda t, e: (t / "x.db").write_text("x" * 200) and _argv(t, e, catalog=t / "x.db"), 2,
         ("x.db", "not a readable catalog"), check=nothing_written),
    Case("no-accepted-labels", lambda t, e: _argv(t, e, catalog=_catalog(t, e.dataset, accept=False)), 2,
         ("no accepted labels", "hydranet engine jobs", "--accept all"), check=nothing_written),
    Case("existing-run", lambda t, e: _earlier_run(t, e) and _argv(t, e, "--mix", "0.25"), 2,
         ("already holds a retrain run", "--resume", "--overwrite"), check=run_kept),
    Case("resume-nothing", lambda t, e: _argv(t, e, "--resume"), 2, ("no retrain.json", "without --resume"), check=nothing_written),
    Case("resume-and-overwrite", lambda t, e: _argv(t, e, "--resume", "--overwrite"), 2, ("--resume", "--overwrite", "one of them"),
         check=nothing_written),
    Case("resume-other-mix", lambda t, e: _earlier_run(t, e) and _argv(t, e, "--resume", "--mix", "0.25"), 2,
         ("--mix 0.25 differs", "retrain.json"), check=run_kept),
    Case("mix-above-one", lambda t, e: _argv(t, e, "--mix", "1.5"), 2, ("retrain.mix", "(0, 1)"), check=nothing_written),
    Case("mix-zero", lambda t, e: _argv(t, e, "--mix", "0"), 2, ("retrain.mix",), check=nothing_written),
    Case("steps-zero", lambda t, e: _argv(t, e, "--steps", "0"), 2, ("retrain.steps", ">= 1"), check=nothing_written),
    Case("unknown-config-key", lambda t, e: _argv(t, e, "--set", "retrain.epochs=3"), 2, ("retrain.epochs", "allowed keys"),
         check=nothing_written),
    Case("lr-negative", lambda t, e: _argv(t, e, "--set", "retrain.lr=-1"), 2, ("retrain.lr", "> 0"), check=nothing_written),
    Case("base-missing", lambda t, e: _argv(t, e, "--base", t / "nobase"), 2, ("--base", "nobase", "not a folder"),
         check=nothing_written),
    Case("production-base-gone", lambda t, e: _argv(t, e, production=_production_elsewhere(t)), 2,
         ("base training set", "does not exist", "--base"), check=nothing_written),
    Case("fleet-lost-an-image", _fleet_lost_an_image, 2, ("CAM_FRONT.jpg", "missing"), check=nothing_written),
    Case("label-misses-a-camera", _one_camera_label, 2, ("no labels for camera", "label every camera"), check=nothing_written),
    Case("fewer-accepted-than-batch", lambda t, e: _argv(t, e, catalog=_one_accepted(t, e), production=_edited_production(
        t, config=lambda c: c.update(batch_size=2))), 2, ("1 accepted frames", "batch_size 2", "accept more"), check=nothing_written),
    Case("model-lacks-a-class", lambda t, e: _argv(t, e, production=_edited_production(
        t, meta=lambda m: m.update(classes=m["classes"][:-1]))), 2, ("classes", "the model lacks"), check=nothing_written),
    Case("drop-labels-not-a-label-set", lambda t, e: _earlier_run(t, e) and _argv(
        t, e, "--drop-labels", t / "elsewhere", production=t / "run", catalog=_catalog(t, e.dataset, name="other.db"),
        out=t / "run2"), 2, ("--drop-labels", "elsewhere", "is neither"), check=_second_not_written),
    Case("carried-labels-gone", lambda t, e: _earlier_run(t, e) and shutil.rmtree(t / "run" / "accepted") or _argv(
        t, e, production=t / "run", catalog=_catalog(t, e.dataset, name="other.db"), out=t / "run2"), 2,
         ("accepted labels at", "no longer exist", "--drop-labels"), check=_second_not_written),
    Case("control-carried-labels", lambda t, e: _earlier_run(t, e) and _argv(
        t, e, "--steps", "1", production=t / "run", catalog=_catalog(t, e.dataset, name="other.db"), out=t / "run2"), 0,
         stdout=("accepted: 2 frames (oracle 2)", "accepted-1 (carried): 2 frames (oracle 2)", "cat.db"), check=no_temp_left),
    Case("control-retrain", lambda t, e: _argv(t, e, "--steps", "1"), 0, stdout=("retrained", "accepted: 2 frames (oracle 2)"),
         check=no_temp_left),
    Case("control-resume-finished", lambda t, e: _earlier_run(t, e) and _argv(t, e, "--resume"), 0, stdout=("retrained",),
         check=run_kept),
]


@pytest.mark.parametrize("case", params(CASES))
def test_retrain_fault(case: Case, production, tmp_path: Path, fault_env: Env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_a_killed_materialization_is_cleaned_up_by_the_rerun(production, tmp_path: Path, fault_env: Env):
    """A temp folder left by a process that died mid-write is removed; the rerun writes the set whole."""
    from data_engine.retrain import materialize_accepted

    cat = _catalog(tmp_path, fault_env.dataset)
    stale = tmp_path / "acc.tmp-999999999"  # no such process
    (stale / "scenes").mkdir(parents=True)
    got = materialize_accepted(cat, tmp_path / "acc")
    assert got["frames"] == 2 and not stale.exists() and (tmp_path / "acc" / "dataset.json").exists()
    shutil.rmtree(tmp_path / "acc")
