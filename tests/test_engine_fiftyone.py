"""`hydranet engine export-fiftyone` and the report's contact sheet on a 2-camera fleet (CAM_FRONT and
CAM_BACK of nuscenes6 at 96x64, 2 clips x 2 frames) shadowed by an untrained configs/tiny.yaml export.

The export is checked against the schema it declares (data_engine.fiftyone_export.check_export: every
file there, every field declared with its type, boxes relative and inside the image) and against the
catalog (signals, trigger hits, selections, boxes placed from known predictions). Where FiftyOne is
installed (in this interpreter, or a Python given by $FIFTYONE_PYTHON: it is not a dependency of this
project, its App needs MongoDB) the export is also loaded with `fo.Dataset.from_dir` and filtered by a
signal."""
from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from engine_fixtures import REPO, make_fleet

from data_engine.catalog import Catalog
from data_engine.fiftyone_export import check_export, export_fiftyone, relative_box
from data_engine.mining import mine
from data_engine.report import write_report
from data_engine.report_pictures import CAM_W, PANEL_W
from data_engine.shadow import run_shadow
from data_engine.signals import SIGNALS
from data_engine.triggers import build_triggers, fire_all
from hydranet.cli import main
from hydranet.viz import class_color

CAMS = ["CAM_FRONT", "CAM_BACK"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    from deploy.export import export_model, sim_frames
    from deploy.metadata import read_metadata
    from hydranet.experiment import load_experiment
    from hydranet.models import build_model

    root = tmp_path_factory.mktemp("engine_fiftyone")
    rig = yaml.safe_load((REPO / "hydranet" / "rigs" / "nuscenes6.yaml").read_text())
    rig["name"] = "front_back"
    rig["cameras"] = [c for c in rig["cameras"] if c["name"] in CAMS]
    (root / "rig2.yaml").write_text(yaml.safe_dump(rig))
    fleet = make_fleet(root / "fleet", clips=2, frames=2, seed=5, extra=("--set", f"sim.rig={root / 'rig2.yaml'}"))
    cfg = load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={fleet}", f"data.cameras=[{','.join(CAMS)}]",
                                                          "data.image_size=[64,96]", "device=cpu"])
    meta = json.loads((fleet / "dataset.json").read_text())
    export_model(build_model(cfg.model, meta), cfg, meta, root / "model.onnx", sim_frames(cfg, fleet, 1), verbose=False)
    cat = root / "cat.db"
    run_shadow(root / "model.onnx", fleet, cat, workers=1, progress=False)
    fire_all(cat, build_triggers())
    mine(cat, 2, "random", name="picked")
    mine(cat, 1, "uncertainty", name="one")
    classes = read_metadata(root / "model.onnx")["heads"]["det2d"]["classes"]
    return {"root": root, "fleet": fleet, "model": root / "model.onnx", "catalog": cat, "classes": classes}


def catalog_rows(cat_path: Path) -> dict[int, dict]:
    db = sqlite3.connect(str(cat_path))
    rows = db.execute(f"SELECT s.frame_id, c.name, f.idx, f.dir, {', '.join(SIGNALS)} FROM signals s JOIN frames f ON "
                      "s.frame_id = f.id JOIN clips c ON f.clip_id = c.id").fetchall()
    db.close()
    return {r[0]: {"clip": r[1], "frame": r[2], "dir": r[3], **dict(zip(SIGNALS, r[4:]))} for r in rows}


def with_predictions(env: dict, tmp: Path, det2d: list[dict], frame_id: int | None = None) -> tuple[Path, int]:
    """A copy of the catalog whose frame `frame_id` (default: rank 0 of selection 'one') has these det2d
    predictions (one entry per model camera, model pixels 96x64)."""
    cat = tmp / "c.db"
    shutil.copy(env["catalog"], cat)
    db = sqlite3.connect(str(cat))
    if frame_id is None:
        frame_id = db.execute("SELECT i.frame_id FROM selection_items i JOIN selections s ON i.selection_id = s.id "
                              "WHERE s.name = 'one' AND i.rank = 0").fetchone()[0]
    db.execute("UPDATE signals SET predictions = ? WHERE frame_id = ?", (json.dumps({"det2d": det2d}), frame_id))
    db.commit()
    db.close()
    return cat, frame_id


def load(out: Path) -> tuple[dict, list[dict]]:
    return json.loads((out / "metadata.json").read_text()), json.loads((out / "samples.json").read_text())["samples"]


def test_export_holds_every_frame_camera_signal_hit_and_selection(env, tmp_path, capsys):
    out = tmp_path / "fo"
    assert main(["engine", "export-fiftyone", "--catalog", str(env["catalog"]), "--out", str(out)]) == 0
    assert "exported 4 frames (8 camera images: CAM_FRONT, CAM_BACK)" in capsys.readouterr().out
    assert check_export(out) == {"samples": 8, "groups": 4}
    doc, samples = load(out)
    assert doc["group_media_types"] == {"CAM_FRONT": "image", "CAM_BACK": "image"} and doc["default_group_slice"] == "CAM_FRONT"
    declared = {f["name"]: f["ftype"].rsplit(".", 1)[1] for f in doc["sample_fields"]}
    assert all(declared[s] == "FloatField" for s in SIGNALS)  # one float field per signal column, even all-None ones
    assert declared["predictions"] == "EmbeddedDocumentField" and declared["triggers"] == declared["selections"] == "ListField"
    assert declared["rank_picked"] == declared["rank_one"] == "IntField" and "rank" not in declared
    rows = catalog_rows(env["catalog"])
    with Catalog(env["catalog"]) as cat:
        hits = cat.hits(cat.latest_run())
        sels = {n: dict(cat.db.execute("SELECT i.frame_id, i.rank FROM selection_items i JOIN selections s ON i.selection_id = "
                                       "s.id WHERE s.name = ?", (n,)).fetchall()) for n in ("picked", "one")}
    assert any(hits.values()), "the fixture should fire some trigger"
    for s in samples:
        fid, row = s["frame_id"], rows[s["frame_id"]]
        assert (s["clip"], s["frame"], s["group"]["name"]) == (row["clip"], row["frame"], s["camera"])
        assert s["filepath"] == f"data/{row['clip']}/{row['dir']}/{s['camera']}.jpg"
        src = env["fleet"] / "scenes" / row["clip"] / row["dir"] / f"{s['camera']}.jpg"
        assert (out / s["filepath"]).read_bytes() == src.read_bytes()
        assert os.path.samefile(out / s["filepath"], src)  # hard-linked: the export costs no image bytes
        for sig in SIGNALS:  # NULL (NaN, not applicable) stays None, never 0
            assert s[sig] == row[sig] and (row[sig] is None or math.isfinite(s[sig]))
        assert s["triggers"] == sorted(t for t, h in hits.items() if fid in dict(h))
        for t, h in hits.items():
            assert s[f"trigger_{t}"] == dict(h).get(fid)
        assert s["selections"] == [n for n in ("picked", "one") if fid in sels[n]]
        assert s["rank_picked"] == sels["picked"].get(fid) and s["rank_one"] == sels["one"].get(fid)
    assert sum(s[SIGNALS[0]] is None for s in samples) < len(samples)
    assert {s["group"]["_id"]["$oid"] for s in samples if s["frame_id"] == samples[0]["frame_id"]} == \
        {samples[0]["group"]["_id"]["$oid"]}
    again = tmp_path / "fo2"
    export_fiftyone(env["catalog"], again)  # the same catalog gives the same files
    assert (again / "samples.json").read_bytes() == (out / "samples.json").read_bytes()
    assert (again / "metadata.json").read_bytes() == (out / "metadata.json").read_bytes()


def test_boxes_are_relative_to_the_image_with_class_names(env, tmp_path):
    det2d = [{"boxes": [[9.6, 6.4, 48.0, 32.0], [-10.0, -10.0, 200.0, 20.0], [120.0, 0.0, 130.0, 10.0]],
              "scores": [0.9, 0.5, 0.4], "labels": [1, 0, 2]},
             {"boxes": [[0.0, 32.0, 96.0, 64.0]], "scores": [0.25], "labels": [0]}]
    cat, fid = with_predictions(env, tmp_path, det2d)
    out = tmp_path / "fo"
    export_fiftyone(cat, out, selection="one")
    check_export(out)
    _, samples = load(out)
    assert [s["camera"] for s in samples] == CAMS and all(s["frame_id"] == fid and s["rank"] == 0 for s in samples)
    front, back = (s["predictions"]["detections"] for s in samples)
    assert len(front) == 2  # the box entirely right of the image has no area inside it: left out
    assert front[0]["bounding_box"] == pytest.approx([0.1, 0.1, 0.4, 0.4])
    assert front[1]["bounding_box"] == pytest.approx([0.0, 0.0, 1.0, 20 / 64])  # clipped to the image
    assert [d["label"] for d in front] == [env["classes"][1], env["classes"][0]]
    assert [d["confidence"] for d in front] == [0.9, 0.5]
    assert back[0]["bounding_box"] == pytest.approx([0.0, 0.5, 1.0, 0.5]) and back[0]["_cls"] == "Detection"
    assert relative_box([5, 5, 5, 9], (64, 96)) is None


def test_selection_export_holds_only_its_frames_in_rank_order(env, tmp_path):
    out = tmp_path / "fo"
    r = export_fiftyone(env["catalog"], out, selection="picked")
    _, samples = load(out)
    with Catalog(env["catalog"]) as cat:
        order = [f for f, in cat.db.execute("SELECT i.frame_id FROM selection_items i JOIN selections s ON i.selection_id = s.id "
                                            "WHERE s.name = 'picked' ORDER BY i.rank")]
    assert r["frames"] == 2 and [s["frame_id"] for s in samples[::2]] == order
    assert [s["rank"] for s in samples[::2]] == [0, 1] and all("picked" in s["selections"] for s in samples)


def test_a_fleet_without_image_files_is_read_through_read_frame(env, tmp_path, monkeypatch):
    """A fleet whose frames are not JPEG files (videos, later): read_frame gives the pixels, written as JPEG."""
    import data_engine.fleet as fleet_mod

    fleet = tmp_path / "fleet"
    shutil.copytree(env["fleet"], fleet)
    cat = tmp_path / "c.db"
    run_shadow(env["model"], fleet, cat, workers=1, progress=False)
    for jpg in fleet.rglob("CAM_BACK.jpg"):
        jpg.unlink()
    calls = []

    def fake_read_frame(root, clip, frame_dir, cameras):
        calls.append(cameras)
        return [np.full((64, 96, 3), (10, 200, 30), np.uint8) for _ in cameras]

    monkeypatch.setattr(fleet_mod, "read_frame", fake_read_frame)
    out = tmp_path / "fo"
    r = export_fiftyone(cat, out, masks=False)  # (the predicted masks read every camera of a frame through it too)
    assert r["samples"] == 8 and not r["skipped"] and calls == [["CAM_BACK"]] * 4
    check_export(out)
    img = cv2.imread(str(next(out.rglob("CAM_BACK.jpg"))))
    assert img.shape == (64, 96, 3) and abs(int(img[32, 48, 1]) - 200) < 8


def test_contact_sheet_shows_every_camera_with_the_predicted_boxes(env, tmp_path):
    """Frame tile = CAM_FRONT | CAM_BACK | panel, each camera CAM_W wide; a box of class 2 on CAM_BACK at model
    pixels (30, 20)-(70, 50) is drawn in class_color(2) on the second camera's view, its class in the legend."""
    box, cls = [30.0, 20.0, 70.0, 50.0], 2
    cat, _ = with_predictions(env, tmp_path, [{"boxes": [], "scores": [], "labels": []},
                                              {"boxes": [box], "scores": [0.8], "labels": [cls]}])
    rep = write_report(cat, tmp_path / "rep", selection="one")
    assert rep["shown"] == 1
    sheet = cv2.imread(str(tmp_path / "rep" / "contact_sheet.png"))  # BGR
    assert sheet.shape[1] == 2 * CAM_W + PANEL_W  # two camera views for the one frame, then its panel
    layout = json.loads((tmp_path / "rep" / "contact_sheet.json").read_text())["frames"][0]
    assert env["classes"][cls] in [e["label"] for e in layout["legend"]]
    h = round(64 * CAM_W / 96)  # the 96x64 camera scaled to CAM_W wide
    sx, sy = CAM_W / 96, h / 64
    header = layout["y"]
    x_left, y_mid = CAM_W + round(box[0] * sx), header + round((box[1] + box[3]) / 2 * sy)
    x_mid, y_top = CAM_W + round((box[0] + box[2]) / 2 * sx), header + round(box[1] * sy)
    color = np.array(class_color(cls)[::-1])
    for y, x in ((y_mid, x_left), (y_top, x_mid), (y_mid, CAM_W + round(box[2] * sx))):
        assert np.abs(sheet[y, x].astype(int) - color).max() <= 2, (y, x, sheet[y, x], color)
    inside = sheet[y_mid, x_left + 10].astype(int)
    assert np.abs(inside - color).max() > 20  # the box is an outline, not a fill
    # and a 2-frame selection: one frame under the other
    write_report(env["catalog"], tmp_path / "rep2", selection="picked")
    two = cv2.imread(str(tmp_path / "rep2" / "contact_sheet.png"))
    frames = json.loads((tmp_path / "rep2" / "contact_sheet.json").read_text())["frames"]
    assert two.shape[1] == 2 * CAM_W + PANEL_W and len(frames) == 2 and frames[1]["y"] > frames[0]["y"] + frames[0]["height"] - 1


FIFTYONE_PYTHON = os.environ.get("FIFTYONE_PYTHON") or (sys.executable if __import__("importlib").util.find_spec("fiftyone")
                                                        else None)


@pytest.mark.skipif(FIFTYONE_PYTHON is None, reason="fiftyone is not installed (set FIFTYONE_PYTHON to a Python that has it)")
def test_fiftyone_loads_the_export_and_filters_by_signal(env, tmp_path):
    det2d = [{"boxes": [[9.6, 6.4, 48.0, 32.0]], "scores": [0.9], "labels": [1]}, {"boxes": [], "scores": [], "labels": []}]
    cat, fid = with_predictions(env, tmp_path, det2d)
    out = tmp_path / "fo"
    export_fiftyone(cat, out)
    rows = catalog_rows(cat)
    sig = next(s for s in SIGNALS if sum(r[s] is not None for r in rows.values()) >= 2)
    vals = sorted(r[sig] for r in rows.values() if r[sig] is not None)
    thr = vals[len(vals) // 2 - 1]
    expect = {"samples": 8, "groups": 4, "above": sum(v > thr for v in vals), "box": [0.1, 0.1, 0.4, 0.4], "fid": fid}
    script = f"""
import json, fiftyone as fo
from fiftyone import ViewField as F
ds = fo.Dataset.from_dir({str(out)!r}, dataset_type=fo.types.FiftyOneDataset)
groups = len(ds.distinct("group.id"))
ds.group_slice = "CAM_FRONT"
above = len(ds.match(F({sig!r}) > {thr!r}))
s = ds.match(F("frame_id") == {fid}).first()
box = s.predictions.detections[0].bounding_box
allv = ds.select_group_slices(media_type="image")
schema = allv.get_field_schema()
print(json.dumps({{"samples": len(allv), "groups": groups, "above": above, "box": box, "fid": s.frame_id,
                   "slices": sorted(ds.group_slices), "signal_type": type(schema[{sig!r}]).__name__,
                   "exists": all(__import__("os").path.isfile(p) for p in allv.values("filepath"))}}))
ds.delete()
"""
    env_vars = {**os.environ, "FIFTYONE_DO_NOT_TRACK": "true", "FIFTYONE_DATABASE_VALIDATION": "false"}
    env_vars.setdefault("FIFTYONE_DATABASE_DIR", str(tmp_path / "fo_db"))
    res = subprocess.run([FIFTYONE_PYTHON, "-c", script], capture_output=True, text=True, timeout=300, env=env_vars)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["slices"] == sorted(CAMS) and got["exists"] and got["signal_type"] == "FloatField"
    assert {k: got[k] for k in ("samples", "groups", "above", "fid")} == {k: expect[k] for k in ("samples", "groups", "above", "fid")}
    assert got["box"] == pytest.approx(expect["box"])


# -- ground truth, masks, embeddings, one camera (issue 34 item 6) ----------------------------------------------
def fleet_labels(env: dict, clip: str, fdir: str) -> dict:
    return json.loads((env["fleet"] / "scenes" / clip / fdir / "labels.json").read_text())


def test_ground_truth_is_the_fleets_boxes_relative_to_the_camera_image(env, tmp_path):
    out = tmp_path / "fo"
    r = export_fiftyone(env["catalog"], out)
    assert r["truth"] == 4 and r["grouped"] and r["no_masks"] is None
    doc, samples = load(out)
    declared = {f["name"]: f for f in doc["sample_fields"]}
    assert declared["ground_truth"]["embedded_doc_type"] == "fiftyone.core.labels.Detections"
    assert doc["classes"]["ground_truth"] == env["classes"]
    rows = catalog_rows(env["catalog"])
    n_boxes = 0
    for s in samples:
        truth = fleet_labels(env, s["clip"], rows[s["frame_id"]]["dir"])["cameras"][s["camera"]]["boxes2d"]
        got = s["ground_truth"]["detections"]
        assert [d["label"] for d in got] == [b["class"] for b in truth] and all("confidence" not in d for d in got)
        for d, b in zip(got, truth):  # labels.json: camera pixels of the 96x64 image, x1 = max column + 1
            x0, y0, x1, y1 = b["bbox"]
            assert d["bounding_box"] == pytest.approx([x0 / 96, y0 / 64, (x1 - x0) / 96, (y1 - y0) / 64], abs=1e-6)
        n_boxes += len(got)
        assert s["accepted"] is None  # no label accepted in this catalog
    assert n_boxes > 0, "the fixture fleet should hold some boxes"


def test_masks_are_segmentations_of_the_model_and_the_truth(env, tmp_path):
    from data_engine.fleet import read_frame
    from deploy.runtime import HydraRuntime
    from hydranet.data.sim_reader import DRIVABLE_CLASSES

    out = tmp_path / "fo"
    export_fiftyone(env["catalog"], out)
    assert check_export(out)["samples"] == 8
    doc, samples = load(out)
    assert doc["mask_targets"] == {"pred_drivable": {"1": "drivable"}, "pred_lanes": {"1": "lane"},
                                   "gt_drivable": {"1": "drivable"}, "gt_lanes": {"1": "lane"}}
    assert {f["name"]: f["embedded_doc_type"] for f in doc["sample_fields"]}["pred_drivable"] == \
        "fiftyone.core.labels.Segmentation"
    rt = HydraRuntime(env["model"])
    rt.allow_sizes({c: (64, 96) for c in CAMS})
    semantic = json.loads((env["fleet"] / "dataset.json").read_text())["semantic_classes"]
    rows = catalog_rows(env["catalog"])
    for s in samples:
        row = rows[s["frame_id"]]
        k = CAMS.index(s["camera"])
        rt.reset()
        expect = rt.step(read_frame(env["fleet"], row["clip"], row["dir"], CAMS))  # the runtime's own decoding
        for f, head in (("pred_drivable", "drivable"), ("pred_lanes", "lanes")):
            seg = s[f]
            assert seg["_cls"] == "Segmentation" and seg["mask_path"] == f"fields/{f}/{row['clip']}/{row['dir']}/{s['camera']}.png"
            mask = cv2.imread(str(out / seg["mask_path"]), cv2.IMREAD_UNCHANGED)
            np.testing.assert_array_equal(mask, expect[head][k]["mask"].astype(np.uint8))
        sem = cv2.imread(str(env["fleet"] / "scenes" / row["clip"] / row["dir"] / f"{s['camera']}.semantic.png"),
                         cv2.IMREAD_UNCHANGED)
        gt = cv2.imread(str(out / s["gt_drivable"]["mask_path"]), cv2.IMREAD_UNCHANGED)
        np.testing.assert_array_equal(gt, np.isin(sem, [semantic.index(c) for c in DRIVABLE_CLASSES]).astype(np.uint8))
        lanes = cv2.imread(str(out / s["gt_lanes"]["mask_path"]), cv2.IMREAD_UNCHANGED)
        assert lanes.shape == (64, 96) and set(np.unique(lanes)) <= {0, 1}
        truth = fleet_labels(env, row["clip"], row["dir"])["cameras"][s["camera"]]["lanes2d"]
        for lane in truth:  # every truth lane point inside the image is on the mask
            for u, v in lane["points"]:
                if 0 <= round(u) < 96 and 0 <= round(v) < 64:
                    assert lanes[round(v), round(u)] == 1
    again = tmp_path / "fo2"
    export_fiftyone(env["catalog"], again, masks=False)
    _, plain = load(again)
    assert all(s["pred_drivable"] is None and s["gt_drivable"] is not None for s in plain)


def test_embeddings_are_the_catalogs_vectors(env, tmp_path):
    out = tmp_path / "fo"
    export_fiftyone(env["catalog"], out)
    doc, samples = load(out)
    declared = {f["name"]: f for f in doc["sample_fields"]}
    assert declared["embedding"]["ftype"].endswith("ListField") and declared["embedding"]["subfield"].endswith("FloatField")
    with Catalog(env["catalog"]) as cat:
        run = cat.latest_run()
        ids, emb = cat.embeddings(run)
        per_cam = [dict(zip(*cat.camera_embeddings(run, n))) for n in range(len(CAMS))]
    frame = dict(zip(ids.tolist(), emb))
    for s in samples:
        vec = frame[s["frame_id"]]
        assert len(s["embedding"]) == emb.shape[1] == len(CAMS) * len(s["camera_embedding"])
        np.testing.assert_allclose(s["embedding"], vec, atol=1e-6)
        np.testing.assert_allclose(s["camera_embedding"], per_cam[CAMS.index(s["camera"])][s["frame_id"]], atol=1e-6)


def test_accepted_labels_are_exported_beside_the_truth(env, tmp_path):
    cat = tmp_path / "c.db"
    shutil.copy(env["catalog"], cat)
    payload = {"cameras": {"CAM_BACK": {"boxes2d": [{"bbox": [9.6, 6.4, 48.0, 32.0], "class": env["classes"][1]}]}}}
    db = sqlite3.connect(str(cat))
    fid = db.execute("SELECT min(frame_id) FROM signals").fetchone()[0]
    db.execute("INSERT INTO label_jobs (id, selection, frame_id, state, backend, label_id, created, updated) "
               "VALUES (1, 'picked', ?, 'accepted', 'files', 1, 0, 0)", (fid,))
    db.execute("INSERT INTO labels (id, frame_id, version, job_id, source, payload, digest, created) "
               "VALUES (1, ?, 1, 1, 'files', ?, 'd', 0)", (fid, json.dumps(payload)))
    db.commit()
    db.close()
    out = tmp_path / "fo"
    assert export_fiftyone(cat, out, masks=False)["accepted"] == 1
    check_export(out)
    _, samples = load(out)
    got = {(s["frame_id"], s["camera"]): s["accepted"] for s in samples}
    assert got[(fid, "CAM_FRONT")] is None  # the label names no box of this camera
    (det,) = got[(fid, "CAM_BACK")]["detections"]
    assert det["label"] == env["classes"][1] and det["bounding_box"] == pytest.approx([0.1, 0.1, 0.4, 0.4])
    assert all(a is None for (f, _), a in got.items() if f != fid)


@pytest.fixture(scope="module")
def one_camera(tmp_path_factory) -> dict:
    """A CAM_FRONT-only fleet (1 clip x 2 frames) shadowed by an untrained 1-camera configs/tiny.yaml export."""
    from deploy.export import export_model, sim_frames
    from hydranet.experiment import load_experiment
    from hydranet.models import build_model

    root = tmp_path_factory.mktemp("engine_fiftyone_one")
    rig = yaml.safe_load((REPO / "hydranet" / "rigs" / "nuscenes6.yaml").read_text())
    rig["name"], rig["cameras"] = "front", [c for c in rig["cameras"] if c["name"] == "CAM_FRONT"]
    (root / "rig1.yaml").write_text(yaml.safe_dump(rig))
    fleet = make_fleet(root / "fleet", clips=1, frames=2, seed=6, extra=("--set", f"sim.rig={root / 'rig1.yaml'}"))
    cfg = load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={fleet}", "data.cameras=[CAM_FRONT]",
                                                          "data.image_size=[64,96]", "device=cpu"])
    meta = json.loads((fleet / "dataset.json").read_text())
    export_model(build_model(cfg.model, meta), cfg, meta, root / "model.onnx", sim_frames(cfg, fleet, 1), verbose=False)
    run_shadow(root / "model.onnx", fleet, root / "cat.db", workers=1, progress=False)
    return {"root": root, "catalog": root / "cat.db"}


def test_a_one_camera_fleet_is_a_flat_dataset(one_camera, tmp_path, capsys):
    out = tmp_path / "fo"
    assert main(["engine", "export-fiftyone", "--catalog", str(one_camera["catalog"]), "--out", str(out)]) == 0
    assert "flat: one camera" in capsys.readouterr().out
    assert check_export(out) == {"samples": 2, "groups": 0}
    doc, samples = load(out)
    assert doc["media_type"] == "image" and doc["group_field"] is None and doc["group_media_types"] == {}
    assert doc["default_group_slice"] is None and "group" not in {f["name"] for f in doc["sample_fields"]}
    assert all("group" not in s and s["camera"] == "CAM_FRONT" for s in samples)
    assert all(s["ground_truth"] is not None and s["pred_drivable"] is not None for s in samples)
