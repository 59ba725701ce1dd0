"""Fault rows of `hydranet engine report`, `engine triggers` (precision/recall from the fleet's truth),
`engine similar --image` and the Ray side of `engine shadow`: one row per case, through the real CLI,
on an untrained CAM_FRONT model shadowed over the fault dataset."""
from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from faultlib import Case, Env, foreign_sqlite, frame_dir, junk, no_temp_left, params, run_case

REPO = Path(__file__).resolve().parents[2]
ENV: dict = {}


@pytest.fixture(scope="module")
def report_env(fault_env: Env, tmp_path_factory) -> dict:
    """An untrained tiny model (CAM_FRONT, 64x64) exported from the fault dataset and shadowed over it, and
    the same model with one more metadata entry (another sha256: "another model")."""
    import onnx

    from data_engine.shadow import run_shadow
    from deploy.export import export_model, sim_frames
    from hydranet.experiment import load_experiment
    from hydranet.models import build_model

    root = tmp_path_factory.mktemp("report_faults")
    cfg = load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={fault_env.dataset}", "data.cameras=[CAM_FRONT]",
                                                          "data.image_size=[64,64]", "device=cpu"])
    meta = json.loads((fault_env.dataset / "dataset.json").read_text())
    export_model(build_model(cfg.model, meta), cfg, meta, root / "model.onnx", sim_frames(cfg, fault_env.dataset, 1),
                 verbose=False)
    m = onnx.load(str(root / "model.onnx"))
    m.metadata_props.add(key="note", value="another build")
    onnx.save(m, str(root / "other.onnx"))
    run_shadow(root / "model.onnx", fault_env.dataset, root / "cat.db", workers=1, progress=False)
    return {"model": root / "model.onnx", "other": root / "other.onnx", "catalog": root / "cat.db"}


@pytest.fixture(autouse=True)
def _env(report_env):
    ENV.update(report_env)


def cat_copy(tmp: Path) -> Path:
    shutil.copy(ENV["catalog"], tmp / "c.db")
    return tmp / "c.db"


def newer(tmp: Path) -> Path:
    db = sqlite3.connect(str(cat_copy(tmp)))
    db.execute("PRAGMA user_version = 7")
    db.close()
    return tmp / "c.db"


def shadow(tmp: Path, env: Env, *extra) -> list:
    return ["engine", "shadow", "--onnx", ENV["model"], "--data", env.dataset, "--catalog", tmp / "s.db", "--quiet", *extra]


def mined(cat: Path, name: str = "one") -> Path:
    """`cat` with a selection of one random frame in it."""
    from data_engine.mining import mine

    mine(cat, 1, "random", name=name)
    return cat


def selected(tmp: Path) -> Path:
    """A copy of the shadowed catalog with one selection in it."""
    return mined(cat_copy(tmp))


def report(tmp: Path, catalog: Path, *extra) -> list:
    return ["engine", "report", "--catalog", catalog, "--out", tmp / "rep", *extra]


def with_truth(tmp: Path, env: Env, truth: bytes | None, drop_labels: bool = False) -> Path:
    """The fault dataset copied with truth/scenarios.json = `truth` (None: a valid one), optionally without
    a frame's labels.json, shadowed into tmp/t.db."""
    from data_engine.shadow import run_shadow

    ds = tmp / "ds"
    shutil.copytree(env.dataset, ds)
    (ds / "truth").mkdir()
    scenes = [s["name"] for s in json.loads((ds / "dataset.json").read_text())["scenes"]]
    valid = json.dumps({"clips": {s: {"rare": []} for s in scenes}}).encode()
    (ds / "truth" / "scenarios.json").write_bytes(valid if truth is None else truth)
    if drop_labels:
        (frame_dir(ds) / "labels.json").unlink()
    run_shadow(ENV["model"], ds, tmp / "t.db", workers=1, progress=False)
    return tmp / "t.db"


def tiny_png(tmp: Path, w: int = 10, h: int = 10) -> Path:
    import cv2
    import numpy as np

    cv2.imwrite(str(tmp / "small.png"), np.zeros((h, w, 3), np.uint8))
    return tmp / "small.png"


def truncated_jpg(tmp: Path, env: Env) -> Path:
    data = (frame_dir(env.dataset) / "CAM_FRONT.jpg").read_bytes()
    (tmp / "cut.jpg").write_bytes(data[: len(data) // 2])
    return tmp / "cut.jpg"


def similar(tmp: Path, env: Env, image, *extra, model=True) -> list:
    return ["engine", "similar", "--catalog", cat_copy(tmp), "--image", image, *(["--onnx", ENV["model"]] if model else []),
            *extra]


def front(env: Env) -> Path:
    return frame_dir(env.dataset) / "CAM_FRONT.jpg"


def report_ok(tmp: Path) -> None:
    assert sorted(p.name for p in (tmp / "rep").iterdir()) == ["contact_sheet.json", "contact_sheet.png", "report.md",
                                                               "signals.png"]
    no_temp_left(tmp)


def no_report(tmp: Path) -> None:
    assert not (tmp / "rep").exists()
    no_temp_left(tmp)


def no_ray(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the package


def image_gone(tmp: Path, env: Env) -> list:
    """A selection whose frame's image disappeared after shadow: the tile says so, the report is written."""
    from data_engine.shadow import run_shadow

    ds = tmp / "ds"
    shutil.copytree(env.dataset, ds)
    run_shadow(ENV["model"], ds, tmp / "c.db", workers=1, progress=False)
    mined(tmp / "c.db")
    for jpg in ds.rglob("CAM_FRONT.jpg"):
        jpg.unlink()
    return report(tmp, tmp / "c.db")


def truth_spoiled(tmp: Path, env: Env, name: str) -> list:
    """A selection whose fleet's truth file `name` (every frame's) became junk after shadow: one line naming it."""
    from data_engine.shadow import run_shadow

    ds = tmp / "ds"
    shutil.copytree(env.dataset, ds)
    run_shadow(ENV["model"], ds, tmp / "c.db", workers=1, progress=False)
    mined(tmp / "c.db")
    for f in ds.rglob(name):
        f.write_bytes(b"\x00junk")
    return report(tmp, tmp / "c.db")


CASES = [
    # report
    Case("report-ok", lambda t, e: report(t, selected(t)), status=0, stdout=("report of selection one",), check=report_ok),
    Case("report-image-gone-still-written", image_gone, status=0, stdout=("report of selection",), check=report_ok),
    Case("report-truth-labels-corrupt", lambda t, e: truth_spoiled(t, e, "labels.json"),
         words=("labels.json", "regenerate the fleet"), check=no_report),
    Case("report-truth-semantic-corrupt", lambda t, e: truth_spoiled(t, e, "CAM_FRONT.semantic.png"),
         words=("CAM_FRONT.semantic.png", "not a readable", "regenerate the fleet"), check=no_report),
    Case("report-missing-catalog", lambda t, e: report(t, t / "none.db"), words=("none.db", "does not exist"), check=no_report),
    Case("report-corrupt-catalog", lambda t, e: report(t, junk(t, "bad.db")), words=("bad.db", "not a readable"),
         check=no_report),
    Case("report-foreign-sqlite", lambda t, e: report(t, foreign_sqlite(t)), words=("not a hydranet catalog",), check=no_report),
    Case("report-newer-schema", lambda t, e: report(t, newer(t)), words=("schema version 7", "newer"), check=no_report),
    Case("report-no-selection", lambda t, e: report(t, cat_copy(t)), words=("no selection", "engine mine", "--selection"),
         check=no_report),
    Case("report-unknown-selection", lambda t, e: report(t, selected(t), "--selection", "nope"),
         words=("'nope'", "not in catalog", "one"), check=no_report),
    Case("report-selection-file-missing", lambda t, e: report(t, selected(t), "--selection", t / "sel.json"),
         words=("sel.json",), check=no_report),
    Case("report-selection-file-not-json", lambda t, e: report(t, selected(t), "--selection", junk(t, "sel.json")),
         words=("sel.json", "corrupt JSON", "engine mine --out"), check=no_report),
    Case("report-selection-file-other-frames", lambda t, e: (t / "s.json").write_text(json.dumps(
        {"items": [{"frame_id": 999}]})) and report(t, selected(t), "--selection", t / "s.json"),
         words=("frame id 999", "not an ok frame", "--run"), check=no_report),
    Case("report-unknown-run", lambda t, e: report(t, selected(t), "--run", "42"), words=("no shadow run 42",),
         check=no_report),
    Case("report-unknown-camera", lambda t, e: report(t, selected(t), "--camera", "CAM_X"), words=("CAM_X", "CAM_FRONT"),
         check=no_report),
    Case("report-max-frames-zero", lambda t, e: report(t, selected(t), "--max-frames", "0"), words=("--max-frames", "at least 1"),
         check=no_report),
    Case("report-unknown-trigger", lambda t, e: report(t, selected(t), "--set", "triggers.sparkle.threshold=1"),
         words=("sparkle", "known triggers"), check=no_report),
    Case("report-out-exists", lambda t, e: (t / "rep").mkdir() or report(t, selected(t)), words=("exists", "--overwrite")),
    Case("report-out-is-a-file", lambda t, e: (t / "rep").write_text("x") and report(t, selected(t), "--overwrite"),
         words=("is a file",)),
    Case("report-overwrite", lambda t, e: (t / "rep").mkdir() or report(t, selected(t), "--overwrite"), status=0,
         stdout=("report of selection",), check=report_ok),
    # triggers: precision and recall from the fleet's truth
    Case("triggers-no-truth", lambda t, e: ["engine", "triggers", "--catalog", cat_copy(t)], status=0,
         stdout=("no precision/recall", "scenarios.json", "| trigger | version | fired |")),
    Case("triggers-with-truth", lambda t, e: ["engine", "triggers", "--catalog", with_truth(t, e, None)], status=0,
         stdout=("| rare: precision | base | lift | n | hard: precision |", "lift 1 = no better than random")),
    Case("triggers-corrupt-truth", lambda t, e: ["engine", "triggers", "--catalog", with_truth(t, e, b"{garbage")],
         words=("scenarios.json", "unreadable", "regenerate")),
    Case("triggers-truth-without-clips", lambda t, e: ["engine", "triggers", "--catalog", with_truth(t, e, b"[]")],
         words=("scenarios.json", "no 'clips'")),
    Case("triggers-truth-missing-clip", lambda t, e: ["engine", "triggers", "--catalog",
                                                      with_truth(t, e, b'{"clips": {"other": {"rare": []}}}')],
         words=("scenarios.json", "no tags for clip")),
    Case("triggers-labels-missing", lambda t, e: ["engine", "triggers", "--catalog", with_truth(t, e, None, drop_labels=True)],
         words=("labels.json", "missing")),
    Case("report-corrupt-truth", lambda t, e: report(t, mined(with_truth(t, e, b"{garbage"))),
         words=("scenarios.json", "unreadable"), check=no_report),
    # similar --image
    Case("similar-image-without-model", lambda t, e: similar(t, e, front(e), model=False),
         words=("--image needs --onnx", "model.onnx")),
    Case("similar-image-other-model", lambda t, e: similar(t, e, front(e), "--onnx", ENV["other"], model=False),
         words=("other.onnx", "not the model of shadow run", "model.onnx")),
    Case("similar-image-model-missing", lambda t, e: similar(t, e, front(e), "--onnx", t / "gone.onnx", model=False),
         words=("gone.onnx", "does not exist")),
    Case("similar-image-missing-file", lambda t, e: similar(t, e, t / "none.jpg"), words=("none.jpg", "no such file")),
    Case("similar-image-not-an-image", lambda t, e: similar(t, e, junk(t, "x.jpg")), words=("x.jpg", "not a readable image")),
    Case("similar-image-truncated-jpeg", lambda t, e: similar(t, e, truncated_jpg(t, e)), words=("cut.jpg", "not a readable")),
    Case("similar-image-wrong-size", lambda t, e: similar(t, e, tiny_png(t)), words=("small.png", "10x10", "CAM_FRONT", "64x48")),
    Case("similar-image-unknown-camera", lambda t, e: similar(t, e, front(e), "--camera", "CAM_X"), words=("CAM_X", "CAM_FRONT")),
    Case("similar-image-k-zero", lambda t, e: similar(t, e, front(e), "--k", "0"), words=("--k", "at least 1")),
    Case("similar-image-and-frame", lambda t, e: similar(t, e, front(e), "--frame", "1"), words=("exactly one of", "--frame", "--image")),
    Case("similar-neither", lambda t, e: ["engine", "similar", "--catalog", cat_copy(t)], words=("--frame", "--image")),
    Case("similar-frame-with-model", lambda t, e: ["engine", "similar", "--catalog", cat_copy(t), "--frame", "1", "--onnx",
                                                   ENV["model"]], words=("--onnx", "go with --image")),
    Case("similar-image-ok", lambda t, e: similar(t, e, front(e), "--k", "1"), status=0, stdout=("1.0000",)),
    # shadow on Ray
    Case("shadow-ray-not-installed", lambda t, e: shadow(t, e, "--executor", "ray"), patch=no_ray,
         words=("ray extra", "pip install", "--executor local")),
    Case("shadow-ray-address-without-ray", lambda t, e: shadow(t, e, "--ray-address", "ray://head:10001"),
         words=("--ray-address", "--executor ray")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_report_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)

