"""Label Studio round trip against a real server (docs/labeling.md): a project with the generated
labelling config, the selected camera images uploaded with pre-annotations and scores, a send killed
with kill -9 and rerun (no task twice), a reviewer's annotations submitted through the REST API,
then the import checked against the sim's exact labels: boxes within 0.5 px, classes equal, nothing
lost; a reviewer's later edit becomes a new version and a reported conflict.

The server: $HYDRANET_LABEL_STUDIO_URL and $HYDRANET_LABEL_STUDIO_TOKEN when set (a team or CI
server; the test creates its own project), else one started here from .venv-labelstudio (made by
`make test-integration`) on 127.0.0.1 with a fresh data folder. Neither: a visible skip."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
from engine_fixtures import REPO, make_fleet

from data_engine.catalog import Catalog
from data_engine.fleet import Fleet
from data_engine.labeling.base import LabelingError, Vocabulary
from data_engine.labeling.label_studio import TOKEN_ENV, URL_ENV, Client, LabelStudioBackend
from data_engine.labels import conflicts, create_jobs, import_labels, load_jobs, open_catalog, versions

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
    data = tmp_path_factory.mktemp("label_studio")
    port, token = _free_port(), uuid.uuid4().hex[:40]
    env = {**os.environ, "LABEL_STUDIO_BASE_DATA_DIR": str(data), "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
           "LATEST_VERSION_CHECK": "false", "HOME": str(data)}
    log = open(data / "server.log", "wb")
    p = subprocess.Popen([str(LS_BIN), "start", "--no-browser", "--data-dir", str(data), "--internal-host", "127.0.0.1",
                          "-p", str(port), "--username", "reviewer@example.com", "--password", uuid.uuid4().hex,
                          "--user-token", token, "--enable-legacy-api-token"], env=env, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    try:
        while True:
            try:
                Client(url, token, timeout=5).request("GET", "/api/projects")
                break
            except LabelingError:
                if p.poll() is not None or time.time() - t0 > START_TIMEOUT_S:
                    tail = (data / "server.log").read_text(errors="replace")[-600:]
                    pytest.fail(f"Label Studio did not start in {START_TIMEOUT_S:.0f} s (exit {p.poll()}): {tail}")
                time.sleep(2)
        yield url, token
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()


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
import data_engine.labels as L
from data_engine.labeling.label_studio import LabelStudioBackend
cat_path, name, url, token, marker = sys.argv[1:6]
real_move, calls = L._move, [0]
def slow_move(cat, job, to, **cols):
    real_move(cat, job, to, **cols)
    calls[0] += 1
    if calls[0] == 2:  # job 2's tasks exist on the server; its 'sent' is not committed yet
        Path(marker).write_text("inside")
        time.sleep(120)
L._move = slow_move
with L.open_catalog(cat_path) as cat:
    L.send(cat, LabelStudioBackend(url, token), name, batch=1)
"""


def _percent(b, W, H, name):  # written out here, independently of the backend's own conversion
    x0, y0, x1, y1 = b
    return {"from_name": "label", "to_name": "image", "type": "rectanglelabels", "original_width": W, "original_height": H,
            "image_rotation": 0, "value": {"x": x0 / W * 100, "y": y0 / H * 100, "width": (x1 - x0) / W * 100,
                                           "height": (y1 - y0) / H * 100, "rotation": 0, "rectanglelabels": [name]}}


def test_label_studio_round_trip(server, env, monkeypatch):
    url, token = server
    client = Client(url, token)
    name = env["name"]
    with open_catalog(env["catalog"]) as cat:
        assert create_jobs(cat, env["selection"], "label_studio")["created"] == 4
    # 1. send, killed with kill -9 after job 2's tasks were created but before it was recorded as sent
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
        # 2. the rerun (with pre-annotations) adopts the tasks already on the server: none twice
        monkeypatch.setattr("data_engine.labels.with_predictions", _with_truth_predictions)
        from data_engine.labels import send

        assert send(cat, LabelStudioBackend(url, token), name)["sent"] == 3
        jobs = load_jobs(cat, name)
    assert {j.state for j in jobs} == {"sent"} and len({j.external_id for j in jobs}) == 1
    pid = int(jobs[0].external_id)
    project = client.request("GET", f"/api/projects/{pid}")
    vocab = Vocabulary.from_dataset(env["fleet"])
    assert project["title"] == f"hydranet {name}" and all(f'value="{n}"' in project["label_config"] for n in vocab.names)
    tasks = client.tasks(pid)
    n_cams = len(jobs[0].cameras)
    keys = [(t["data"]["job_id"], t["data"]["camera"]) for t in tasks]
    assert len(tasks) == 4 * n_cams and len(set(keys)) == len(keys)
    with_preds = [t for t in tasks if t.get("predictions")]
    assert with_preds and all(isinstance(t["predictions"][0]["score"], float) for t in with_preds)  # the rerun's jobs
    # 3. a reviewer annotates every image (one job's last camera left for later; one cancelled skip)
    by_key = {(t["data"]["job_id"], t["data"]["camera"]): t for t in tasks}
    later = (jobs[-1].id, jobs[-1].cameras[-1])
    expected = {}
    for j in jobs:
        t_all = truth(j)
        expected[j.id] = t_all
        for cam, (H, W) in zip(j.cameras, j.sizes):
            if (j.id, cam) == later:
                client.request("POST", f"/api/tasks/{by_key[(j.id, cam)]['id']}/annotations", {"result": [], "was_cancelled": True})
                continue
            res = [_percent(b["bbox"], W, H, vocab.name_of(b)) for b in t_all["cameras"][cam]["boxes2d"]]
            client.request("POST", f"/api/tasks/{by_key[(j.id, cam)]['id']}/annotations", {"result": res, "was_cancelled": False})
    me = client.request("GET", "/api/current-user/whoami")["email"]  # the reviewer: whoever holds the token
    with open_catalog(env["catalog"]) as cat:
        got = import_labels(cat, LabelStudioBackend(url, token), name)
        assert got["new"] == 3 and got["waiting"] == 1 and got["conflicts"] == []
        j = jobs[-1]
        H, W = j.sizes[-1]
        res = [_percent(b["bbox"], W, H, vocab.name_of(b)) for b in expected[j.id]["cameras"][later[1]]["boxes2d"]]
        client.request("POST", f"/api/tasks/{by_key[later]['id']}/annotations", {"result": res, "was_cancelled": False})
        got = import_labels(cat, LabelStudioBackend(url, token), name)
        assert got["new"] == 1 and got["duplicate"] == 3 and got["waiting"] == 0
        # 4. the import equals the sim's labels: boxes within 0.5 px, classes equal, nothing lost
        n = 0
        for j in load_jobs(cat, name):
            assert j.state == "labelled"
            v = versions(cat, j.frame_id)
            assert len(v) == 1 and v[0]["source"] == "label_studio" and v[0]["labeller"] == me
            for cam in j.cameras:
                ref = sorted(expected[j.id]["cameras"][cam]["boxes2d"], key=lambda b: b["bbox"])
                mine = sorted(v[0]["payload"]["cameras"][cam]["boxes2d"], key=lambda b: b["bbox"])
                assert len(ref) == len(mine)
                for a, b in zip(ref, mine):
                    assert vocab.name_of(a) == vocab.name_of(b)
                    assert max(abs(p - q) for p, q in zip(a["bbox"], b["bbox"])) <= 0.5
                    n += 1
        assert n > 0
        # 5. a reviewer changes a class later: a new version, a reported conflict, the first kept
        j = next(j for j in jobs for cam in j.cameras if expected[j.id]["cameras"][cam]["boxes2d"])
        cam = next(c for c in j.cameras if expected[j.id]["cameras"][c]["boxes2d"])
        H, W = j.sizes[j.cameras.index(cam)]
        boxes = expected[j.id]["cameras"][cam]["boxes2d"]
        other = next(n for n in vocab.names if n != vocab.name_of(boxes[0]))
        res = [_percent(b["bbox"], W, H, other if k == 0 else vocab.name_of(b)) for k, b in enumerate(boxes)]
        ann = [a for a in client.request("GET", f"/api/tasks/{by_key[(j.id, cam)]['id']}/annotations")][-1]
        client.request("PATCH", f"/api/annotations/{ann['id']}", {"result": res})
        got = import_labels(cat, LabelStudioBackend(url, token), name)
        assert got["new"] == 1 and len(got["conflicts"]) == 1 and "1 class changes" in got["conflicts"][0]["detail"]
        assert [x["version"] for x in versions(cat, j.frame_id)] == [1, 2] and conflicts(cat, name)
