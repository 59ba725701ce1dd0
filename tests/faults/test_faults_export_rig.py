"""Fault rows of `hydranet export --rig FLEET_OR_RIG` (and the export's --out guard): a rig file that does not
exist, broken YAML, a rig lacking the model's camera, a folder that is neither a rig nor a fleet, a recorded
fleet of another format, non-finite calibration (JSON NaN in a fleet's dataset.json, .nan in a YAML), the
checkpoint given twice, an existing --out without --overwrite; the control replaces an existing --out with
--overwrite and records the rig. The model is the fault suite's 1-step camera-only run (CAM_FRONT, 64x64)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from faultlib import RUNS, Case, no_temp_left, params, run_case

OLD = b"an older model"


def sim_rig(env) -> dict:
    return json.loads((env.dataset / "dataset.json").read_text())["rig"]


def export(tmp: Path, rig, *extra) -> list:
    return ["export", RUNS["a"], "--out", tmp / "out" / "m.onnx", "--rig", rig, *extra]


def rig_yaml(tmp: Path, env, edit=None, text: str | None = None) -> Path:
    rig = sim_rig(env)
    if edit is not None:
        edit(rig)
    (tmp / "rig.yaml").write_text(text if text is not None else yaml.safe_dump(rig, sort_keys=False))
    return tmp / "rig.yaml"


def drop_front(rig: dict) -> None:
    rig["cameras"] = [c for c in rig["cameras"] if c["name"] != "CAM_FRONT"]


def nan_cam2ego(rig: dict) -> None:
    rig["cameras"][0]["cam2ego"][0][3] = float("nan")


def nan_fleet(tmp: Path, env) -> list:
    """A sim fleet folder whose dataset.json rig has K[0][0] = NaN (Python's json writes it)."""
    meta = json.loads((env.dataset / "dataset.json").read_text())
    meta["rig"]["cameras"][0]["K"][0][0] = float("nan")
    (tmp / "fleet").mkdir()
    (tmp / "fleet" / "dataset.json").write_text(json.dumps(meta))
    return export(tmp, tmp / "fleet")


def other_format_fleet(tmp: Path, env) -> list:
    (tmp / "rec").mkdir()
    (tmp / "rec" / "fleet.json").write_text(json.dumps({"format": "something-else", "rig": sim_rig(env)}))
    return export(tmp, tmp / "rec")


def existing_out(tmp: Path, env, *extra) -> list:
    (tmp / "out").mkdir()
    (tmp / "out" / "m.onnx").write_bytes(OLD)
    return export(tmp, rig_yaml(tmp, env), *extra)


def nothing_written(tmp: Path) -> None:
    assert not (tmp / "out" / "m.onnx").exists(), "a model was written for a refused export"
    no_temp_left(tmp)


def old_kept(tmp: Path) -> None:
    assert (tmp / "out" / "m.onnx").read_bytes() == OLD, "an existing --out was overwritten without --overwrite"
    no_temp_left(tmp)


def replaced_with_rig(tmp: Path) -> None:
    from deploy.metadata import read_metadata

    md = read_metadata(tmp / "out" / "m.onnx")
    assert md["source"]["rig"]["from"] == str(tmp / "rig.yaml") and md["rig"]["names"] == ["CAM_FRONT"]
    no_temp_left(tmp)


CASES = [
    Case("export-rig-file-missing", lambda t, e: export(t, t / "nope.yaml"), words=("nope.yaml", "does not exist"),
         check=nothing_written),
    Case("export-rig-yaml-broken", lambda t, e: export(t, rig_yaml(t, e, text="name: r\ncameras: [\n  - {name: A\n")),
         words=("rig.yaml",), check=nothing_written),
    Case("export-rig-lacks-model-camera", lambda t, e: export(t, rig_yaml(t, e, drop_front)),
         words=("rig.yaml", "lacks camera CAM_FRONT", "every camera the model"), check=nothing_written),
    Case("export-rig-folder-neither", lambda t, e: export(t, (t / "neither").mkdir() or t / "neither"),
         words=("neither", "dataset.json", "fleet.json"),
         check=nothing_written),
    Case("export-rig-recorded-fleet-other-format", other_format_fleet, words=("fleet.json", "not a recorded fleet"),
         check=nothing_written),
    Case("export-rig-nan-in-fleet-json", nan_fleet, words=("dataset.json", "K[0][0]", "finite"), check=nothing_written),
    Case("export-rig-nan-in-yaml", lambda t, e: export(t, rig_yaml(t, e, nan_cam2ego)),
         words=("rig.yaml", "cam2ego[0][3]", "finite"), check=nothing_written),
    Case("export-checkpoint-given-twice", lambda t, e: export(t, rig_yaml(t, e), "--checkpoint", t / "other"),
         words=("checkpoint once",), check=nothing_written),
    Case("export-out-exists", existing_out, words=("m.onnx", "already exists", "--overwrite"), check=old_kept),
    # export --cameras: the camera heads on a subset of the model's cameras (issue 32)
    Case("export-cameras-unknown", lambda t, e: ["export", RUNS["a"], "--out", t / "out" / "m.onnx", "--cameras",
                                                  "CAM_SIDE"], words=("--cameras", "no camera 'CAM_SIDE'"),
         check=nothing_written),
    Case("export-cameras-twice", lambda t, e: ["export", RUNS["a"], "--out", t / "out" / "m.onnx", "--cameras",
                                                "CAM_FRONT", "CAM_FRONT"], words=("--cameras", "distinct"),
         check=nothing_written),
    Case("export-cameras-and-rig", lambda t, e: export(t, rig_yaml(t, e), "--cameras", "CAM_FRONT"),
         words=("--rig or --cameras",), check=nothing_written),
    Case("export-rig-overwrite-control", lambda t, e: existing_out(t, e, "--overwrite"), status=0,
         stdout=("camera-only model", "wrote"), check=replaced_with_rig),
]


@pytest.mark.parametrize("case", params(CASES))
def test_export_rig_fault(case: Case, tmp_path, fault_env, two_runs, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
