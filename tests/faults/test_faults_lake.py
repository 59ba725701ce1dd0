"""Fault rows of the lake catalog (`hydranet engine catalog create --backend lake`, data_engine/lake.py): a truncated
part, a part of another schema version or of another catalog's lake, a part without a done marker (ignored and
reported; a rerun of shadow commits it without rewriting it), a folder that is not a catalog, a catalog folder
given again to create, a bad backend, a migration source that is not a catalog. One row per case, through the CLI."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from faultlib import ENGINE, Case, Env, junk, mine, params, run_case

from data_engine.lake import META_KEY, frames_path

pytest.importorskip("duckdb", reason="the lake backend needs the engine extra (duckdb)")
pytestmark = pytest.mark.usefixtures("engine_env")
LAKE: dict = {}  # the template: engine_env's model shadowed over the fault dataset into a lake folder


@pytest.fixture(scope="module", autouse=True)
def lake_template(engine_env, fault_env, tmp_path_factory):
    from hydranet.cli import main

    root = tmp_path_factory.mktemp("lake_faults")
    assert main(["engine", "catalog", "create", "--out", str(root / "lake"), "--backend", "lake"]) == 0
    assert main(["engine", "shadow", "--onnx", str(ENGINE["model"]), "--data", str(fault_env.dataset), "--catalog",
                 str(root / "lake"), "--quiet", "--workers", "1"]) == 0
    LAKE["dir"] = root / "lake"


def lake_copy(tmp: Path) -> Path:
    shutil.copytree(LAKE["dir"], tmp / "lake")
    return tmp / "lake"


def part(lake: Path) -> Path:
    return frames_path(lake, 1, 1)


def truncated(tmp: Path) -> Path:
    lake = lake_copy(tmp)
    data = part(lake).read_bytes()
    part(lake).write_bytes(data[: len(data) // 2])
    return lake


def with_footer(tmp: Path, **changes) -> Path:
    """The part rewritten with its footer's metadata changed (another schema version, another lake)."""
    import pyarrow.parquet as pq

    lake = lake_copy(tmp)
    t = pq.read_table(part(lake))
    meta = json.loads(t.schema.metadata[META_KEY.encode()])
    pq.write_table(t.replace_schema_metadata({META_KEY: json.dumps({**meta, **changes})}), part(lake))
    return lake


def unmarked(tmp: Path) -> Path:
    lake = lake_copy(tmp)
    db = sqlite3.connect(str(lake / "catalog.db"))
    db.execute("DELETE FROM shadow_clips")  # the driver killed after the worker's part, before its done marker
    db.commit()
    db.close()
    (tmp / "mtime").write_text(str(part(lake).stat().st_mtime_ns))
    return lake


def part_kept(tmp: Path) -> None:
    assert str(part(tmp / "lake").stat().st_mtime_ns) == (tmp / "mtime").read_text(), "the rerun rewrote the part"
    db = sqlite3.connect(str(tmp / "lake" / "catalog.db"))
    assert db.execute("SELECT count(*) FROM shadow_clips").fetchone()[0] == 1
    db.close()


def compacted(tmp: Path) -> Path:
    """A lake copy whose one clip part is compacted into a block, the block then truncated."""
    from data_engine.catalog import Catalog

    lake = lake_copy(tmp)
    with Catalog(lake) as cat:
        assert cat.compact(1, 1)["blocks"] == 1
    block = next((lake / "parts" / "frames" / "run=1").glob("block=*.parquet"))
    block.write_bytes(block.read_bytes()[:100])
    return lake


HELD: list = []


def held_lock(lake: Path) -> bool:
    """The catalog's lock taken as a running `engine shadow` holds it (flock is per open file: the CLI call must wait)."""
    import fcntl
    import os

    f = open(f"{lake}.lock", "a+")
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    f.write(f"{os.getpid()}\n")
    f.flush()
    HELD.append(f)
    return True


def release_held() -> None:
    while HELD:
        HELD.pop().close()


def compact(catalog: Path, *extra: str) -> list:
    return ["engine", "catalog", "compact", "--catalog", catalog, *extra]


def shadow(tmp: Path, env: Env, catalog: Path) -> list:
    return ["engine", "shadow", "--onnx", ENGINE["model"], "--data", env.dataset, "--catalog", catalog, "--quiet"]


CASES = [
    Case("lake-part-truncated", lambda t, e: mine(t, truncated(t), "--budget", "1"),
         words=("clip=1.parquet", "truncated", "delete it")),
    Case("lake-part-other-schema-version", lambda t, e: mine(t, with_footer(t, schema=99), "--budget", "1"),
         words=("clip=1.parquet", "lake schema 99", "update")),
    Case("lake-two-catalogs-one-lake", lambda t, e: mine(t, with_footer(t, lake="f" * 32), "--budget", "1"),
         words=("clip=1.parquet", "two catalogs write one lake")),
    Case("lake-part-without-done-marker", lambda t, e: mine(t, unmarked(t), "--budget", "1"),
         words=("pool of 0",), warns=("no done marker", "clip=1.parquet", "ignored")),
    Case("lake-rerun-commits-the-part", lambda t, e: shadow(t, e, unmarked(t)), status=0,
         stdout=("0 of 1 clips shadowed now", "1 done before"), check=part_kept),
    Case("lake-folder-not-a-catalog", lambda t, e: (t / "some").mkdir() or mine(t, t / "some", "--budget", "1"),
         words=("some", "not a catalog", "catalog create")),
    Case("lake-create-over-a-catalog", lambda t, e: ["engine", "catalog", "create", "--out", lake_copy(t), "--backend", "lake"],
         words=("is a catalog already", "new folder")),
    Case("lake-create-in-a-full-folder", lambda t, e: junk(t, "x") and ["engine", "catalog", "create", "--out", t],
         words=("not an empty folder",)),
    Case("lake-create-unknown-backend", lambda t, e: ["engine", "catalog", "create", "--out", t / "c", "--backend", "mongo"],
         words=("mongo", "sqlite", "lake")),
    Case("compact-a-catalog-file", lambda t, e: compact(ENGINE["catalog"]), words=("cat.db", "not a catalog folder", "lake")),
    Case("compact-rows-zero", lambda t, e: compact(lake_copy(t), "--rows", "0"), words=("--rows", "at least 1")),
    Case("compact-unknown-run", lambda t, e: compact(lake_copy(t), "--run", "9"), words=("9",)),
    Case("compact-a-sqlite-folder", lambda t, e: main_ok(["engine", "catalog", "create", "--out", t / "c"]) and compact(t / "c"),
         words=("not a lake",)),
    Case("lake-block-truncated", lambda t, e: mine(t, compacted(t), "--budget", "1"),
         words=("block=1-1.parquet", "truncated", "compacted block", "restore the parts folder")),
    Case("compact-locked-by-a-shadow", lambda t, e: held_lock(lake_copy(t)) and compact(t / "lake"),
         words=("lake", "in use by another process", "pid"), check=lambda t: release_held()),
    Case("lake-migrate-from-junk", lambda t, e: ["engine", "catalog", "migrate", "--from", junk(t, "j.db"), "--to", t / "l"],
         words=("j.db", "not a readable catalog"), check=lambda t: None if not (t / "l").exists() else pytest.fail("wrote --to")),
]


def main_ok(argv: list) -> bool:
    from hydranet.cli import main

    return main([str(a) for a in argv]) == 0


@pytest.mark.parametrize("case", params(CASES))
def test_lake_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_shadow_compacts_full_blocks_as_it_ends(tmp_path, fault_env, monkeypatch):
    """`engine shadow` on a lake gathers every full block as it ends (BLOCK_ROWS lowered to the one clip's rows)."""
    import data_engine.lake as lake_mod
    from data_engine.catalog import Catalog

    monkeypatch.setattr(lake_mod, "BLOCK_ROWS", 2)
    assert main_ok(["engine", "catalog", "create", "--out", tmp_path / "lake", "--backend", "lake"])
    assert main_ok(shadow(tmp_path, fault_env, tmp_path / "lake"))
    assert [p.name for p in (tmp_path / "lake" / "parts" / "frames" / "run=1").iterdir()] == ["block=1-1.parquet"]
    with Catalog(tmp_path / "lake") as got, Catalog(LAKE["dir"]) as ref:
        a, b = ref.table(1, status=None), got.table(1, status=None)
        assert len(b["frame_id"]) == 2 and a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
