"""Label Studio whole-frame tasks (issue 24.5, docs/labeling.md): the default task holds every camera of a frame
(one Image and RectangleLabels per camera; the images uploaded to the project's image store), pre-annotations per
camera in its one prediction; imports split the
annotation's results into cameras by to_name; a skipped frame or an unsubmitted draft waits saying why; one bad
box quarantines its job naming task, frame and camera; an edit after acceptance is a new version to re-pin; per-camera
tasks stay an option (`engine label --ls-task camera`); a project made with one kind is refused for the other.
Label Studio is an in-memory fake that keeps what the server checks on import (a task's data must hold every
$variable of the config); tests/test_engine_labeling_ls.py runs the real server."""
from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from engine_catalogs import catalog_env, matched_boxes
from fake_label_studio import FakeLS
from engine_fixtures import make_fleet

from data_engine.fleet import Fleet
from data_engine.label_exchange import import_labels, send
from data_engine.label_queue import LabelError, create_jobs, history, job_table, load_jobs
from data_engine.labeling.base import LabelingError, Vocabulary
from data_engine.labeling.label_studio import LabelStudioBackend
from data_engine.labeling.ls_tasks import camera_names, config_kind, label_config
from data_engine.labels import accepted_versions, open_catalog, transition, versions


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    return make_fleet(tmp_path_factory.mktemp("lsframe") / "fleet", clips=2, frames=2, seed=4)


@pytest.fixture
def env(fleet, tmp_path) -> dict:
    return catalog_env(fleet, tmp_path)


def rect(cam, box, size, name="car"):
    """A frame task's result for camera `cam`, written out here independently of the backend's conversion."""
    (H, W), key = size, re.sub(r"[^A-Za-z0-9_]", "_", cam)
    x0, y0, x1, y1 = box
    return {"from_name": f"label_{key}", "to_name": f"image_{key}", "type": "rectanglelabels", "original_width": W,
            "original_height": H, "value": {"x": 100 * x0 / W, "y": 100 * y0 / H, "width": 100 * (x1 - x0) / W,
                                            "height": 100 * (y1 - y0) / H, "rotation": 0, "rectanglelabels": [name]}}


def truth_results(job, vocab):
    lab = json.loads((job.folder / "labels.json").read_text())
    return [rect(cam, b["bbox"], size, vocab.name_of(b)) for cam, size in zip(job.cameras, job.sizes)
            for b in lab["cameras"][cam]["boxes2d"]], lab


def _sent(env, task="frame", predictions=True):
    fake = FakeLS()
    backend = LabelStudioBackend(client=fake, task=task)
    cat = open_catalog(env["catalog"])
    create_jobs(cat, env["selection"], backend.name)
    def preds(c, jobs):  # the shadow run's det2d boxes as pre-annotations (label_exchange.with_predictions' form)
        return [dataclasses.replace(j, model_version="ab" * 32, predictions={
            cam: [{"bbox": [1.0 + k, 2.0, 20.0 + k, 30.0], "label": "car", "score": 0.5 + 0.1 * k}] for k, cam in enumerate(j.cameras)})
            for j in jobs] if predictions else list(jobs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("data_engine.label_exchange.with_predictions", preds)
        send(cat, backend, "sel")
    return cat, backend, fake


# -- the config and the task ----------------------------------------------------------------------------------
def test_the_frame_config_binds_one_rectangle_labels_to_each_camera_image(fleet):
    vocab = Vocabulary.from_dataset(fleet)
    cams = Fleet(fleet).cameras
    root = ET.fromstring(label_config(vocab, list(cams)))
    images = {e.get("name"): e.get("value") for e in root.iter("Image")}
    controls = {e.get("name"): e.get("toName") for e in root.iter("RectangleLabels")}
    assert len(images) == len(controls) == len(cams) >= 2
    for cam in cams:
        frm, to = camera_names(cams)[cam]
        assert images[to] == f"${to}" and controls[frm] == to
    assert all([lab.get("value") for lab in rl.iter("Label")] == vocab.names for rl in root.iter("RectangleLabels"))
    assert config_kind(label_config(vocab, list(cams)), "p")[0] == "frame" and config_kind(label_config(vocab), "p") == ("camera", ())
    with pytest.raises(LabelingError, match=r"cameras 'CAM-A' and 'CAM A' both become 'CAM_A'.*--ls-task camera"):
        camera_names(["CAM-A", "CAM A"])
    with pytest.raises(LabelingError, match=r"project 3 \('t'\): its labelling config .* not made by hydranet"):
        config_kind("<View><Image name='img' value='$img'/></View>", "project 3 ('t')")


def test_a_frame_is_one_task_with_every_camera_and_the_models_boxes_per_camera(env):
    cat, backend, fake = _sent(env)
    with cat:
        jobs = load_jobs(cat, "sel")
        assert {j.state for j in jobs} == {"sent"} and len(fake.tasks_) == len(jobs) == 4  # one task per frame
        assert len(fake.uploads) == 4 * len(jobs[0].cameras)
        assert list(fake.configs) == ["hydranet sel", "hydranet sel (images)"] and not fake.tasks(2)  # the image store
        names = camera_names(jobs[0].cameras)
        for j in jobs:
            t = fake.task_of(j.id)
            d = t["data"]
            assert d["cameras"] == list(j.cameras) and d["frame"] == f"{j.clip}/{j.dir}" and d["frame_id"] == j.frame_id
            assert all(d[names[c][1]] == f"/data/upload/2/j{j.id}_{j.clip}_{j.dir}_{c}.jpg" for c in j.cameras)
            (pred,) = t["predictions"]
            assert pred["model_version"] == "ab" * 32
            assert [(r["from_name"], r["to_name"]) for r in pred["result"]] == [names[c] for c in j.cameras]
            assert pred["score"] == pytest.approx(sum(r["score"] for r in pred["result"]) / len(j.cameras), abs=1e-4)
            # the pre-annotation's percent box is the model's pixel box on that camera
            k, r = 1, pred["result"][1]
            H, W = j.sizes[k]
            assert r["value"]["x"] == pytest.approx(100 * (1.0 + k) / W) and r["original_width"] == W
        backend.send(jobs)  # a resend (kill -9 before the jobs were recorded sent) creates nothing twice
        assert len(fake.tasks_) == 4


# -- imports ------------------------------------------------------------------------------------------------------
def test_a_frame_annotation_is_split_into_cameras_by_to_name(env):
    cat, backend, fake = _sent(env)
    vocab = Vocabulary.from_dataset(env["fleet"])
    with cat:
        jobs = load_jobs(cat, "sel")
        expected = {}
        for j in jobs:
            results, lab = truth_results(j, vocab)
            expected[j.id] = lab
            fake.annotate(j.id, results + [{"type": "choices", "from_name": "note", "to_name": "x", "value": {}}])
        got = import_labels(cat, backend, "sel")
        assert got["new"] == 4 and got["waiting"] == 0 and not got["quarantined"] and not got["conflicts"]
        n = 0
        for j in load_jobs(cat, "sel"):
            (v,) = versions(cat, j.frame_id)
            assert v["source"] == "label_studio" and v["labeller"] == "reviewer@example.com" and j.state == "labelled"
            assert set(v["payload"]["cameras"]) == set(j.cameras)  # a camera without a box is there, empty
            n += matched_boxes(expected[j.id], v["payload"], j.cameras, vocab)
        assert n > 0
        assert import_labels(cat, backend, "sel")["duplicate"] == 4  # imported again: nothing new


def test_a_skipped_frame_and_an_unsubmitted_draft_wait_saying_why(env):
    cat, backend, fake = _sent(env, predictions=False)
    with cat:
        jobs = load_jobs(cat, "sel")
        size0, size1 = jobs[0].sizes[0], jobs[0].sizes[1]
        fake.annotate(1, [], cancelled=True)
        fake.annotate(2, [rect(jobs[1].cameras[0], [2, 3, 20, 30], size0), rect(jobs[1].cameras[1], [2, 3, 20, 30], size1)], draft=True)
        fake.annotate(3, [])  # submitted with no box at all: a frame without objects
        got = import_labels(cat, backend, "sel")
        assert got["new"] == 1 and got["waiting"] == 3
        assert got["partial"] == [
            {"job": 1, "frame": f"{jobs[0].clip}/{jobs[0].dir}", "reason": "frame skipped in Label Studio task 1"},
            {"job": 2, "frame": f"{jobs[1].clip}/{jobs[1].dir}",
             "reason": f"a draft in Label Studio task 2 (boxes on 2 of {len(jobs[1].cameras)} cameras), not submitted"}]
        notes = [r["note"] for r in job_table(cat, "sel")]
        assert notes[:2] == [p["reason"] for p in got["partial"]] and notes[2:] == [None, None]
        assert all(c["boxes2d"] == [] for c in versions(cat, jobs[2].frame_id)[0]["payload"]["cameras"].values())


def test_one_bad_box_quarantines_its_frame_naming_task_frame_and_camera(env):
    cat, backend, fake = _sent(env)
    with cat:
        jobs = load_jobs(cat, "sel")
        cam = jobs[0].cameras[2]
        H, W = jobs[0].sizes[2]
        fake.annotate(1, [rect(jobs[0].cameras[0], [2, 3, 20, 30], jobs[0].sizes[0]), rect(cam, [2, 3, W + 40, 30], (H, W))])
        fake.annotate(2, [rect("CAM_NOWHERE", [2, 3, 20, 30], (H, W))])
        fake.annotate(3, [{**rect(cam, [2, 3, 20, 30], (H, W)), "original_width": W * 2}])
        fake.annotate(4, [rect(cam, [2, 3, 20, 30], (H, W), name="spaceship")])
        got = import_labels(cat, backend, "sel")
        assert got["new"] == 0 and len(got["quarantined"]) == 4
        why = {q["job"]: q["reason"] for q in got["quarantined"]}
        f = [f"{j.clip}/{j.dir}" for j in jobs]
        assert why[1].startswith(f"Label Studio project 1 task 1 ({f[0]} {cam}) annotation 100 result 1: box [") and \
            why[1].endswith(f"lies outside the {W}x{H} image")
        assert why[2].startswith(f"Label Studio project 1 task 2 ({f[1]}) annotation 200 result 0: a box on 'image_CAM_NOWHERE'")
        assert why[3].startswith(f"Label Studio project 1 task 3 ({f[2]} {cam}) annotation 300 result 0: the image is {2 * W}x{H}")
        assert f"task 4 ({f[3]} {cam}) annotation 400 result 0: unknown label 'spaceship'" in why[4]
        assert [e["action"] for e in history(cat)] == ["quarantine"] * 4
        assert [r["state"] for r in job_table(cat, "sel")] == ["sent"] * 4
        fake.annotate(1, [rect(cam, [2, 3, 20, 30], (H, W))])  # the labeller fixes the frame: imported, its note gone
        got = import_labels(cat, backend, "sel")
        assert got["new"] == 1 and len(got["quarantined"]) == 3 and job_table(cat, "sel")[0]["note"] is None
        assert len(versions(cat, jobs[0].frame_id)[0]["payload"]["cameras"][cam]["boxes2d"]) == 1


def test_an_edit_after_acceptance_is_a_new_version_to_re_pin(env):
    cat, backend, fake = _sent(env)
    vocab = Vocabulary.from_dataset(env["fleet"])
    with cat:
        jobs = load_jobs(cat, "sel")
        for j in jobs:
            fake.annotate(j.id, truth_results(j, vocab)[0])
        assert import_labels(cat, backend, "sel")["new"] == 4
        transition(cat, [1, 2, 3, 4], "accepted", by="alice")
        j = next(j for j in jobs if truth_results(j, vocab)[0])
        res = truth_results(j, vocab)[0]
        other = next(n for n in vocab.names if n != res[0]["value"]["rectanglelabels"][0])
        res[0] = {**res[0], "value": {**res[0]["value"], "rectanglelabels": [other]}}
        fake.annotate(j.id, res)  # a reviewer's later correction in the tool
        got = import_labels(cat, backend, "sel")
        assert got["new"] == 1 and len(got["conflicts"]) == 1
        cam = {to: c for c, (_, to) in camera_names(j.cameras).items()}[res[0]["to_name"]]
        assert f"{cam} box [" in got["conflicts"][0]["detail"] and f"-> {other}" in got["conflicts"][0]["detail"].replace(":", "")
        assert job_table(cat, "sel")[j.id - 1]["state"] == "accepted" and accepted_versions(cat)[j.frame_id]["version"] == 1
        with pytest.raises(LabelError, match=rf"job {j.id} is accepted \(pinned to v1\)"):
            transition(cat, [j.id], "accepted")
        transition(cat, [j.id], "accepted", version=2, by="bob")
        assert accepted_versions(cat)[j.frame_id]["version"] == 2
        assert [(e["action"], e["new_version"]) for e in history(cat, job_id=j.id)] == [("accept", 1), ("repin", 2)]


# -- the per-camera option and a project of the other kind -----------------------------------------------------------
def test_cli_ls_task_camera_sends_per_camera_tasks_and_imports_them(env, monkeypatch, capsys):
    from hydranet.cli import main

    fake = FakeLS()
    monkeypatch.setattr("data_engine.labeling.label_studio.Client", lambda url, token: fake)
    argv = ["engine", "label", "--catalog", str(env["catalog"]), "--selection", str(env["selection"]), "--backend", "label-studio",
            "--quiet", "--ls-task", "camera"]
    assert main(argv) == 0 and "4 sent to label_studio" in capsys.readouterr().out
    with open_catalog(env["catalog"]) as cat:
        jobs = load_jobs(cat, "sel")
    n_cams = len(jobs[0].cameras)
    assert len(fake.tasks_) == 4 * n_cams and all(t["data"]["camera"] in jobs[0].cameras for t in fake.tasks_)
    assert config_kind(fake.label_config(1), "p")[0] == "camera"
    for t in fake.tasks_:
        j = jobs[t["data"]["job_id"] - 1]
        t["annotations"].append({"id": 1, "completed_by": 7, "was_cancelled": False, "result": [
            {**rect(t["data"]["camera"], [2, 3, 20, 30], j.sizes[0]), "from_name": "label", "to_name": "image"}]})
    assert main(["engine", "import-labels", "--catalog", str(env["catalog"]), "--backend", "label-studio", "--quiet"]) == 0
    assert "4 new label versions" in capsys.readouterr().out


@pytest.mark.parametrize("made, then", [("frame", "camera"), ("camera", "frame")])
def test_a_project_made_with_one_task_kind_is_refused_for_the_other(env, made, then):
    cat, _, fake = _sent(env, task=made, predictions=False)
    with cat:
        with cat.transaction():  # the jobs back to queued, as if sent anew with the other kind
            cat.db.execute("UPDATE label_jobs SET state = 'queued'")
        kinds = {"frame": "whole-frame tasks", "camera": "per-camera tasks"}
        with pytest.raises(LabelingError, match=rf"Label Studio project 1 \('hydranet sel'\) holds {kinds[made]}.*cannot take "
                                                rf"{kinds[then]}.*: send with --ls-task {made}, or give --ls-project another title"):
            send(cat, LabelStudioBackend(client=fake, task=then), "sel")
        n = len(fake.tasks_)
        fake.configs["hydranet sel"] = label_config(Vocabulary.from_dataset(env["fleet"]),
                                                    None if then == "camera" else load_jobs(cat, "sel")[0].cameras)
        with pytest.raises(LabelingError, match=rf"holds {kinds[made]}"):  # a config swapped by hand: its tasks still say
            send(cat, LabelStudioBackend(client=fake, task=then), "sel")
        assert len(fake.tasks_) == n  # nothing created


def test_a_frame_project_for_other_cameras_and_an_unknown_kind_are_refused(env):
    fake = FakeLS()
    fake.configs["hydranet sel"] = label_config(Vocabulary.from_dataset(env["fleet"]), ["CAM_X", "CAM_Y"])
    with open_catalog(env["catalog"]) as cat:
        create_jobs(cat, env["selection"], "label_studio")
        with pytest.raises(LabelingError, match=r"project 1 \('hydranet sel'\) was made for images \['image_CAM_X', 'image_CAM_Y'\]"):
            send(cat, LabelStudioBackend(client=fake), "sel")
    with pytest.raises(LabelingError, match=r"unknown Label Studio task kind 'frames'; choose one of \['frame', 'camera'\]"):
        LabelStudioBackend(client=fake, task="frames")
