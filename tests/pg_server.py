"""A throwaway PostgreSQL server for the catalog's PostgreSQL tests (tests/test_engine_postgres.py,
tests/faults/test_faults_postgres.py): initdb into a fresh folder under pytest's tmp dir, `postgres` on 127.0.0.1
on a free port (unix socket in the data folder), password login (scram-sha-256) for user `hydranet`; stopped
(fast shutdown) when the module's tests are done. Each pytest-xdist worker starts its own. initdb and postgres
refuse to run as root: as root, both run as the unprivileged `postgres` (or `nobody`) user, which owns the folder.
Skipped, with the reason, where the binaries or psycopg are missing."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

USER, PASSWORD = "hydranet", "hydranet-test"


def binary(name: str) -> str | None:
    """`name` on PATH, else from Debian's versioned folder (/usr/lib/postgresql/<v>/bin)."""
    found = shutil.which(name) or sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found if isinstance(found, str) else (found[-1] if found else None)


def _runner() -> pwd.struct_passwd | None:
    """The user the server runs as: None (this one) unless this is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.skip("running as root and no unprivileged user (postgres, nobody) to run the PostgreSQL server as")


def _hand_over(folder: Path, user: pwd.struct_passwd | None) -> None:
    """`folder` owned by the server's user, and every folder above it searchable (o+x, never listable) by it."""
    if user is None:
        return
    os.chown(folder, user.pw_uid, user.pw_gid)
    for p in folder.parents:
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(p, mode | stat.S_IXOTH)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, folder: Path):
        import psycopg

        self.folder = folder
        user = _runner()
        _hand_over(folder, user)
        as_user = {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}
        (folder / "pw").write_text(PASSWORD + "\n")
        if user is not None:
            os.chown(folder / "pw", user.pw_uid, user.pw_gid)
        subprocess.run([binary("initdb"), "-D", str(folder / "data"), "-U", USER, f"--pwfile={folder / 'pw'}", "-N",
                        "--auth-local=trust", "--auth-host=scram-sha-256", "--locale=C", "--encoding=UTF8"],
                       check=True, capture_output=True, env=env, cwd=folder, **as_user)
        for _ in range(5):  # a port taken between _free_port and the bind: another one
            self.port = _free_port()
            self.log = open(folder / "server.log", "ab")  # noqa: SIM115 - open while the server runs
            self.proc = subprocess.Popen([binary("postgres"), "-D", str(folder / "data"), "-h", "127.0.0.1", "-p", str(self.port),
                                          "-k", str(folder), "-F", "-c", "max_connections=40", "-c", "shared_buffers=16MB"],
                                         stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=folder, **as_user)
            deadline = time.monotonic() + 60
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:
                    psycopg.connect(self.url, connect_timeout=2).close()
                    return
                except psycopg.OperationalError:
                    time.sleep(0.2)
            self.stop()
        raise RuntimeError(f"PostgreSQL did not start; see {folder / 'server.log'}")

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown: no wait for clients
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def skip_reason() -> str | None:
    try:
        import psycopg  # noqa: F401
    except ModuleNotFoundError:
        return "the PostgreSQL catalog needs psycopg (pip install '.[engine]')"
    missing = [b for b in ("initdb", "postgres") if binary(b) is None]
    return f"PostgreSQL's {' and '.join(missing)} not installed (Debian: apt-get install postgresql)" if missing else None


@pytest.fixture(scope="module")
def postgres(tmp_path_factory) -> Server:
    """A running server for the module's tests (its `url` logs in with the password)."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    server = Server(tmp_path_factory.mktemp("postgres"))
    yield server
    server.stop()
