"""The relabel queue and the offline backends (docs/labeling.md): the job state machine and its
refusals, versioned labels with provenance, conflicts reported and never settled silently, oracle
labels invisible to training before acceptance, seeded labeller noise, kill -9 in the middle of an
import and of a send (rerun, then count: nothing lost, nothing twice), COCO and CVAT round trips."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_catalogs import catalog_env
from engine_fixtures import REPO, make_fleet

from data_engine.catalog import Catalog
from data_engine.label_exchange import import_labels, send
from data_engine.label_queue import LabelError, create_jobs, load_jobs
from data_engine.labeling import build_backend
from data_engine.labeling.base import LabelingError, Vocabulary, compare, two_d
from data_engine.labeling.files import image_entries, write_coco, write_cvat
from data_engine.labeling.oracle import OracleBackend, OracleNoise
from data_engine.labels import accepted_labels, conflicts, open_catalog, transition, versions


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    return make_fleet(tmp_path_factory.mktemp("labeling") / "fleet", clips=2, frames=2, seed=3)


@pytest.fixture
def env(fleet, tmp_path) -> dict:
    return catalog_env(fleet, tmp_path)


def truth(job) -> dict:
    return json.loads((job.folder / "labels.json").read_text())


def test_selection_becomes_jobs_once(env):
    with open_catalog(env["catalog"]) as cat:
        assert create_jobs(cat, env["selection"], "oracle")["created"] == 4
        again = create_jobs(cat, env["selection"], "oracle")
        assert again["created"] == 0 and again["existing"] == 4
        jobs = load_jobs(cat, "sel")
        assert [j.state for j in jobs] == ["queued"] * 4 and len({j.frame_id for j in jobs}) == 4
        with pytest.raises(LabelError, match="already queued for backend 'oracle'"):
            create_jobs(cat, env["selection"], "files")


@pytest.mark.parametrize("path, to, words", [
    ([], "accepted", "job 1 is queued: it cannot become accepted (from queued only to sent)"),
    ([], "labelled", "cannot become labelled"),
    (["sent"], "accepted", "job 1 is sent: it cannot become accepted (from sent only to labelled (by an import) or rejected (the frame "
     "cannot be labelled))"),
    (["sent"], "labelled", "job 1 is sent: it becomes labelled when its label is imported"),
    (["sent", "labelled", "accepted"], "rejected", "job 1 is accepted: it cannot become rejected (from accepted only to "
     "labelled (--reopen) or accepted again on another version (re-pin: --accept ID --label-version N))"),
    (["sent", "labelled", "accepted"], "accepted", "job 1 is accepted (pinned to v1): re-pin it with --accept 1 --label-version N, "
     "or re-open it with --reopen 1"),
    (["sent", "labelled", "accepted"], "queued", "job 1 is accepted: it cannot become queued"),
    (["sent", "labelled", "rejected"], "accepted", "from rejected only to queued"),
    ([], "done", "unknown job state 'done'"),
])
def test_illegal_transitions_are_refused(env, path, to, words):
    with open_catalog(env["catalog"]) as cat:
        create_jobs(cat, env["selection"], "oracle")
        for st in path:
            if st == "labelled":
                import_labels(cat, OracleBackend(), "sel")
            elif st == "sent":
                send(cat, OracleBackend(), "sel")
            else:
                transition(cat, [1], st)
        before = cat.db.execute("SELECT state FROM label_jobs WHERE id = 1").fetchone()[0]
        with pytest.raises(LabelError) as e:
            transition(cat, [1], to)
        assert words in str(e.value) and "\n" not in str(e.value)
        assert cat.db.execute("SELECT state FROM label_jobs WHERE id = 1").fetchone()[0] == before


def test_transitions_are_all_or_nothing(env):
    with open_catalog(env["catalog"]) as cat:
        create_jobs(cat, env["selection"], "oracle")
        send(cat, OracleBackend(), "sel")
        import_labels(cat, OracleBackend(), "sel")
        transition(cat, [2], "accepted")
        with pytest.raises(LabelError, match="job 2 is accepted"):
            transition(cat, [1, 2], "rejected")
        assert [j.state for j in load_jobs(cat, "sel")] == ["labelled", "accepted", "labelled", "labelled"]
        transition(cat, [1], "rejected")
        transition(cat, [1], "queued")
        assert load_jobs(cat, ids=[1])[0].state == "queued"


def test_oracle_labels_reach_training_only_when_accepted(env):
    with open_catalog(env["catalog"]) as cat:
        create_jobs(cat, env["selection"], "oracle")
        backend = OracleBackend()
        assert list(backend.fetch(load_jobs(cat, "sel"))) == []  # queued: nothing released
        send(cat, backend, "sel")
        assert accepted_labels(cat) == {} and cat.db.execute("SELECT count(*) FROM labels").fetchone()[0] == 0
        got = import_labels(cat, backend, "sel")
        assert got["new"] == 4 and got["duplicate"] == 0 and got["conflicts"] == [] and got["waiting"] == 0
        assert accepted_labels(cat) == {}  # labelled, not accepted: training still sees nothing
        jobs = load_jobs(cat, "sel")
        assert {j.state for j in jobs} == {"labelled"}
        transition(cat, [jobs[0].id, jobs[1].id], "accepted")
        acc = accepted_labels(cat)
        assert set(acc) == {jobs[0].frame_id, jobs[1].frame_id}
        t = truth(jobs[0])
        assert compare(acc[jobs[0].frame_id], t)["max_px"] == 0 and acc[jobs[0].frame_id]["boxes3d"] == t["boxes3d"]
        v = versions(cat, jobs[0].frame_id)
        assert len(v) == 1 and v[0]["source"] == "oracle" and v[0]["labeller"] == "oracle" and v[0]["created"] > 0
        assert import_labels(cat, backend, "sel")["new"] == 0  # rerun: nothing twice


def test_noise_is_seeded_and_a_disagreeing_version_is_a_conflict(env):
    noise = OracleNoise(jitter_px=2.0, miss_small=0.5, small_area=400, confusion=0.3, seed=7)
    with open_catalog(env["catalog"]) as cat:
        create_jobs(cat, env["selection"], "oracle")
        send(cat, OracleBackend(), "sel")
        jobs = load_jobs(cat, "sel")
        a = [lab.payload for lab in OracleBackend(noise).fetch(jobs)]
        b = [lab.payload for lab in OracleBackend(noise).fetch(jobs)]
        assert a == b  # seeded per frame
        exact = [truth(j) for j in jobs]
        diffs = [compare(x, t) for x, t in zip(a, exact)]
        assert any(not d["agree"] for d in diffs)
        n_true = sum(len(c["boxes2d"]) for t in exact for c in t["cameras"].values())
        n_noisy = sum(len(c["boxes2d"]) for x in a for c in x["cameras"].values())
        assert 0 < n_noisy <= n_true
        assert import_labels(cat, OracleBackend(), "sel")["new"] == 4
        transition(cat, [jobs[0].id], "accepted")
        got = import_labels(cat, OracleBackend(noise), "sel")  # a second labeller over the same jobs
        assert got["new"] == 0  # the oracle releases labels only for sent jobs
        # a noisy labeller on freshly sent jobs of the same frames: new versions, conflicts reported
        sel2 = env["tmp"] / "sel2.json"
        sel2.write_text(json.dumps({"name": "sel2", "items": [{"frame_id": j.frame_id} for j in jobs]}))
        create_jobs(cat, sel2, "oracle")
        send(cat, OracleBackend(), "sel2")
        got = import_labels(cat, OracleBackend(noise), "sel2")
        assert got["new"] == 4 and got["conflicts"], got
        c = got["conflicts"][0]
        assert c["versions"] == [1, 2] and c["sources"] == ["oracle", "oracle"] and "px" in c["detail"]
        assert conflicts(cat, "sel2")
        conflicted = {c["frame_id"] for c in got["conflicts"]}
        job = next(j for j in load_jobs(cat, "sel2") if j.frame_id in conflicted)
        with pytest.raises(LabelError, match="disagree.*accept one with --label-version"):
            transition(cat, [job.id], "accepted")
        transition(cat, [job.id], "accepted", version=1)
        assert compare(accepted_labels(cat)[job.frame_id], truth(job))["max_px"] == 0
        v = versions(cat, job.frame_id)
        assert [x["version"] for x in v] == [1, 2] and v[1]["labeller"].startswith("oracle+noise")  # never overwritten


def test_bad_noise_and_selection_are_one_line_errors(env):
    with pytest.raises(LabelingError, match="rate in"):
        OracleNoise(confusion=1.5)
    bad = env["tmp"] / "bad.json"
    bad.write_text(json.dumps({"frames": [{"clip": "clip_00009", "frame": 0}]}))
    with open_catalog(env["catalog"]) as cat:
        with pytest.raises(LabelError, match="clip_00009/0 is not in catalog"):
            create_jobs(cat, bad, "oracle")
        bad.write_text("{")
        with pytest.raises(LabelError, match="corrupt JSON"):
            create_jobs(cat, bad, "oracle")
    with pytest.raises(LabelingError, match="unknown labelling backend 'human'"):
        build_backend("human")


# -- kill -9 -------------------------------------------------------------------------------------------
KILL_SCRIPT = """
import sys, time
from pathlib import Path
import data_engine.label_exchange as X
import data_engine.label_queue as Q
import data_engine.labels as L
from data_engine.labeling.oracle import OracleBackend
mode, cat_path, marker = sys.argv[1], sys.argv[2], Path(sys.argv[3])
real_move, calls = Q.move_job, [0]
def slow_move(cat, job, to, **cols):  # inside the label's (or the send batch's) transaction
    real_move(cat, job, to, **cols)
    calls[0] += 1
    if calls[0] == 2:
        marker.write_text("inside")
        time.sleep(60)
L.move_job = X.move_job = slow_move  # where record_label (import) and send look it up
with L.open_catalog(cat_path) as cat:
    if mode == "import":
        X.import_labels(cat, OracleBackend(), "sel")
    else:
        X.send(cat, OracleBackend(), "sel", batch=1)
"""


@pytest.mark.parametrize("mode", ["import", "send"])
def test_kill9_mid_stage_loses_nothing_and_duplicates_nothing(env, mode):
    with open_catalog(env["catalog"]) as cat:
        create_jobs(cat, env["selection"], "oracle")
        if mode == "import":
            send(cat, OracleBackend(), "sel")
    marker = env["tmp"] / "inside"
    p = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, mode, str(env["catalog"]), str(marker)], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    t0 = time.time()
    while not marker.exists():
        assert p.poll() is None and time.time() - t0 < 60, "the child ended before reaching the second transaction"
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    with open_catalog(env["catalog"]) as cat:
        states = [j.state for j in load_jobs(cat, "sel")]
        n = cat.db.execute("SELECT count(*) FROM labels").fetchone()[0]
        if mode == "import":  # the first label committed, the second rolled back with its job's move
            assert n == 1 and states.count("labelled") == 1 and states.count("sent") == 3
            got = import_labels(cat, OracleBackend(), "sel")
            assert got["new"] == 3 and got["duplicate"] == 0
        else:
            assert n == 0 and states.count("sent") == 1 and states.count("queued") == 3
            assert send(cat, OracleBackend(), "sel")["sent"] == 3
            assert import_labels(cat, OracleBackend(), "sel")["new"] == 4
        rows = cat.db.execute("SELECT frame_id, count(*), max(version) FROM labels GROUP BY frame_id").fetchall()
        assert len(rows) == 4 and all(c == 1 and v == 1 for _, c, v in rows)
        assert {j.state for j in load_jobs(cat, "sel")} == {"labelled"}
        assert import_labels(cat, OracleBackend(), "sel")["new"] == 0
        assert cat.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# -- files: COCO and CVAT ---------------------------------------------------------------------------------
def _sent_to_files(env):
    out = env["tmp"] / "export"
    cat = open_catalog(env["catalog"])
    create_jobs(cat, env["selection"], "files")
    assert send(cat, build_backend("files", out=out), "sel")["sent"] == 4
    return cat, out


def test_files_export_is_valid_coco_and_cvat(env):
    import xml.etree.ElementTree as ET

    from pycocotools.coco import COCO

    cat, out = _sent_to_files(env)
    with cat:
        jobs = load_jobs(cat, "sel")
    n_img = sum(len(j.cameras) for j in jobs)
    coco = COCO(str(out / "sel.coco.json"))  # the reference reader
    assert len(coco.getImgIds()) == n_img and len(coco.getCatIds()) == len(Vocabulary.from_dataset(env["fleet"]).names)
    assert all((out / "images" / im["file_name"]).is_file() for im in coco.dataset["images"])
    root = ET.parse(out / "sel.cvat.xml").getroot()
    assert root.tag == "annotations" and root.findtext("version") == "1.1" and len(root.findall("image")) == n_img
    assert {lab.findtext("type") for lab in root.iter("label")} == {"rectangle", "polyline"}


@pytest.mark.parametrize("fmt", ["coco", "cvat"])
def test_files_round_trip_is_exact(env, fmt):
    cat, out = _sent_to_files(env)
    with cat:
        jobs = load_jobs(cat, "sel")
        vocab = Vocabulary.from_dataset(env["fleet"])
        exact = {j.id: truth(j) for j in jobs}
        team = out / f"team.{'json' if fmt == 'coco' else 'xml'}"  # what a team's tool would send back
        (write_coco if fmt == "coco" else write_cvat)(team, image_entries(jobs, exact), vocab, "team")
        got = import_labels(cat, build_backend("files", files=[team], labeller="team-a"), "sel")
        assert got["new"] == 4 and got["waiting"] == 0 and got["conflicts"] == []
        n = 0
        for j in jobs:
            v = versions(cat, j.frame_id)
            assert len(v) == 1 and v[0]["source"] == "file" and v[0]["labeller"] == "team-a"
            mine, ref = v[0]["payload"], two_d(exact[j.id])
            for cam in j.cameras:
                a = sorted(ref["cameras"][cam]["boxes2d"], key=lambda b: b["bbox"])
                b = sorted(mine["cameras"][cam]["boxes2d"], key=lambda b: b["bbox"])
                assert len(a) == len(b)
                for x, y in zip(a, b):
                    assert vocab.name_of(x) == vocab.name_of(y)
                    assert max(abs(p - q) for p, q in zip(x["bbox"], y["bbox"])) <= 0.5
                    n += 1
                if fmt == "cvat":
                    assert len(mine["cameras"][cam]["lanes2d"]) == len(ref["cameras"][cam]["lanes2d"])
        assert n > 0
        assert import_labels(cat, build_backend("files", files=[team], labeller="team-a"), "sel")["new"] == 0


def _coco_bad(d, how):
    if how == "bbox-negative-width":
        d["annotations"][0]["bbox"][2] = -3
    elif how == "unknown-category":
        d["categories"][0]["name"] = "spaceship"
    elif how == "image-unknown":
        d["images"][0]["file_name"] = "clip_00042/000000/CAM_FRONT.jpg"
    elif how == "camera-missing":
        d["images"] = d["images"][1:]
        d["annotations"] = [a for a in d["annotations"] if a["image_id"] != 1]
    elif how == "no-annotations":
        del d["annotations"]
    return d


@pytest.mark.parametrize("how, words", [("bbox-negative-width", "annotations[0]"), ("unknown-category", "unknown label 'spaceship'"),
                                        ("image-unknown", "clip_00042"),
                                        ("no-annotations", "'annotations' is missing"), ("not-json", "corrupt JSON")])
def test_malformed_coco_is_refused_and_records_nothing(env, how, words):
    cat, out = _sent_to_files(env)
    with cat:
        jobs = load_jobs(cat, "sel")
        team = out / "team.json"
        write_coco(team, image_entries(jobs, {j.id: truth(j) for j in jobs}), Vocabulary.from_dataset(env["fleet"]), "team")
        if how == "not-json":
            team.write_text(team.read_text()[:-20])
        else:
            team.write_text(json.dumps(_coco_bad(json.loads(team.read_text()), how)))
        with pytest.raises(LabelingError) as e:
            import_labels(cat, build_backend("files", files=[team]), "sel")
        assert words in str(e.value) and str(team) in str(e.value) and "\n" not in str(e.value)
        assert cat.db.execute("SELECT count(*) FROM labels").fetchone()[0] == 0
        assert {j.state for j in load_jobs(cat, "sel")} == {"sent"}


@pytest.mark.parametrize("how, words", [
    ("truncated", "not valid XML"), ("root", "root element is <root>"),
    ("box-nan", "xtl='nan'"), ("label", "unknown label 'ufo'"), ("polyline", "points 'x'")])
def test_malformed_cvat_is_refused_and_records_nothing(env, how, words):
    cat, out = _sent_to_files(env)
    with cat:
        jobs = load_jobs(cat, "sel")
        team = out / "team.xml"
        write_cvat(team, image_entries(jobs, {j.id: truth(j) for j in jobs}), Vocabulary.from_dataset(env["fleet"]), "team")
        s = team.read_text()
        s = {"truncated": lambda: s[:len(s) // 2],
             "root": lambda: s.replace("<annotations>", "<root>").replace("</annotations>", "</root>"),
             "box-nan": lambda: s.replace('xtl="', 'xtl="nan" x="', 1),
             "box-outside": lambda: s.replace('xbr="', 'xbr="9999" x="', 1),
             "label": lambda: s.replace('<box label="', '<box label="ufo" x="', 1),
             "polyline": lambda: s.replace('points="', 'points="x" p="', 1),
             "size": lambda: s.replace('width="96"', 'width="97"', 1)}[how]()
        team.write_text(s)
        with pytest.raises(LabelingError) as e:
            import_labels(cat, build_backend("files", files=[team]), "sel")
        assert words in str(e.value) and str(team) in str(e.value) and "\n" not in str(e.value)
        assert cat.db.execute("SELECT count(*) FROM labels").fetchone()[0] == 0


@pytest.mark.parametrize("fmt, how, quarantine, words", [
    ("coco", "camera-missing", False, "cameras in team.json, camera CAM_FRONT missing"),
    ("coco", "box-outside", True, "outside the 96x64 image"),
    ("cvat", "box-outside", True, "outside the 96x64 image"),
    ("cvat", "box-inverted", True, "has no area"),
    ("cvat", "size", True, "is 97x64, the camera's images are 96x64")])
def test_one_bad_image_holds_its_job_back_and_the_rest_import(env, fmt, how, quarantine, words):
    """Issue 24.3: a bad box, a wrong image size (quarantined) or a camera missing (waiting) holds back the job of
    that image only; every other job of the file is imported; the reason is the job's note."""
    cat, out = _sent_to_files(env)
    with cat:
        jobs = load_jobs(cat, "sel")
        team = out / f"team.{'json' if fmt == 'coco' else 'xml'}"
        (write_coco if fmt == "coco" else write_cvat)(team, image_entries(jobs, {j.id: truth(j) for j in jobs}),
                                                      Vocabulary.from_dataset(env["fleet"]), "team")
        s = team.read_text()
        if fmt == "coco":
            d = json.loads(s)
            if how == "camera-missing":
                d = _coco_bad(d, how)
            else:
                a = next(a for a in d["annotations"] if a["image_id"] == 1)
                a["bbox"] = [10, 10, 500, 5]
            s = json.dumps(d)
        else:  # the first <image> is job 1's first camera
            s = {"box-outside": lambda: s.replace('xbr="', 'xbr="9999" x="', 1),
                 "box-inverted": lambda: s.replace('xbr="', 'xbr="0" x="', 1),
                 "size": lambda: s.replace('width="96"', 'width="97"', 1)}[how]()
        team.write_text(s)
        got = import_labels(cat, build_backend("files", files=[team]), "sel")
        assert got["new"] == 3 and got["waiting"] == 1
        held = got["quarantined"] if quarantine else got["partial"]
        assert [h["job"] for h in held] == [1] and words in held[0]["reason"] and "\n" not in held[0]["reason"]
        assert [j.state for j in load_jobs(cat, "sel")] == ["sent", "labelled", "labelled", "labelled"]
        note = cat.db.execute("SELECT note FROM label_jobs WHERE id = 1").fetchone()[0]
        assert words in note and note.startswith("quarantined: ") == quarantine


def test_cli_label_import_accept(env, capsys):
    from hydranet.cli import main

    cat, sel = str(env["catalog"]), str(env["selection"])
    assert main(["engine", "label", "--catalog", cat, "--selection", sel, "--quiet"]) == 0
    assert "4 label jobs queued (0 existed), 4 sent to oracle" in capsys.readouterr().out
    assert main(["engine", "import-labels", "--catalog", cat, "--selection", sel, "--quiet"]) == 0
    assert "4 new label versions (0 already recorded), 0 sent jobs still waiting, 0 conflicts" in capsys.readouterr().out
    assert main(["engine", "jobs", "--catalog", cat, "--accept", "all"]) == 0
    out = capsys.readouterr().out
    assert "4 jobs -> accepted" in out and out.count("| accepted | oracle | 1 | v1 | - |") == 4
    assert main(["engine", "jobs", "--catalog", cat, "--accept", "1"]) == 2
    assert capsys.readouterr().err.strip() == ("error: job 1 is accepted (pinned to v1): re-pin it with --accept 1 --label-version N, "
                                               "or re-open it with --reopen 1")


def test_placeholder_label_tables_of_older_catalogs_are_upgraded_only_when_empty(env):
    from data_engine.catalog_schema import CatalogError

    old = ["CREATE TABLE label_jobs (id INTEGER PRIMARY KEY, selection_id INTEGER, frame_id INTEGER NOT NULL, state TEXT NOT NULL, "
           "backend TEXT, created REAL, updated REAL)",
           "CREATE TABLE labels (id INTEGER PRIMARY KEY, frame_id INTEGER NOT NULL, version INTEGER NOT NULL, source TEXT, "
           "model_id INTEGER, payload TEXT, created REAL, UNIQUE(frame_id, version))"]
    with Catalog(env["catalog"]) as cat:
        cat.db.execute("DROP TABLE labels")
        cat.db.execute("DROP TABLE label_jobs")
        for s in old:
            cat.db.execute(s)
        cat.db.execute("PRAGMA user_version = 1")  # a version-1 catalog: the migration to 2 upgrades them
    with open_catalog(env["catalog"]) as cat:
        assert create_jobs(cat, env["selection"], "oracle")["created"] == 4
    with Catalog(env["catalog"]) as cat:
        cat.db.execute("DROP TABLE labels")
        cat.db.execute("DROP TABLE label_jobs")
        for s in old:
            cat.db.execute(s)
        cat.db.execute("INSERT INTO label_jobs (frame_id, state) VALUES (1, 'queued')")
        cat.db.execute("PRAGMA user_version = 1")
    with pytest.raises(CatalogError, match="older layout; recreate"):
        open_catalog(env["catalog"])
