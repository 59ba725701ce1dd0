"""Fault rows of results that were silent (exit 0, wrong output): a dataset with no scenes, a PNG named .jpg
(training, evaluation and shadow mode share one decoder), `data check` of a bad file; and a trigger threshold
that is not a finite number below the config. (The same round's engine rows are in test_faults_engine.py,
its label-file rows in test_faults_labels.py.)"""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from faultlib import ENGINE as ENV
from faultlib import RUNS, Case, copy_dataset, edit_json, frame_dir, params, run_case

pytestmark = pytest.mark.usefixtures("engine_env", "two_runs")


def png_named_jpg(root: Path) -> None:
    img = frame_dir(root) / "CAM_FRONT.jpg"
    ok, png = cv2.imencode(".png", cv2.imread(str(img)))
    img.write_bytes(png.tobytes())


def png_dataset(tmp: Path, env) -> Path:
    root = copy_dataset(tmp, env)
    png_named_jpg(root)
    return root


def no_scenes(tmp: Path, env) -> Path:
    root = copy_dataset(tmp, env)
    edit_json(root / "dataset.json", lambda m: m.update(scenes=[]))
    return root


def no_metrics(tmp: Path) -> None:
    assert not (tmp / "m.json").exists(), "metrics written for a dataset that cannot be scored"


CASES = [
    Case("eval-dataset-without-scenes", lambda t, e: ["eval", "--checkpoint", RUNS["a"], "--data", no_scenes(t, e), "--out",
                                                      t / "m.json", "--quiet"],
         words=("dataset.json", "'scenes'", "empty"), check=no_metrics),
    Case("eval-png-named-jpg", lambda t, e: ["eval", "--checkpoint", RUNS["a"], "--data", png_dataset(t, e), "--out",
                                             t / "m.json", "--quiet"],
         words=("CAM_FRONT.jpg", "PNG file named .jpg"), check=no_metrics),
    Case("data-check-bad-file-exit-2", lambda t, e: ["data", "check", "--data", png_dataset(t, e), "--quiet"],
         words=("1 bad file", "CAM_FRONT.jpg")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_silent_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_shadow_refuses_the_frame_training_refuses(tmp_path, fault_env, capsys):
    """One decoder, one policy: a PNG named .jpg is a corrupt frame in shadow mode too (counted, never scored)."""
    from hydranet.cli import main

    fleet = png_dataset(tmp_path, fault_env)
    assert main(["engine", "shadow", "--onnx", str(ENV["model"]), "--data", str(fleet), "--catalog",
                 str(tmp_path / "c.db"), "--quiet"]) == 0
    assert "1 corrupt" in capsys.readouterr().out


def test_one_decoder_policy_for_every_reader():
    """The decoder refuses format/name mismatches, truncation and libjpeg-warned damage; a good file decodes
    exactly as cv2.imdecode does."""
    from hydranet.data.image import ImageError, decode_bytes

    img = (np.random.default_rng(0).random((48, 64, 3)) * 255).astype(np.uint8)
    jpg = cv2.imencode(".jpg", img)[1].tobytes()
    png = cv2.imencode(".png", img)[1].tobytes()
    assert (decode_bytes(jpg, "a.jpg") == cv2.imdecode(np.frombuffer(jpg, np.uint8), cv2.IMREAD_UNCHANGED)).all()
    assert (decode_bytes(png, "a.png") == img).all()
    damaged = bytearray(jpg)
    damaged[len(jpg) // 2: len(jpg) // 2 + 64] = b"\x00" * 64
    for data, name, words in ((png, "a.jpg", "PNG file named .jpg"), (jpg, "a.png", "JPEG file named .png"),
                              (jpg[:-40], "a.jpg", "truncated"), (png[:-20], "a.png", "truncated"),
                              (bytes(damaged), "a.jpg", "corrupt"), (b"", "a.jpg", "not a JPEG or PNG"),
                              (b"GIF89a" + b"\x00" * 40, "a.jpg", "not a JPEG or PNG")):
        with pytest.raises(ImageError, match=words):
            decode_bytes(data, name)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "high", True])
def test_a_trigger_threshold_must_be_a_finite_number(value):
    """Below the config too (an API caller's params): a NaN threshold would never fire, silently."""
    from data_engine.triggers import build_triggers

    with pytest.raises(ValueError, match="det2d_uncertain.*threshold"):
        build_triggers({"det2d_uncertain": {"threshold": value}})
