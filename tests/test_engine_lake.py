"""The catalog's lake backend (data_engine/lake.py, lake_catalog.py): the same seeded fixture catalog written
through the Catalog API into an SQLite file and into a lake folder answers the same, and every mining strategy
writes byte-identical selection files on both; parts are whole, checked and committed by their done markers;
`catalog migrate` moves a file onto a lake, verified."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from engine_catalogs import mine_to_file, write_fixture_catalog, write_fixture_offline

from data_engine.catalog import Catalog
from data_engine.catalog_migrate import PER_FRAME, fingerprint, migrate
from data_engine.lake import LakeError, create, frames_path, read_marker
from data_engine.mining import STRATEGIES
from data_engine.triggers import build_triggers, fire_all

pytest.importorskip("duckdb", reason="the lake backend needs the engine extra (duckdb)")


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lake")
    db = write_fixture_catalog(root / "catalog.db")
    lake = write_fixture_catalog(create(root / "lake", "lake"))
    for p in (db, lake):
        write_fixture_offline(p)
    return {"sqlite": db, "lake": lake}


def test_folder_layout_and_parts(both):
    lake = both["lake"]
    assert read_marker(lake)["backend"] == "lake"
    parts = sorted((lake / "parts" / "frames" / "run=1").glob("*.parquet"))
    assert [p.name for p in parts] == [f"clip={c}.parquet" for c in range(1, 5)]  # one part per shadow task (clip)
    db = sqlite3.connect(str(lake / "catalog.db"))
    assert db.execute("SELECT count(*) FROM signals").fetchone()[0] == 0  # per-frame rows live in the parts only
    assert db.execute("SELECT count(*) FROM shadow_clips").fetchone()[0] == 4
    db.close()


def test_same_answers_on_both_backends(both):
    with Catalog(both["sqlite"]) as a, Catalog(both["lake"]) as b:
        assert a.latest_run() == b.latest_run() == 1
        ta, tb = a.table(1, status=None), b.table(1, status=None)
        assert ta.keys() == tb.keys()
        for k in ta:
            np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)
        for sig in ("flicker", "jitter"):
            for desc in (True, False):
                np.testing.assert_array_equal(np.stack(a.top(1, sig, 7, desc)), np.stack(b.top(1, sig, 7, desc)))
        ea, eb = a.embeddings(1), b.embeddings(1)
        assert np.array_equal(ea[0], eb[0]) and ea[1].tobytes() == eb[1].tobytes()
        assert a.predictions(1, ta["frame_id"]) == b.predictions(1, tb["frame_id"])
        oa, ob = a.offline(1), b.offline(1)
        assert oa.keys() == ob.keys() and all(np.allclose(list(oa[k].values()), list(ob[k].values()), equal_nan=True) for k in oa)
        fa, fb = fingerprint(a), fingerprint(b)
        assert all(fa[t] == fb[t] for t in PER_FRAME), [t for t in PER_FRAME if fa[t] != fb[t]]  # row for row


@pytest.mark.parametrize("unit", ["frame", "clip"])
def test_every_strategy_selects_byte_identical_files(both, tmp_path, unit):
    for strategy in STRATEGIES:
        files = [mine_to_file(path, strategy, unit, tmp_path / f"{strategy}-{unit}-{name}.json") for name, path in both.items()]
        assert files[0] == files[1], f"{strategy} ({unit}) selects differently on the lake"


def test_triggers_store_the_same_hits(both):
    triggers = build_triggers(None)
    got = [fire_all(p, triggers, None)[1] for p in both.values()]
    assert got[0] == got[1] and any(got[0].values())
    with Catalog(both["sqlite"]) as a, Catalog(both["lake"]) as b:
        assert a.hits(1) == b.hits(1) and a.hit_rows(1) == b.hit_rows(1)


def test_a_part_without_done_marker_is_ignored_and_reported(both, tmp_path, capsys):
    import shutil

    lake = tmp_path / "lake"
    shutil.copytree(both["lake"], lake)
    db = sqlite3.connect(str(lake / "catalog.db"))
    db.execute("DELETE FROM shadow_clips WHERE clip_id = 4")  # the driver was killed before it committed clip 4
    db.commit()
    db.close()
    before = frames_path(lake, 1, 4).stat()
    with Catalog(lake) as cat:
        table = cat.table(1, status=None)
        assert len(table["frame_id"]) == 30 and not set(table["clip"]) & {"clip_00003"}  # never read as done
        assert 4 not in cat.done_clips(1)
    assert "1 lake part(s) of shadow run 1 have no done marker and are ignored" in capsys.readouterr().err
    with Catalog(lake) as cat:  # what a rerun of shadow does first: the worker's part is committed, not rewritten
        cat.commit_clip(1, 4)
        assert len(cat.table(1, status=None)["frame_id"]) == 40
    after = frames_path(lake, 1, 4).stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)


def test_bad_parts_are_one_line_errors(both, tmp_path):
    import shutil

    def copy(name: str) -> Path:
        shutil.copytree(both["lake"], tmp_path / name)
        return tmp_path / name

    trunc = copy("trunc")
    p = frames_path(trunc, 1, 2)
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with Catalog(trunc) as cat, pytest.raises(LakeError, match=r"clip=2.parquet is truncated or not Parquet"):
        cat.table(1)
    other = copy("other")
    donor = write_fixture_catalog(create(tmp_path / "donor", "lake"), seed=9)  # another catalog's lake
    shutil.copy(frames_path(donor, 1, 3), frames_path(other, 1, 3))
    with Catalog(other) as cat, pytest.raises(LakeError, match=r"belongs to lake .* two catalogs write one lake"):
        cat.table(1)
    with pytest.raises(LakeError, match="is a folder but not a catalog"):
        Catalog(tmp_path / "donor" / "parts")
    with pytest.raises(LakeError, match="is a catalog already"):
        create(tmp_path / "donor", "lake")


def test_stale_temp_of_a_killed_worker_is_removed(both, tmp_path):
    from data_engine.lake import Lake

    lake_dir = tmp_path / "l"
    import shutil

    shutil.copytree(both["lake"], lake_dir)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid that is gone
    stale = frames_path(lake_dir, 1, 1).with_name(f"clip=9.parquet.tmp-{pid}")
    stale.write_bytes(b"half a part")
    Lake(lake_dir, read_marker(lake_dir)["lake_id"]).remove_stale(1)
    assert not stale.exists()


def test_migrate_moves_every_row_verified(both, tmp_path):
    with Catalog(both["sqlite"]) as a:
        versions = len({(t, v) for t, v, _, _ in a.hit_rows(1)})
    r = migrate(both["sqlite"], tmp_path / "moved")
    assert r["counts"]["signals"] == 40 and r["parts"] == 4 + 2 + versions  # clips, offline columns, trigger versions
    with Catalog(both["sqlite"]) as a, Catalog(tmp_path / "moved") as b:
        assert fingerprint(a) == fingerprint(b)
        assert b.lake is not None
    with pytest.raises(LakeError, match="exists; give a new folder"):
        migrate(both["sqlite"], tmp_path / "moved")
    assert not list(tmp_path.glob("*.tmp-*"))


def test_ann_index_recall_growth_and_refusal(tmp_path):
    """An IVF index over 1,200 frames in 12 clips: recall@50 against exact search >= 0.95; an index older than the
    parts (clips committed since) grows to hold them; an index of another catalog is refused."""
    pytest.importorskip("faiss", reason="the ANN index needs the engine extra (faiss-cpu)")
    import json

    from data_engine.ann import AnnError, index_files, open_index, recall_at, search
    from data_engine.mining import similar

    lake = write_fixture_catalog(create(tmp_path / "lake", "lake"), clips=12, frames=100)
    db = sqlite3.connect(str(lake / "catalog.db"))
    db.execute("DELETE FROM shadow_clips WHERE clip_id > 10")  # two clips' markers come later
    db.commit()
    db.close()
    with Catalog(lake) as cat:
        index, info = open_index(cat, 1)
        assert info["built"] and index.ntotal == 1000 - 1  # one corrupt frame has no embedding
        ids, emb = cat.embeddings(1)
        recalls = []
        for q in range(0, len(ids), 50):
            exact = np.lexsort((ids, -(emb @ emb[q])))[:50]
            recalls.append(recall_at(ids[exact], search(index, emb[q], 50)[0]))
        assert np.mean(recalls) >= 0.95, np.mean(recalls)
        cat.commit_clip(1, 11)
        cat.commit_clip(1, 12)
    notes: list[str] = []
    res = similar(lake, 5, 10, ann=True, notes=notes)
    assert notes == ["ANN index of run 1: added 200 frames of 2 clip(s)"] and res[0]["frame_id"] == 5 and len(res) == 10
    exact = similar(lake, 5, 10)
    assert len({r["frame_id"] for r in res} & {r["frame_id"] for r in exact}) >= 9
    with Catalog(lake) as cat:
        side = index_files(cat, 1)[1]
    side.write_text(json.dumps({**json.loads(side.read_text()), "catalog": "another"}))
    with pytest.raises(AnnError, match="not an index of this catalog's run 1"):
        similar(lake, 5, 10, ann=True)
