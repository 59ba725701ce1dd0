"""Fault rows of `hydranet engine run` (the loop): no production for a new folder, a production that does not
exist or is not a checkpoint, an --out that is something else, a corrupt or foreign journal, bad loop
config keys (a Label Studio labeller without a server configured), a --suites folder that is not one. One row per
case, through the CLI; none leaves a loop behind."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from faultlib import Case, params, run_case


REPO = Path(__file__).resolve().parents[2]
RUN: dict = {}


@pytest.fixture(scope="module", autouse=True)
def tiny_run(fault_env, tmp_path_factory):
    """A real 1-step checkpoint (CAM_FRONT, 64x64): the rows that need a production get past its check."""
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    root = tmp_path_factory.mktemp("loop_faults")
    train(load_experiment(REPO / "configs" / "tiny.yaml", [f"data.root={fault_env.dataset}", "data.cameras=[CAM_FRONT]",
                                                          "data.image_size=[64,64]", "device=cpu", "steps=1",
                                                          "checkpoint_every=1", "batch_size=1", "optim.warmup_steps=1"]),
          root / "run", progress=False)
    RUN["run"] = root / "run"


def run(tmp: Path, *extra, production=True) -> list:
    prod = ["--production", tmp / "prod"] if production else []
    return ["engine", "run", "--out", tmp / "loop", "--quiet", *prod, *extra]


def fake_run(tmp: Path) -> None:
    (tmp / "prod").mkdir(exist_ok=True)
    (tmp / "prod" / "checkpoint.pt").write_bytes(b"not a checkpoint " * 32)


def real_run(tmp: Path) -> None:
    shutil.copytree(RUN["run"], tmp / "prod")


def with_journal(tmp: Path, text: str) -> None:
    real_run(tmp)
    (tmp / "loop").mkdir()
    (tmp / "loop" / "loop.json").write_text(text)


def no_server(mp) -> None:
    """No Label Studio server configured (whatever the machine running the suite has set)."""
    for var in ("HYDRANET_LABEL_STUDIO_URL", "HYDRANET_LABEL_STUDIO_TOKEN"):
        mp.delenv(var, raising=False)


def no_loop_left(tmp: Path) -> None:
    assert not (tmp / "loop" / "catalog.sqlite").exists()
    assert not list(tmp.glob("loop/rounds/*"))


CASES = [
    Case("new-folder-without-production", lambda t, e: run(t, production=False), words=("no loop run", "--production")),
    Case("production-missing", lambda t, e: run(t), words=("checkpoint", "does not exist")),
    Case("production-not-a-checkpoint", lambda t, e: (fake_run(t), run(t))[1], words=("checkpoint",)),
    Case("out-is-something-else", lambda t, e: ((t / "loop").mkdir(), (t / "loop" / "notes.txt").write_text("x"),
                                                real_run(t), run(t))[3], words=("not a loop run", "new --out")),
    Case("journal-corrupt", lambda t, e: (with_journal(t, "{half"), run(t))[1], words=("loop.json", "not valid json")),
    Case("journal-of-another-production", lambda t, e: (with_journal(t, json.dumps(
        {"identity": {"production": "/elsewhere/checkpoint.pt"}, "rounds": []})), run(t))[1],
        words=("another production", "new --out")),
    Case("rounds-zero", lambda t, e: (real_run(t), run(t, "--rounds", "0"))[1], words=("--rounds", "at least 1")),
    Case("unknown-strategy", lambda t, e: (real_run(t), run(t, "--set", "loop.strategy=best"))[1],
         words=("loop.strategy", "hybrid")),
    Case("ensemble-strategy-without-members", lambda t, e: (real_run(t), run(t, "--set", "loop.strategy=ensemble"))[1],
         words=("loop.ensemble", "is empty", "'ensemble'"), check=no_loop_left),
    Case("ensemble-member-missing", lambda t, e: (real_run(t), run(t, "--set", "loop.strategy=tta", "--set",
                                                                 f"loop.ensemble=[{t / 'gone.onnx'}]"))[1],
         words=("loop.ensemble", "gone.onnx", "does not exist"), check=no_loop_left),
    Case("budget-zero", lambda t, e: (real_run(t), run(t, "--set", "loop.budget=0"))[1], words=("loop.budget", ">= 1")),
    Case("labeller-a-person", lambda t, e: (real_run(t), run(t, "--set", "loop.labeller=label-studio"))[1],
         words=("loop.labeller", "oracle")),
    Case("labeller-auto-then-label-studio-without-server", lambda t, e: (real_run(t), run(t, "--set",
                                                                                "loop.labeller=auto+label_studio"))[1],
         words=("loop.labeller auto+label_studio", "needs a Label Studio server", "HYDRANET_LABEL_STUDIO_URL",
                "make labelstudio"), patch=lambda mp, t: no_server(mp)),
    Case("labeller-label-studio-without-token", lambda t, e: (real_run(t), run(t, "--set", "loop.labeller=label_studio"))[1],
         words=("loop.labeller label_studio", "HYDRANET_LABEL_STUDIO_TOKEN"),
         patch=lambda mp, t: (no_server(mp), mp.setenv("HYDRANET_LABEL_STUDIO_URL", "http://127.0.0.1:9"))),
    Case("labeller-auto-accept-nan", lambda t, e: (real_run(t), run(t, "--set", "loop.labeller=auto", "--set",
                                                                   "autolabel.dense_accept=nan"))[1],
         words=("autolabel.dense_accept", "expected a number")),
    Case("suites-not-a-suites-folder", lambda t, e: (real_run(t), (t / "s").mkdir(), run(t, "--suites", t / "s"))[2],
         words=("--suites", "not a suites folder")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_loop_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    rc, out, err = run_case(case, tmp_path, fault_env, monkeypatch, capsys)
    assert rc == case.status, (out, err)
    no_loop_left(tmp_path)
