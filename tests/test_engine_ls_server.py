"""`hydranet engine label-studio` / `make labelstudio` (issue 34 item 5) against a stand-in for the `label-studio`
command (tests/ls_fake.py: migration lines, then the REST answer for its token), so the start-up, its progress lines,
the URL and token printed, the fresh data folder and the stop are tested without installing Label Studio (minutes).
The real server is tests/test_engine_labeling_ls.py's."""
from __future__ import annotations

import json
import os
import socket

import pytest
from ls_fake import write_fake

from data_engine.labeling import LabelingError
from data_engine.labeling.label_studio import Client
from data_engine.labeling.ls_server import LOGIN_FILE, login_lines, start_server, stop


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_starts_on_localhost_with_progress_then_prints_url_and_token(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LS_RECORD", str(tmp_path / "record.json"))
    monkeypatch.setenv("FAKE_LS_DELAY_S", "3")
    lines: list[str] = []
    port = _free_port()
    proc, login = start_server(tmp_path / "ls", port, write_fake(tmp_path / "bin"), timeout_s=60, every_s=1,
                               log=lines.append)
    try:
        assert login["url"] == f"http://127.0.0.1:{port}"
        Client(login["url"], login["token"], timeout=5).request("GET", "/api/projects")  # the token it printed works
        assert lines[0].startswith(f"starting Label Studio on http://127.0.0.1:{port}") and "3.5 minutes" in lines[0]
        progress = [ln for ln in lines if "still starting" in ln]
        assert progress and any("Applying migration" in ln for ln in progress), lines  # the log's last line shown
        rec = json.loads((tmp_path / "record.json").read_text())
        argv = rec["argv"]
        assert argv[argv.index("--internal-host") + 1] == "127.0.0.1"
        assert argv[argv.index("--data-dir") + 1] == str((tmp_path / "ls").resolve())
        assert rec["env"]["LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN"] == "true" and rec["env"]["LATEST_VERSION_CHECK"] == "false"
        kept = json.loads((tmp_path / "ls" / LOGIN_FILE).read_text())
        assert kept["token"] == login["token"] and (tmp_path / "ls" / LOGIN_FILE).stat().st_mode & 0o077 == 0
        shown = "\n".join(login_lines(login))
        assert login["url"] in shown and login["token"] in shown and login["password"] in shown
        assert f"HYDRANET_LABEL_STUDIO_URL={login['url']} HYDRANET_LABEL_STUDIO_TOKEN={login['token']}" in shown
    finally:
        stop(proc)
    assert proc.poll() is not None
    with pytest.raises(LabelingError):
        Client(login["url"], login["token"], timeout=2).request("GET", "/api/projects")


def test_a_server_that_exits_while_starting_is_one_line_and_nothing_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LS_EXIT", "3")
    monkeypatch.setenv("FAKE_LS_DELAY_S", "0.4")
    with pytest.raises(LabelingError, match=r"exited with status 3 while starting: django.*database is locked"):
        start_server(tmp_path / "ls", _free_port(), write_fake(tmp_path / "bin"), timeout_s=60, every_s=1, log=lambda s: None)
    assert not (tmp_path / "ls" / LOGIN_FILE).exists()


def test_a_server_that_never_answers_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LS_DELAY_S", "30")
    monkeypatch.setenv("FAKE_LS_RECORD", str(tmp_path / "record.json"))
    with pytest.raises(LabelingError, match=r"did not answer .* within 2 s.*--timeout"):
        start_server(tmp_path / "ls", _free_port(), write_fake(tmp_path / "bin"), timeout_s=2, every_s=1, log=lambda s: None)
    assert not (tmp_path / "ls" / LOGIN_FILE).exists()
    # the process group was ended: no fake server left behind (its pid is gone)
    for line in os.popen("ps -eo args").read().splitlines():
        assert not (str(tmp_path) in line and "ls_fake.py" in line), line
