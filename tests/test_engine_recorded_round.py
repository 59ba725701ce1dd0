"""`hydranet engine run --fleets` on recorded fleets: one whole round (shadow, triggers, mine, report, label,
retrain, export, gate, promote) on camera videos labelled through COCO files by a "team", and on a nuScenes
folder with unlabelled sweeps labelled by the stand-in oracle (the dataset's own annotations)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dataset_fixtures import make_sweeps_sim, write_nuscenes
from engine_catalogs import catalog_rows
from engine_fixtures import REPO, make_fleet, train_tiny
from recording_fixtures import sim_rig_file, write_videos

from benchmarks.recorded_round import team_labels

from hydranet.cli import main

SETS = ["loop.workers=1", "retrain.steps=2", "suites.clips=1", "suites.frames=2",
        "loop.fleet_set=[sim.image_width=96,sim.image_height=64,sim.frames_per_scene=2]"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """A 2-step production model trained on a sim fleet, the frozen sim suites, and two recorded fleets: the
    videos of another sim fleet (truth kept aside for the labelling team) and a nuScenes export with sweeps."""
    from data_engine.config import EngineConfig
    from data_engine.loop import fleet_config
    from data_engine.suites import generate_suites
    from hydranet.config import load_config

    tmp = tmp_path_factory.mktemp("recorded_round")
    base = make_fleet(tmp / "base", clips=2, frames=2, seed=3)
    prod = train_tiny(base, tmp / "production")
    cfg = load_config(EngineConfig, "engine", SETS)
    generate_suites(tmp / "suites", cfg.suites, fleet_config(cfg.loop), progress=False)
    drive = make_fleet(tmp / "drive", clips=2, frames=3, seed=41)  # what the cars saw: truth only for the team below
    videos = write_videos(drive, tmp / "videos")
    assert main(["engine", "ingest", "--quiet", "--out", str(tmp / "video_fleets" / "r000"), "--source", "video",
                 "--videos", str(videos), "--rig", str(sim_rig_file(drive, tmp / "rig.yaml"))]) == 0
    nus = write_nuscenes(make_sweeps_sim(tmp / "sweeps_sim", 1), tmp / "nuscenes", sweeps=1)
    assert main(["engine", "ingest", "--quiet", "--out", str(tmp / "nus_fleets" / "r000"), "--source", "dataset",
                 "--root", str(nus), "--sweeps", "1"]) == 0
    return {"tmp": tmp, "prod": prod, "suites": tmp / "suites", "drive": drive, "nus": nus}


def run(world: dict, out: Path, fleets: str, *sets: str) -> int:
    argv = ["engine", "run", "--out", str(out), "--production", str(world["prod"]), "--rounds", "1", "--suites",
            str(world["suites"]), "--fleets", str(world["tmp"] / fleets), "--quiet"]
    try:
        return main([*argv, *[a for s in (*SETS, *sets) for a in ("--set", s)]])
    except SystemExit as e:  # `engine run` waiting for a team exits 3 (as `hydranet` does: SystemExit)
        return e.code


def test_video_fleet_round_waits_for_the_team_then_runs_every_stage(world, capsys):
    from data_engine.labels import accepted_versions, open_catalog
    from data_engine.loop import STAGES

    out = world["tmp"] / "run_video"
    assert run(world, out, "video_fleets", "loop.labeller=files", "loop.budget=3") == 3  # waiting: not an error (2)
    got = capsys.readouterr()
    labels = out / "rounds" / "r000" / "labels"
    assert "waits for its labels" in got.out and str(labels / "import") in got.out and "error:" not in got.err
    assert f"resume with the same `hydranet engine run` command: hydranet engine run --out {out}" in got.out
    coco = json.loads((labels / "round000.coco.json").read_text())
    assert len(coco["images"]) == 3 * 6 and all(im["file_name"].endswith(".png") for im in coco["images"])
    done = json.loads((out / "loop.json").read_text())["rounds"][0]["done"]
    assert list(done) == ["fleet", "shadow", "triggers", "mine", "report"]  # label is not done: nothing is lost
    assert done["fleet"]["recorded"] is True and done["shadow"]["frames"] == 6

    team_labels(out, world["drive"])  # the team labels the sent frames with the sim's truth
    assert run(world, out, "video_fleets", "loop.labeller=files", "loop.budget=3") == 0
    line = capsys.readouterr().out
    assert "round 0: 3 labels" in line and str(out / "rounds" / "r000" / "gate" / "gate.md") in line
    done = json.loads((out / "loop.json").read_text())["rounds"][0]["done"]
    assert list(done) == list(STAGES)
    assert done["unit_tests"]["added"] == 0 and "suites --from-fleet" in done["unit_tests"]["skipped"]
    with open_catalog(out / "catalog.sqlite") as cat:
        acc = accepted_versions(cat)
    assert len(acc) == 3 and {v["source"] for v in acc.values()} == {"file"}
    rec = json.loads((out / "rounds" / "r000" / "retrain" / "retrain.json").read_text())
    assert rec["accepted"]["frames"] == 3 and rec["accepted"]["by_source"] == {"file": 3}
    accepted = out / "rounds" / "r000" / "retrain" / "accepted"
    scenes = [json.loads(p.read_text()) for p in sorted(accepted.glob("scenes/*/scene.json"))]
    assert scenes and all(f["supervises"] == ["det2d", "signs_lights"] for s in scenes for f in s["frames"])
    assert (out / "rounds" / "r000" / "gate" / "gate.md").is_file() and (out / "rounds" / "r000" / "model.onnx").is_file()


NUS = ("loop.budget=6", "loop.strategy=random")


@pytest.fixture(scope="module")
def nus_round(world) -> Path:
    """One uninterrupted round on the nuScenes fleet (stand-in oracle)."""
    out = world["tmp"] / "run_nus"
    assert run(world, out, "nus_fleets", *NUS) == 0
    return out


def test_nuscenes_round_with_sweeps_uses_the_dataset_labels_as_stand_in_oracle(world, nus_round):
    from data_engine.fleet import Fleet
    from data_engine.label_queue import job_table
    from data_engine.labels import accepted_versions, open_catalog
    from data_engine.loop import STAGES
    from hydranet.data.formats import open_dataset

    out = nus_round
    done = json.loads((out / "loop.json").read_text())["rounds"][0]["done"]
    assert list(done) == list(STAGES)
    fleet = Fleet(world["tmp"] / "nus_fleets" / "r000")
    reader = open_dataset(world["nus"], sweeps=1, channels=())
    with open_catalog(out / "catalog.sqlite") as cat:
        acc = accepted_versions(cat)
        jobs = job_table(cat, "round000")
        rows = dict(cat.db.execute("SELECT f.id, c.name || '/' || f.dir FROM frames f JOIN clips c ON f.clip_id = c.id"))
    # every mined keyframe is labelled with the reader's own annotations; every mined sweep is rejected, not invented
    keyframes, sweeps = 0, 0
    for j in jobs:
        clip, fdir = rows[j["frame_id"]].split("/")
        sample = reader.load(int(fleet.frame_refs(clip, fdir)["sample"]))
        if sample["supervises"]:
            keyframes += 1
            assert j["state"] == "accepted"
            got = acc[j["frame_id"]]["payload"]
            want = json.loads(json.dumps(sample["labels"]["boxes3d"]))
            for b in want:  # an unknown velocity (NaN in the reader) is left out of the label, and the box says so
                if not all(v == v for v in b["velocity"]):
                    del b["velocity"]
                    b["attributes"]["velocity_unknown"] = True
            assert got["boxes3d"] == want
            assert set(got["supervises"]) <= set(sample["supervises"]) and "det3d" in got["supervises"]
        else:
            sweeps += 1
            assert j["state"] == "rejected" and j["note"].startswith("no truth")
    assert keyframes and sweeps, (keyframes, sweeps)  # the seeded random pick holds both kinds
    assert done["label"]["no_truth"] == sweeps and done["label"]["accepted"] == keyframes
    accepted = out / "rounds" / "r000" / "retrain" / "accepted"
    scenes = [json.loads(p.read_text()) for p in sorted(accepted.glob("scenes/*/scene.json"))]
    heads = {h for s in scenes for f in s["frames"] for h in f["supervises"]}
    assert "det3d" in heads and not heads & {"depth", "normals", "drivable"}  # no dense truth rides along
    assert "supervises" not in json.loads(next(accepted.glob("scenes/*/*/labels.json")).read_text())


def test_a_rerun_with_another_config_names_the_keys_that_differ(world, nus_round, capsys):
    capsys.readouterr()
    assert run(world, nus_round, "nus_fleets", "loop.budget=5", "loop.strategy=random") == 2
    err = capsys.readouterr().err
    assert "config.loop.budget" in err and "another" in err


def test_a_recorded_round_killed_with_sigkill_resumes_to_the_same_catalog(world, nus_round):
    """kill -9 once the label stage is done (during retrain, export or gate); the same command ends with the
    uninterrupted round's selections, jobs, label versions and registry."""
    out = world["tmp"] / "run_nus_killed"
    argv = [sys.executable, "-m", "hydranet.cli", "engine", "run", "--out", str(out), "--production", str(world["prod"]),
            "--rounds", "1", "--suites", str(world["suites"]), "--fleets", str(world["tmp"] / "nus_fleets"), "--quiet",
            *[a for s in (*SETS, *NUS) for a in ("--set", s)]]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        try:
            done = json.loads((out / "loop.json").read_text())["rounds"][0]["done"]
        except (OSError, ValueError, KeyError, IndexError):
            done = {}
        if "label" in done:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the round finished before it could be killed"
    assert "promote" not in json.loads((out / "loop.json").read_text())["rounds"][0]["done"]
    got = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    assert catalog_rows(out) == catalog_rows(nus_round)
