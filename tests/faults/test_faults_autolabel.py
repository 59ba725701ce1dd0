"""Fault rows of `hydranet engine autolabel` (data_engine/autolabel/, docs/autolabel.md): a model of another rig
or, for a BEV model, another calibration than the fleet (a camera-only model takes any image size, as in shadow
mode), models whose heads differ (a warning: the shared heads are fused), a NaN model, a
clip of one frame (labelled per frame, said so), a fleet without poses (2D tracks only, said so), a selection
whose clips or fleet are gone, thresholds NaN or outside [0, 1], an existing --out without --overwrite, a model
missing or given twice. Every refusal leaves no --out, no temp folder and no label in the catalog. One row per
case; see faultlib.py for the contract.

The rows share three untrained exports on the fault dataset (CAM_FRONT at 32x64; its camera is 64x48): a.onnx and
b.onnx (configs/tiny.yaml: camera heads) and bev.onnx (configs/engine_tiny.yaml: det2d, dense heads, det3d and the
video queue); each row builds its own catalog over its own copy of the dataset."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from faultlib import Case, edit_json, Env, export_untrained, no_temp_left, params, run_case, with_metadata

REPO = Path(__file__).resolve().parents[2]
_M: dict[str, Path] = {}
SCENE = "scene_0000"


def _nan_model(src: Path, dst: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src))
    for init in m.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32 and arr.size > 16:
            init.CopyFrom(numpy_helper.from_array(np.full_like(arr, np.nan), init.name))
    onnx.save(m, str(dst))
    return dst


@pytest.fixture(scope="module")
def models(fault_env: Env, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("autolabel_faults")
    _M["a"] = export_untrained(fault_env.dataset, root / "a.onnx", "tiny.yaml", 0)
    _M["b"] = export_untrained(fault_env.dataset, root / "b.onnx", "tiny.yaml", 1)
    _M["bev"] = export_untrained(fault_env.dataset, root / "bev.onnx", "engine_tiny.yaml", 2)
    _M["rig"] = with_metadata(_M["a"], root / "rig.onnx", lambda md: md["rig"].update(names=["CAM_OTHER"]))
    _M["size"] = with_metadata(_M["a"], root / "size.onnx", lambda md: md["rig"].update(source_sizes=[[96, 160]]))
    _M["calib"] = with_metadata(_M["bev"], root / "calib.onnx", _wider_lens)
    _M["nan"] = _nan_model(_M["b"], root / "nan.onnx")
    return _M


def _wider_lens(md: dict) -> None:
    """The BEV model's camera calibrated with a focal length 1.5x the fleet's (another lens or resolution)."""
    for K in md["rig"]["K"]:
        K[0][0] *= 1.5
        K[1][1] *= 1.5


def _fleet(tmp: Path, env: Env, edit=None) -> Path:
    """A copy of the fault dataset (edited by `edit(scene.json dict)`), registered in tmp/cat.db with a selection."""
    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet

    ds = tmp / "ds"
    if not ds.exists():
        shutil.copytree(env.dataset, ds)
        if edit is not None:
            edit_json(ds / "scenes" / SCENE / "scene.json", edit)
        with Catalog(tmp / "cat.db", create=True) as c:
            c.add_fleet(Fleet(ds))
        frames = json.loads((ds / "scenes" / SCENE / "scene.json").read_text())["frames"]
        (tmp / "sel.json").write_text(json.dumps({"name": "sel", "frames": [{"clip": SCENE, "frame": f["index"]}
                                                                            for f in frames]}))
    return ds


def _argv(tmp: Path, env: Env, *names: str, edit=None, extra=()) -> list:
    _fleet(tmp, env, edit)
    return ["engine", "autolabel", "--catalog", tmp / "cat.db", "--selection", tmp / "sel.json", "--models",
            *[_M[n] for n in names], "--out", tmp / "out", "--quiet", *extra]


def _one_frame(scene: dict) -> None:
    scene["frames"] = scene["frames"][:1]


def _no_poses(scene: dict) -> None:
    for f in scene["frames"]:
        f["ego2world"] = None


def _labels(tmp: Path) -> int:
    with sqlite3.connect(tmp / "cat.db") as db:
        return db.execute("SELECT count(*) FROM labels WHERE source = 'auto'").fetchone()[0]


def refused(tmp: Path) -> None:
    assert not (tmp / "out").exists(), "a refused autolabel wrote --out"
    no_temp_left(tmp)
    if (tmp / "cat.db").exists():
        assert _labels(tmp) == 0, "a refused autolabel recorded labels"


def labelled(n: int):
    def check(tmp: Path) -> None:
        assert json.loads((tmp / "out" / "summary.json").read_text())["frames_labelled"] == n
        assert _labels(tmp) == n
        no_temp_left(tmp)
    return check


def _gone_clip(tmp: Path, env: Env) -> list:
    argv = _argv(tmp, env, "a", "b")
    shutil.rmtree(tmp / "ds" / "scenes" / SCENE)
    return argv


def _gone_fleet(tmp: Path, env: Env) -> list:
    argv = _argv(tmp, env, "a", "b")
    shutil.rmtree(tmp / "ds")
    return argv


def _out_exists(tmp: Path, env: Env) -> list:
    (tmp / "out").mkdir()
    (tmp / "out" / "mine.txt").write_text("keep")
    return _argv(tmp, env, "a", "b")


def _out_kept(tmp: Path) -> None:
    assert (tmp / "out" / "mine.txt").read_text() == "keep" and not (tmp / "out" / "summary.json").exists()
    no_temp_left(tmp)
    assert _labels(tmp) == 0


CASES = [
    Case("autolabel-ok", lambda t, e: _argv(t, e, "a", "b"), 0, stdout=("2 frames of 1 clips", "2 models"), check=labelled(2)),
    Case("autolabel-heads-differ", lambda t, e: _argv(t, e, "a", "bev"), 0,
         stdout=("warning: heads not shared by every model are dropped", "signs_lights", "normals", "det3d"),
         check=labelled(2)),
    Case("autolabel-other-rig", lambda t, e: _argv(t, e, "a", "rig"), words=("rig.onnx", "CAM_OTHER", "rig"), check=refused),
    Case("autolabel-camera-model-other-size", lambda t, e: _argv(t, e, "size", "a"), 0,
         stdout=("2 frames of 1 clips", "2 models"), check=labelled(2)),
    Case("autolabel-bev-model-other-calibration", lambda t, e: _argv(t, e, "calib"),
         words=("calib.onnx", "CAM_FRONT", "intrinsics differ", "own rig"), check=refused),
    Case("autolabel-nan-model", lambda t, e: _argv(t, e, "a", "nan"), words=("nan.onnx", "non-finite", "export it again"),
         check=refused),
    Case("autolabel-one-frame-clip", lambda t, e: _argv(t, e, "a", "b", edit=_one_frame), 0,
         stdout=(f"clip {SCENE} has one frame: no tracking, labelled per frame",), check=labelled(1)),
    Case("autolabel-no-poses", lambda t, e: _argv(t, e, "bev", edit=_no_poses), 0,
         stdout=("has no ego poses: 2D tracks only, no 3D labels",), check=labelled(2)),
    Case("autolabel-clips-gone", _gone_clip, words=("sel.json", SCENE, "gone", "regenerate the fleet"), check=refused),
    Case("autolabel-fleet-gone", _gone_fleet, words=("sel.json", "fleet is gone", "regenerate"), check=refused),
    Case("autolabel-threshold-nan", lambda t, e: _argv(t, e, "a", "b", extra=("--set", "autolabel.min_track_score=.nan")),
         words=("autolabel.min_track_score",), check=refused),
    Case("autolabel-threshold-above-1", lambda t, e: _argv(t, e, "a", "b", extra=("--set", "autolabel.accept.det2d=1.5")),
         words=("autolabel.accept.det2d", "[0, 1]", "1.5"), check=refused),
    Case("autolabel-threshold-negative", lambda t, e: _argv(t, e, "a", "b", extra=("--set", "autolabel.track_iou=-0.2")),
         words=("autolabel.track_iou", "[0, 1]"), check=refused),
    Case("autolabel-out-exists", _out_exists, words=("out", "exists", "--overwrite"), check=_out_kept),
    Case("autolabel-model-missing", lambda t, e: [*_argv(t, e, "a"), "--models", t / "none.onnx"],
         words=("none.onnx", "does not exist", "hydranet export"), check=refused),
    Case("autolabel-same-model-twice", lambda t, e: _argv(t, e, "a", "a"), words=("a.onnx", "twice"), check=refused),
]


@pytest.mark.parametrize("case", params(CASES))
def test_autolabel_fault(case: Case, models, tmp_path: Path, fault_env: Env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
