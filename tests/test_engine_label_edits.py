"""The edit record (issue 35 item 2, docs/autolabel.md): a person's label of a frame whose job was pre-filled with the
auto-labeller's boxes records what the person changed against them (boxes added, deleted, moved beyond 0.5 px, class
changed, sign class included), stored with the person's version in the catalog and printed by `engine import-labels`;
a label without a pre-fill records none. The pre-fill is written with `record_auto` (what `engine autolabel` records)
and the person's label comes back through COCO files (data_engine/labeling/files.py), as from a team's tool."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
from engine_catalogs import catalog_env
from engine_fixtures import make_fleet

from data_engine.label_exchange import send, with_predictions
from data_engine.label_queue import create_jobs, load_jobs
from data_engine.labeling import build_backend
from data_engine.labeling.base import Vocabulary, edit_record, edit_totals
from data_engine.labeling.files import image_entries, write_coco
from data_engine.labels import edits, open_catalog, record_auto, versions

CAM = "CAM_FRONT"
# the auto-labeller's boxes on CAM_FRONT of the first frame (96x64 images): what the person is shown
AUTO_BOXES = [([10.0, 10.0, 40.0, 40.0], "car", {}),               # moved 3 px by the person
              ([50.0, 10.0, 80.0, 40.0], "car", {}),               # deleted
              ([10.0, 42.0, 40.0, 62.0], "car", {}),               # class changed to truck
              ([50.0, 42.0, 70.0, 62.0], "pedestrian", {})]        # moved 0.3 px: unchanged


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    return make_fleet(tmp_path_factory.mktemp("edits") / "fleet", clips=2, frames=2, seed=6)


@pytest.fixture
def env(fleet, tmp_path) -> dict:
    return catalog_env(fleet, tmp_path)


def _payload(boxes, auto: bool) -> dict:
    return {"cameras": {CAM: {"boxes2d": [{"bbox": list(b), "class": c, "attributes": dict(a),
                                           **({"confidence": 0.4, "track_id": k} if auto else {})}
                                          for k, (b, c, a) in enumerate(boxes)]}}}


def _prefilled(env, boxes=AUTO_BOXES) -> tuple:
    """Jobs of the 4 frames for the files backend; the first two frames pre-filled with AUTO_BOXES (policy: not sure),
    then sent (the export carries the pre-fill as scored boxes)."""
    cat = open_catalog(env["catalog"])
    create_jobs(cat, env["selection"], "files")
    jobs = load_jobs(cat, "sel")
    for j in jobs[:2]:
        lid, new = record_auto(cat, j, _payload(boxes, True), "autolabel(test)", accept=False, why="below the threshold")
        assert new and lid
    out = env["tmp"] / "files"
    send(cat, build_backend("files", out=out), "sel")
    return cat, load_jobs(cat, "sel"), out


def _person(boxes_first) -> dict:
    """A person's labels of the 4 frames: the first frame's CAM_FRONT as given, the second's the pre-fill with one box
    moved 0.3 px, the other two frames (never pre-filled) one box each."""
    second = copy.deepcopy(AUTO_BOXES)
    second[0] = ([10.3, 10.0, 40.3, 40.0], "car", {})
    return [boxes_first, second, [([5.0, 5.0, 30.0, 30.0], "car", {})], [([5.0, 5.0, 30.0, 30.0], "bus", {})]]


EDITED = [([13.0, 10.0, 43.0, 40.0], "car", {}),                 # moved 3 px
          ([10.0, 42.0, 40.0, 62.0], "truck", {}),               # class changed
          ([50.3, 42.0, 70.3, 62.0], "pedestrian", {}),          # moved 0.3 px: not a move
          ([60.0, 45.0, 90.0, 60.0], "bus", {})]                 # added (the car at [50, 10, 80, 40] deleted)


def _import(env, cat, jobs, out, frames, capsys=None) -> dict:
    vocab = Vocabulary.from_dataset(env["fleet"])
    team = out / "team.json"
    write_coco(team, image_entries(jobs, {j.id: _payload(b, False) for j, b in zip(jobs, frames)}), vocab, "team")
    if capsys is None:
        from data_engine.label_exchange import import_labels

        return import_labels(cat, build_backend("files", files=[team], labeller="team-a"), "sel")
    from hydranet.cli import main

    cat.close()
    assert main(["engine", "import-labels", "--catalog", str(env["catalog"]), "--backend", "files", "--file", str(team),
                 "--labeller", "team-a", "--quiet"]) == 0
    return {"printed": capsys.readouterr().out}


def test_a_person_s_edits_of_the_pre_fill_are_counted_and_stored(env, capsys):
    cat, jobs, out = _prefilled(env)
    got = _import(env, cat, jobs, out, _person(EDITED), capsys)["printed"]
    with open_catalog(env["catalog"]) as cat:
        recs = {r["job"]: r for r in edits(cat, "sel")}
        assert sorted(recs) == [jobs[0].id, jobs[1].id]  # the frames without a pre-fill have no record, not zeros
        first, second = recs[jobs[0].id], recs[jobs[1].id]
        assert {k: first[k] for k in ("added", "deleted", "moved", "class_changed")} == \
            {"added": 1, "deleted": 1, "moved": 1, "class_changed": 1}
        assert first["boxes"] == [4, 4] and first["prefill"] == 1 and first["version"] == 2 and first["labeller"] == "team-a"
        moved = [c for c in first["changes"] if c["what"] == "corners"]
        assert len(moved) == 1 and moved[0]["px"] == pytest.approx(3.0, abs=0.01)
        assert {k: second[k] for k in ("added", "deleted", "moved", "class_changed")} == \
            {"added": 0, "deleted": 0, "moved": 0, "class_changed": 0}  # 0.3 px is no move
        # stored with the person's version (its payload), none with the frames that were not pre-filled
        for j in jobs:
            (person,) = [v for v in versions(cat, j.frame_id) if v["source"] == "file"]
            assert ("edits" in person["payload"]) == (j.id in recs)
        assert edit_totals(list(recs.values())) == {"frames": 2, "unchanged": 1, "added": 1, "deleted": 1, "moved": 1,
                                                     "class_changed": 1, "lanes_added": 0, "lanes_deleted": 0}
    assert f"edits: job {jobs[0].id} frame {jobs[0].clip}/{jobs[0].dir} v2 against auto v1: 1 added, 1 deleted, 1 moved, " \
           "1 class changed (" in got and "class car -> truck" in got and "corners moved 3.0 px" in got
    assert f"edits: job {jobs[1].id} frame {jobs[1].clip}/{jobs[1].dir} v2 against auto v1: no edit" in got
    assert "edits to auto pre-fills: 2 frames (1 unchanged), 1 added, 1 deleted, 1 moved, 1 class changed" in got


def test_the_same_import_again_adds_no_version_and_no_record(env):
    cat, jobs, out = _prefilled(env)
    with cat:
        assert len(_import(env, cat, jobs, out, _person(EDITED))["edits"]) == 2
        again = _import(env, cat, jobs, out, _person(EDITED))
        assert again["new"] == 0 and again["edits"] == [] and len(edits(cat, "sel")) == 2


def test_a_label_without_a_pre_fill_records_no_edit_record(env):
    cat, jobs, out = _prefilled(env)
    with cat:
        got = _import(env, cat, jobs, out, _person(EDITED))
        assert {r["job"] for r in got["edits"]} == {jobs[0].id, jobs[1].id}
        for j in jobs[2:]:
            assert all("edits" not in v["payload"] for v in versions(cat, j.frame_id))


def test_signs_and_lights_the_tools_could_not_show_are_not_deletions(env):
    """The auto-labeller's sign and light boxes have no sign class or light state, so no tool pre-fills them
    (labeling.base.as_shown): the person did not delete them by leaving them out; a sign the person draws is added."""
    sign, light = ([60.0, 5.0, 80.0, 25.0], "traffic_sign", {}), ([82.0, 5.0, 94.0, 20.0], "traffic_light", {})
    cat, jobs, out = _prefilled(env, [AUTO_BOXES[0], sign, light])
    vocab = Vocabulary.from_dataset(env["fleet"])
    shown = image_entries(with_predictions(cat, jobs[:1]), None)  # what the export pre-fills: the car only
    assert [p["name"] for e in shown for p in e["boxes"]] == ["car"]
    stop = (sign[0], "traffic_sign", {"sign_class": vocab.sign_classes[0], "view": "front"})
    with cat:
        got = _import(env, cat, jobs, out, [[AUTO_BOXES[0], stop], [AUTO_BOXES[0]], [], []])
        first, second = sorted(got["edits"], key=lambda r: r["job"])
        assert (first["added"], first["deleted"], first["class_changed"], first["boxes"]) == (1, 0, 0, [1, 2])
        assert (second["added"], second["deleted"], second["boxes"]) == (0, 0, [1, 1])


def test_sign_class_and_light_state_are_class_changes_lanes_are_counted():
    """edit_record on payloads: a sign given its sign class, a light its state, a lane drawn and one removed."""
    auto = {"cameras": {CAM: {"boxes2d": [{"bbox": [0, 0, 10, 10], "class": "traffic_sign", "attributes": {"filled": True}},
                                          {"bbox": [20, 0, 30, 10], "class": "traffic_light", "attributes": {}},
                                          {"bbox": [40, 0, 50, 10], "class": "car", "attributes": {"filled": True}}],
                              "lanes2d": [{"type": "solid", "points": [[0, 60], [40, 30]]}]}}}
    person = {"cameras": {CAM: {"boxes2d": [{"bbox": [0, 0, 10, 10], "class": "traffic_sign",
                                             "attributes": {"sign_class": "stop", "view": "front"}},
                                            {"bbox": [20, 0, 30, 10], "class": "traffic_light",
                                             "attributes": {"light_state": "red", "view": "front"}},
                                            {"bbox": [40.2, 0, 50.2, 10], "class": "car", "attributes": {}}],
                                "lanes2d": [{"type": "dashed", "points": [[90, 60], [60, 30]]}]}}}
    rec = edit_record(auto, person)
    assert (rec["class_changed"], rec["moved"], rec["added"], rec["deleted"]) == (2, 0, 0, 0)  # `filled` is not a class
    assert (rec["lanes_added"], rec["lanes_deleted"]) == (1, 1)
    assert edit_record(auto, auto)["class_changed"] == 0 and edit_record(auto, auto)["lanes_added"] == 0
