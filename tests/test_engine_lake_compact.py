"""Compaction of a lake catalog's frames parts (`Lake.compact`, `hydranet engine catalog compact`, the end of
`engine shadow`): blocks answer exactly what the clip parts answered (and what the SQLite catalog answers: every
query, every strategy's selection file byte for byte), a kill between a block and the removal of its clip parts
leaves nothing read twice, and a block that cannot be trusted is one line naming it."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from engine_catalogs import assert_same_answers, both_backends, mine_to_file

from data_engine.catalog import Catalog
from data_engine.lake import LakeError, block_path, frames_path
from data_engine.mining import STRATEGIES

pytest.importorskip("duckdb", reason="the lake backend needs the engine extra (duckdb)")
CLIPS = (1, 2, 3, 4)  # the fixture catalog: 4 clips of 10 frames, all done


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict[str, Path]:
    return both_backends(tmp_path_factory.mktemp("compact"))


def copy(lake: Path, tmp: Path) -> Path:
    shutil.copytree(lake, tmp / "lake")
    return tmp / "lake"


def files(lake: Path) -> list[str]:
    return sorted(p.name for p in (lake / "parts" / "frames" / "run=1").iterdir())


@pytest.mark.parametrize("rows, blocks, left", [(20, ["block=1-2", "block=3-4"], []), (25, ["block=1-3"], ["clip=4"]),
                                                (1000, [], ["clip=1", "clip=2", "clip=3", "clip=4"])])
def test_blocks_answer_what_the_clip_parts_did(both, tmp_path, rows, blocks, left):
    lake = copy(both["lake"], tmp_path)
    with Catalog(lake) as cat:
        got = cat.compact(1, rows)
    assert got == {"blocks": len(blocks), "clips": 4 - len(left), "removed": 4 - len(left)}
    assert files(lake) == sorted([f"{b}.parquet" for b in blocks] + [f"{c}.parquet" for c in left])
    assert_same_answers(both["sqlite"], lake)
    with Catalog(lake) as cat:  # a second compaction finds nothing new to gather
        assert cat.compact(1, rows) == {"blocks": 0, "clips": 0, "removed": 0}


def test_every_strategy_selects_the_same_files_after_compaction(both, tmp_path):
    lake = copy(both["lake"], tmp_path)
    with Catalog(lake) as cat:
        cat.compact(1, 25)
    for unit in ("frame", "clip"):
        for strategy in STRATEGIES:
            a = mine_to_file(both["sqlite"], strategy, unit, tmp_path / f"{strategy}-{unit}-sqlite.json")
            b = mine_to_file(lake, strategy, unit, tmp_path / f"{strategy}-{unit}-lake.json")
            assert a == b, f"{strategy} ({unit}) selects differently after compaction"


def test_a_kill_between_block_and_removal_reads_nothing_twice(both, tmp_path, capsys):
    lake = copy(both["lake"], tmp_path)
    with Catalog(lake) as cat:
        cat.compact(1, 20)
    for c in CLIPS:  # the clip parts back, as a compaction killed after its renames and before its unlinks leaves them
        shutil.copy(frames_path(both["lake"], 1, c), frames_path(lake, 1, c))
    assert_same_answers(both["sqlite"], lake)
    assert "no done marker" not in capsys.readouterr().err  # covered, not pending
    with Catalog(lake) as cat:
        assert cat.compact(1, 20) == {"blocks": 0, "clips": 0, "removed": 4}
    assert files(lake) == ["block=1-2.parquet", "block=3-4.parquet"]


def test_a_part_without_its_done_marker_is_not_compacted(both, tmp_path, capsys):
    lake = copy(both["lake"], tmp_path)
    db = sqlite3.connect(str(lake / "catalog.db"))
    db.execute("DELETE FROM shadow_clips WHERE clip_id = 2")  # the driver was killed before it committed clip 2
    db.commit()
    db.close()
    with Catalog(lake) as cat:
        assert cat.compact(1, 20) == {"blocks": 1, "clips": 2, "removed": 2}  # clips 1 and 3: done and in order
        assert len(cat.table(1, status=None)["frame_id"]) == 30
        assert "have no done marker and are ignored" in capsys.readouterr().err
        cat.commit_clip(1, 2)  # what a rerun of shadow does
        assert cat.compact(1, 20) == {"blocks": 1, "clips": 2, "removed": 2}
    assert files(lake) == ["block=1-3.parquet", "block=2-4.parquet"]
    assert_same_answers(both["sqlite"], lake)


def damaged(lake: Path, how: str) -> Path:
    block = block_path(lake, 1, [1, 2])
    if how == "truncated":
        block.write_bytes(block.read_bytes()[:200])
    elif how == "not done":
        db = sqlite3.connect(str(lake / "catalog.db"))
        db.execute("DELETE FROM shadow_clips WHERE clip_id = 1")
        db.commit()
        db.close()
    elif how == "twice":
        shutil.copy(block, block.with_name("block=1-9.parquet"))
    return block


@pytest.mark.parametrize("how, says", [("truncated", "is truncated or not Parquet"),
                                       ("not done", "holds clip 1 of shadow run 1, which the catalog does not mark done"),
                                       ("twice", "both hold clip 1 of run 1")])
def test_a_block_that_cannot_be_trusted_is_refused_naming_it(both, tmp_path, how, says):
    lake = copy(both["lake"], tmp_path)
    with Catalog(lake) as cat:
        cat.compact(1, 20)
    block = damaged(lake, how)
    with Catalog(lake) as cat, pytest.raises(LakeError, match=says) as e:
        cat.table(1)
    assert str(block) in str(e.value) and "\n" not in str(e.value)



def test_migrate_compacts_what_it_moves(both, tmp_path, monkeypatch):
    """`catalog migrate` writes clip parts, then compacts them as shadow would; its counts and checksums cover it."""
    import data_engine.lake as lake_mod
    from data_engine.catalog_migrate import migrate

    monkeypatch.setattr(lake_mod, "BLOCK_ROWS", 20)
    migrate(both["sqlite"], tmp_path / "moved")
    assert files(tmp_path / "moved") == ["block=1-2.parquet", "block=3-4.parquet"]
    assert_same_answers(both["sqlite"], tmp_path / "moved")


def test_a_reader_whose_listing_a_compaction_outdated_lists_again(both, tmp_path, monkeypatch):
    """A clip part listed by a reader, then removed by a compaction finishing before the read: read from the blocks."""
    from data_engine.lake import Lake

    lake = copy(both["lake"], tmp_path)
    query = Lake.query
    ran = []

    def compact_first(self, sql, parts):  # the compaction lands between this reader's listing and its read
        if not ran:
            ran.append(True)
            with Catalog(lake) as other:
                assert other.compact(1, 20)["blocks"] == 2
        return query(self, sql, parts)

    monkeypatch.setattr(Lake, "query", compact_first)
    with Catalog(lake) as cat:
        assert len(cat.table(1, status=None)["frame_id"]) == 40 and ran
    monkeypatch.undo()
    assert_same_answers(both["sqlite"], lake)
