"""Move a catalog file onto a lake: `hydranet engine catalog migrate --from catalog.db --to DIR [--postgres URL]`.

The new folder is built beside DIR (DIR.tmp-<pid>) and renamed into place only once verified, so a kill
leaves the source untouched and no half catalog. Steps: the source is copied with SQLite's backup API (the
source file is never written; the copy is upgraded to the current schema by `Catalog`), every done clip's
signals, predictions and embeddings become its frames part, every offline column and trigger version its
part, the copied per-frame tables are emptied; then every table is compared with the source through the
Catalog API: row counts and a SHA-256 over the rows (values exact: floats as stored, embeddings as bytes; each
transactional table's columns by name, its rows by its key columns, so the checksum is the same on SQLite and
PostgreSQL). A difference is a `LakeError` naming the table, and nothing is left at DIR.

With `--postgres URL` the lake's transactional tables live on that server (data_engine/catalog_pg.py): the server
is asked first (one line naming the URL when it does not answer or refuses the login; nothing written), the new
catalog's schema is made there and filled with the source's rows (ids kept, the identity counters moved past
them) instead of the file copy, and on any failure the schema is dropped with the folder.
"""
from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from data_engine import catalog_pg
from data_engine import lake_catalog as lk
from data_engine.catalog import Catalog
from data_engine.catalog_schema import TABLES
from data_engine.lake import DB_FILE, LakeError, create, read_marker, write_frames_part
from data_engine.signals import SIGNALS
from hydranet.io import atomic_path

PER_FRAME = ("signals", "embeddings", "offline_signals", "trigger_hits")  # the tables that move into parts
FRAME_COLUMNS = ("frame_id", "clip", "idx", "status", "error", *SIGNALS, "per_camera", "predictions")
KEYS = catalog_pg.keys(TABLES)  # table -> its primary key columns: the row order of its checksum (SQLite's rowid is not
# PostgreSQL's, and a migrated table's columns may stand in another order: both are by name here)


def _ordered(cat: Catalog, table: str) -> str:
    """SELECT of every column of `table` (by name), its rows by its key (all columns where it has none, NULLs first)."""
    cols = sorted(cat.columns(table))
    key = KEYS.get(table) or tuple(f"{c} NULLS FIRST" for c in cols)
    return f"SELECT {', '.join(cols)} FROM {table} ORDER BY {', '.join(key)}"


def _digest(rows) -> tuple[int, str]:
    """(count, sha256) of rows, NaN and NULL alike (None), numpy scalars as Python values."""
    h, n = hashlib.sha256(), 0
    for r in rows:
        vals = [v.item() if isinstance(v, np.generic) else v for v in r]
        vals = [None if isinstance(v, float) and v != v else v for v in vals]
        h.update(repr(vals).encode())
        n += 1
    return n, h.hexdigest()


def fingerprint(cat: Catalog) -> dict[str, tuple[int, str]]:
    """{table: (rows, sha256)} of a catalog through its API: every transactional table as stored, and per shadow
    run its frames rows, embeddings (bytes), offline columns and trigger hits."""
    out = {}
    for t in TABLES:
        if t not in PER_FRAME:
            out[t] = _digest(cat.db.execute(_ordered(cat, t)))
    runs = [r[0] for r in cat.db.execute("SELECT id FROM shadow_runs ORDER BY id")]
    frames, emb, off, hits = [], [], [], []
    for run in runs:
        got = cat.rows(run, list(FRAME_COLUMNS))
        frames += [(run, *r) for r in zip(*(got[c].tolist() for c in FRAME_COLUMNS))]
        ids, vecs = cat._embedding_rows(run)
        emb += [(run, int(f), v.tobytes()) for f, v in zip(ids, vecs)]
        off += sorted((run, name, f, v) for name, col in cat.offline(run).items() for f, v in col.items())
        hits += [(run, *h) for h in sorted(cat.hit_rows(run))]
    out.update(signals=_digest(frames), embeddings=_digest(emb), offline_signals=_digest(off), trigger_hits=_digest(hits))
    return out


def migrate(src: str | Path, out: str | Path, postgres: str | None = None) -> dict[str, Any]:
    """Copy the catalog file `src` into a new lake catalog folder `out` (its transactional tables on the PostgreSQL
    server `postgres`, a URL, when given), verified; {"out", "counts", "parts"}."""
    src, out = Path(src), Path(out)
    if not src.is_file():
        raise LakeError(f"--from {src} is not a catalog file; give the catalog.db to move")
    if out.exists():
        raise LakeError(f"--to {out} exists; give a new folder for the lake catalog")
    with Catalog(src) as old:  # one-line errors for a file that is not a catalog; an older schema is upgraded on read
        want = fingerprint(old)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        create(tmp, "lake", postgres)  # a server that does not answer: one line, before anything is written
        try:
            if postgres is None:
                with contextlib.closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as s, \
                        contextlib.closing(sqlite3.connect(str(tmp / DB_FILE))) as d:
                    s.backup(d)
            with Catalog(tmp) as cat:
                if postgres is not None:
                    _copy_tables(cat, src)
                parts = _write_parts(cat, Catalog(src))
                with cat.transaction():
                    for t in PER_FRAME:
                        cat.db.execute(f"DELETE FROM {t}")
                if postgres is None:
                    cat.db.execute("VACUUM")
                got = fingerprint(cat)
            bad = [t for t in want if want[t] != got[t]]
            if bad:
                t = bad[0]
                raise LakeError(f"migrate {src} -> {out}: table {t} differs after the move ({want[t][0]} rows in the source, "
                                f"{got[t][0]} in the lake, or their checksums); nothing was written at {out}")
        except BaseException:
            if postgres is not None and (tmp / "catalog.json").is_file():  # the half-filled schema goes with the folder
                catalog_pg.drop_schema(postgres, read_marker(tmp)["postgres"]["schema"])
            raise
    # the lake's folder name is in no part (parts name their lake by id), so the rename keeps it whole
    return {"out": out, "counts": {t: n for t, (n, _) in want.items()}, "parts": parts}


def _copy_tables(cat: Catalog, src: Path) -> None:
    """Every transactional table's rows of the catalog file `src` into `cat` (on PostgreSQL), parents first (TABLES
    order), in one transaction; ids as they were, the server's identity counters then past them."""
    with contextlib.closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as old, cat.transaction():
        for t in TABLES:
            if t in PER_FRAME:
                continue
            cols = [r[1] for r in old.execute(f"PRAGMA table_info({t})")]
            rows = old.execute(f"SELECT {', '.join(cols)} FROM {t} ORDER BY {', '.join(KEYS.get(t) or cols)}").fetchall()
            cat.db.executemany(f"INSERT INTO {t} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", rows)
            if KEYS.get(t) == ("id",):
                cat.db.execute(f"SELECT setval(pg_get_serial_sequence('{t}', 'id'), (SELECT COALESCE(max(id), 0) + 1 FROM {t}), "
                               "false)")


def _write_parts(cat: Catalog, old: Catalog) -> int:
    """Every per-frame row of `old` (the source, read through SQLite) as parts of `cat`'s lake; the count of parts."""
    lake, n = cat.lake, 0
    with old:
        for run, clip_id, name in cat.db.execute("SELECT sc.run_id, sc.clip_id, c.name FROM shadow_clips sc JOIN clips c "
                                                 "ON sc.clip_id = c.id ORDER BY 1, 2").fetchall():
            idx = dict(old.db.execute("SELECT id, idx FROM frames WHERE clip_id = ?", (clip_id,)))
            got = old.rows(run, list(FRAME_COLUMNS), frame_ids=idx)
            ids, vecs = old._embedding_rows(run)
            at = {int(f): k for k, f in enumerate(ids)}
            rows = [{"frame_id": f, "status": got["status"][k], "error": got["error"][k],
                     "signals": {s: got[s][k] for s in SIGNALS},
                     "per_camera": got["per_camera"][k], "predictions": got["predictions"][k],  # JSON text, as stored
                     "embedding": vecs[at[f]] if f in at else None}
                    for k, f in enumerate(got["frame_id"].tolist())]
            write_frames_part(lk.lake_ref(lake, run), clip_id, name, idx, rows)
            n += 1
        for run in [r[0] for r in cat.db.execute("SELECT id FROM shadow_runs ORDER BY id")]:
            cat.compact(run)  # full blocks, as engine shadow leaves them (the fingerprint below checks them too)
            for col, values in old.offline(run).items():
                f = sorted(values)
                lk.write_offline(cat.db, lake, run, f, {col: [values[i] for i in f]}, [])
                n += 1
            by_version: dict[tuple[str, int], list] = {}
            for t, v, f, s in old.hit_rows(run):
                by_version.setdefault((t, v), []).append((f, s))
            for (t, v), hits in by_version.items():
                lk.write_hits(lake, t, v, run, hits)
                n += 1
    # write_offline replaced the sources' models with []: the copied rows are the truth, put them back
    for run, name, models, created in old_sources(old.path):
        cat.db.execute("UPDATE offline_sources SET models = ?, created = ? WHERE run_id = ? AND name = ?",
                       (models, created, run, name))
    return n


def old_sources(path: Path) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return db.execute("SELECT run_id, name, models, created FROM offline_sources").fetchall()
