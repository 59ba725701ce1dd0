"""Fault rows of `hydranet engine label-studio` (what `make labelstudio` runs; issue 34 item 5), against the stand-in
`label-studio` command of tests/ls_fake.py: Label Studio not installed, a data folder that is not fresh, a server
that exits while it migrates, one that never answers; each one line, no server left running, no login written."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
from faultlib import Case, params, run_case
from ls_fake import write_fake


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def argv(tmp: Path, *extra, fake=True) -> list:
    ls_bin = write_fake(tmp / "bin") if fake else tmp / "nowhere" / "label-studio"
    return ["engine", "label-studio", "--data", tmp / "ls", "--port", _port(), "--ls-bin", ls_bin, *extra]


def data_not_fresh(tmp: Path, env) -> list:
    (tmp / "ls").mkdir()
    (tmp / "ls" / "label_studio.sqlite3").write_text("an old server's database")
    return argv(tmp)


def exits(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    mp.setenv("FAKE_LS_EXIT", "1")
    mp.setenv("FAKE_LS_DELAY_S", "0.4")


def never_answers(mp: pytest.MonkeyPatch, tmp: Path) -> None:
    mp.setenv("FAKE_LS_DELAY_S", "30")


def no_login(tmp: Path) -> None:
    assert not (tmp / "ls" / "hydranet-login.json").exists(), "a login was written for a server that is not up"


def old_kept(tmp: Path) -> None:
    assert (tmp / "ls" / "label_studio.sqlite3").read_text() == "an old server's database"
    assert not (tmp / "ls" / "server.log").exists(), "a server was started on a used data folder"


CASES = [
    Case("ls-server-not-installed", lambda t, e: argv(t, fake=False),
         words=("no label studio at", "make labelstudio", "6 minutes", "--ls-bin"), check=no_login),
    Case("ls-server-data-not-fresh", data_not_fresh, words=("--data", "not an empty folder", "fresh data folder",
                                                            "LS_DATA"), check=old_kept),
    Case("ls-server-exits-while-starting", lambda t, e: argv(t), patch=exits,
         words=("exited with status 1 while starting", "database is locked", "server.log"), check=no_login),
    Case("ls-server-never-answers", lambda t, e: argv(t, "--timeout", "2"), patch=never_answers,
         words=("did not answer", "within 2 s", "--timeout"), check=no_login),
]


@pytest.mark.parametrize("case", params(CASES))
def test_ls_server_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
