"""Fault rows of `hydranet engine export-fiftyone`: one row per case, through the real CLI, on the engine_env
catalog (an untrained CAM_FRONT model shadowed over the fault dataset: 1 clip, 2 frames, six cameras)."""
from __future__ import annotations

import errno
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from faultlib import ENGINE, Case, Env, cat_copy, foreign_sqlite, junk, no_temp_left, params, run_case

pytestmark = pytest.mark.usefixtures("engine_env")


def export(tmp: Path, catalog: Path, *extra) -> list:
    return ["engine", "export-fiftyone", "--catalog", catalog, "--out", tmp / "fo", *extra]


def selected(tmp: Path, name: str = "one") -> Path:
    """A copy of the engine catalog with a selection of one random frame."""
    from data_engine.mining import mine

    cat = cat_copy(tmp)
    mine(cat, 1, "random", name=name)
    return cat


def exported(samples: int, frames: int = 2):
    def check(tmp: Path) -> None:
        from data_engine.fiftyone_export import check_export

        got = check_export(tmp / "fo")
        assert got == {"samples": samples, "groups": frames}, got
        assert not (tmp / "fo" / "old.txt").exists()
        no_temp_left(tmp)
    return check


def no_export(tmp: Path) -> None:
    assert not (tmp / "fo").exists()
    no_temp_left(tmp)


def kept(tmp: Path) -> None:
    assert (tmp / "fo" / "old.txt").read_text() == "mine" and not (tmp / "fo" / "samples.json").exists()
    no_temp_left(tmp)


def old_export(tmp: Path) -> Path:
    (tmp / "fo").mkdir()
    (tmp / "fo" / "old.txt").write_text("mine")
    return tmp / "fo"


def newer(tmp: Path) -> Path:
    db = sqlite3.connect(str(cat_copy(tmp)))
    db.execute("PRAGMA user_version = 7")
    db.close()
    return tmp / "c.db"


def model_moved(tmp: Path) -> Path:
    db = sqlite3.connect(str(cat_copy(tmp)))
    db.execute("UPDATE models SET path = ?", (str(tmp / "gone.onnx"),))
    db.commit()
    db.close()
    return tmp / "c.db"


def shadowed_copy(tmp: Path, env: Env, remove: str | None) -> Path:
    """The fault dataset copied and shadowed into tmp/s.db, then the images matching `remove` deleted."""
    from data_engine.shadow import run_shadow

    ds = tmp / "ds"
    shutil.copytree(env.dataset, ds)
    run_shadow(ENGINE["model"], ds, tmp / "s.db", workers=1, progress=False)
    if remove:
        for jpg in ds.rglob(remove):
            jpg.unlink()
    return tmp / "s.db"


def spoiled(tmp: Path, env: Env, name: str) -> Path:
    """The fault dataset shadowed into tmp/s.db, then the first frame's file `name` overwritten with junk."""
    cat = shadowed_copy(tmp, env, None)
    next(iter(sorted((tmp / "ds").rglob(name)))).write_bytes(b"\x00not what it should be")
    return cat


def masks_unwritable(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    import cv2

    real = cv2.imwrite
    monkeypatch.setattr(cv2, "imwrite", lambda path, *a: False if path.endswith(".png") else real(path, *a))


def other_frames(tmp: Path) -> Path:
    (tmp / "sel.json").write_text(json.dumps({"items": [{"frame_id": 999}]}))
    return tmp / "sel.json"


def disk_full(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full)


CASES = [
    Case("fiftyone-ok", lambda t, e: export(t, cat_copy(t)), status=0,
         stdout=("exported 2 frames (12 camera images: CAM_FRONT,", "fo.Dataset.from_dir"), check=exported(12)),
    Case("fiftyone-selection", lambda t, e: export(t, selected(t), "--selection", "one"), status=0,
         stdout=("exported 1 frames", "selection one"), check=exported(6, 1)),
    Case("fiftyone-selection-file", lambda t, e: (t / "s.json").write_text(json.dumps({"items": [{"clip": "scene_0000", "frame": 1}]}))
         and export(t, cat_copy(t), "--selection", t / "s.json"), status=0, stdout=("exported 1 frames",), check=exported(6, 1)),
    Case("fiftyone-out-exists", lambda t, e: old_export(t) and export(t, cat_copy(t)), words=("fo", "exists", "--overwrite"),
         check=kept),
    Case("fiftyone-out-is-a-file", lambda t, e: (t / "fo").write_text("x") and export(t, cat_copy(t), "--overwrite"),
         words=("is a file",)),
    Case("fiftyone-overwrite", lambda t, e: old_export(t) and export(t, cat_copy(t), "--overwrite"), status=0,
         stdout=("exported 2 frames",), check=exported(12)),
    Case("fiftyone-unknown-selection", lambda t, e: export(t, selected(t), "--selection", "nope"),
         words=("'nope'", "not in catalog", "one"), check=no_export),
    Case("fiftyone-no-selections-at-all", lambda t, e: export(t, cat_copy(t), "--selection", "nope"),
         words=("'nope'", "not in catalog", "none"), check=no_export),
    Case("fiftyone-selection-file-other-frames", lambda t, e: export(t, cat_copy(t), "--selection", other_frames(t)),
         words=("frame id 999", "--run"), check=no_export),
    Case("fiftyone-unknown-run", lambda t, e: export(t, cat_copy(t), "--run", "42"), words=("no shadow run 42",), check=no_export),
    Case("fiftyone-selection-of-unknown-run", lambda t, e: export(t, selected(t), "--selection", "one", "--run", "42"),
         words=("no shadow run 42",), check=no_export),
    Case("fiftyone-missing-catalog", lambda t, e: export(t, t / "none.db"), words=("none.db", "does not exist"), check=no_export),
    Case("fiftyone-corrupt-catalog", lambda t, e: export(t, junk(t, "bad.db")), words=("bad.db", "not a readable"),
         check=no_export),
    Case("fiftyone-foreign-sqlite", lambda t, e: export(t, foreign_sqlite(t)), words=("not a hydranet catalog",), check=no_export),
    Case("fiftyone-newer-schema", lambda t, e: export(t, newer(t)), words=("schema version 7", "newer"), check=no_export),
    Case("fiftyone-no-shadow-run", lambda t, e: export(t, sqlite_catalog(t)), words=("no shadow run", "engine shadow"),
         check=no_export),
    Case("fiftyone-model-moved", lambda t, e: export(t, model_moved(t)), words=("gone.onnx", "cannot be read", "put the model"),
         check=no_export),
    Case("fiftyone-images-gone-still-written", lambda t, e: export(t, shadowed_copy(t, e, "CAM_BACK.jpg")), status=0,
         stdout=("exported 2 frames (10 camera images", "2 camera images unreadable and left out", "CAM_BACK.jpg"),
         check=exported(10)),
    Case("fiftyone-no-image-at-all", lambda t, e: export(t, shadowed_copy(t, e, "*.jpg")),
         words=("no camera image", "restore the fleet"), check=no_export),
    Case("fiftyone-truth-labels-corrupt", lambda t, e: export(t, spoiled(t, e, "labels.json")),
         words=("labels.json", "regenerate the fleet"), check=no_export),
    Case("fiftyone-truth-semantic-corrupt", lambda t, e: export(t, spoiled(t, e, "CAM_FRONT.semantic.png")),
         words=("CAM_FRONT.semantic.png", "not a readable", "regenerate the fleet"), check=no_export),
    Case("fiftyone-mask-unwritable", lambda t, e: export(t, cat_copy(t)), patch=masks_unwritable,
         words=("cannot write the export", "could not write the mask", "another --out"), check=no_export),
    Case("fiftyone-no-masks", lambda t, e: export(t, cat_copy(t), "--no-masks"), status=0,
         stdout=("exported 2 frames", "predicted masks: none (--no-masks)"), check=exported(12)),
    Case("fiftyone-disk-full", lambda t, e: export(t, cat_copy(t)), patch=disk_full,
         words=("cannot write the export", "no space left", "another --out"), check=no_export),
]


def sqlite_catalog(tmp: Path) -> Path:
    """A valid, empty catalog: no shadow run in it."""
    from data_engine.catalog import Catalog

    Catalog(tmp / "empty.db", create=True).close()
    return tmp / "empty.db"


@pytest.mark.parametrize("case", params(CASES))
def test_fiftyone_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
