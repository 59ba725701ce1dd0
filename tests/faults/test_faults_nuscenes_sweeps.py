"""Fault rows: nuScenes camera sweeps (`data.sweeps`, hydranet/data/nuscenes.py) through `hydranet train`
and `hydranet sim export-nuscenes --sweeps`: a sweep listed in sample_data.json but missing on disk
(raised naming the file, or skipped with on_bad_frame=skip), a broken prev/next chain (naming the
token), bad values; controls. One row per case; see faultlib.py."""
from __future__ import annotations

import copy
import json
import shutil

import pytest
import yaml
from faultlib import Case, params, run_case

from hydranet.cli import main

TOKEN = "<the edited sample_data token>"  # stands for the token the row's edit touched (filled in by build)


@pytest.fixture(scope="module")
def sweeps_nusc(tmp_path_factory):
    """A 1-scene nuScenes export, 2 keyframes with 1 camera sweep between them, 64x48 pixels."""
    out = tmp_path_factory.mktemp("sweeps") / "nusc"
    assert main(["sim", "export-nuscenes", "--out", str(out), "--scenes", "1", "--seed", "0", "--sweeps", "1",
                 "--set", "frames_per_scene=2", "--set", "image_width=64", "--set", "image_height=48",
                 "--set", "frame_rate_hz=2.0"]) == 0
    return out


def _sweep(rows, ch="CAM_FRONT"):
    return next(r for r in rows if not r["is_key_frame"] and f"/{ch}/" in r["filename"])


def train_case(id, words, edit=None, status=2, data=None):
    """`edit(root, rows) -> token or None` breaks a copy of the export (rows: sample_data.json, written back)."""
    case = Case(id, None, status, words)

    def build(tmp, env):
        root = shutil.copytree(env.sweeps, tmp / "nusc")
        if edit is not None:
            path = root / "v1.0-mini" / "sample_data.json"
            rows = json.loads(path.read_text())
            tok = edit(root, rows)
            path.write_text(json.dumps(rows))
            case.words = tuple(tok if w == TOKEN else w for w in words)
        d = {"root": str(root), "cameras": ["CAM_FRONT"], "image_size": [64, 64], "sweeps": 1, **(data or {})}
        cfg = {"data": d, "model": {"backbone": "tiny", "neck_width": 16, "neck_repeats": 1,
                                    "tasks": [{"name": "det2d"}]},
               "steps": 1, "batch_size": 3, "num_workers": 0, "augment": {"photometric": False, "geometric": False}}
        (tmp / "exp.yaml").write_text(yaml.safe_dump(cfg))
        return ["train", "--config", tmp / "exp.yaml", "--out", tmp / "run", "--quiet"]
    case.build = build
    return case


def unlink_sweep(root, rows):
    sw = _sweep(rows)
    (root / sw["filename"]).unlink()
    return sw["filename"].split("/")[-1]


def dangling_next(root, rows):
    sw = _sweep(rows)
    sw["next"] = "f" * 32
    return sw["token"]


def wrong_prev(root, rows):
    sw = _sweep(rows)
    sw["prev"] = "0" * 32
    return sw["token"]


def chain_skips_a_keyframe(root, rows):
    """The sweep's next points back to the scene's first keyframe (not the next sample's)."""
    sw = _sweep(rows)
    first = next(r for r in rows if r["token"] == sw["prev"])
    sw["next"] = first["token"]
    return sw["token"]


CASES = [
    train_case("sweep-image-missing", (TOKEN, "image is missing", "on_bad_frame"), unlink_sweep),
    train_case("sweep-image-missing-skipped", (), unlink_sweep, status=0, data={"on_bad_frame": "skip"}),
    train_case("sweep-chain-next-missing", (TOKEN, "links to next", "ffffffff", "broken prev/next chain"), dangling_next),
    train_case("sweep-chain-prev-wrong", ("follows", TOKEN, "prev", "broken prev/next chain"), wrong_prev),
    train_case("sweep-chain-loops-back", ("broken prev/next chain", "sample_data"), chain_skips_a_keyframe),
    train_case("sweeps-negative", ("data.sweeps", ">= 0"), data={"sweeps": -1}),
    train_case("sweeps-not-an-int", ("data.sweeps",), data={"sweeps": "all"}),
    train_case("sweeps-on-kitti-format", ("data.sweeps", "only nuscenes"), data={"format": "kitti"}),
    train_case("sweeps-valid", (), status=0),  # control row: sweeps read, one step trained
    Case("export-sweeps-negative", lambda tmp, env: ["sim", "export-nuscenes", "--out", tmp / "n", "--sweeps", "-1",
                                                      "--scenes", "1"], 2, ("sweeps", ">= 0"),
         check=lambda tmp: not (tmp / "n").exists() or pytest.fail("an output folder was left behind")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_sweeps_fault(case, fault_env, sweeps_nusc, tmp_path, monkeypatch, capsys):
    env = copy.copy(fault_env)
    env.sweeps = sweeps_nusc
    run_case(case, tmp_path, env, monkeypatch, capsys)
