"""`hydranet engine report`, `engine triggers` with precision/recall, `engine similar --image`, and the
catalog's fast queries, on a tiny fleet with rare scenarios (4 clips x 2 frames, 96x64) shadowed by a
2-step engine_tiny model. The tables the CLI prints and writes must equal what data_engine/evaluation.py
computes; evaluation itself is checked on constructed labels and predictions."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from engine_fixtures import make_fleet, make_model

from data_engine.catalog import Catalog
from data_engine.evaluation import RunTruth, frame_errors, load_run_truth, trigger_markdown, trigger_rows
from data_engine.mining import mine
from data_engine.report import write_report
from data_engine.report_pictures import CAM_W, GRID_COLS, OVERLAYS, PANEL_W, overlay, reason_text
from data_engine.shadow import run_shadow
from data_engine.similar import similar_image
from data_engine.triggers import build_triggers, run_table
from hydranet.viz import class_color
from hydranet.cli import main

RARE = ("--set", "rare.cones_on_road=0.5", "--set", "rare.unusual_vehicle=0.3")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("engine_report")
    fleet = make_fleet(root / "fleet", clips=4, frames=2, seed=3, extra=RARE)
    model = make_model(root, fleet)
    cat = root / "cat.db"
    run_shadow(model, fleet, cat, workers=1, progress=False)
    sel = mine(cat, 5, "triggers", name="picked")
    (root / "sel.json").write_text(json.dumps(sel))
    return {"root": root, "fleet": fleet, "model": model, "catalog": cat, "selection": sel}


def truth_of(cat_path: Path) -> RunTruth:
    with Catalog(cat_path) as cat:
        truth, why = load_run_truth(cat, cat.latest_run())
    assert truth is not None, why
    return truth


def expected_rows(cat_path: Path, truth: RunTruth):
    """The trigger rows evaluation.py gives for the default engine triggers, fired in memory."""
    triggers = build_triggers()
    with Catalog(cat_path) as cat:
        table = run_table(cat, cat.latest_run())
    assert "embedding" in table
    return trigger_rows(triggers, {t.name: t.fire(table) for t in triggers}, truth, table)


def md_table(text: str, first_header: str) -> list[list[str]]:
    """Rows (cells) of the markdown table whose header starts with `first_header`."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_header} |"))
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


def test_fleet_has_rare_and_plain_clips(env):
    truth = truth_of(env["catalog"])
    assert truth.scenarios == ["cones_on_road", "unusual_vehicle"]
    assert 0 < len(truth.any_rare) < len(truth.errors) == 8
    assert all(0.0 <= e <= 1.0 for e in truth.errors.values()) and set(truth.detected) == set(truth.errors)


def test_report_files_and_tables_equal_the_evaluation(env, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["engine", "report", "--catalog", str(env["catalog"]), "--out", str(out)]) == 0
    assert "report of selection picked" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["contact_sheet.json", "contact_sheet.png", "report.md", "signals.png"]
    sheet = cv2.imread(str(out / "contact_sheet.png"))
    assert sheet is not None and sheet.shape[1] == GRID_COLS * CAM_W + PANEL_W  # a frame per row: 2 rows of 3 cameras
    assert cv2.imread(str(out / "signals.png")) is not None
    md = (out / "report.md").read_text()
    truth = truth_of(env["catalog"])
    rows = expected_rows(env["catalog"], truth)
    got = md_table(md, "trigger")
    assert [r[0] for r in got] == [r.trigger for r in rows]
    fmt = lambda v: "-" if math.isnan(v) else f"{v:.2f}"  # noqa: E731
    for cells, r in zip(got, rows):
        assert int(cells[1]) == r.version and int(cells[2]) == r.fired and cells[3] == f"{r.fires} ({100 * r.fires / 8:.0f}%)"
        assert cells[4:8] == [fmt(r.rare.precision), fmt(r.rare.base), fmt(r.rare.lift), str(r.fired)]
        assert cells[8:12] == [fmt(r.hard.precision), fmt(r.hard.base), fmt(r.hard.lift), str(r.hard.n)]
        assert cells[12:-1] == [fmt(r.recall[s]) for s in truth.scenarios]
        assert cells[-1] == (f"DEGENERATE: {r.degenerate}" if r.degenerate else "") and (r.degenerate is None) == (r.fires <= 4)
    assert trigger_markdown(rows, truth) in md
    assert any(r.fired for r in rows)
    items = md_table(md, "rank")
    sel = env["selection"]["items"]
    assert [int(c[1]) for c in items] == [it["frame_id"] for it in sel]
    assert [c[4] for c in items] == [it["reason"].get("trigger") or "-" for it in sel]
    assert [c[8] for c in items] == [f"{truth.errors[it['frame_id']]:.3f}" for it in sel]


def test_triggers_cli_prints_precision_and_recall(env, tmp_path, capsys):
    cat = tmp_path / "c.db"
    shutil.copy(env["catalog"], cat)
    assert main(["engine", "triggers", "--catalog", str(cat)]) == 0
    out = capsys.readouterr().out
    truth = truth_of(cat)
    assert trigger_markdown(expected_rows(cat, truth), truth) in out
    assert "recall cones_on_road" in out and "| rare: precision | base | lift | n | hard: precision |" in out


def test_report_refuses_an_existing_folder_and_replaces_it_with_overwrite(env, tmp_path, capsys):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["engine", "report", "--catalog", str(env["catalog"]), "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err and (out / "keep.txt").read_text() == "mine"
    assert main(["engine", "report", "--catalog", str(env["catalog"]), "--out", str(out), "--overwrite",
                 "--selection", str(env["root"] / "sel.json"), "--max-frames", "2"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["contact_sheet.json", "contact_sheet.png", "report.md", "signals.png"]
    assert cv2.imread(str(out / "contact_sheet.png")).shape[1] == GRID_COLS * CAM_W + PANEL_W
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert "the first 2 of 5" in (out / "report.md").read_text()


def test_report_and_triggers_without_truth(env, tmp_path, capsys):
    fleet = tmp_path / "fleet"
    shutil.copytree(env["fleet"], fleet)
    shutil.rmtree(fleet / "truth")
    cat = tmp_path / "c.db"
    run_shadow(env["model"], fleet, cat, workers=1, progress=False)
    mine(cat, 2, "uncertainty")
    assert main(["engine", "triggers", "--catalog", str(cat)]) == 0
    out = capsys.readouterr().out
    assert "no precision/recall" in out and "truth/scenarios.json" in out and "precision (" not in out
    assert main(["engine", "report", "--catalog", str(cat), "--out", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "No precision/recall" in md and "| trigger | version | fired |" in md and "model error" not in md


def test_similar_image_returns_the_query_frame_first(env, capsys):
    with Catalog(env["catalog"]) as c:
        t = c.table(c.latest_run())
    for k in (0, 3, 7):
        clip, idx, fid = str(t["clip"][k]), int(t["idx"][k]), int(t["frame_id"][k])
        for cam in ("CAM_FRONT", "CAM_BACK"):
            img = env["fleet"] / "scenes" / clip / f"{idx:06d}" / f"{cam}.jpg"
            res = similar_image(env["catalog"], env["model"], img, cam, k=4)
            assert res[0]["frame_id"] == fid and res[0]["similarity"] == pytest.approx(1.0, abs=1e-5)
            assert len(res) == 4 and all(a["similarity"] >= b["similarity"] for a, b in zip(res, res[1:]))
    img = env["fleet"] / "scenes" / str(t["clip"][5]) / f"{int(t['idx'][5]):06d}" / "CAM_FRONT.jpg"
    assert main(["engine", "similar", "--catalog", str(env["catalog"]), "--image", str(img), "--onnx", str(env["model"]),
                 "--k", "3"]) == 0
    header, *lines = capsys.readouterr().out.strip().splitlines()
    assert header.split() == ["frame", "id", "clip/frame", "similarity"]
    assert len(lines) == 3 and int(lines[0].split()[0]) == int(t["frame_id"][5])


def test_catalog_top_and_nearest_equal_numpy(env):
    with Catalog(env["catalog"]) as c:
        run = c.latest_run()
        t = c.table(run)
        ids, vals = c.top(run, "drivable_entropy", 3)
        ref = np.lexsort((t["frame_id"], -t["drivable_entropy"]))[:3]
        assert list(ids) == list(t["frame_id"][ref]) and np.allclose(vals, t["drivable_entropy"][ref])
        e_ids, emb = c.embeddings(run)
        for q in (0, 5):
            nn, sim = c.nearest(run, emb[q], 4)
            cos = emb @ (emb[q] / np.linalg.norm(emb[q]))  # the cosine similarity nearest() ranks by
            order = np.lexsort((e_ids, -cos))[:4]
            assert nn[0] == e_ids[q] and np.allclose(sim, cos[order], atol=1e-6)
            assert list(nn) == list(e_ids[order]), "ties broken by frame id"
        with pytest.raises(ValueError, match="unknown signal"):
            c.top(run, "sparkle", 3)


def test_frame_error_is_one_minus_f1_on_constructed_labels(tmp_path):
    """Camera 200x100 (W x H), model 100x50: predictions are scaled by 2. Two GT boxes, three confident
    predictions (one matches at IoU >= 0.5 after scaling, one overlaps too little, one is elsewhere) and one
    below the score threshold: F1 = 2*1 / (3 + 2) -> error 0.6."""
    fleet = tmp_path / "f"
    (fleet / "scenes" / "c" / "000000").mkdir(parents=True)
    (fleet / "dataset.json").write_text(json.dumps({"rig": {"cameras": [{"name": "CAM", "height": 100, "width": 200}]}}))
    gt = [{"bbox": [20, 20, 60, 60]}, {"bbox": [100, 10, 140, 50]}]
    (fleet / "scenes" / "c" / "000000" / "labels.json").write_text(json.dumps({"cameras": {"CAM": {"boxes2d": gt}}}))
    preds = {7: {"det2d": [{"boxes": [[10, 10, 30, 30], [50, 5, 58, 25], [0, 40, 10, 50], [10, 10, 30, 30]],
                            "scores": [0.9, 0.8, 0.5, 0.2], "labels": [0, 0, 0, 0]}]}}
    err = frame_errors(fleet, {7: ("c", "000000")}, preds, ["CAM"], (50, 100))
    assert err == {7: pytest.approx(0.6)}
    truth = RunTruth(1, fleet, {1: 0.1, 2: 0.9, 3: 0.5, 4: 1.0}, {1: "a", 2: "a", 3: "b", 4: "b"},
                     {"cones_on_road": {3, 4}, "debris_on_road": set()}, {1: True, 2: True, 3: True, 4: True})
    p = truth.rare_precision([1, 2, 4])  # frame 4 of the 3 fired is rare; 2 of the 4 frames are
    assert (p.precision, p.base, p.n) == (pytest.approx(1 / 3), 0.5, 3) and p.lift == pytest.approx(2 / 3)
    assert math.isnan(truth.rare_precision([]).precision)
    rec = truth.recall([1, 4])
    assert rec["cones_on_road"] == 0.5 and math.isnan(rec["debris_on_road"])
    assert truth.rare_rate([1, 3]) == 0.5 and truth.mean_error([2, 4]) == pytest.approx(0.95)


def test_triggers_cli_and_report_flag_a_degenerate_trigger(env, tmp_path, capsys):
    """A threshold below every value fires on every frame with one: the CLI table and report.md say DEGENERATE."""
    cat = tmp_path / "c.db"
    shutil.copy(env["catalog"], cat)
    with Catalog(cat) as c:
        v = run_table(c, c.latest_run())["det2d_uncertain"]
    assert np.isfinite(v).all() and len(v) == 8
    low = ["--set", "triggers.signs_uncertain.enabled=false", "--set", "triggers.det2d_uncertain.threshold=-1"]
    assert main(["engine", "triggers", "--catalog", str(cat), *low]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("| det2d_uncertain |"))
    assert "| 8 (100%) |" in row and "DEGENERATE: det2d_uncertain fires on 100% of frames (8 of 8): " in row
    assert not any(ln.startswith("| signs_uncertain |") for ln in out.splitlines())
    assert main(["engine", "report", "--catalog", str(cat), "--out", str(tmp_path / "rep"), *low]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert row in md  # the same row, reason included


# -- the contact sheet a curator reads (issue 34 item 6) ---------------------------------------------------------
def one_frame(env: dict, tmp: Path, reason: dict, det2d: list[dict] | None) -> tuple[Path, Path, int]:
    """(a catalog copy whose first selected frame has predictions `det2d` (one entry per model camera; None: as
    stored), a selection file holding that frame with `reason`, its frame id)."""
    import sqlite3

    cat = tmp / "c.db"
    shutil.copy(env["catalog"], cat)
    fid = env["selection"]["items"][0]["frame_id"]
    if det2d is not None:
        db = sqlite3.connect(str(cat))
        db.execute("UPDATE signals SET predictions = ? WHERE frame_id = ?", (json.dumps({"det2d": det2d}), fid))
        db.commit()
        db.close()
    (tmp / "sel.json").write_text(json.dumps({"name": "curated", "items": [{"frame_id": fid, "rank": 0, "reason": reason}]}))
    return cat, tmp / "sel.json", fid


def sheet_and_layout(out: Path) -> tuple[np.ndarray, dict]:
    sheet = cv2.cvtColor(cv2.imread(str(out / "contact_sheet.png")), cv2.COLOR_BGR2RGB)
    return sheet, json.loads((out / "contact_sheet.json").read_text())["frames"][0]


def test_the_whole_reason_is_on_the_sheet_and_the_legend_lists_the_classes_drawn(env, tmp_path):
    from deploy.metadata import read_metadata

    classes = read_metadata(env["model"])["heads"]["det2d"]["classes"]
    n_cams = len(read_metadata(env["model"])["rig"]["names"])
    fired = [f"a_trigger_with_a_rather_long_name_number_{k}" for k in range(8)]
    reason = {"strategy": "triggers", "trigger": fired[0], "score": 0.123456, "triggers": fired,
              "trigger_scores": {t: 0.5 + k / 100 for k, t in enumerate(fired)}, "distance": 0.25}
    front = {"boxes": [[5.0, 5.0, 40.0, 30.0], [50.0, 20.0, 90.0, 60.0], [10.0, 40.0, 20.0, 50.0]], "scores": [0.9, 0.5, 0.2],
             "labels": [1, 2, 0]}
    empty = {"boxes": [], "scores": [], "labels": []}
    cat, sel, fid = one_frame(env, tmp_path, reason, [front] + [empty] * (n_cams - 1))
    out = tmp_path / "rep"
    write_report(cat, out, selection=sel, camera="CAM_FRONT")
    sheet, f = sheet_and_layout(out)
    text = " ".join(reason_text(reason))
    assert len(text) > 3 * 40  # the old tile cut each reason line at 40 characters a camera
    assert " ".join(f["reason_lines"]) == text and all(any(t in ln for ln in f["reason_lines"]) for t in fired)
    assert "distance: 0.25" in text and f"{fired[7]} (0.57)" in text
    x0 = f["panel_x"]
    for y in f["reason_y"]:  # every line is drawn: text pixels on the panel's dark ground at its baseline
        band = sheet[f["y"] + y - 10:f["y"] + y + 1, x0 + 8:x0 + PANEL_W - 8]
        assert (np.abs(band.astype(int) - 24).max(-1) > 60).sum() > 20, y
    legend = {e["label"]: e for e in f["legend"]}
    assert classes[1] in legend and classes[2] in legend and classes[0] not in legend  # 0.2 is under the drawn score
    for name in (classes[1], classes[2]):
        assert legend[name]["color"] == list(class_color(classes.index(name)))
        e = legend[name]
        assert list(sheet[f["y"] + e["y"] - 5, x0 + 18]) == e["color"]  # the swatch
    truth = json.loads((env["fleet"] / "scenes" / f["clip"] / f"{f['frame']:06d}" / "labels.json").read_text())
    assert ("box (truth)" in legend) == bool(truth["cameras"]["CAM_FRONT"]["boxes2d"])
    assert ("lanes (truth)" in legend) == bool(truth["cameras"]["CAM_FRONT"]["lanes2d"])


def test_a_mask_overlay_changes_the_pixels_where_the_mask_is_set_and_no_others(env, tmp_path, monkeypatch):
    import data_engine.report as report
    from data_engine.fleet import read_frame
    from deploy.metadata import read_metadata

    img = np.random.default_rng(0).integers(0, 256, (40, 60, 3), np.uint8)
    mask = np.zeros((20, 30), bool)
    mask[:, :15] = True  # the left half, at half the image's resolution
    got = overlay(img, mask, (0, 255, 0))
    assert np.array_equal(got[:, 30:], img[:, 30:]) and (got[:, :30] != img[:, :30]).any(-1).mean() > 0.9
    # on the sheet: the model's drivable mask (stubbed: the left half of each camera), no truth, no boxes
    cams = read_metadata(env["model"])["rig"]["names"]
    monkeypatch.setattr(report, "mask_predictor", lambda model, fleet: (lambda images: {"drivable": [mask] * len(images)}, ""))
    monkeypatch.setattr(report, "fleet_truth", lambda *a: None)
    monkeypatch.setattr(report, "truth_drivable", lambda *a: None)
    empty = {"boxes": [], "scores": [], "labels": []}
    cat, sel, fid = one_frame(env, tmp_path, {"strategy": "uncertainty", "score": 0.5}, [empty] * len(cams))
    out = tmp_path / "rep"
    write_report(cat, out, selection=sel, camera="CAM_FRONT")
    sheet, f = sheet_and_layout(out)
    assert [e["label"] for e in f["legend"]] == ["drivable (model)"]
    image = read_frame(env["fleet"], f["clip"], f"{f['frame']:06d}", ["CAM_FRONT"])[0]
    h = round(image.shape[0] * CAM_W / image.shape[1])
    plain = cv2.resize(image, (CAM_W, h), interpolation=cv2.INTER_LINEAR)
    view = sheet[f["y"]:f["y"] + h, :CAM_W]
    top = 24  # the camera's name is written across the top rows
    assert np.array_equal(view[top:], overlay(plain, mask, OVERLAYS["drivable (model)"])[top:])
    assert np.array_equal(view[top:, CAM_W // 2:], plain[top:, CAM_W // 2:])  # unchanged where the mask is not set
    assert (view[top:, :CAM_W // 2] != plain[top:, :CAM_W // 2]).any(-1).mean() > 0.5
