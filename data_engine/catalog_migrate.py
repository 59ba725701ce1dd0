"""Move a catalog file onto a lake: `hydranet engine catalog migrate --from catalog.db --to DIR`.

The new folder is built beside DIR (DIR.tmp-<pid>) and renamed into place only once verified, so a kill
leaves the source untouched and no half catalog. Steps: the source is copied with SQLite's backup API (the
source file is never written; the copy is upgraded to the current schema by `Catalog`), every done clip's
signals, predictions and embeddings become its frames part, every offline column and trigger version its
part, the copied per-frame tables are emptied; then every table is compared with the source through the
Catalog API: row counts and a SHA-256 over the rows (values exact: floats as stored, embeddings as bytes).
A difference is a `LakeError` naming the table, and nothing is left at DIR.
"""
from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from data_engine import lake_catalog as lk
from data_engine.catalog import TABLES, Catalog
from data_engine.lake import DB_FILE, LakeError, create, write_frames_part
from data_engine.signals import SIGNALS
from hydranet.io import atomic_path

PER_FRAME = ("signals", "embeddings", "offline_signals", "trigger_hits")  # the tables that move into parts
FRAME_COLUMNS = ("frame_id", "clip", "idx", "status", "error", *SIGNALS, "per_camera", "predictions")


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
            out[t] = _digest(cat.db.execute(f"SELECT * FROM {t} ORDER BY rowid"))
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


def migrate(src: str | Path, out: str | Path) -> dict[str, Any]:
    """Copy the catalog file `src` into a new lake catalog folder `out`, verified; {"out", "counts", "parts"}."""
    src, out = Path(src), Path(out)
    if not src.is_file():
        raise LakeError(f"--from {src} is not a catalog file; give the catalog.db to move")
    if out.exists():
        raise LakeError(f"--to {out} exists; give a new folder for the lake catalog")
    with Catalog(src) as old:  # one-line errors for a file that is not a catalog; an older schema is upgraded on read
        want = fingerprint(old)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        create(tmp, "lake")
        with contextlib.closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as s, \
                contextlib.closing(sqlite3.connect(str(tmp / DB_FILE))) as d:
            s.backup(d)
        with Catalog(tmp) as cat:
            parts = _write_parts(cat, Catalog(src))
            with cat.transaction():
                for t in PER_FRAME:
                    cat.db.execute(f"DELETE FROM {t}")
            cat.db.execute("VACUUM")
            got = fingerprint(cat)
        bad = [t for t in want if want[t] != got[t]]
        if bad:
            t = bad[0]
            raise LakeError(f"migrate {src} -> {out}: table {t} differs after the move ({want[t][0]} rows in the source, "
                            f"{got[t][0]} in the lake, or their checksums); nothing was written at {out}")
    # the lake's folder name is in no part (parts name their lake by id), so the rename keeps it whole
    return {"out": out, "counts": {t: n for t, (n, _) in want.items()}, "parts": parts}


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
