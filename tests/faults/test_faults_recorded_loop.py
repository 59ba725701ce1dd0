"""Fault rows of `hydranet engine run --fleets` over recorded fleets and of the stand-in oracle: a round folder that
is no fleet, a recorded fleet whose fleet.json is broken or whose recordings are gone, the oracle asked to label
camera videos (no truth), a files-labelled round waiting for its team (status 3 and a plain line, not an error; nothing
lost), an import folder holding a file that is not a label export, rounds whose fleets retrain could not put in one
training set (a sim fleet then a recorded one: refused before anything is spent). One row per case through the CLI;
none leaves a label behind."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from faultlib import RUNS, Case, params, run_case
from recording_fixtures import sim_rig_file, write_videos

RUN: dict = {}
SETS = ["loop.workers=1", "loop.budget=2", "retrain.steps=1", "suites.clips=1", "suites.frames=1",
        "loop.fleet_set=[sim.image_width=64,sim.image_height=64,sim.frames_per_scene=1]"]


@pytest.fixture(scope="module", autouse=True)
def recorded(fault_env, two_runs, tmp_path_factory):
    """The fault dataset's frames as camera videos with their rig file (production: two_runs' 1-step CAM_FRONT run)."""
    root = tmp_path_factory.mktemp("recorded_loop_faults")
    RUN.update(run=RUNS["a"], videos=write_videos(fault_env.dataset, root / "videos"),
               rig=sim_rig_file(fault_env.dataset, root / "rig.yaml"))


def fleets(tmp: Path) -> Path:
    """tmp/fleets/r000: the videos ingested (the recordings stay where RUN put them, read in place)."""
    from hydranet.cli import main

    out = tmp / "fleets" / "r000"
    assert main(["engine", "ingest", "--quiet", "--out", str(out), "--source", "video", "--videos", str(RUN["videos"]),
                 "--rig", str(RUN["rig"])]) == 0
    return tmp / "fleets"


def run(tmp: Path, *sets: str) -> list:
    shutil.copytree(RUN["run"], tmp / "prod", dirs_exist_ok=True)
    return ["engine", "run", "--out", tmp / "loop", "--production", tmp / "prod", "--fleets", tmp / "fleets", "--quiet",
            *[a for s in (*SETS, *sets) for a in ("--set", s)]]


def not_a_fleet(tmp: Path, env) -> list:
    (tmp / "fleets" / "r000").mkdir(parents=True)
    (tmp / "fleets" / "r000" / "notes.txt").write_text("x")
    return run(tmp)


def fleets_missing(tmp: Path, env) -> list:
    return run(tmp)  # no tmp/fleets at all


def nothing_exported(tmp: Path) -> None:
    """Refused before the set-up: no catalog, no exported model (a second round's missing fleet too)."""
    assert not (tmp / "loop" / "catalog.sqlite").exists() and not (tmp / "loop" / "models").exists()


def second_round_missing(tmp: Path, env) -> list:
    fleets(tmp)
    return [*run(tmp), "--rounds", "2"]


def broken_fleet_json(tmp: Path, env) -> list:
    (fleets(tmp) / "r000" / "fleet.json").write_text("{half")
    return run(tmp)


def recordings_gone(tmp: Path, env) -> list:
    f = fleets(tmp) / "r000" / "fleet.json"
    meta = json.loads(f.read_text())
    meta["source"]["root"] = str(tmp / "moved")
    f.write_text(json.dumps(meta))
    return run(tmp)


def oracle_on_videos(tmp: Path, env) -> list:
    fleets(tmp)
    return run(tmp)


def team_not_done(tmp: Path, env) -> list:
    fleets(tmp)
    return run(tmp, "loop.labeller=files")


def import_not_an_export(tmp: Path, env) -> list:
    from hydranet.cli import main

    fleets(tmp)
    argv = [str(a) for a in run(tmp, "loop.labeller=files")]
    with pytest.raises(SystemExit) as stop:  # the round sent its frames and waits (its own exit status, not an error)
        main(argv)
    assert stop.value.code == 3
    inbox = tmp / "loop" / "rounds" / "r000" / "labels" / "import"
    (inbox / "team.coco.json").write_text(json.dumps({"images": [{"id": 1, "file_name": "nowhere/000000/CAM_FRONT.png",
                                                                  "width": 64, "height": 64}],
                                                      "annotations": [], "categories": []}))
    return argv


def no_labels(tmp: Path) -> None:
    db = tmp / "loop" / "catalog.sqlite"
    if db.exists():
        con = sqlite3.connect(db)
        try:
            assert con.execute("SELECT count(*) FROM labels").fetchone()[0] == 0
        finally:
            con.close()


def waiting(tmp: Path) -> None:
    no_labels(tmp)
    labels = tmp / "loop" / "rounds" / "r000" / "labels"
    assert (labels / "round000.coco.json").is_file() and (labels / "import").is_dir()
    done = json.loads((tmp / "loop" / "loop.json").read_text())["rounds"][0]["done"]
    assert "label" not in done and "report" in done


def sim_then_recorded(tmp: Path, env) -> list:
    """r000 a sim fleet (the fault dataset itself), r001 the same frames' nuScenes export ingested as a dataset: the
    campaign's mixed loop, whose round 1 spent its labels (the stand-in oracle answers from the nuScenes annotations)
    before retrain refused them ('accepted labels come from fleets that differ in ...')."""
    from hydranet.cli import main

    shutil.copytree(env.dataset, tmp / "fleets" / "r000")
    assert main(["engine", "ingest", "--quiet", "--out", str(tmp / "fleets" / "r001"), "--source", "dataset", "--root",
                 str(env.nuscenes)]) == 0
    return run(tmp)


def recorded_after_labelled_sim(tmp: Path, env) -> list:
    """Round 0 (a sim fleet) ran to the end in an earlier call, its frame labelled and accepted; round 1's fleet is a
    recorded one: refused before round 1 spends anything."""
    from data_engine.catalog import Catalog
    from data_engine.config import EngineConfig
    from data_engine.fleet import Fleet
    from data_engine.label_exchange import import_labels, send
    from data_engine.label_queue import create_jobs, job_table
    from data_engine.labeling import build_backend
    from data_engine.labels import transition
    from data_engine.loop import STAGES, Loop
    from hydranet.config import load_config

    argv = [*(sim_then_recorded(tmp, env)), "--rounds", "2"]
    loop = Loop(tmp / "loop", load_config(EngineConfig, "engine", SETS), tmp / "prod", progress=False, fleets=tmp / "fleets")
    for stage in STAGES:  # round 0 done, as an earlier `engine run` left it
        loop.journal.finish(0, stage, {"fleet": str(tmp / "fleets" / "r000")} if stage == "fleet" else {})
    (tmp / "sel.json").write_text(json.dumps({"name": "round000", "frames": [{"clip": "scene_0000", "frame": 0}]}))
    oracle = build_backend("oracle")
    with Catalog(tmp / "loop" / "catalog.sqlite", create=True) as cat:
        cat.add_fleet(Fleet(tmp / "fleets" / "r000"))
        create_jobs(cat, tmp / "sel.json", "oracle")
        send(cat, oracle, "round000")
        import_labels(cat, oracle, "round000")
        transition(cat, [j["job"] for j in job_table(cat, "round000")], "accepted")
    return argv


def nothing_spent(tmp: Path) -> None:
    """Refused before the set-up: no exported model, no round folder, no label job beyond what was there."""
    assert not (tmp / "loop" / "models").exists() and not (tmp / "loop" / "rounds").exists()


CASES = [
    Case("round-folder-not-a-fleet", not_a_fleet, words=("r000", "not a fleet", "engine ingest"), check=nothing_exported),
    Case("fleets-folder-missing", fleets_missing, words=("--fleets", "not a folder", "r000"),
         check=lambda t: None if not (t / "loop").exists() else pytest.fail("the loop folder was created")),
    Case("second-round-fleet-missing", second_round_missing, words=("r001", "not a fleet"), check=nothing_exported),
    Case("recorded-fleet-json-broken", broken_fleet_json, words=("fleet.json", "not valid json", "ingest"), check=no_labels),
    Case("recorded-fleet-recordings-gone", recordings_gone, words=("fleet.json", "gone", "ingest again"), check=no_labels),
    Case("oracle-on-camera-videos", oracle_on_videos, words=("oracle", "video recordings", "--backend files"),
         check=no_labels),
    Case("files-round-waits-for-its-team", team_not_done, status=3,
         stdout=("waits for its labels", "round000.coco.json", "labels/import/", "resume with the same", ": hydranet engine run --out"),
         check=waiting),
    Case("rounds-mix-a-sim-and-a-recorded-fleet", lambda t, e: [*sim_then_recorded(t, e), "--rounds", "2"],
         words=("round 1's fleet", "r001", "differs from round 0's fleet", "r000", "in '", "another --out"),
         check=nothing_exported),
    Case("recorded-round-after-a-labelled-sim-fleet", recorded_after_labelled_sim,
         words=("round 1's fleet", "r001", "fleet already labelled in", "catalog.sqlite", "r000", "same rig and classes"),
         check=nothing_spent),
    Case("files-import-of-an-unknown-image", import_not_an_export, words=("team.coco.json", "nowhere/000000"),
         check=no_labels),
]


@pytest.mark.parametrize("case", params(CASES))
def test_recorded_loop_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_the_loop_compares_fleets_as_retrain_does(tmp_path, fault_env):
    """`fleet_training_meta` is what retrain's accepted set compares (`retrain._fleet_meta`), for a sim fleet and a
    recorded one; fleets of one kind and rig pass `check_fleet_mix`, a sim and a recorded one do not."""
    from data_engine.loop import LoopError, check_fleet_mix, fleet_training_meta
    from data_engine.retrain import _fleet_meta

    recorded = fleets(tmp_path) / "r000"
    shutil.copytree(recorded, tmp_path / "again")
    for root in (fault_env.dataset, recorded):
        assert fleet_training_meta(root) == _fleet_meta(str(root))
    check_fleet_mix([("a", recorded), ("b", tmp_path / "again"), ("c", recorded)])
    check_fleet_mix([("a", fault_env.dataset), ("b", fault_env.dataset)])
    with pytest.raises(LoopError, match=r"b \(.*again\) differs from a \(.*\) in '"):
        check_fleet_mix([("a", fault_env.dataset), ("b", tmp_path / "again")])
