"""Fault rows of the PostgreSQL catalog (`hydranet engine catalog create --postgres URL`, data_engine/catalog_pg.py),
against a real server started for the module (tests/pg_server.py): a URL that does not answer, refuses the password
or is not a URL (create writes nothing; nor does `catalog migrate --postgres`, which otherwise moves a file onto the
server), a catalog whose server is gone or refuses its login, a marker whose "postgres" entry is damaged, and on a
lake whose done markers live on the server: a part without its marker (ignored and reported; a rerun of shadow
commits it without rewriting it). One row per case, through the CLI."""
from __future__ import annotations

from pathlib import Path

import pytest
from faultlib import ENGINE, Case, Env, edit_json, mine, params, run_case
from pg_server import postgres  # noqa: F401 - the module's server (a fixture)

from data_engine.lake import frames_path, read_marker

pytest.importorskip("duckdb", reason="the lake backend needs the engine extra (duckdb)")
pytestmark = pytest.mark.usefixtures("engine_env")
PG: dict = {}  # the server's URL, for the rows


@pytest.fixture(scope="module", autouse=True)
def server(postgres):  # noqa: F811 - the fixture imported above
    PG["url"] = postgres.url
    PG["port"] = postgres.port


def url(**change) -> str:
    """The server's URL with its port or password changed."""
    u = PG["url"]
    if "port" in change:
        u = u.replace(f":{PG['port']}/", f":{change['port']}/")
    if "password" in change:
        u = u.replace(":hydranet-test@", f":{change['password']}@")
    return u


def shadowed(tmp: Path, env: Env) -> Path:
    """A lake catalog on the server, the engine's model shadowed over the fault dataset into it (its own schema)."""
    from hydranet.cli import main

    lake = tmp / "lake"
    assert main(["engine", "catalog", "create", "--out", str(lake), "--backend", "lake", "--postgres", PG["url"]]) == 0
    assert main([str(a) for a in shadow(tmp, env, lake)] + ["--workers", "1"]) == 0
    return lake


def with_url(tmp: Path, env: Env, new: str) -> Path:
    lake = shadowed(tmp, env)
    edit_json(lake / "catalog.json", lambda m: m["postgres"].update(url=new))
    return lake


def unmarked(tmp: Path, env: Env) -> Path:
    """The driver killed after the worker's part, before its done marker (the marker rows deleted on the server)."""
    import psycopg

    lake = shadowed(tmp, env)
    with psycopg.connect(PG["url"], autocommit=True) as db:
        db.execute(f'DELETE FROM "{read_marker(lake)["postgres"]["schema"]}".shadow_clips')
    (tmp / "mtime").write_text(str(frames_path(lake, 1, 1).stat().st_mtime_ns))
    return lake


def part_kept(tmp: Path) -> None:
    from data_engine.catalog import Catalog

    assert str(frames_path(tmp / "lake", 1, 1).stat().st_mtime_ns) == (tmp / "mtime").read_text(), "the rerun rewrote the part"
    with Catalog(tmp / "lake") as cat:
        assert cat.done_clips(1) == {1}


def shadow(tmp: Path, env: Env, catalog: Path) -> list:
    return ["engine", "shadow", "--onnx", ENGINE["model"], "--data", env.dataset, "--catalog", catalog, "--quiet"]


def create(tmp: Path, pg_url: str) -> list:
    return ["engine", "catalog", "create", "--out", tmp / "c", "--backend", "lake", "--postgres", pg_url]


def nothing_created(tmp: Path) -> None:
    assert not (tmp / "c").exists(), "create wrote a catalog folder for a server it could not use"


def migrate(tmp: Path, pg_url: str) -> list:
    """`catalog migrate` of a fixture catalog file onto a lake whose tables go to `pg_url`."""
    from engine_catalogs import write_fixture_catalog

    return ["engine", "catalog", "migrate", "--from", write_fixture_catalog(tmp / "src.db"), "--to", tmp / "m",
            "--postgres", pg_url]


def nothing_migrated(tmp: Path) -> None:
    assert not (tmp / "m").exists() and not list(tmp.glob("m.tmp-*")), "migrate left a folder for a server it could not use"


CASES = [
    Case("pg-create-no-answer", lambda t, e: create(t, url(port=1)),
         words=("127.0.0.1:1", "does not answer", "start the server", "--postgres"), check=nothing_created),
    Case("pg-create-wrong-password", lambda t, e: create(t, url(password="wrong-password")),
         words=("refuses the login", "password authentication failed", "hydranet:***@"), absent=("wrong-password",),
         check=nothing_created),
    Case("pg-create-not-a-url", lambda t, e: create(t, "not a url"),
         words=("not a url", "is not a PostgreSQL URL"), check=nothing_created),
    Case("pg-migrate-no-answer", lambda t, e: migrate(t, url(port=1)),
         words=("127.0.0.1:1", "does not answer", "start the server", "--postgres"), check=nothing_migrated),
    Case("pg-migrate-wrong-password", lambda t, e: migrate(t, url(password="wrong-password")),
         words=("refuses the login", "hydranet:***@"), absent=("wrong-password",), check=nothing_migrated),
    Case("pg-migrate-onto-the-server", lambda t, e: migrate(t, PG["url"]), status=0,
         stdout=("tables on PostgreSQL", "hydranet:***@", "counts and checksums verified")),
    Case("pg-catalog-server-gone", lambda t, e: mine(t, with_url(t, e, url(port=1)), "--budget", "1"),
         words=("127.0.0.1:1", "does not answer", "postgres.url", "catalog.json")),
    Case("pg-catalog-login-refused", lambda t, e: mine(t, with_url(t, e, url(password="wrong-password")), "--budget", "1"),
         words=("refuses the login", "postgres.url"), absent=("wrong-password",)),
    Case("pg-marker-damaged", lambda t, e: edit_json(shadowed(t, e) / "catalog.json", lambda m: m.update(postgres="x"))
         or mine(t, t / "lake", "--budget", "1"), words=("catalog.json", '"postgres" must be')),
    Case("pg-mine-through-the-server", lambda t, e: mine(t, shadowed(t, e), "--budget", "1"), status=0,
         stdout=("selected 1 frame(s) of 2",)),
    Case("pg-part-without-done-marker", lambda t, e: mine(t, unmarked(t, e), "--budget", "1"),
         words=("pool of 0",), warns=("no done marker", "clip=1.parquet", "ignored")),
    Case("pg-rerun-commits-the-part", lambda t, e: shadow(t, e, unmarked(t, e)), status=0,
         stdout=("0 of 1 clips shadowed now", "1 done before"), check=part_kept),
]


@pytest.mark.parametrize("case", params(CASES))
def test_postgres_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)

