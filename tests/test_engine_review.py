"""A labelling team's review workflow (issue 24.2-24.4): an accepted job re-opened or re-pinned to a newer
version (who, when, the old pin kept in the history; training reads the new pin), kill -9 during a re-pin
or a quarantine; a job waiting on a partly done frame says why; one bad Label Studio task is quarantined
and the rest imported (printed once, listed by `engine jobs`); conflicts named box by box; Label Studio
predictions carry the model's sha256; the catalog's version-2 -> 3 migration. Label Studio is a fake
in-memory client here (tests/test_engine_labeling_ls.py runs the real server)."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from engine_catalogs import catalog_env
from engine_fixtures import REPO, make_fleet

from data_engine.label_exchange import import_labels, send
from data_engine.label_queue import LabelError, create_jobs, history, job_table, load_jobs
from data_engine.labeling.label_studio import LabelStudioBackend, box_result
from data_engine.labeling.oracle import OracleBackend
from data_engine.labels import accepted_labels, accepted_versions, open_catalog, transition


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    return make_fleet(tmp_path_factory.mktemp("review") / "fleet", clips=2, frames=2, seed=3)


@pytest.fixture
def env(fleet, tmp_path) -> dict:
    return catalog_env(fleet, tmp_path)


class Corrections:
    """A reviewer's corrections after acceptance, as a tool would hand them back: each frame's first box moved 3 px."""
    name = "oracle"

    def fetch(self, jobs):
        from data_engine.labeling.base import FetchedLabel, two_d

        for j in jobs:
            lab = two_d(json.loads((j.folder / "labels.json").read_text()))
            box = max((b for c in lab["cameras"].values() for b in c["boxes2d"]), key=lambda b: b["bbox"][2] - b["bbox"][0])
            box["bbox"][2] -= 3.0
            yield FetchedLabel(j.id, lab, "file", "reviewer")


def _accepted_then_corrected(cat, selection) -> None:
    """Every job accepted on the oracle's v1; then a reviewer's correction imported as v2 of each."""
    create_jobs(cat, selection, "oracle")
    send(cat, OracleBackend(), "sel")
    import_labels(cat, OracleBackend(), "sel")
    transition(cat, [1, 2, 3, 4], "accepted", by="alice")
    got = import_labels(cat, Corrections(), "sel")
    assert got["new"] == 4 and got["conflicts"]  # recorded as versions 2; the jobs stay accepted on v1
    assert [j["state"] for j in job_table(cat, "sel")] == ["accepted"] * 4


# -- 24.2: re-pin and re-open ---------------------------------------------------------------------------
def test_a_correction_after_acceptance_is_re_pinned_and_training_reads_it(env):
    with open_catalog(env["catalog"]) as cat:
        _accepted_then_corrected(cat, env["selection"])
        fid = load_jobs(cat, "sel", ids=[1])[0].frame_id
        v1 = accepted_labels(cat)[fid]
        with pytest.raises(LabelError, match=r"job 1 is accepted \(pinned to v1\): re-pin it with --accept 1 --label-version N"):
            transition(cat, [1], "accepted")
        transition(cat, [1], "accepted", version=2, by="bob")
        acc = accepted_versions(cat)
        assert acc[fid]["version"] == 2 and accepted_labels(cat)[fid] != v1  # training reads the correction
        assert [r["pinned"] for r in job_table(cat, "sel")] == [2, 1, 1, 1]
        h = history(cat, job_id=1)
        assert [(e["action"], e["old_version"], e["new_version"], e["by"]) for e in h] == [
            ("accept", None, 1, "alice"), ("repin", 1, 2, "bob")]  # the old pin kept in the history
        assert all(isinstance(e["at"], float) and e["at"] > 0 for e in h)
        transition(cat, [1], "accepted", version=2, by="bob")  # again: nothing changes, nothing recorded twice
        assert len(history(cat, job_id=1)) == 2


def test_a_re_opened_job_leaves_training_until_accepted_again(env):
    with open_catalog(env["catalog"]) as cat:
        _accepted_then_corrected(cat, env["selection"])
        fid = load_jobs(cat, "sel", ids=[2])[0].frame_id
        transition(cat, [2], "labelled", by="lead")
        assert fid not in accepted_labels(cat) and job_table(cat, "sel")[1]["state"] == "labelled"
        with pytest.raises(LabelError, match="disagree"):  # a conflicted frame: which version, the reviewer says
            transition(cat, [2], "accepted", by="lead")
        transition(cat, [2], "accepted", version=2, by="lead")
        assert accepted_versions(cat)[fid]["version"] == 2
        assert [(e["action"], e["old_version"], e["new_version"]) for e in history(cat, job_id=2)] == [
            ("accept", None, 1), ("reopen", 1, None), ("accept", None, 2)]


def test_cli_reopen_and_repin_with_history(env, capsys):
    from hydranet.cli import main

    with open_catalog(env["catalog"]) as cat:
        _accepted_then_corrected(cat, env["selection"])
    cat = str(env["catalog"])
    assert main(["engine", "jobs", "--catalog", cat, "--accept", "3", "--label-version", "2", "--by", "carol"]) == 0
    assert main(["engine", "jobs", "--catalog", cat, "--reopen", "4", "--by", "dave", "--history"]) == 0
    out = capsys.readouterr().out
    assert "| 3 | sel | clip_00001/0 | accepted | oracle | 2 | v2 | - |" in out
    assert "| 4 | sel | clip_00001/1 | labelled | oracle | 2 | - | - |" in out
    assert "history: job 3 repin v1 -> v2 by carol at " in out and "history: job 4 reopen v1 -> v- by dave at " in out
    assert "conflict: frame id" in out and " box [" in out  # conflicts name the box


# -- kill -9 during a re-pin and during a quarantine ------------------------------------------------------
SLOW = """
import sys, time
from pathlib import Path
import data_engine.label_exchange as X
import data_engine.label_queue as Q
import data_engine.labels as L
orig = Q.log_event
def slow(*a, **k):
    orig(*a, **k)
    Path(sys.argv[2]).write_text("in")
    time.sleep(60)
L.log_event = X.log_event = slow  # where transition (labels) and hold (label_exchange) look it up
with L.open_catalog(sys.argv[1]) as cat:
    if sys.argv[3] == "repin":
        L.transition(cat, [1], "accepted", version=2, by="bob")
    else:
        job = Q.load_jobs(cat, "sel", ids=[1])[0]
        X.hold(cat, job, "task 7 box outside the image", True)
"""


@pytest.mark.parametrize("what", ["repin", "quarantine"])
def test_kill9_mid_move_keeps_the_history_whole(env, what):
    with open_catalog(env["catalog"]) as cat:
        _accepted_then_corrected(cat, env["selection"])
        before = history(cat)
    marker = env["tmp"] / "marker"
    p = subprocess.Popen([sys.executable, "-c", SLOW, str(env["catalog"]), str(marker), what], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    t0 = time.time()
    while not marker.exists() and time.time() - t0 < 60 and p.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), "the move never started"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with open_catalog(env["catalog"]) as cat:  # nothing of the killed move: the pin, the note, the history as before
        assert history(cat) == before and job_table(cat, "sel")[0]["pinned"] == 1 and job_table(cat, "sel")[0]["note"] is None
        if what == "repin":
            transition(cat, [1], "accepted", version=2, by="bob")
        else:
            from data_engine.label_exchange import hold

            assert hold(cat, load_jobs(cat, "sel", ids=[1])[0], "task 7 box outside the image", True)
        after = history(cat)
        assert after[:len(before)] == before and [e["action"] for e in after[len(before):]] == [what]


# -- Label Studio: partly done frames, a quarantined task, model_version ---------------------------------
class FakeClient:
    """Label Studio's REST answers as the backend reads them, in memory."""

    def __init__(self):
        self.tasks_: list[dict] = []
        self.next_id = 1

    def project(self, title, config):
        self.config = getattr(self, "config", config)
        return 1

    def label_config(self, project):
        return self.config

    def tasks(self, project):
        return self.tasks_

    def upload(self, project, name, content):
        return f"/data/upload/1/{name}"

    def import_tasks(self, project, tasks):
        for t in tasks:
            self.tasks_.append({"id": self.next_id, "data": t["data"], "predictions": t.get("predictions", []), "annotations": []})
            self.next_id += 1

    def users(self):
        return {7: "reviewer@example.com"}

    def export(self, project):
        return json.loads(json.dumps(self.tasks_))

    def annotate(self, job, camera, boxes, size, cancelled=False, ann_id=None):
        t = next(t for t in self.tasks_ if t["data"]["job_id"] == job and t["data"]["camera"] == camera)
        t["annotations"].append({"id": ann_id or len(t["annotations"]) + 100, "completed_by": 7, "was_cancelled": cancelled,
                                 "updated_at": f"2026-01-01T00:00:{len(t['annotations']):02d}",
                                 "result": [box_result(n, b, size) for n, b in boxes]})


def _ls_sent(env):
    fake = FakeClient()
    backend = LabelStudioBackend(client=fake, task="camera")  # per-camera tasks (frame tasks: test_engine_ls_frame_tasks.py)
    cat = open_catalog(env["catalog"])
    create_jobs(cat, env["selection"], backend.name)
    send(cat, backend, "sel")
    return cat, backend, fake


def _label_all_cameras(fake, job, skip=(), bad=None):
    for cam, size in zip(job.cameras, job.sizes):
        if cam in skip:
            continue
        H, W = size
        box = [2.0, 3.0, 20.0, 30.0] if cam != bad else [2.0, 3.0, W + 40.0, 30.0]  # bad: a box outside the image
        fake.annotate(job.id, cam, [("car", box)], size)


def test_label_studio_partly_done_frames_say_why(env, capsys):
    from hydranet.cli.engine_labels import cmd_engine_jobs

    cat, backend, fake = _ls_sent(env)
    with cat:
        jobs = load_jobs(cat, "sel")
        cams = jobs[0].cameras
        for cam, size in list(zip(cams, jobs[0].sizes))[:3]:
            fake.annotate(1, cam, [("car", [2.0, 3.0, 20.0, 30.0])], size)
        fake.annotate(1, cams[-1], [], jobs[0].sizes[-1], cancelled=True)  # the labeller skipped CAM_BACK...
        _label_all_cameras(fake, jobs[1])
        got = import_labels(cat, backend, "sel")
        assert got["new"] == 1 and got["waiting"] == 3 and not got["quarantined"]
        assert got["partial"] == [{"job": 1, "frame": f"{jobs[0].clip}/{jobs[0].dir}",
                                   "reason": f"3 of {len(cams)} cameras done, camera {cams[-1]} skipped"}]
        assert job_table(cat, "sel")[0]["note"] == f"3 of {len(cams)} cameras done, camera {cams[-1]} skipped"
    cmd_engine_jobs(type("A", (), {"catalog": env["catalog"], "selection": None, "accept": None, "reject": None,
                                   "requeue": None, "reopen": None, "version": None, "by": None, "history": False})())
    assert f"| 1 | sel | clip_00000/0 | sent | label_studio | 0 | - | 3 of {len(cams)} cameras done" in capsys.readouterr().out


def test_one_bad_label_studio_task_is_quarantined_and_the_rest_imported(env, capsys, monkeypatch):
    from hydranet.cli import main

    cat, backend, fake = _ls_sent(env)
    with cat:
        jobs = load_jobs(cat, "sel")
        _label_all_cameras(fake, jobs[0], bad=jobs[0].cameras[1])
        for j in jobs[1:]:
            _label_all_cameras(fake, j)
    monkeypatch.setattr("data_engine.labeling.build_backend", lambda *a, **k: backend)
    argv = ["engine", "import-labels", "--catalog", str(env["catalog"]), "--backend", "label-studio", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "3 new label versions" in out and "1 sent jobs still waiting" in out and "1 tasks quarantined" in out
    line = [ln for ln in out.splitlines() if "quarantined: job 1" in ln]
    assert len(line) == 1 and f"task 2 (clip_00000/000000 {jobs[0].cameras[1]})" in line[0] and "outside the" in line[0]
    assert main(argv) == 0  # printed once: the second import counts it and points at `engine jobs`
    out = capsys.readouterr().out
    assert "quarantined: job 1" not in out and "1 tasks quarantined (1 as before: `hydranet engine jobs` lists why)" in out
    with open_catalog(env["catalog"]) as cat:
        assert [j["state"] for j in job_table(cat, "sel")] == ["sent", "labelled", "labelled", "labelled"]
        assert job_table(cat, "sel")[0]["note"].startswith("quarantined: Label Studio project 1 task 2")
        assert [e["action"] for e in history(cat)] == ["quarantine"]  # one event, not one per import
        t = next(t for t in fake.tasks_ if t["id"] == 2)  # the labeller fixes the task: the job is imported, the note goes
        fake.annotate(1, t["data"]["camera"], [("car", [2.0, 3.0, 20.0, 30.0])], jobs[0].sizes[1])
        got = import_labels(cat, backend, "sel")
        assert got["new"] == 1 and not got["quarantined"] and job_table(cat, "sel")[0]["note"] is None


def test_label_studio_predictions_carry_the_model_sha256(env, monkeypatch):
    from data_engine.label_exchange import with_predictions

    sha = "ab" * 32
    with open_catalog(env["catalog"]) as cat:
        jobs0 = create_jobs(cat, env["selection"], "label_studio")
        assert jobs0["created"] == 4
        with cat.transaction():
            cat.db.execute("INSERT INTO models (sha256, path, embedding_dim, meta, added) VALUES (?, '/models/model.onnx', 8, "
                           "'{}', 0)", (sha,))
            cat.db.execute("INSERT INTO shadow_runs (model_id, candidate_id, fleet_id, started) VALUES (1, 0, 1, 0)")
            cat.db.execute("INSERT INTO selections (name, run_id, strategy, budget, unit, params, created) VALUES "
                           "('sel', 1, 'hybrid', 4, 'frame', '{}', 0)")
            jobs = load_jobs(cat, "sel")
            pred = {"det2d": [{"boxes": [[1, 1, 10, 10]], "scores": [0.9], "labels": [0]} for _ in jobs[0].cameras]}
            for j in jobs:
                cat.db.execute("INSERT INTO signals (run_id, frame_id, status, predictions) VALUES (1, ?, 'ok', ?)",
                               (j.frame_id, json.dumps(pred)))
        H, W = jobs[0].sizes[0]
        n = len(jobs[0].cameras)  # a complete metadata rig (deploy.metadata.ModelRig checks it)
        md = {"heads": {"det2d": {"classes": ["car"]}},
              "rig": {"image_size": [H, W], "names": list(jobs[0].cameras), "K": [np.eye(3).tolist()] * n,
                      "cam2ego": [np.eye(4).tolist()] * n, "source_sizes": [[H, W]] * n}}
        monkeypatch.setattr("deploy.metadata.read_metadata", lambda path: md)
        assert {j.model_version for j in with_predictions(cat, jobs)} == {sha}
        fake = FakeClient()
        send(cat, LabelStudioBackend(client=fake, task="camera"), "sel")  # frame tasks: test_engine_ls_frame_tasks.py
    assert {p["model_version"] for t in fake.tasks_ for p in t["predictions"]} == {sha}


# -- conflicts box by box ------------------------------------------------------------------------------------
def test_conflicts_name_the_frame_camera_box_and_change():
    from data_engine.labeling.base import compare, describe_changes

    a = {"cameras": {"CAM_FRONT": {"boxes2d": [{"bbox": [10, 10, 40, 30], "class": "car"},
                                                {"bbox": [50, 10, 60, 40], "class": "pedestrian"}]},
                     "CAM_BACK": {"boxes2d": [{"bbox": [0, 0, 20, 20], "class": "truck"}]}}}
    b = {"cameras": {"CAM_FRONT": {"boxes2d": [{"bbox": [10, 10, 40, 30], "class": "bus"},
                                                {"bbox": [52, 10, 60, 40], "class": "pedestrian"}]},
                     "CAM_BACK": {"boxes2d": []}}}
    c = compare(a, b)
    assert not c["agree"]
    text = describe_changes(c, "v1", "v2")
    assert "CAM_FRONT box [10.0, 10.0, 40.0, 30.0]: class car -> bus" in text
    assert "CAM_FRONT box [50.0, 10.0, 60.0, 40.0]: corners moved 2 px to [52.0, 10.0, 60.0, 40.0]" in text
    assert "CAM_BACK box [0.0, 0.0, 20.0, 20.0]: missing in v2 (truck)" in text


# -- the catalog's schema 2 -> 3 ------------------------------------------------------------------------------
def test_a_version_2_catalog_gains_notes_and_the_history_keeping_its_jobs(env):
    with open_catalog(env["catalog"]) as cat:
        create_jobs(cat, env["selection"], "oracle")
    db = sqlite3.connect(str(env["catalog"]))  # back to version 2's layout: label_jobs without note, no label_events
    db.executescript("DROP TABLE label_events; ALTER TABLE label_jobs DROP COLUMN note; PRAGMA user_version = 2;")
    rows = db.execute("SELECT * FROM label_jobs ORDER BY id").fetchall()
    db.close()
    with open_catalog(env["catalog"]) as cat:
        assert cat.columns("label_jobs")[-1] == "note" and "job_id" in cat.columns("label_events")
        assert [r[:-1] for r in cat.db.execute("SELECT * FROM label_jobs ORDER BY id")] == rows
        assert cat.db.execute("SELECT count(*) FROM label_jobs WHERE note IS NOT NULL").fetchone()[0] == 0
        assert cat.db.execute("PRAGMA user_version").fetchone()[0] == 4
        send(cat, OracleBackend(), "sel")
        import_labels(cat, OracleBackend(), "sel")
        transition(cat, [1], "accepted", by="x")
        assert [e["action"] for e in history(cat)] == ["accept"]


# -- 24.6c: accepted_labels takes a catalog path --------------------------------------------------------
def test_accepted_labels_takes_a_catalog_path_and_closes_it(env, monkeypatch):
    from data_engine import labels as labels_mod

    with open_catalog(env["catalog"]) as cat:
        _accepted_then_corrected(cat, env["selection"])
        want_labels, want_versions = accepted_labels(cat), accepted_versions(cat)
    assert len(want_labels) == 4
    opened = []
    real = labels_mod.open_catalog

    def spy(path):
        opened.append(real(path))
        return opened[-1]

    monkeypatch.setattr(labels_mod, "open_catalog", spy)
    for path in (env["catalog"], str(env["catalog"])):  # a Path and a str
        assert accepted_labels(path) == want_labels
        assert accepted_versions(path) == want_versions
    assert len(opened) == 4
    for cat in opened:  # each opened catalog is closed again
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            cat.db.execute("SELECT 1")
