"""Label Studio round trip against a real server (docs/labeling.md): a project with the generated
labelling config, every frame one task with all its camera images uploaded and the pre-annotations per
camera, a send killed with kill -9 and rerun (no task twice), a reviewer's annotations and a draft
submitted through the REST API, a bad box quarantining its job until fixed, then the import checked
against the sim's exact labels: boxes within 0.5 px, classes equal, nothing lost; a reviewer's edit
after acceptance becomes a new version, a reported conflict, and is re-pinned. Per-camera tasks
(--ls-task camera) round trip too, and their project refuses whole-frame tasks. A recorded fleet of camera videos
(engine ingest) is labelled the same way: PNGs of the decoded video frames, boxes back within 0.5 px.

The server: $HYDRANET_LABEL_STUDIO_URL and $HYDRANET_LABEL_STUDIO_TOKEN when set (a team or CI
server; the test creates its own project), else one started here from .venv-labelstudio (made by
`make test-integration`) on 127.0.0.1 with a fresh data folder. Neither: a visible skip."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
from engine_catalogs import matched_boxes
from engine_fixtures import REPO, make_fleet

from data_engine.catalog import Catalog
from data_engine.fleet import Fleet
from data_engine.label_exchange import import_labels
from data_engine.label_queue import create_jobs, history, job_table, load_jobs
from data_engine.labeling.base import LabelingError, Vocabulary
from data_engine.labeling.label_studio import TOKEN_ENV, URL_ENV, Client, LabelStudioBackend
from data_engine.labels import accepted_versions, conflicts, open_catalog, transition, versions

LS_BIN = REPO / ".venv-labelstudio" / "bin" / "label-studio"
START_TIMEOUT_S = float(os.environ.get("HYDRANET_LABEL_STUDIO_START_S", "300"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    url, token = os.environ.get(URL_ENV), os.environ.get(TOKEN_ENV)
    if url and token:
        yield url, token
        return
    if not LS_BIN.exists():
        pytest.skip(f"no Label Studio server: set {URL_ENV} and {TOKEN_ENV}, or run `make test-integration` (installs it "
                    "into .venv-labelstudio)")
    from data_engine.labeling.ls_server import start_server, stop  # what `make labelstudio` runs

    data = tmp_path_factory.mktemp("label_studio")
    try:
        p, login = start_server(data, _free_port(), LS_BIN, START_TIMEOUT_S, every_s=30, log=lambda s: None)
    except LabelingError as e:
        pytest.fail(str(e))
    try:
        yield login["url"], login["token"]
    finally:
        stop(p)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("ls_engine")
    fleet = make_fleet(root / "fleet", clips=2, frames=2, seed=5)
    cat = root / "catalog.db"
    with Catalog(cat, create=True) as c:
        c.add_fleet(Fleet(fleet))
    sel = root / "selection.json"
    name = f"ls-{uuid.uuid4().hex[:8]}"  # a project of its own, also on a shared server
    sel.write_text(json.dumps({"name": name, "frames": [{"clip": f"clip_{c:05d}", "frame": f} for c in range(2) for f in range(2)]}))
    return {"root": root, "fleet": fleet, "catalog": cat, "selection": sel, "name": name}


def truth(job) -> dict:
    return json.loads((job.folder / "labels.json").read_text())


def _with_truth_predictions(cat, jobs, min_score=0.1):
    """Stand-in for the deployed model's detections: the exact boxes, scored (pre-annotations)."""
    vocab = Vocabulary.from_dataset(jobs[0].root) if jobs else None
    return [dataclasses.replace(j, model_version="test-model", predictions={
        cam: [{"bbox": b["bbox"], "label": vocab.name_of(b), "score": 0.5 + 0.01 * k} for k, b in enumerate(c["boxes2d"])]
        for cam, c in truth(j)["cameras"].items()}) for j in jobs]


SEND_KILL = """
import sys, time
from pathlib import Path
import data_engine.label_exchange as X
import data_engine.labels as L
from data_engine.labeling.label_studio import LabelStudioBackend
cat_path, name, url, token, marker = sys.argv[1:6]
real_move, calls = X.move_job, [0]
def slow_move(cat, job, to, **cols):
    real_move(cat, job, to, **cols)
    calls[0] += 1
    if calls[0] == 2:  # job 2's tasks exist on the server; its 'sent' is not committed yet
        Path(marker).write_text("inside")
        time.sleep(120)
X.move_job = slow_move  # where send looks it up
with L.open_catalog(cat_path) as cat:
    X.send(cat, LabelStudioBackend(url, token), name, batch=1)
"""


def _percent(b, W, H, name, cam=None):  # written out here, independently of the backend's own conversion
    """A result on a frame task's camera `cam` (image_<cam>, label_<cam>), or on a per-camera task (cam None)."""
    x0, y0, x1, y1 = b
    key = None if cam is None else re.sub(r"[^A-Za-z0-9_]", "_", cam)
    return {"from_name": "label" if cam is None else f"label_{key}", "to_name": "image" if cam is None else f"image_{key}",
            "type": "rectanglelabels", "original_width": W, "original_height": H, "image_rotation": 0,
            "value": {"x": x0 / W * 100, "y": y0 / H * 100, "width": (x1 - x0) / W * 100, "height": (y1 - y0) / H * 100,
                      "rotation": 0, "rectanglelabels": [name]}}


def _frame_results(job, lab, vocab, rename=None):
    """Every camera's boxes of `lab` as one frame task's results (`rename`: {(camera, index): another label name})."""
    return [_percent(b["bbox"], W, H, (rename or {}).get((cam, k), vocab.name_of(b)), cam)
            for cam, (H, W) in zip(job.cameras, job.sizes) for k, b in enumerate(lab["cameras"][cam]["boxes2d"])]


def test_label_studio_round_trip(server, env, monkeypatch):
    """Whole-frame tasks (the default): kill -9 mid-send, predictions per camera, a draft waits, a bad box quarantines,
    the import equals the truth, an edit after acceptance becomes version 2 and is re-pinned."""
    url, token = server
    client = Client(url, token)
    name = env["name"]
    with open_catalog(env["catalog"]) as cat:
        assert create_jobs(cat, env["selection"], "label_studio")["created"] == 4
    # 1. send, killed with kill -9 after job 2's task was created but before it was recorded as sent
    marker = env["root"] / "inside"
    p = subprocess.Popen([sys.executable, "-c", SEND_KILL, str(env["catalog"]), name, url, token, str(marker)], cwd=REPO)
    t0 = time.time()
    while not marker.exists():
        assert p.poll() is None and time.time() - t0 < 180, "the sender ended before its second job"
        time.sleep(0.1)
    p.send_signal(signal.SIGKILL)
    p.wait()
    with open_catalog(env["catalog"]) as cat:
        assert [j.state for j in load_jobs(cat, name)].count("sent") == 1
        # 2. the rerun (with pre-annotations) adopts the task already on the server: none twice
        monkeypatch.setattr("data_engine.label_exchange.with_predictions", _with_truth_predictions)
        from data_engine.label_exchange import send

        assert send(cat, LabelStudioBackend(url, token), name)["sent"] == 3
        jobs = load_jobs(cat, name)
    assert {j.state for j in jobs} == {"sent"} and len({j.external_id for j in jobs}) == 1
    pid = int(jobs[0].external_id)
    project = client.request("GET", f"/api/projects/{pid}")
    vocab = Vocabulary.from_dataset(env["fleet"])
    cams = jobs[0].cameras
    assert project["title"] == f"hydranet {name}" and all(f'value="{n}"' in project["label_config"] for n in vocab.names)
    assert all(f'<Image name="image_{c}" value="$image_{c}"' in project["label_config"] for c in cams)
    tasks = client.tasks(pid)
    assert sorted(t["data"]["job_id"] for t in tasks) == [j.id for j in jobs]  # one task per frame, none twice
    assert all(t["data"]["cameras"] == list(cams) and all(t["data"][f"image_{c}"] for c in cams) for t in tasks)
    with_preds = [t for t in tasks if t.get("predictions")]
    assert sorted(t["data"]["job_id"] for t in with_preds) == [3, 4]  # the rerun's new tasks (jobs 1, 2: the killed send's)
    for t in with_preds:
        pred = client.request("GET", f"/api/predictions/{t['predictions'][0]}") if isinstance(t["predictions"][0], int) \
            else t["predictions"][0]
        assert isinstance(pred["score"], float) and pred["model_version"] == "test-model"
        assert {r["to_name"] for r in pred["result"]} <= {f"image_{c}" for c in cams}
    by_job = {t["data"]["job_id"]: t for t in tasks}
    expected = {j.id: truth(j) for j in jobs}
    # 3. a reviewer annotates jobs 1 and 2; job 3 has a box outside its image on one camera; job 4 is only a draft
    for j in jobs[:2]:
        client.request("POST", f"/api/tasks/{by_job[j.id]['id']}/annotations",
                       {"result": _frame_results(j, expected[j.id], vocab), "was_cancelled": False})
    j3, j4 = jobs[2], jobs[3]
    H, W = j3.sizes[1]
    bad = _frame_results(j3, expected[j3.id], vocab) + [_percent([2.0, 3.0, W + 30.0, 20.0], W, H, vocab.names[0], j3.cameras[1])]
    ann3 = client.request("POST", f"/api/tasks/{by_job[j3.id]['id']}/annotations", {"result": bad, "was_cancelled": False})
    client.request("POST", f"/api/tasks/{by_job[j4.id]['id']}/drafts", {"result": _frame_results(j4, expected[j4.id], vocab)})
    me = client.request("GET", "/api/current-user/whoami")["email"]  # the reviewer: whoever holds the token
    with open_catalog(env["catalog"]) as cat:
        got = import_labels(cat, LabelStudioBackend(url, token), name)
        assert got["new"] == 2 and got["waiting"] == 2 and got["conflicts"] == []
        (q,) = got["quarantined"]
        assert q["job"] == j3.id and f"task {by_job[j3.id]['id']} ({j3.clip}/{j3.dir} {j3.cameras[1]}) annotation {ann3['id']}" \
            in q["reason"] and "lies outside the" in q["reason"]
        n_drawn = sum(1 for c in cams if expected[j4.id]["cameras"][c]["boxes2d"])
        assert got["partial"] == [{"job": j4.id, "frame": f"{j4.clip}/{j4.dir}", "reason": f"a draft in Label Studio task "
                                   f"{by_job[j4.id]['id']} (boxes on {n_drawn} of {len(cams)} cameras), not submitted"}]
        # 4. the bad box fixed in the tool, the draft submitted: both imported, nothing twice
        client.request("PATCH", f"/api/annotations/{ann3['id']}", {"result": _frame_results(j3, expected[j3.id], vocab)})
        client.request("POST", f"/api/tasks/{by_job[j4.id]['id']}/annotations",
                       {"result": _frame_results(j4, expected[j4.id], vocab), "was_cancelled": False})
        got = import_labels(cat, LabelStudioBackend(url, token), name)
        assert got["new"] == 2 and got["duplicate"] == 2 and got["waiting"] == 0 and not got["quarantined"]
        assert [r["note"] for r in job_table(cat, name)] == [None] * 4
        # 5. the import equals the sim's labels: boxes within 0.5 px, classes equal, nothing lost
        n = 0
        for j in load_jobs(cat, name):
            assert j.state == "labelled"
            v = versions(cat, j.frame_id)
            assert len(v) == 1 and v[0]["source"] == "label_studio" and v[0]["labeller"] == me
            n += matched_boxes(expected[j.id], v[0]["payload"], j.cameras, vocab)
        assert n > 0
        # 6. accepted; a reviewer changes a class later: a new version, a reported conflict, re-pinned to it
        transition(cat, [j.id for j in jobs], "accepted", by="lead")
        j = next(j for j in jobs if any(expected[j.id]["cameras"][c]["boxes2d"] for c in cams))
        cam = next(c for c in cams if expected[j.id]["cameras"][c]["boxes2d"])
        first = vocab.name_of(expected[j.id]["cameras"][cam]["boxes2d"][0])
        other = next(n for n in vocab.names if n != first)
        ann = client.request("GET", f"/api/tasks/{by_job[j.id]['id']}/annotations")[-1]
        client.request("PATCH", f"/api/annotations/{ann['id']}", {"result": _frame_results(j, expected[j.id], vocab, {(cam, 0): other})})
        got = import_labels(cat, LabelStudioBackend(url, token), name)
        assert got["new"] == 1 and len(got["conflicts"]) == 1 and "1 class changes" in got["conflicts"][0]["detail"]
        assert f"{cam} box [" in got["conflicts"][0]["detail"]
        assert [x["version"] for x in versions(cat, j.frame_id)] == [1, 2] and conflicts(cat, name)
        assert accepted_versions(cat)[j.frame_id]["version"] == 1  # the job stays pinned until a reviewer moves it
        transition(cat, [j.id], "accepted", version=2, by="lead")
        assert accepted_versions(cat)[j.frame_id]["version"] == 2
        assert [e["action"] for e in history(cat, job_id=j.id)] == ["accept", "repin"]


def test_label_studio_per_camera_tasks_and_a_project_of_the_other_kind(server, env, tmp_path):
    """--ls-task camera: one task per camera image, a job labelled once each camera has an annotation (a cancelled one
    says the camera was skipped); the project then refuses whole-frame tasks (its config, read from the server, says)."""
    url, token = server
    client = Client(url, token)
    cat_path = tmp_path / "catalog.db"
    with Catalog(cat_path, create=True) as c:
        c.add_fleet(Fleet(env["fleet"]))
    name = f"lscam-{uuid.uuid4().hex[:8]}"
    sel = tmp_path / "selection.json"
    sel.write_text(json.dumps({"name": name, "frames": [{"clip": "clip_00000", "frame": 0}, {"clip": "clip_00001", "frame": 1}]}))
    vocab = Vocabulary.from_dataset(env["fleet"])
    with open_catalog(cat_path) as cat:
        from data_engine.label_exchange import send

        create_jobs(cat, sel, "label_studio")
        assert send(cat, LabelStudioBackend(url, token, task="camera"), name)["sent"] == 2
        jobs = load_jobs(cat, name)
        pid = int(jobs[0].external_id)
        tasks = client.tasks(pid)
        assert sorted((t["data"]["job_id"], t["data"]["camera"]) for t in tasks) == sorted(
            (j.id, c) for j in jobs for c in j.cameras)
        by_key = {(t["data"]["job_id"], t["data"]["camera"]): t for t in tasks}
        for j in jobs:
            for cam, (H, W) in zip(j.cameras, j.sizes):
                if (j.id, cam) == (jobs[1].id, jobs[1].cameras[-1]):
                    client.request("POST", f"/api/tasks/{by_key[(j.id, cam)]['id']}/annotations", {"result": [], "was_cancelled": True})
                    continue
                res = [_percent(b["bbox"], W, H, vocab.name_of(b)) for b in truth(j)["cameras"][cam]["boxes2d"]]
                client.request("POST", f"/api/tasks/{by_key[(j.id, cam)]['id']}/annotations", {"result": res, "was_cancelled": False})
        got = import_labels(cat, LabelStudioBackend(url, token), name)  # an import reads either kind
        n = len(jobs[1].cameras)
        assert got["new"] == 1 and got["partial"] == [{"job": jobs[1].id, "frame": f"{jobs[1].clip}/{jobs[1].dir}",
                                                       "reason": f"{n - 1} of {n} cameras done, camera {jobs[1].cameras[-1]} skipped"}]
        # the same project asked for whole-frame tasks: refused, nothing created
        sel2 = tmp_path / "more.json"
        sel2.write_text(json.dumps({"name": name + "-b", "frames": [{"clip": "clip_00000", "frame": 1}]}))
        create_jobs(cat, sel2, "label_studio")
        with pytest.raises(LabelingError, match=rf"Label Studio project {pid} \('hydranet {name}'\) holds per-camera tasks; it "
                                                r"cannot take whole-frame tasks .*send with --ls-task camera"):
            send(cat, LabelStudioBackend(url, token, title=f"hydranet {name}"), name + "-b")
        assert len(client.tasks(pid)) == len(tasks)


def test_label_studio_labels_recorded_video_frames(server, tmp_path):
    """A fleet of camera videos (engine ingest): each frame goes to Label Studio as one task of PNGs of the decoded
    video frames; the reviewer's boxes come back as label versions of the recorded frames, within 0.5 px."""
    from recording_fixtures import sim_rig_file, write_videos

    from data_engine.label_exchange import send
    from hydranet.cli import main

    url, token = server
    client = Client(url, token)
    sim = make_fleet(tmp_path / "sim", clips=1, frames=2, seed=6)
    fleet = tmp_path / "fleet"
    assert main(["engine", "ingest", "--quiet", "--out", str(fleet), "--source", "video", "--videos",
                 str(write_videos(sim, tmp_path / "videos")), "--rig", str(sim_rig_file(sim, tmp_path / "rig.yaml"))]) == 0
    cat_path, name = tmp_path / "catalog.db", f"rec-{uuid.uuid4().hex[:8]}"
    with Catalog(cat_path, create=True) as c:
        c.add_fleet(Fleet(fleet))
    sel = tmp_path / "selection.json"
    sel.write_text(json.dumps({"name": name, "frames": [{"clip": "clip_00000", "frame": f} for f in range(2)]}))
    vocab = Vocabulary.from_dataset(fleet)
    with open_catalog(cat_path) as cat:
        assert create_jobs(cat, sel, "label_studio")["created"] == 2
        assert send(cat, LabelStudioBackend(url, token), name)["sent"] == 2
        jobs = load_jobs(cat, name)
        tasks = {t["data"]["job_id"]: t for t in client.tasks(int(jobs[0].external_id))}
        assert sorted(tasks) == [j.id for j in jobs]
        assert all(tasks[j.id]["data"][f"image_{c}"].lower().endswith(".png") for j in jobs for c in j.cameras)
        expected = {j.id: json.loads((sim / "scenes" / j.clip / j.dir / "labels.json").read_text()) for j in jobs}
        for j in jobs:
            client.request("POST", f"/api/tasks/{tasks[j.id]['id']}/annotations",
                           {"result": _frame_results(j, expected[j.id], vocab), "was_cancelled": False})
        got = import_labels(cat, LabelStudioBackend(url, token), name)
        assert got["new"] == 2 and got["waiting"] == 0 and not got["quarantined"]
        n = 0
        for j in load_jobs(cat, name):
            (v,) = versions(cat, j.frame_id)
            n += matched_boxes(expected[j.id], v["payload"], j.cameras, vocab)
        assert n > 0


def test_label_studio_edits_of_an_auto_pre_fill_are_recorded(server, tmp_path):
    """A frame pre-filled by the auto-labeller (`record_auto`, not sure: queued) goes to the server with the auto boxes
    as its prediction (model_version: the auto labeller); the reviewer submits them with one box moved 3 px, one
    deleted, one renamed and one drawn: the import records exactly those edits with the reviewer's version
    (tests/test_engine_label_edits.py does the same through COCO files, the loop through an in-memory server)."""
    from data_engine.label_exchange import send
    from data_engine.labels import record_auto

    url, token = server
    client = Client(url, token)
    fleet = make_fleet(tmp_path / "fleet", clips=1, frames=1, seed=7)
    cat_path, name = tmp_path / "catalog.db", f"edit-{uuid.uuid4().hex[:8]}"
    with Catalog(cat_path, create=True) as c:
        c.add_fleet(Fleet(fleet))
    sel = tmp_path / "selection.json"
    sel.write_text(json.dumps({"name": name, "frames": [{"clip": "clip_00000", "frame": 0}]}))
    auto = [([10.0, 10.0, 40.0, 40.0], "car"), ([50.0, 10.0, 80.0, 40.0], "car"), ([10.0, 42.0, 40.0, 62.0], "car")]
    with open_catalog(cat_path) as cat:
        create_jobs(cat, sel, "label_studio")
        (job,) = load_jobs(cat, name)
        cam, (H, W) = job.cameras[0], job.sizes[0]
        record_auto(cat, job, {"cameras": {cam: {"boxes2d": [{"bbox": b, "class": k, "attributes": {}, "confidence": 0.4}
                                                             for b, k in auto]}}}, "autolabel(test)", accept=False, why="test")
        assert send(cat, LabelStudioBackend(url, token), name)["sent"] == 1
        (job,) = load_jobs(cat, name)
        (task,) = client.tasks(int(job.external_id))
        pred = task["predictions"][0]
        pred = client.request("GET", f"/api/predictions/{pred}") if isinstance(pred, int) else pred
        assert pred["model_version"] == "autolabel(test)" and len(pred["result"]) == 3
        edited = [_percent([13.0, 10.0, 43.0, 40.0], W, H, "car", cam), _percent(auto[2][0], W, H, "truck", cam),
                  _percent([60.0, 45.0, 90.0, 60.0], W, H, "bus", cam)]
        client.request("POST", f"/api/tasks/{task['id']}/annotations", {"result": edited, "was_cancelled": False})
        got = import_labels(cat, LabelStudioBackend(url, token), name)
        assert got["new"] == 1 and got["waiting"] == 0
        (rec,) = got["edits"]
        assert (rec["added"], rec["deleted"], rec["moved"], rec["class_changed"], rec["prefill"]) == (1, 1, 1, 1, 1)
        (person,) = [v for v in versions(cat, job.frame_id) if v["source"] == "label_studio"]
        assert person["payload"]["edits"]["moved"] == 1
