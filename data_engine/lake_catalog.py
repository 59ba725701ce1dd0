"""The Catalog API's per-frame tables on a lake (data_engine/lake.py): what `data_engine.catalog.Catalog` calls
when its folder's backend is "lake". Each function takes the catalog's SQLite connection (the transactional
tables: clips, frames, the done markers in `shadow_clips`, `offline_sources`) and its `Lake` (the parts), and
answers exactly what the SQLite tables would: same columns, same order (frame id), NaN for a missing value.
`ray_frames` opens the same done parts as a Ray Data dataset, for a cluster.
"""
from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from data_engine.lake import Lake, LakeError, by_frame, column, embedding_matrix, frames_path, frames_schema, \
    hits_path, need, offline_path, write_frames_part, write_part
from data_engine.signals import SIGNALS

INTS = ("frame_id", "idx", "cameras", "dim")
FLOATS = (*SIGNALS, "value", "score")


def typed(name: str, values) -> np.ndarray:
    """A column as the Catalog returns it: int64 ids, float64 values (None -> NaN), objects otherwise."""
    if name in INTS:
        return np.asarray(values, np.int64)
    if name in FLOATS:
        return np.array(values, np.float64)
    return np.asarray(values, object)


def lake_ref(lake: Lake, run_id: int) -> dict[str, Any]:
    """What a shadow task carries to write its part: the catalog folder, its lake id, the run."""
    return {"root": str(lake.root), "id": lake.id, "run_id": int(run_id)}


# -- shadow: parts and done markers ----------------------------------------------------------------------
def write_clip(db: sqlite3.Connection, lake: Lake, run_id: int, clip_id: int, rows: Sequence[Mapping[str, Any]]) -> None:
    """A clip written in this process: its part, then its done marker (nothing when it is done already)."""
    if db.execute("SELECT 1 FROM shadow_clips WHERE run_id = ? AND clip_id = ?", (run_id, clip_id)).fetchone():
        return
    name = db.execute("SELECT name FROM clips WHERE id = ?", (clip_id,)).fetchone()[0]
    idx = dict(db.execute("SELECT id, idx FROM frames WHERE clip_id = ?", (clip_id,)).fetchall())
    write_frames_part(lake_ref(lake, run_id), clip_id, name, idx, rows)
    commit_clip(db, lake, run_id, clip_id)


def part_ready(lake: Lake, run_id: int, clip_id: int) -> dict | None:
    """The checked footer of a clip's part when a worker wrote it (None when there is none)."""
    path = frames_path(lake.root, run_id, clip_id)
    return lake.part_meta(path) if path.is_file() else None


def commit_clip(db: sqlite3.Connection, lake: Lake, run_id: int, clip_id: int) -> dict:
    """The driver's half: the clip's part must exist and be whole (its footer names this lake, run and clip, and
    its row count), then its done marker is committed (one statement: atomic; a second commit does nothing)."""
    path = frames_path(lake.root, run_id, clip_id)
    meta = lake.part_meta(path)
    if meta.get("table") != "frames" or meta.get("run") != run_id or meta.get("clip_id") != clip_id \
            or meta.get("rows") != meta["num_rows"]:
        raise LakeError(f"lake part {path} holds {meta.get('table')} rows of run {meta.get('run')} clip {meta.get('clip_id')} "
                        f"({meta['num_rows']} of {meta.get('rows')} rows), not clip {clip_id} of run {run_id}; delete it and "
                        "rerun `hydranet engine shadow`")
    db.execute("INSERT OR IGNORE INTO shadow_clips (run_id, clip_id, frames, corrupt, finished) VALUES (?, ?, ?, ?, ?)",
               (run_id, clip_id, int(meta["rows"]), int(meta["not_ok"]), time.time()))
    return meta


def latest_ok_run(db: sqlite3.Connection):
    """The newest run with a frame that shadowed fine: a done clip with fewer not-ok frames than frames."""
    return db.execute("SELECT r.id FROM shadow_runs r WHERE EXISTS (SELECT 1 FROM shadow_clips c WHERE c.run_id = r.id "
                      "AND c.frames > c.corrupt) ORDER BY r.id DESC LIMIT 1").fetchone()


# -- reading the frames parts ----------------------------------------------------------------------------
def _done(db: sqlite3.Connection, run_id: int) -> set[int]:
    return {r[0] for r in db.execute("SELECT clip_id FROM shadow_clips WHERE run_id = ?", (run_id,))}


def _parts(db: sqlite3.Connection, lake: Lake, run_id: int):
    return lake.frames_parts(run_id, _done(db, run_id))


def _query(db: sqlite3.Connection, lake: Lake, run_id: int, sql: str):
    """`sql` over the run's done parts (None when there is none). A clip part listed here and removed before it is
    read (a compaction finishing meanwhile) is read again from a fresh listing, once; any other error stands."""
    for attempt in (0, 1):
        try:
            parts = _parts(db, lake, run_id)
            return lake.query(sql, parts) if parts else None
        except LakeError:
            if attempt:
                raise


def _where(status: str | None, exclude: str | None, frame_ids: Iterable[int] | None) -> str:
    terms = []
    if status is not None:
        terms.append("status = '" + status.replace("'", "''") + "'")
    if exclude is not None:
        terms.append("status != '" + exclude.replace("'", "''") + "'")
    if frame_ids is not None:
        terms.append(f"frame_id IN ({', '.join(str(int(f)) for f in frame_ids) or 'NULL'})")
    return ("WHERE " + " AND ".join(terms)) if terms else ""


def rows(db: sqlite3.Connection, lake: Lake, run_id: int, columns: Sequence[str], status: str | None = None,
         exclude: str | None = None, frame_ids: Iterable[int] | None = None) -> dict[str, np.ndarray]:
    """Columns of the run's frames rows (frame_id, clip, idx, status, error, signals, per_camera, predictions),
    ordered by frame id; `status` keeps, `exclude` drops one status."""
    known = {"frame_id", "clip", "idx", "status", "error", "per_camera", "predictions", *SIGNALS}
    bad = [c for c in columns if c not in known]
    if bad:
        raise LakeError(f"unknown frames column {bad[0]!r}")
    cols = list(dict.fromkeys(["frame_id", *columns]))
    t = _query(db, lake, run_id, f"SELECT {', '.join(cols)} FROM {{parts}} {_where(status, exclude, frame_ids)}")
    if t is None:
        return {c: typed(c, []) for c in columns}
    t = by_frame(t)
    return {c: typed(c, column(t, c, repeated=c in ("clip", "status"))) for c in columns}


def ray_frames(db: sqlite3.Connection, lake: Lake, run_id: int, columns: Sequence[str] | None = None):
    """The run's frames rows as a `ray.data.Dataset` read natively from the lake's parts (`ray.data.read_parquet`):
    exactly the parts DuckDB reads (done clips only; a part without its marker ignored and reported, every footer
    checked), `columns` of `lake.frames_schema` (default all); rows in no guaranteed order (sort by frame_id)."""
    try:
        import ray.data as ray_data
    except ModuleNotFoundError:
        raise LakeError("reading the lake with Ray Data needs ray, which is not installed: pip install 'hydranet-stack[ray]' "
                        "(from a checkout: pip install '.[ray]'); or query it with DuckDB (Catalog.rows)") from None
    parts = _parts(db, lake, run_id)
    cols = None if columns is None else list(columns)
    if not parts:
        empty = need("pyarrow").schema([f for f in frames_schema() if cols is None or f.name in cols]).empty_table()
        return ray_data.from_arrow(empty)
    try:  # Ray checks each path against fsspec's HTTP filesystem from several threads: import it once here. Without
        import fsspec.implementations.http  # noqa: F401 - aiohttp (installed with the ray extra) every thread retries
    except ImportError:  # the failing import, and one of them can see the half-built module: Ray then raises ImportError
        pass
    ds = ray_data.read_parquet([str(p) for p in parts])
    return ds if cols is None else ds.select_columns(cols)


def top(db: sqlite3.Connection, lake: Lake, run_id: int, signal: str, k: int, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    t = _query(db, lake, run_id, f"SELECT frame_id, {signal} FROM {{parts}} WHERE status = 'ok' AND {signal} IS NOT NULL AND "
               f"NOT isnan({signal}) ORDER BY {signal} {'DESC' if descending else 'ASC'}, frame_id LIMIT {int(k)}")
    if t is None:
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    return typed("frame_id", column(t, "frame_id")), typed(signal, column(t, signal))


def compact(db: sqlite3.Connection, lake: Lake, run_id: int, rows: int | None = None) -> dict[str, int]:
    """The run's done clip parts gathered into blocks of at least `rows` rows (`Lake.compact`)."""
    return lake.compact(run_id, _done(db, run_id), rows)


def embedding_rows(db: sqlite3.Connection, lake: Lake, run_id: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(frame ids (M,), raw per-camera vectors (M, N, C) float32) of the run, by frame id."""
    t = _query(db, lake, run_id, "SELECT frame_id, cameras, dim, embedding FROM {parts} WHERE embedding IS NOT NULL")
    if t is None:
        return np.zeros(0, np.int64), np.zeros((0, 0, 0), np.float32)
    t = by_frame(t)
    ids, flat, shapes = embedding_matrix(t)
    if not len(ids):
        return ids, np.zeros((0, 0, 0), np.float32)
    if len(shapes) > 1:
        raise LakeError(f"catalog {where}: shadow run {run_id} holds embeddings of several shapes {sorted(shapes)}; "
                        "recreate the catalog")
    (n, c), = shapes
    return ids, flat.reshape(len(ids), n, c)


def predictions(db: sqlite3.Connection, lake: Lake, run_id: int, frame_ids: Iterable[int]) -> dict[int, dict]:
    ids = [int(i) for i in frame_ids]
    got = rows(db, lake, run_id, ["frame_id", "predictions"], frame_ids=ids if len(ids) <= 10_000 else None)
    want = set(ids)
    return {int(f): json.loads(p or "{}") for f, p in zip(got["frame_id"], got["predictions"]) if int(f) in want}


# -- offline columns and trigger hits: one part each, replaced whole ----------------------------------------
def _pairs_table(frame_ids: Sequence[int], values: Iterable, name: str):
    pa = need("pyarrow")
    vals = [None if v is None or not np.isfinite(float(v)) else float(v) for v in values]
    return pa.table({"frame_id": pa.array([int(f) for f in frame_ids], pa.int64()), name: pa.array(vals, pa.float64())})


def write_offline(db: sqlite3.Connection, lake: Lake, run_id: int, frame_ids: Sequence[int], columns: Mapping[str, np.ndarray],
                  models: Sequence[Mapping[str, Any]]) -> None:
    """Each column's part (replacing the old one whole), then its `offline_sources` row: a column is read only once
    its row exists, so a kill between the two leaves the old state."""
    for name, values in columns.items():
        write_part(offline_path(lake.root, run_id, name), _pairs_table(frame_ids, values, "value"),
                   {"table": "offline", "lake": lake.id, "run": run_id, "name": name})
    db.execute("BEGIN IMMEDIATE")
    try:
        for name in columns:
            db.execute("INSERT OR REPLACE INTO offline_sources (run_id, name, models, created) VALUES (?, ?, ?, ?)",
                       (run_id, name, json.dumps(list(models)), time.time()))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def offline(db: sqlite3.Connection, lake: Lake, run_id: int) -> dict[str, dict[int, float]]:
    pq = need("pyarrow.parquet")
    out: dict[str, dict[int, float]] = {}
    for (name,) in db.execute("SELECT name FROM offline_sources WHERE run_id = ? ORDER BY name", (run_id,)).fetchall():
        path = offline_path(lake.root, run_id, name)
        lake.check([path])
        t = pq.read_table(path)
        out[name] = dict(zip(typed("frame_id", column(t, "frame_id")).tolist(), typed("value", column(t, "value")).tolist()))
    return out


def write_hits(lake: Lake, name: str, version: int, run_id: int, hits: Sequence[tuple[int, float]]) -> None:
    write_part(hits_path(lake.root, run_id, name, version), _pairs_table([f for f, _ in hits], [s for _, s in hits], "score"),
               {"table": "hits", "lake": lake.id, "run": run_id, "trigger": name, "version": int(version)})


def hit_rows(lake: Lake, run_id: int) -> list[tuple[str, int, int, float]]:
    """(trigger, version, frame id, score) of every stored hit of the run, by trigger, score (best first), frame id."""
    pq = need("pyarrow.parquet")
    out = []
    for p in lake.small_parts("hits", run_id):
        meta = lake.part_meta(p)
        t = pq.read_table(p)
        out += [(str(meta["trigger"]), int(meta["version"]), int(f), float(s))
                for f, s in zip(column(t, "frame_id").tolist(), column(t, "score").tolist())]
    return sorted(out, key=lambda r: (r[0], -r[3], r[2]))
