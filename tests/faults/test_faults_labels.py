"""Fault rows of the relabel queue (docs/labeling.md) through `hydranet engine label | import-labels | jobs`:
malformed COCO and CVAT files (also of frames pre-filled by the auto-labeller: no edit record for what was not
recorded), illegal job transitions, corrupt oracle labels, labels for frames that were never sent. Each error row
also checks that nothing was recorded: never a silent skip, never a wrong label. One row per case; see faultlib.py
for the contract."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from faultlib import Case, copy_dataset, frame_dir, params, run_case


def _setup(tmp: Path, dataset: Path, backend: str = "files", send: bool = True, frames=(0, 1)) -> Path:
    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet
    from data_engine.label_exchange import send as send_jobs
    from data_engine.label_queue import create_jobs
    from data_engine.labeling import build_backend
    from data_engine.labels import open_catalog

    cat = tmp / "cat.db"
    with Catalog(cat, create=True) as c:
        c.add_fleet(Fleet(dataset))
    sel = tmp / "selection.json"
    sel.write_text(json.dumps({"name": "sel", "frames": [{"clip": "scene_0000", "frame": f} for f in frames]}))
    with open_catalog(cat) as c:
        create_jobs(c, sel, backend)
        if send:
            send_jobs(c, build_backend(backend, out=tmp / "export"), "sel")
    return cat


def _team_file(tmp: Path, fmt: str, edit=None) -> Path:
    """The exact labels of the sent jobs as a team's tool would send them back, then `edit`ed."""
    from data_engine.label_queue import load_jobs
    from data_engine.labeling.base import Vocabulary
    from data_engine.labeling.files import image_entries, write_coco, write_cvat
    from data_engine.labels import open_catalog

    with open_catalog(tmp / "cat.db") as c:
        jobs = load_jobs(c, "sel")
    exact = {j.id: json.loads((j.folder / "labels.json").read_text()) for j in jobs}
    path = tmp / f"team.{'json' if fmt == 'coco' else 'xml'}"
    (write_coco if fmt == "coco" else write_cvat)(path, image_entries(jobs, exact), Vocabulary.from_dataset(jobs[0].root), "team")
    if edit is not None:
        path.write_text(edit(path.read_text()))
    return path


def labels_recorded(n: int):
    def check(tmp: Path) -> None:
        db = sqlite3.connect(str(tmp / "cat.db"))
        try:
            got = db.execute("SELECT count(*) FROM labels").fetchone()[0]
        finally:
            db.close()
        assert got == n, f"{got} label versions recorded, expected {n}"
    return check


def file_case(id, fmt, edit, words, status=2, n=0, stdout=(), extra=(), team=None):
    def build(tmp, env):
        _setup(tmp, env.dataset)
        return ["engine", "import-labels", "--catalog", tmp / "cat.db", "--backend", "files", "--quiet",
                "--file", (team or _team_file)(tmp, fmt, edit), *extra]
    return Case(id, build, status, words, stdout=stdout, check=labels_recorded(n))


def _predictions_file(tmp: Path, fmt: str, edit=None) -> Path:
    """What `engine label --backend files` wrote (the model's pre-annotations), sent back untouched."""
    from data_engine.label_queue import load_jobs
    from data_engine.labeling.base import Vocabulary
    from data_engine.labeling.files import image_entries, write_coco, write_cvat
    from data_engine.labels import open_catalog

    with open_catalog(tmp / "cat.db") as c:
        jobs = load_jobs(c, "sel")
    exact = {j.id: json.loads((j.folder / "labels.json").read_text()) for j in jobs}
    entries = image_entries(jobs, exact)
    for e in entries:  # as a model's boxes: each with a score
        e["boxes"] = [{**b, "score": 0.8} for b in e["boxes"]]
    path = tmp / f"team.{'json' if fmt == 'coco' else 'xml'}"
    (write_coco if fmt == "coco" else write_cvat)(path, entries, Vocabulary.from_dataset(jobs[0].root), "team")
    return path


def _coco(fn):
    def edit(text):
        d = json.loads(text)
        fn(d)
        return json.dumps(d)
    return edit


def _first_box(d):
    return next(a for a in d["annotations"])


FILE_CASES = [
    file_case("labels-coco-duplicate-annotation-id", "coco",
              _coco(lambda d: d["annotations"][1].update(id=d["annotations"][0]["id"])),
              ("team.json", "annotations[1]", "appears twice")),
    file_case("labels-coco-annotation-without-id", "coco", _coco(lambda d: d["annotations"][0].pop("id")),
              ("team.json", "annotations[0]", "integer 'id'")),
    file_case("labels-coco-ok", "coco", None, (), status=0, n=2),
    file_case("labels-cvat-ok", "cvat", None, (), status=0, n=2),
    file_case("labels-coco-not-json", "coco", lambda s: s[:-30], ("team.json", "corrupt json", "export it again")),
    file_case("labels-coco-no-images", "coco", _coco(lambda d: d.pop("images")), ("team.json", "'images' is missing")),
    file_case("labels-coco-bbox-negative", "coco", _coco(lambda d: _first_box(d)["bbox"].__setitem__(2, -4)),
              ("team.json", "annotations[0]", "positive width")),
    file_case("labels-coco-bbox-short", "coco", _coco(lambda d: _first_box(d).update(bbox=[1, 2, 3])),
              ("team.json", "annotations[0]", "[x, y, width, height]")),
    # one bad image entry holds back its job (quarantined, listed by `engine jobs`), the other job is imported
    file_case("labels-coco-bbox-outside", "coco", _coco(lambda d: _first_box(d).update(bbox=[10, 10, 500, 5])), (),
              status=0, n=1, stdout=("1 tasks quarantined", "quarantined: job", "annotations[0]", "outside the 64x48 image")),
    file_case("labels-coco-unknown-label", "coco", _coco(lambda d: d["categories"][0].update(name="ufo")),
              ("team.json", "unknown label 'ufo'")),
    file_case("labels-coco-dangling-image-id", "coco", _coco(lambda d: _first_box(d).update(image_id=999)),
              ("team.json", "annotations[0]", "image_id 999")),
    file_case("labels-coco-image-twice", "coco", _coco(lambda d: d["images"].append({**d["images"][0], "id": 999})),
              ("team.json", "appears twice")),
    file_case("labels-coco-camera-missing", "coco",
              _coco(lambda d: d.update(images=d["images"][1:], annotations=[a for a in d["annotations"] if a["image_id"] != 1])),
              (), status=0, n=1, stdout=("1 sent jobs still waiting", "waiting: job 1", "cameras in team.json", "missing")),
    file_case("labels-coco-wrong-size", "coco", _coco(lambda d: d["images"][0].update(width=65)), (), status=0, n=1,
              stdout=("quarantined: job 1", "65x48", "64x48")),
    file_case("labels-cvat-truncated", "cvat", lambda s: s[:len(s) // 2], ("team.xml", "not valid xml")),
    file_case("labels-cvat-root", "cvat", lambda s: s.replace("annotations>", "dataset>"), ("team.xml", "<dataset>")),
    file_case("labels-cvat-box-nan", "cvat", lambda s: s.replace('xtl="', 'xtl="nan" a="', 1), ("team.xml", "<box>", "xtl='nan'")),
    file_case("labels-cvat-box-inverted", "cvat", lambda s: s.replace('xbr="', 'xbr="0" a="', 1), (), status=0, n=1,
              stdout=("quarantined: job 1", "team.xml", "<box>", "no area")),
    # predictions are not labels: an untouched pre-annotation export is refused unless asked for
    file_case("labels-coco-untouched-predictions", "coco", None, ("team.json", "pre-annotations", "a 'score'",
                                                                  "--accept-predictions"), team=_predictions_file),
    file_case("labels-cvat-untouched-predictions", "cvat", None, ("team.xml", "pre-annotations", 'source="auto"',
                                                                  "--accept-predictions"), team=_predictions_file),
    file_case("labels-coco-predictions-accepted", "coco", None, (), status=0, n=2, stdout=("2 new label versions",),
              extra=("--accept-predictions",), team=_predictions_file),
    file_case("labels-cvat-unknown-label", "cvat", lambda s: s.replace('<box label="', '<box label="ufo" a="', 1),
              ("team.xml", "unknown label 'ufo'")),
    file_case("labels-cvat-video-track", "cvat", lambda s: s.replace("</annotations>", "<track id=\"0\"/></annotations>"),
              ("team.xml", "<track>", "cvat for images")),
    file_case("labels-cvat-polygon", "cvat", lambda s: s.replace('<box label="car"', '<polygon label="car"', 1)
              .replace("</box>", "</polygon>", 1) if '<box label="car"' in s else s.replace("<box ", "<polygon ", 1)
              .replace("</box>", "</polygon>", 1), ("team.xml", "polygon", "not a label this project reads")),
    file_case("labels-cvat-image-unknown", "cvat", lambda s: s.replace('name="scene_0000/', 'name="scene_0099/', 1),
              ("team.xml", "scene_0099", "not a camera image of a sent job")),
]


def _prefilled(tmp: Path, dataset: Path) -> Path:
    """Both jobs pre-filled by the auto-labeller (`record_auto`, not sure: queued) with the exact boxes, then sent to
    files: tmp/export/sel.coco.json holds the pre-fill as scored boxes."""
    from data_engine.label_exchange import send
    from data_engine.label_queue import load_jobs
    from data_engine.labeling import build_backend
    from data_engine.labeling.base import two_d
    from data_engine.labels import open_catalog, record_auto

    cat = _setup(tmp, dataset, send=False)
    with open_catalog(cat) as c:
        for j in load_jobs(c, "sel"):
            auto = two_d(json.loads((j.folder / "labels.json").read_text()))
            for cam in auto["cameras"].values():
                cam["boxes2d"] = [{**b, "confidence": 0.4} for b in cam["boxes2d"]]
            record_auto(c, j, auto, "autolabel(faults)", accept=False, why="below the threshold")
        send(c, build_backend("files", out=tmp / "export"), "sel")
    return cat


def prefilled_case(id, team, words, status=2, n=2, stdout=(), extra=()):
    """An import of a person's file (`team(tmp)`) for pre-filled jobs; `n` label versions after it (2 are the autos')."""
    def build(tmp, env):
        _prefilled(tmp, env.dataset)
        return ["engine", "import-labels", "--catalog", tmp / "cat.db", "--backend", "files", "--file", team(tmp), *extra]
    return Case(id, build, status, words, stdout=stdout, check=labels_recorded(n))


PREFILLED_CASES = [  # the edit record (docs/autolabel.md): only for what was recorded, never for a refused or held label
    prefilled_case("labels-prefilled-untouched-export", lambda t: t / "export" / "sel.coco.json",
                   ("sel.coco.json", "pre-annotations", "--accept-predictions")),
    prefilled_case("labels-prefilled-export-accepted", lambda t: t / "export" / "sel.coco.json", (), status=0, n=4,
                   stdout=("2 new label versions", "v2 against auto v1: no edit", "edits to auto pre-fills: 2 frames (2 unchanged)"),
                   extra=("--accept-predictions",)),
    prefilled_case("labels-prefilled-box-outside", lambda t: _team_file(t, "coco", _coco(
        lambda d: _first_box(d).update(bbox=[10, 10, 500, 5]))), (), status=0, n=3,
        stdout=("1 tasks quarantined", "edits: job 2", "edits to auto pre-fills: 1 frames")),
]


def _jobs(id, argv, words, status=2, prepare=None, n=0, stdout=()):
    def build(tmp, env):
        cat = _setup(tmp, env.dataset, backend="oracle", send=False)
        if prepare:
            prepare(cat)
        return ["engine", "jobs", "--catalog", cat, *argv]
    return Case(id, build, status, words, stdout=stdout, check=labels_recorded(n))


def _label_all(cat):
    from data_engine.label_exchange import import_labels, send
    from data_engine.labeling.oracle import OracleBackend
    from data_engine.labels import open_catalog

    with open_catalog(cat) as c:
        send(c, OracleBackend(), "sel")
        import_labels(c, OracleBackend(), "sel")


def _accepted(cat):
    from data_engine.labels import open_catalog, transition

    _label_all(cat)
    with open_catalog(cat) as c:
        transition(c, [1], "accepted")


JOB_CASES = [
    _jobs("labels-job-accept-queued", ["--accept", "1"], ("job 1 is queued", "cannot become accepted", "only to sent")),
    _jobs("labels-job-reject-queued", ["--reject", "all"], (), status=0),  # 'all' = every labelled job: none, nothing moves
    _jobs("labels-job-unknown", ["--accept", "99"], ("job 99 is not in catalog",)),
    _jobs("labels-job-bad-ids", ["--accept", "1;2"], ("--accept", "job ids")),
    _jobs("labels-job-accepted-is-final", ["--reject", "1"], ("job 1 is accepted", "only to labelled (--reopen)", "re-pin"),
          prepare=_accepted, n=2),
    _jobs("labels-job-requeue-labelled", ["--requeue", "1"], ("job 1 is labelled", "cannot become queued"), prepare=_label_all, n=2),
    _jobs("labels-job-accept-missing-version", ["--accept", "1", "--label-version", "7"], ("no label version 7",),
          prepare=_label_all, n=2),
    # the review moves after acceptance (issue 24.2)
    _jobs("labels-job-repin-without-version", ["--accept", "1"], ("job 1 is accepted (pinned to v1)", "--label-version N",
                                                                   "--reopen 1"), prepare=_accepted, n=2),
    _jobs("labels-job-repin-missing-version", ["--accept", "1", "--label-version", "5"], ("job 1", "no label version 5"),
          prepare=_accepted, n=2),
    _jobs("labels-job-repin-same-version", ["--accept", "1", "--label-version", "1", "--by", "lead", "--history"], (), status=0,
          prepare=_accepted, n=2, stdout=("| accepted | oracle | 1 | v1 |",), ),
    _jobs("labels-job-reopen-queued", ["--reopen", "1"], ("job 1 is queued", "cannot become labelled", "only to sent")),
    _jobs("labels-job-reopen-labelled", ["--reopen", "1", "--by", "lead"], ("job 1 is labelled", "cannot become labelled"),
          prepare=_label_all, n=2),
    _jobs("labels-job-reopen-accepted", ["--reopen", "1", "--by", "lead", "--history"], (), status=0, prepare=_accepted, n=2,
          stdout=("1 jobs -> labelled", "| labelled | oracle | 1 | - |", "history: job 1 reopen v1 -> v- by lead")),
    _jobs("labels-job-reopen-bad-ids", ["--reopen", "one"], ("--reopen", "job ids")),
]


def _corrupt_labels(tmp, env):
    ds = copy_dataset(tmp, env)
    (frame_dir(ds) / "labels.json").write_text('{"cameras": {')
    _setup(tmp, ds, backend="oracle")
    return ["engine", "import-labels", "--catalog", tmp / "cat.db", "--backend", "oracle", "--quiet"]


def _box_outside(tmp, env):
    ds = copy_dataset(tmp, env)
    p = frame_dir(ds) / "labels.json"
    lab = json.loads(p.read_text())
    cam = next(c for c in lab["cameras"].values() if c["boxes2d"])
    cam["boxes2d"][0]["bbox"] = [0, 0, 900, 10]
    p.write_text(json.dumps(lab))
    _setup(tmp, ds, backend="oracle")
    return ["engine", "import-labels", "--catalog", tmp / "cat.db", "--backend", "oracle", "--quiet"]


def _never_sent(tmp, env):
    (tmp / "a").mkdir()
    _setup(tmp / "a", env.dataset, backend="files")
    team = _team_file(tmp / "a", "coco")  # labels of frames 0 and 1; only frame 0 is sent in cat.db
    _setup(tmp, env.dataset, backend="files", frames=(0,))
    return ["engine", "import-labels", "--catalog", tmp / "cat.db", "--backend", "files", "--quiet", "--file", team]


def _selection_unknown(tmp, env):
    _setup(tmp, env.dataset, backend="oracle", send=False)
    sel = tmp / "other.json"
    sel.write_text(json.dumps({"frames": [{"clip": "scene_0042", "frame": 0}]}))
    return ["engine", "label", "--catalog", tmp / "cat.db", "--selection", sel, "--backend", "oracle", "--quiet"]


def _noise_rate(tmp, env):
    _setup(tmp, env.dataset, backend="oracle")
    return ["engine", "import-labels", "--catalog", tmp / "cat.db", "--backend", "oracle", "--quiet", "--confusion", "2"]


IMPORT_CASES = [
    Case("labels-oracle-corrupt-labels-json", _corrupt_labels, 2, ("labels.json", "corrupt json"), check=labels_recorded(0)),
    Case("labels-oracle-box-outside-image", _box_outside, 2, ("oracle", "box 0", "outside the"), check=labels_recorded(0)),
    Case("labels-import-for-unsent-job", _never_sent, 2, ("team.json", "not a camera image of a sent job"), check=labels_recorded(0)),
    Case("labels-selection-unknown-frame", _selection_unknown, 2, ("other.json", "scene_0042/0", "not in catalog")),
    Case("labels-oracle-noise-rate", _noise_rate, 2, ("confusion", "rate in [0, 1]"), check=labels_recorded(0)),
    Case("labels-unknown-backend", lambda tmp, env: ["engine", "import-labels", "--catalog", _setup(tmp, env.dataset, "oracle", False),
                                                     "--backend", "crowd", "--quiet"], 2, ("unknown labelling backend 'crowd'",)),
]


@pytest.mark.parametrize("case", params(FILE_CASES + PREFILLED_CASES + JOB_CASES + IMPORT_CASES))
def test_fault(case, fault_env, tmp_path, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
