"""Fault rows of `hydranet engine uncertainty` (the server-side ensemble and flip TTA stored as offline columns)
and of mining with them: too few or missing models, a first model that is not the shadow run's, the same model
twice, a file that is not a model, a frame gone from the fleet, columns stored already, and `mine --strategy
ensemble` before the columns exist. One row per case, through the real CLI."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from faultlib import ENGINE, RUNS, Case, Env, cat_copy, copy_dataset, frame_dir, junk, mine, params, run_case

pytestmark = pytest.mark.usefixtures("engine_env", "two_runs")


def unc(tmp: Path, catalog: Path, *models, extra: tuple = ()) -> list:
    return ["engine", "uncertainty", "--catalog", catalog, "--models", *models, "--quiet", *extra]


def pair() -> tuple[Path, Path]:
    """The shadow run's model (untrained) and another export of the same heads, cameras and size."""
    return ENGINE["model"], RUNS["a.onnx"]


def stored(tmp: Path) -> dict:
    from data_engine.catalog import Catalog

    with Catalog(tmp / "c.db") as cat:
        return cat.offline(cat.latest_run())


def nothing_stored(tmp: Path) -> None:
    assert stored(tmp) == {}, "offline columns written by a refused run"


def computed_then_again(tmp: Path, env: Env) -> list:
    from hydranet.cli import main

    cat = cat_copy(tmp)
    assert main([str(a) for a in unc(tmp, cat, *pair())]) == 0
    (tmp / "before.json").write_text(json.dumps({k: sorted(v.items()) for k, v in stored(tmp).items()}))
    return unc(tmp, cat, *pair())


def kept(tmp: Path) -> None:
    before = json.loads((tmp / "before.json").read_text())
    assert before and {k: [list(x) for x in sorted(v.items())] for k, v in stored(tmp).items()} == before


def shadowed_then_frame_removed(tmp: Path, env: Env) -> list:
    from data_engine.shadow import run_shadow

    fleet = copy_dataset(tmp, env, "fleet")
    run_shadow(ENGINE["model"], fleet, tmp / "c.db", workers=1, progress=False)
    (frame_dir(fleet) / "CAM_FRONT.jpg").unlink()
    return unc(tmp, tmp / "c.db", *pair())


def same_model_twice(tmp: Path, env: Env) -> list:
    shutil.copy(ENGINE["model"], tmp / "copy.onnx")
    return unc(tmp, cat_copy(tmp), ENGINE["model"], tmp / "copy.onnx")


def ensemble_only_then_mine_tta(tmp: Path, env: Env) -> list:
    from hydranet.cli import main

    assert main([str(a) for a in unc(tmp, cat_copy(tmp), *pair(), extra=("--no-tta",))]) == 0
    return mine(tmp, tmp / "c.db", "--budget", "1", "--strategy", "tta")


def columns_and_selection(tmp: Path) -> None:
    cols = stored(tmp)
    assert {"ensemble", "tta", "ens_drivable", "tta_depth"} <= set(cols)
    assert all(len(v) == 2 for v in cols.values())


CASES = [
    Case("uncertainty-one-model", lambda t, e: unc(t, cat_copy(t), ENGINE["model"]), words=("at least 2 models",),
         check=nothing_stored),
    Case("uncertainty-model-missing", lambda t, e: unc(t, cat_copy(t), ENGINE["model"], t / "none.onnx"),
         words=("none.onnx", "does not exist"), check=nothing_stored),
    Case("uncertainty-model-not-onnx", lambda t, e: unc(t, cat_copy(t), ENGINE["model"], junk(t, "junk.onnx")),
         words=("junk.onnx", "cannot be loaded"), check=nothing_stored),
    Case("uncertainty-first-not-the-run-model", lambda t, e: unc(t, cat_copy(t), RUNS["a.onnx"], ENGINE["model"]),
         words=("a.onnx", "not shadow run 1's model", "first"), check=nothing_stored),
    Case("uncertainty-same-model-twice", same_model_twice, words=("same model twice",), check=nothing_stored),
    Case("uncertainty-catalog-missing", lambda t, e: unc(t, t / "none.db", *pair()), words=("none.db", "does not exist")),
    Case("uncertainty-catalog-corrupt", lambda t, e: unc(t, junk(t, "c.db"), *pair()), words=("c.db", "not a readable")),
    Case("uncertainty-frame-gone", shadowed_then_frame_removed, words=("scene_0000", "000000", "cam_front.jpg"),
         check=nothing_stored),
    Case("uncertainty-columns-exist", computed_then_again, words=("holds offline columns already", "--overwrite"),
         check=kept),
    Case("uncertainty-ok", lambda t, e: unc(t, cat_copy(t), *pair()), status=0, stdout=("2 models over 2 frames",
                                                                                        "ensemble", "tta"),
         check=columns_and_selection),
    Case("mine-ensemble-before-uncertainty", lambda t, e: mine(t, cat_copy(t), "--budget", "1", "--strategy", "ensemble"),
         words=("ensemble", "engine uncertainty")),
    Case("mine-tta-after-no-tta", ensemble_only_then_mine_tta, words=("'tta'", "engine uncertainty")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_uncertainty_fault(case: Case, tmp_path: Path, fault_env: Env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
