"""A local Label Studio server for a newcomer: `make labelstudio` (`hydranet engine label-studio`).

Label Studio lives in its own virtual environment (.venv-labelstudio: it pins packages this project does not,
docs/labeling.md). `start_server` starts it on 127.0.0.1 with a fresh data folder, a reviewer account and a
legacy API token made up here, prints a progress line every few seconds while it starts (the first start
migrates its database: about 3.5 minutes on a loaded 2-core machine, about 20 s on an idle one), each with the
last line of its log, and returns once the REST API answers with that token. `login_lines` is what the user
needs then: the URL, the account for the browser and the two variables `engine label --backend label-studio`
reads. The login is also kept in DATA/hydranet-login.json (readable by its owner only).
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from data_engine.labeling.base import LabelingError
from data_engine.labeling.label_studio import TOKEN_ENV, URL_ENV, Client

LOGIN_FILE = "hydranet-login.json"
LOG_FILE = "server.log"
REVIEWER = "reviewer@example.com"


def start_command(ls_bin: Path, data: Path, port: int, token: str, password: str) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of `label-studio start` on 127.0.0.1:port with `data` as its data folder, the reviewer
    account and `token` as its legacy API token (docs/labeling.md, "A local server")."""
    env = {**os.environ, "LABEL_STUDIO_BASE_DATA_DIR": str(data), "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
           "LATEST_VERSION_CHECK": "false", "HOME": str(data)}
    argv = [str(ls_bin), "start", "--no-browser", "--data-dir", str(data), "--internal-host", "127.0.0.1", "-p",
            str(port), "--username", REVIEWER, "--password", password, "--user-token", token, "--enable-legacy-api-token"]
    return argv, env


def _last_line(log: Path) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:160] if lines else ""


def stop(proc: subprocess.Popen) -> None:
    """End the server's process group (SIGTERM, then SIGKILL after 20 s)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def start_server(data: str | Path, port: int = 8089, ls_bin: str | Path = ".venv-labelstudio/bin/label-studio",
                 timeout_s: float = 900.0, every_s: float = 15.0,
                 log: Callable[[str], None] = print) -> tuple[subprocess.Popen, dict[str, str]]:
    """Start Label Studio on 127.0.0.1:`port` with the fresh data folder `data`, printing progress every `every_s`
    seconds until its API answers; returns (the process, {"url", "token", "user", "password", "data", "log"}). The
    caller stops it (`stop`). LabelingError, the server stopped, when it is missing, `data` holds anything, it exits
    or it does not answer within `timeout_s`."""
    ls_bin, data = Path(ls_bin), Path(data)
    if not ls_bin.exists():
        raise LabelingError(f"no Label Studio at {ls_bin}; install it into its own environment with `make labelstudio` "
                            "(about 6 minutes) or give --ls-bin")
    if data.exists() and (not data.is_dir() or any(data.iterdir())):
        raise LabelingError(f"--data {data} exists and is not an empty folder; the server starts on a fresh data folder: "
                            "choose another --data (LS_DATA=... for make), or remove that one if its projects can go")
    data.mkdir(parents=True, exist_ok=True)
    token, password = secrets.token_hex(20), secrets.token_urlsafe(12)
    argv, env = start_command(ls_bin, data.resolve(), port, token, password)
    logfile = data / LOG_FILE
    with open(logfile, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    t0 = last = time.monotonic()
    log(f"starting Label Studio on {url} (data {data}, log {logfile}); the first start migrates its database: about "
        "3.5 minutes on a loaded 2-core machine, 20 s on an idle one")
    try:
        while True:
            try:
                Client(url, token, timeout=5).request("GET", "/api/projects")
                break
            except LabelingError:
                pass
            now = time.monotonic()
            if proc.poll() is not None:
                raise LabelingError(f"Label Studio exited with status {proc.returncode} while starting: "
                                    f"{_last_line(logfile) or 'no output'} (whole log: {logfile})")
            if now - t0 > timeout_s:
                raise LabelingError(f"Label Studio did not answer on {url} within {timeout_s:.0f} s: "
                                    f"{_last_line(logfile) or 'no output'} (log {logfile}); on a busy machine raise "
                                    "--timeout")
            if now - last >= every_s:
                last = now
                log(f"  still starting ({now - t0:.0f} s): {_last_line(logfile) or '(no output yet)'}")
            time.sleep(min(1.0, every_s))
    except BaseException:
        stop(proc)
        raise
    login = {"url": url, "token": token, "user": REVIEWER, "password": password, "data": str(data), "log": str(logfile),
             "started_s": round(time.monotonic() - t0, 1)}
    path = data / LOGIN_FILE
    path.write_text(json.dumps(login, indent=1) + "\n")
    path.chmod(0o600)
    return proc, login


def login_lines(login: dict[str, str]) -> list[str]:
    """What to print once the server is up: the URL, the browser account, the variables the engine reads."""
    return [f"Label Studio is up after {login['started_s']:.0f} s: {login['url']}",
            f"  browser login: {login['user']} / {login['password']}",
            f"  API token: {login['token']}",
            f"  export {URL_ENV}={login['url']} {TOKEN_ENV}={login['token']}",
            f"  (kept in {Path(login['data']) / LOGIN_FILE}; then `hydranet engine label --backend label-studio ...`, "
            "docs/labeling.md); Ctrl-C stops the server"]
