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
from engine_catalogs import assert_same_answers, both_backends, mine_to_file, write_fixture_catalog

from data_engine.catalog import Catalog
from data_engine.catalog_migrate import fingerprint, migrate
from data_engine.lake import LakeError, create, frames_path, read_marker
from data_engine.mining import STRATEGIES
from data_engine.triggers import build_triggers, fire_all

pytest.importorskip("duckdb", reason="the lake backend needs the engine extra (duckdb)")


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> dict[str, Path]:
    return both_backends(tmp_path_factory.mktemp("lake"))


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
    assert_same_answers(both["sqlite"], both["lake"])


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


def _clustered_pool(seed: int = 0, clusters: int = 50, rare: int = 10, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(unit rows, cluster of each row): `clusters` tight clusters, the first `rare` of them 8 rows, the rest 300."""
    rng = np.random.default_rng(seed)
    label = np.repeat(np.arange(clusters), np.where(np.arange(clusters) < rare, 8, 300))
    e = rng.normal(size=(clusters, dim))[label] + rng.normal(scale=0.15, size=(len(label), dim))
    return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32), label


def _coverage_radius(emb: np.ndarray, picks) -> float:
    """The largest distance of any row to its nearest pick (what k-center greedy minimises, within a factor 2)."""
    return float(np.sqrt(max(2 - 2 * float((emb @ emb[list(picks)].T).max(1).min()), 0)))


def test_k_center_through_a_ball_is_k_center():
    """With an exact ball (every row within r of the pick, float64), k_center_ann picks exactly what k_center_greedy
    picks, distances included: confining each update to the ball loses nothing; with a time gap rule too."""
    from data_engine.mining import gap_rule, k_center_ann, k_center_greedy

    rng = np.random.default_rng(1)
    e = rng.normal(size=(600, 8))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    X = e.astype(np.float64)

    def exact_ball(row, r):
        dist = np.sqrt(np.maximum(2 - 2 * X @ X[row], 0))
        rows = np.flatnonzero(dist < r)
        return rows, dist[rows]

    pool = {"clip": np.asarray([f"c{i // 60}" for i in range(600)], object), "t_s": np.arange(600) % 60 * 0.1}
    for near in (None, gap_rule(pool, 0.5)):
        ref, ref_d = k_center_greedy(e, 40, near=near)
        got, got_d = k_center_ann(e, 40, exact_ball, near)
        assert got == ref and np.allclose(got_d, ref_d, atol=1e-5)


def test_k_center_through_the_ann_index_covers_as_exact():
    """Diversity through the FAISS index (range search over 64 of ~300 lists) on 12,080 frames in 50 clusters, 10 of
    them rare (8 frames): it finds every cluster, as exact k-center does (random finds about 36), and its coverage
    radius is within 5% of exact's."""
    pytest.importorskip("faiss", reason="the ANN index needs the engine extra (faiss-cpu)")
    from data_engine.ann import build
    from data_engine.mining import index_ball, k_center_ann, k_center_greedy

    e, label = _clustered_pool()
    ids = np.arange(len(e)) * 3 + 7  # frame ids are not rows
    exact, _ = k_center_greedy(e, 80)
    approx, _ = k_center_ann(e, 80, index_ball(build(e, ids), ids, e))
    rand = np.random.default_rng(0).choice(len(e), 80, replace=False)
    assert len(set(approx)) == 80  # distinct picks
    assert len(set(label[exact])) == len(set(label[approx])) == 50 > len(set(label[rand]))
    r_exact, r_ann, r_rand = (_coverage_radius(e, p) for p in (exact, approx, rand))
    assert r_ann <= 1.05 * r_exact and r_rand > 2 * r_exact, (r_exact, r_ann, r_rand)


def test_mine_diversity_uses_the_lake_index_on_a_large_pool(tmp_path, monkeypatch):
    """`mine(search="ann")` on a lake catalog selects through the run's index (built on first use) and says so in the
    selection (params.search; an exact selection has no such key, so its file is as before); search "auto" uses it
    only on a lake catalog's pool of >= ANN_MIN_POOL frames; clips and unknown searches are refused."""
    pytest.importorskip("faiss", reason="the ANN index needs the engine extra (faiss-cpu)")
    import dataclasses
    import json

    from data_engine import mining
    from data_engine.ann import index_files
    from data_engine.config import EngineConfig
    from data_engine.mining import MiningError, mine

    cfg = EngineConfig()
    cfg = dataclasses.replace(cfg, mining=dataclasses.replace(cfg.mining, min_gap_s=0.0))
    lake = write_fixture_catalog(create(tmp_path / "lake", "lake"), clips=12, frames=100)
    db = write_fixture_catalog(tmp_path / "catalog.db", clips=12, frames=100)
    exact = mine(lake, 20, "diversity", cfg, name="exact")
    approx = mine(lake, 20, "diversity", cfg, name="ann", search="ann")
    assert "search" not in exact and approx["search"] == {"method": "ann", "nprobe": 64}
    with Catalog(lake) as cat:
        assert index_files(cat, 1)[0].is_file()
        params = json.loads(cat.db.execute("SELECT params FROM selections WHERE name = 'ann'").fetchone()[0])
        assert params["search"]["method"] == "ann"
        ids, emb = cat.embeddings(1)
    row = {int(f): i for i, f in enumerate(ids)}
    picks = [[row[it["frame_id"]] for it in sel["items"]] for sel in (exact, approx)]
    assert len(set(picks[1])) == 20
    assert _coverage_radius(emb, picks[1]) <= 1.1 * _coverage_radius(emb, picks[0])
    monkeypatch.setattr(mining, "ANN_MIN_POOL", 1000)
    assert "search" in mine(lake, 5, "diversity", cfg, name="auto-lake")  # 1,199 ok frames: the index
    assert "search" not in mine(db, 5, "diversity", cfg, name="auto-file")  # a catalog file: exact
    monkeypatch.setattr(mining, "ANN_MIN_POOL", 1_000_000)
    assert "search" not in mine(lake, 5, "diversity", cfg, name="auto-small")
    with pytest.raises(MiningError, match="indexes frames, not whole clips"):
        mine(lake, 2, "diversity", cfg, "clip", search="ann")
    with pytest.raises(MiningError, match="unknown search 'fast'"):
        mine(lake, 2, "diversity", cfg, search="fast")
    # the CLI: `engine mine --search ann` is mine(search="ann"); a whole-clip ANN search is one line, exit 2
    from hydranet.cli.main import main

    out = tmp_path / "cli.json"
    assert main(["engine", "mine", "--catalog", str(lake), "--budget", "20", "--strategy", "diversity", "--search", "ann",
                 "--set", "mining.min_gap_s=0", "--name", "cli-ann", "--out", str(out)]) == 0
    assert [it["frame_id"] for it in json.loads(out.read_text())["items"]] == [it["frame_id"] for it in approx["items"]]
    assert main(["engine", "mine", "--catalog", str(lake), "--budget", "2", "--strategy", "diversity", "--unit", "clip",
                 "--search", "ann", "--out", str(tmp_path / "clip.json")]) == 2
    assert not (tmp_path / "clip.json").exists()


def test_ray_data_reads_the_done_parts_as_duckdb_does(both, tmp_path, capsys):
    """`lake_catalog.ray_frames`: Ray Data reads the lake's parts natively; its rows (sorted by frame id) equal the
    DuckDB query's (`Catalog.rows`), column for column, embeddings included; a part without its done marker is
    left out and reported, as on the DuckDB side."""
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'ray[data]', in the dev extra)")
    import shutil

    import ray

    from data_engine.catalog_migrate import FRAME_COLUMNS
    from data_engine.lake_catalog import ray_frames

    lake = tmp_path / "lake"
    shutil.copytree(both["lake"], lake)
    db = sqlite3.connect(str(lake / "catalog.db"))
    db.execute("DELETE FROM shadow_clips WHERE clip_id = 3")  # the driver killed before clip 3's marker
    db.commit()
    db.close()
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with Catalog(lake) as cat:
            capsys.readouterr()
            want = cat.rows(1, list(FRAME_COLUMNS))
            assert "no done marker" in capsys.readouterr().err
            ds = ray_frames(cat.db, cat.lake, 1, [*FRAME_COLUMNS, "embedding"])
            got = sorted(ds.take_all(), key=lambda r: r["frame_id"])
            ids, emb = cat._embedding_rows(1)
    finally:
        if started:
            ray.shutdown()

    def plain(v):  # a value as compared: nulls (None, NaN) alike, numpy scalars as Python values
        v = v.item() if isinstance(v, np.generic) else v
        return None if v is None or isinstance(v, float) and v != v else v

    assert len(want["frame_id"]) == len(got) == 30 and not {r["frame_id"] for r in got} & set(range(21, 31))  # clip 3
    for c in FRAME_COLUMNS:
        assert [plain(v) for v in want[c].tolist()] == [plain(r[c]) for r in got], c
    vecs = {int(r["frame_id"]): r["embedding"] for r in got if r["embedding"] is not None}
    assert sorted(vecs) == ids.tolist()
    assert all(np.asarray(vecs[int(f)], np.float32).tobytes() == v.tobytes() for f, v in zip(ids, emb))
