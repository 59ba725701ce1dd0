"""Fault rows of `hydranet engine run --fleets` over recorded fleets and of the stand-in oracle: a round folder that
is no fleet, a recorded fleet whose fleet.json is broken or whose recordings are gone, the oracle asked to label
camera videos (no truth), a files-labelled round waiting for its team (status 2, nothing lost), an import folder
holding a file that is not a label export. One row per case through the CLI; none leaves a label behind."""
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
    assert main(argv) == 2  # the round sent its frames and waits
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


CASES = [
    Case("round-folder-not-a-fleet", not_a_fleet, words=("r000", "not a fleet", "engine ingest"), check=nothing_exported),
    Case("fleets-folder-missing", fleets_missing, words=("--fleets", "not a folder", "r000"),
         check=lambda t: None if not (t / "loop").exists() else pytest.fail("the loop folder was created")),
    Case("second-round-fleet-missing", second_round_missing, words=("r001", "not a fleet"), check=nothing_exported),
    Case("recorded-fleet-json-broken", broken_fleet_json, words=("fleet.json", "not valid json", "ingest"), check=no_labels),
    Case("recorded-fleet-recordings-gone", recordings_gone, words=("fleet.json", "gone", "ingest again"), check=no_labels),
    Case("oracle-on-camera-videos", oracle_on_videos, words=("oracle", "video recordings", "--backend files"),
         check=no_labels),
    Case("files-round-waits-for-its-team", team_not_done, words=("waits for its labels", "round000.coco.json", "import"),
         check=waiting),
    Case("files-import-of-an-unknown-image", import_not_an_export, words=("team.coco.json", "nowhere/000000"),
         check=no_labels),
]


@pytest.mark.parametrize("case", params(CASES))
def test_recorded_loop_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
