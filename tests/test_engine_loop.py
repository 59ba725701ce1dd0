"""`hydranet engine run`: the whole loop on a tiny fleet; resumable after kill -9 (data_engine/loop.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_catalogs import catalog_rows
from engine_fixtures import REPO, make_fleet, train_tiny

SETS = ["loop.budget=2", "loop.workers=1", "retrain.steps=2", "suites.clips=1", "suites.frames=2",
        "loop.fleet_set=[sim.image_width=96,sim.image_height=64,sim.frames_per_scene=2]"]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """A 2-step production run, one pre-rendered fleet per round (2 rounds) and the frozen suites."""
    from data_engine.config import EngineConfig
    from data_engine.loop import fleet_config
    from data_engine.suites import generate_suites
    from hydranet.config import load_config

    tmp = tmp_path_factory.mktemp("loop")
    base = make_fleet(tmp / "base", clips=2, frames=2, seed=3)
    prod = train_tiny(base, tmp / "production")
    for r in range(2):
        make_fleet(tmp / "fleets" / f"r{r:03d}", clips=2, frames=2, seed=40 + r)
    cfg = load_config(EngineConfig, "engine", SETS)
    generate_suites(tmp / "suites", cfg.suites, fleet_config(cfg.loop), progress=False)
    return {"tmp": tmp, "prod": prod, "fleets": tmp / "fleets", "suites": tmp / "suites"}


def _cmd(world: dict, out: Path, rounds: int = 1) -> list[str]:
    return [sys.executable, "-m", "hydranet.cli", "engine", "run", "--out", str(out), "--production", str(world["prod"]),
            "--rounds", str(rounds), "--suites", str(world["suites"]), "--fleets", str(world["fleets"]), "--quiet",
            *[a for s in SETS for a in ("--set", s)]]


@pytest.fixture(scope="module")
def uninterrupted(world) -> Path:
    out = world["tmp"] / "run_a"
    got = subprocess.run(_cmd(world, out), cwd=REPO, capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "round 0:" in got.stdout
    return out


def test_one_round_runs_every_stage(world, uninterrupted):
    from data_engine.labels import accepted_labels, open_catalog
    from data_engine.loop import STAGES
    from data_engine.registry import history, production

    journal = json.loads((uninterrupted / "loop.json").read_text())
    done = journal["rounds"][0]["done"]
    assert list(done) == list(STAGES)
    with open_catalog(uninterrupted / "catalog.sqlite") as cat:
        assert len(accepted_labels(cat)) == 2  # the budget, labelled by the oracle, accepted
    gate = json.loads((uninterrupted / "rounds" / "r000" / "gate" / "gate.json").read_text())
    assert gate["promote"] == done["gate"]["promote"]
    # the candidate's label sources, on the gate's verdict line and the round's summary (issue 34 item 1)
    cat = (uninterrupted / "catalog.sqlite").resolve()
    assert gate["labels"] == f"labels: accepted: 2 frames (oracle 2) from catalog {cat}"
    md = (uninterrupted / "rounds" / "r000" / "gate" / "gate.md").read_text().splitlines()
    assert f"candidate's labels: accepted: 2 frames (oracle 2) from catalog {cat}" in md[-1]
    assert any("candidate's labels" in c for c in done["gate"]["caveats"])
    prod = production(uninterrupted / "catalog.sqlite")
    retrained = str((uninterrupted / "rounds" / "r000" / "retrain" / "checkpoint.pt").resolve())
    # promoted exactly when the gate said so; the initial production is kept for rollback
    assert (prod["checkpoint"] == retrained) == gate["promote"]
    assert len(history(uninterrupted / "catalog.sqlite")) == 1 + gate["promote"]


def test_rerun_is_a_no_op(world, uninterrupted, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(uninterrupted, out)
    journal = json.loads((out / "loop.json").read_text())
    del journal["identity"]["config"]["loop"]["ensemble"]  # as written before the key existed: it holds the default
    del journal["identity"]["config"]["retrain"]["norm_eval"]  # ... or, where the default is new behaviour, the old one
    (out / "loop.json").write_text(json.dumps(journal))
    before = catalog_rows(out)
    got = subprocess.run(_cmd(world, out), cwd=REPO, capture_output=True, text=True, timeout=900)
    assert got.returncode != 0 and "differing: config.retrain.norm_eval" in got.stderr, got.stderr[-2000:]
    got = subprocess.run([*_cmd(world, out), "--set", "retrain.norm_eval=false"], cwd=REPO, capture_output=True,
                         text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    assert catalog_rows(out) == before  # nothing labelled twice, nothing promoted twice
    (out / "loop.json").write_text(json.dumps(journal))  # a new key set to another value than its default: refused
    (tmp_path / "x.onnx").write_bytes(b"x")
    got = subprocess.run([*_cmd(world, out), "--set", "retrain.norm_eval=false", "--set", f"loop.ensemble=[{tmp_path / 'x.onnx'}]"],
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert got.returncode != 0 and "differing: config.loop.ensemble" in got.stderr, got.stderr[-2000:]


def test_kill9_anywhere_then_rerun_gives_the_same_catalog(world, uninterrupted):
    """Killed with SIGKILL once the label stage is done (in the middle of what follows: unit tests,
    retrain, export or gate), the same command continues and ends with the uninterrupted run's rows."""
    out = world["tmp"] / "run_b"
    proc = subprocess.Popen(_cmd(world, out), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    journal = out / "loop.json"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        try:
            rounds = json.loads(journal.read_text())["rounds"]
        except (OSError, ValueError, KeyError):
            rounds = []
        if rounds and "label" in rounds[0]["done"]:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the loop finished before it could be killed"
    partial = json.loads(journal.read_text())["rounds"][0]["done"]
    assert "label" in partial and "promote" not in partial
    got = subprocess.run(_cmd(world, out), cwd=REPO, capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stderr[-3000:]
    assert catalog_rows(out) == catalog_rows(uninterrupted)


def test_another_production_in_the_same_folder_is_refused(world, uninterrupted, tmp_path):
    from data_engine.loop import Loop, LoopError
    from data_engine.config import EngineConfig
    from hydranet.config import load_config

    import shutil

    other = shutil.copytree(world["prod"], tmp_path / "other")  # the same weights, but another production run
    with pytest.raises(LoopError, match="another production model or config"):
        Loop(uninterrupted, load_config(EngineConfig, "engine", SETS), other, suites=world["suites"],
             fleets=world["fleets"])
    with pytest.raises(LoopError, match="give --production"):
        Loop(tmp_path / "new", load_config(EngineConfig, "engine", SETS))


def _first_stages(world: dict, tmp_path: Path, cfg, *stages: str):
    """A Loop in tmp_path/run, set up, with round 0's `stages` run in order (in this process); (loop, round folder)."""
    from data_engine.loop import Loop

    loop = Loop(tmp_path / "run", cfg, world["prod"], progress=False, suites=world["suites"], fleets=world["fleets"])
    loop.setup()
    rdir = tmp_path / "run" / "rounds" / "r000"
    rdir.mkdir(parents=True)
    for stage in stages:
        loop.journal.finish(0, stage, getattr(loop, f"stage_{stage}")(0, rdir))
    return loop, rdir


def test_the_ensemble_strategy_scores_each_round_pool_before_mining(world, tmp_path):
    """loop.strategy ensemble: the mine stage first stores the server-side columns of the round's shadow run (the
    run's model and loop.ensemble's members), then selects the frames highest on them."""
    from data_engine.catalog import Catalog
    from data_engine.config import EngineConfig
    from data_engine.loop import Loop
    from deploy.export import export_checkpoint
    from hydranet.config import ConfigError, load_config

    other = train_tiny(world["tmp"] / "base", tmp_path / "other", seed=1)
    export_checkpoint(other, tmp_path / "other.onnx", verbose=False)
    with pytest.raises(ConfigError, match="'loop.ensemble' is empty: strategy 'ensemble' needs"):
        Loop(tmp_path / "refused", load_config(EngineConfig, "engine", [*SETS, "loop.strategy=ensemble"]), world["prod"])
    # the top frames by the columns, without the minimum time gap between picks of a clip (tests/test_engine_mining.py)
    cfg = load_config(EngineConfig, "engine", [*SETS, "loop.strategy=ensemble", f"loop.ensemble=[{tmp_path / 'other.onnx'}]",
                                               "mining.min_gap_s=0"])
    loop, rdir = _first_stages(world, tmp_path, cfg, "fleet", "shadow", "triggers", "mine")
    run_id = loop.done(0, "shadow")["run_id"]
    with Catalog(loop.catalog) as cat:
        cols, sources = cat.offline(run_id)["ensemble"], cat.offline_sources(run_id)["ensemble"]
        model = cat.run_info(run_id)["model"]
    assert [s["path"] for s in sources] == [str(Path(model).resolve()), str((tmp_path / "other.onnx").resolve())]
    picks = [it["frame_id"] for it in json.loads((rdir / "selection.json").read_text())["items"]]
    assert picks == sorted(cols, key=lambda f: (-cols[f], f))[:2]


@pytest.mark.parametrize("labeller, sure", [("auto", None), ("auto+oracle", None), ("auto", 1.0)])
def test_the_auto_labeller_labels_first(world, tmp_path, labeller, sure):
    """loop.labeller auto | auto+X (issue 35 item 3): the round's selection goes through `engine autolabel` (the
    production as its ensemble) first; what its policy accepts trains as source "auto", the rest goes to X (the
    oracle here), or is rejected for "auto" alone; the round says which labels were automatic. `sure` 1.0: no box
    is sure enough, every frame is unsure (queued -> rejected for "auto" alone: once a crash)."""
    from data_engine.config import EngineConfig
    from data_engine.label_queue import job_table
    from data_engine.labels import AUTO, accepted_versions, open_catalog
    from hydranet.config import load_config

    accept = [f"autolabel.accept={{det2d: {sure}, det3d: {sure}}}"] if sure is not None else []
    cfg = load_config(EngineConfig, "engine", [*SETS, f"loop.labeller={labeller}", *accept])
    loop, rdir = _first_stages(world, tmp_path, cfg, "fleet", "shadow", "triggers", "mine", "label")
    got = loop.done(0, "label")
    auto = got["auto"]
    assert auto["human"] == (None if labeller == "auto" else "oracle")
    assert auto["accepted"] + auto["queued"] == 2 and (rdir / "autolabel" / "summary.json").is_file()
    assert sure is None or auto["queued"] == 2
    with open_catalog(loop.catalog) as cat:
        versions = accepted_versions(cat)
        states = [j["state"] for j in job_table(cat, got["selection"])]
    sources = [v["source"] for v in versions.values()]
    assert sources.count(AUTO) == auto["accepted"]
    if labeller == "auto":  # nobody to send the unsure frames to: rejected, never trained on
        assert states.count("rejected") == auto["queued"] and got["accepted"] == auto["accepted"]
    else:  # the oracle labelled the queued frames (pre-filled with the auto-labels)
        assert sources.count("oracle") == auto["queued"] and got["accepted"] == 2
    # resumed: the ensemble is not run again, the same jobs and versions
    again = loop._autolabel(0, rdir)
    assert again == auto


def test_auto_then_label_studio_waits_for_the_reviewers_and_counts_their_edits(world, tmp_path, monkeypatch):
    """loop.labeller auto+label_studio: the frames the policy did not accept go to a Label Studio project of this run,
    pre-filled with the auto-labels; the round waits (LoopWaiting, naming the project) until every task has an
    annotation, then imports them, and the round line counts what the reviewers changed (here: one box deleted per
    frame that had one). Label Studio is the in-memory fake of tests/fake_label_studio.py; the real server's
    round trip of an edited pre-fill is in tests/test_engine_labeling_ls.py."""
    from fake_label_studio import FakeLS

    from data_engine.config import EngineConfig
    from data_engine.labeling.label_studio import TOKEN_ENV, URL_ENV
    from data_engine.labels import edits, open_catalog
    from data_engine.loop import Loop, LoopError, LoopWaiting
    from hydranet.config import load_config

    sets = [*SETS, "loop.labeller=auto+label_studio", "autolabel.min_score=0.05", "autolabel.min_track_score=0.05",
            "autolabel.accept.det2d=1.0", "autolabel.dense_accept=1.0"]  # untrained: scores ~0.1, nothing is sure
    cfg = load_config(EngineConfig, "engine", sets)
    monkeypatch.delenv(URL_ENV, raising=False)
    with pytest.raises(LoopError, match=URL_ENV):  # no server: refused before anything is written
        Loop(tmp_path / "run", cfg, world["prod"], progress=False, suites=world["suites"], fleets=world["fleets"])
    assert not (tmp_path / "run").exists()
    fake = FakeLS()
    monkeypatch.setenv(URL_ENV, fake.url)
    monkeypatch.setenv(TOKEN_ENV, "t" * 40)
    monkeypatch.setattr("data_engine.labeling.label_studio.Client", lambda url, token: fake)
    loop, rdir = _first_stages(world, tmp_path, cfg, "fleet", "shadow", "triggers", "mine")
    with pytest.raises(LoopWaiting, match=r"Label Studio project 'hydranet run [0-9a-f]{8} round000'") as waiting:
        loop.stage_label(0, rdir)
    assert "resume with the same `hydranet engine run` command" in str(waiting.value)
    queued = json.loads((rdir / "autolabel" / "summary.json").read_text())["queued"]
    assert queued >= 1 and len(fake.tasks_) == queued
    deleted = 0
    for t in fake.tasks_:  # a reviewer submits the pre-fill less its first box
        shown = [r for p in t["predictions"] for r in p["result"]]
        deleted += bool(shown)
        fake.annotate(t["data"]["job_id"], shown[1:])
    got = loop.stage_label(0, rdir)
    assert got["accepted"] == 2 and got["edits"]["frames"] == queued and got["edits"]["deleted"] == deleted
    assert got["edits"]["added"] == got["edits"]["moved"] == got["edits"]["class_changed"] == 0
    with open_catalog(loop.catalog) as cat:
        assert [r["source"] for r in edits(cat, got["selection"])] == ["label_studio"] * queued
    loop.journal.finish(0, "label", got)
    loop.journal.finish(0, "gate", {"promote": False, "failing": ["x"], "slices": {}, "dir": str(rdir / "gate")})
    line = loop.summary(0)["line"]
    assert f"queued for label_studio (0 added, {deleted} deleted, 0 moved, 0 class changed in {queued} pre-filled frames)" in line


def test_an_edited_fleet_config_is_refused_on_resume(tmp_path):
    """The loop's identity holds the fleet config its YAML file gave (not only the file's name): after an edit of
    that file the same command refuses to continue, naming the key; a journal written before the fleet config was
    recorded resumes."""
    from dataclasses import asdict

    from data_engine.config import EngineConfig
    from data_engine.loop import JOURNAL, Loop, LoopError, fleet_config
    from hydranet.config import load_config

    yaml_file = tmp_path / "fleet.yaml"
    yaml_file.write_text((REPO / "configs" / "fleet.yaml").read_text())
    cfg = load_config(EngineConfig, "engine", [f"loop.fleet_config={yaml_file}"])
    out = tmp_path / "run"
    out.mkdir()
    identity = {"production": str(tmp_path / "prod"), "config": asdict(cfg), "suites": str((out / "suites").resolve()),
                "fleets": None}
    (out / JOURNAL).write_text(json.dumps({"identity": identity, "rounds": []}))  # before the fleet config was kept
    Loop(out, cfg).journal.finish(0, "fleet", {})  # resumes, and the journal then records this fleet config
    assert json.loads((out / JOURNAL).read_text())["identity"]["fleet"] == json.loads(json.dumps(asdict(fleet_config(cfg.loop))))
    identity["fleet"] = asdict(fleet_config(cfg.loop))
    del identity["fleet"]["max_rare_per_clip"]  # recorded before a key existed: its default
    (out / JOURNAL).write_text(json.dumps({"identity": identity, "rounds": []}))
    Loop(out, cfg)  # the same file: resumes
    yaml_file.write_text(yaml_file.read_text().replace("weather_weights: [0.8, 0.1, 0.1]", "weather_weights: [0.6, 0.2, 0.2]"))
    with pytest.raises(LoopError, match="fleet.weather_weights"):
        Loop(out, cfg)
    fleets, suites, given = tmp_path / "fleets", tmp_path / "suites", tmp_path / "given"  # both given: the config renders
    fleets.mkdir()                                                                         # nothing, and is not recorded
    given.mkdir()
    identity.update(suites=str(suites.resolve()), fleets=str(fleets.resolve()), fleet=None)
    (given / JOURNAL).write_text(json.dumps({"identity": identity, "rounds": []}))
    Loop(given, cfg, suites=suites, fleets=fleets)
