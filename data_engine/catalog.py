"""The data engine's catalog: one embedded SQLite file (stdlib `sqlite3`, no server).

Why SQLite: the engine's state is workflow state (which clip was shadowed by which model, which
frames a trigger fired on, what was selected and why, later label jobs and versions) that must
survive kill -9; SQLite gives ACID transactions in one file with the WAL journal, needs nothing
installed, and reads ~1e5 rows/s of signals into numpy, ample for fleets of 1e4-1e5 frames here.
Embeddings are float32 blobs; nearest-neighbour search is a numpy matrix product over them.

Guarantees:
- every stage writes one clip (its frames' signals, embeddings and the clip's done marker) in one
  transaction: a process killed at any moment leaves whole clips or nothing, and a rerun skips the
  clips marked done (idempotent: primary keys forbid a frame twice);
- the file carries `PRAGMA application_id` (HYD1) and `user_version` = SCHEMA_VERSION: a foreign
  SQLite file, a file that is not SQLite, or a newer schema is a one-line `CatalogError`; an older
  schema is upgraded on open, in one transaction, keeping every row (MIGRATIONS).

A catalog is a file (SQLite, the embedded default) or a catalog folder (`hydranet engine catalog create --out DIR
--backend sqlite|lake`, data_engine/lake.py): on a lake the per-frame tables (signals, embeddings, predictions,
offline columns, trigger hits) are Parquet parts that shadow workers write themselves and DuckDB reads
(data_engine/lake_catalog.py), and the tables here hold the rest; the methods below answer the same on both. A
folder made with `--postgres URL` keeps these tables on a PostgreSQL server (data_engine/catalog_pg.py: the same
statements, translated).

Every table and index is defined here (TABLES, INDEXES) and nowhere else: registry.py, labels.py and
gate.py read and write their tables but never create or alter them.

Tables: models, fleets, clips, frames, shadow_runs, shadow_clips (done markers), signals (one
column per `data_engine.signals.SIGNALS`), embeddings, offline_signals and offline_sources (server-side
columns added after shadow mode), trigger_hits, selections, selection_items;
and, for the labelling loop, label_jobs, labels (versioned, never overwritten), label_events (the review
history), registry, gate_results.
"""
from __future__ import annotations

import contextlib

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from data_engine import catalog_pg
from data_engine import lake_catalog as lk
from data_engine.lake import catalog_db, open_folder
from data_engine.signals import SIGNALS
from hydranet.io import file_sha256

APPLICATION_ID = 0x48594431  # "HYD1"
# The schema's version: bump it whenever a table or index below changes, and add the step from the
# version before to MIGRATIONS. 1: registry and label tables were placeholders that registry.py and
# labels.py rewrote on first use; 2: every table in its final layout, defined here only; 3: label_jobs.note
# (why a sent job waits: a quarantined task, a partly done frame) and label_events (the review history); 4:
# offline_signals and offline_sources (the server-side ensemble and TTA columns of `hydranet engine uncertainty`).
SCHEMA_VERSION = 4

TABLES: dict[str, str] = {  # table -> its CREATE statement (the one definition of each table)
    "models": "CREATE TABLE IF NOT EXISTS models (id INTEGER PRIMARY KEY, sha256 TEXT UNIQUE NOT NULL, path TEXT, "
              "embedding_dim INTEGER, meta TEXT, added REAL)",
    "fleets": "CREATE TABLE IF NOT EXISTS fleets (id INTEGER PRIMARY KEY, root TEXT UNIQUE NOT NULL, rig TEXT, cameras TEXT, "
              "added REAL)",
    "clips": "CREATE TABLE IF NOT EXISTS clips (id INTEGER PRIMARY KEY, fleet_id INTEGER NOT NULL REFERENCES fleets(id), "
             "name TEXT NOT NULL, num_frames INTEGER, UNIQUE(fleet_id, name))",
    "frames": "CREATE TABLE IF NOT EXISTS frames (id INTEGER PRIMARY KEY, clip_id INTEGER NOT NULL REFERENCES clips(id), "
              "idx INTEGER NOT NULL, dir TEXT NOT NULL, timestamp_us INTEGER, UNIQUE(clip_id, idx))",
    "shadow_runs": "CREATE TABLE IF NOT EXISTS shadow_runs (id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL REFERENCES "
                   "models(id), candidate_id INTEGER NOT NULL DEFAULT 0, fleet_id INTEGER NOT NULL REFERENCES fleets(id), "
                   "started REAL, UNIQUE(model_id, candidate_id, fleet_id))",
    "shadow_clips": "CREATE TABLE IF NOT EXISTS shadow_clips (run_id INTEGER NOT NULL REFERENCES shadow_runs(id), clip_id "
                    "INTEGER NOT NULL, frames INTEGER, corrupt INTEGER, finished REAL, PRIMARY KEY(run_id, clip_id))",
    "signals": "CREATE TABLE IF NOT EXISTS signals (run_id INTEGER NOT NULL, frame_id INTEGER NOT NULL REFERENCES frames(id), "
               f"status TEXT NOT NULL, error TEXT, {', '.join(f'{s} REAL' for s in SIGNALS)}, per_camera TEXT, "
               "predictions TEXT, PRIMARY KEY(run_id, frame_id))",
    "embeddings": "CREATE TABLE IF NOT EXISTS embeddings (run_id INTEGER NOT NULL, frame_id INTEGER NOT NULL, cameras INTEGER, "
                  "dim INTEGER, vec BLOB NOT NULL, PRIMARY KEY(run_id, frame_id))",
    # server-side columns computed after shadow mode (data_engine/uncertainty.py): one row per (run, column, frame),
    # and per (run, column) the models that computed it
    "offline_signals": "CREATE TABLE IF NOT EXISTS offline_signals (run_id INTEGER NOT NULL, name TEXT NOT NULL, frame_id "
                       "INTEGER NOT NULL REFERENCES frames(id), value REAL, PRIMARY KEY(run_id, name, frame_id))",
    "offline_sources": "CREATE TABLE IF NOT EXISTS offline_sources (run_id INTEGER NOT NULL, name TEXT NOT NULL, models TEXT "
                       "NOT NULL, created REAL, PRIMARY KEY(run_id, name))",
    "trigger_hits": "CREATE TABLE IF NOT EXISTS trigger_hits (trigger TEXT NOT NULL, version INTEGER NOT NULL, run_id INTEGER "
                    "NOT NULL, frame_id INTEGER NOT NULL, score REAL, PRIMARY KEY(trigger, version, run_id, frame_id))",
    "selections": "CREATE TABLE IF NOT EXISTS selections (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, run_id INTEGER, "
                  "strategy TEXT, budget INTEGER, unit TEXT, params TEXT, created REAL)",
    "selection_items": "CREATE TABLE IF NOT EXISTS selection_items (selection_id INTEGER NOT NULL REFERENCES selections(id), "
                       "rank INTEGER NOT NULL, frame_id INTEGER NOT NULL, reason TEXT, PRIMARY KEY(selection_id, rank), "
                       "UNIQUE(selection_id, frame_id))",
    # the relabel queue and the versioned label store (data_engine/labels.py)
    "label_jobs": "CREATE TABLE IF NOT EXISTS label_jobs (id INTEGER PRIMARY KEY, selection TEXT NOT NULL, frame_id INTEGER "
                  "NOT NULL REFERENCES frames(id), state TEXT NOT NULL, backend TEXT NOT NULL, model_id INTEGER, external_id "
                  "TEXT, label_id INTEGER, created REAL, updated REAL, note TEXT, UNIQUE(selection, frame_id))",
    # the review history of the jobs (accept, reject, requeue, reopen, re-pin, quarantine): who, when, the old pin
    "label_events": "CREATE TABLE IF NOT EXISTS label_events (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES "
                    "label_jobs(id), action TEXT NOT NULL, from_state TEXT, to_state TEXT, old_label_id INTEGER, new_label_id "
                    "INTEGER, by TEXT, at REAL NOT NULL, note TEXT)",
    "labels": "CREATE TABLE IF NOT EXISTS labels (id INTEGER PRIMARY KEY, frame_id INTEGER NOT NULL REFERENCES frames(id), "
              "version INTEGER NOT NULL, job_id INTEGER NOT NULL REFERENCES label_jobs(id), source TEXT NOT NULL, labeller TEXT, "
              "model_id INTEGER, payload TEXT NOT NULL, digest TEXT NOT NULL, created REAL, UNIQUE(frame_id, version), "
              "UNIQUE(job_id, source, digest))",
    # the model registry (data_engine/registry.py): an append-only log, one production entry
    "registry": "CREATE TABLE IF NOT EXISTS registry (id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL REFERENCES models(id), "
                "role TEXT NOT NULL, previous_id INTEGER REFERENCES registry(id), promoted REAL NOT NULL, action TEXT NOT NULL, "
                "checkpoint TEXT NOT NULL, sha256 TEXT NOT NULL, onnx TEXT, onnx_sha256 TEXT, note TEXT)",
    # suite metrics and gate decisions (data_engine/gate.py)
    "gate_results": "CREATE TABLE IF NOT EXISTS gate_results (id INTEGER PRIMARY KEY, candidate_id INTEGER, production_id "
                    "INTEGER, suite TEXT, metrics TEXT, verdict TEXT, created REAL)",
}
INDEXES: tuple[str, ...] = (
    "CREATE INDEX IF NOT EXISTS frames_clip ON frames(clip_id)",
    "CREATE INDEX IF NOT EXISTS label_events_job ON label_events(job_id, id)",
    "CREATE UNIQUE INDEX IF NOT EXISTS registry_one_production ON registry(role) WHERE role = 'production'",
    # one index per signal column, in `Catalog.top` order: a top-k query reads k index entries instead of
    # scanning every row (1e6 frames: ~2.5 s -> a few ms); ingest is ~3x slower, still far above shadow's rate
    *(f"CREATE INDEX IF NOT EXISTS signals_{s} ON signals(run_id, {s} DESC, frame_id)" for s in SIGNALS),
)

# PostgreSQL only (data_engine/catalog_pg.py): what SQLite keeps in its file header, PRAGMA application_id and user_version
PG_META = f"CREATE TABLE IF NOT EXISTS {catalog_pg.META} (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"


def schema() -> list[str]:
    """Every statement of the current schema (idempotent: IF NOT EXISTS), tables then indexes."""
    return [*TABLES.values(), *INDEXES]


class CatalogError(ValueError):
    """A catalog file that cannot be used; one line naming the file and what to do."""


class Catalog:
    """`Catalog(path, create=True)`: open (or create) a catalog; use as a context manager or `close()`."""

    def __init__(self, path: str | Path, create: bool = False):
        self.path = Path(path)
        self._emb_cache: dict = {}  # run id -> embeddings read once (see _embedding_rows)
        self.lake = None  # the parts of a lake-backed catalog folder (data_engine/lake.py)
        pg = None  # {"url", "schema"}: the folder's tables live on a PostgreSQL server (data_engine/catalog_pg.py)
        if self.path.is_dir():
            self.db_path, self.lake, pg = open_folder(self.path)
            create = True  # a catalog folder's SQLite file (or PostgreSQL schema) is made on first open
        else:
            self.db_path = self.path
        if not self.path.exists() and not create:
            raise CatalogError(f"catalog {self.path} does not exist; create it with `hydranet engine shadow ... --catalog {self.path}`")
        new = pg is None and (not self.db_path.exists() or self.db_path.stat().st_size == 0)
        if new:
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = catalog_pg.connect(pg["url"], pg["schema"], TABLES, PG_META, str(self.path)) if pg else \
                sqlite3.connect(str(self.db_path), timeout=30.0, isolation_level=None)
            self.db.execute("PRAGMA foreign_keys = ON")
            app, ver = self.db.execute("PRAGMA application_id").fetchone()[0], self.db.execute("PRAGMA user_version").fetchone()[0]
            if new or (app == 0 and ver == 0 and not self._tables()):
                self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self.db.execute("PRAGMA journal_mode = WAL")
                with self.transaction():
                    for stmt in schema():
                        self.db.execute(stmt)
                    self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif app != APPLICATION_ID:
                raise CatalogError(f"{self.path} is an SQLite file but not a hydranet catalog; give another --catalog path")
            elif ver > SCHEMA_VERSION:
                raise CatalogError(f"catalog {self.path} has schema version {ver}, newer than this package's {SCHEMA_VERSION}; "
                                   "update the hydranet package")
            elif ver < SCHEMA_VERSION:
                self._migrate()
            self.db.execute("PRAGMA synchronous = FULL")
            self.db.execute("PRAGMA cache_size = -131072")  # 128 MiB of pages: the signal indexes stay in memory while writing
            self.db.execute("SELECT count(*) FROM signals").fetchone()
        except sqlite3.DatabaseError as e:
            raise CatalogError(f"catalog {self.path} is not a readable catalog ({e}); give another --catalog path or "
                               "delete the corrupt file") from None

    def _migrate(self) -> None:
        """Upgrade an older catalog to SCHEMA_VERSION in ONE transaction (every step of MIGRATIONS from its
        version on, then any table or index of the current schema it lacks), keeping every row; a step
        that cannot keep the rows raises and leaves the file as it was."""
        with self.transaction():
            ver = self.db.execute("PRAGMA user_version").fetchone()[0]  # another process may have migrated it meanwhile
            for v in range(ver, SCHEMA_VERSION):
                if v not in MIGRATIONS:
                    raise CatalogError(f"catalog {self.path} has schema version {ver}, which this package cannot upgrade "
                                       f"(it knows versions {min(MIGRATIONS)}..{SCHEMA_VERSION}); recreate it")
                MIGRATIONS[v](self)
            for stmt in schema():
                self.db.execute(stmt)
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def columns(self, table: str) -> list[str]:
        """The column names of `table` as the file has it ([] when it has no such table)."""
        return [r[1] for r in self.db.execute(f"PRAGMA table_info({table})")]

    def _tables(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")]

    def close(self) -> None:
        self.db.close()
        if self.lake is not None:
            self.lake.close()

    def __enter__(self) -> "Catalog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def transaction(self):
        return _Transaction(self.db)

    # -- registration (idempotent) -----------------------------------------------------------------
    def add_model(self, path: str | Path, md: Mapping[str, Any]) -> int:
        """Register the ONNX model at `path` whose checked metadata is `md` (`deploy.metadata.read_metadata`'s): its
        row's meta records the camera names in input order (`ModelRig.from_metadata`: a malformed rig is one
        MetadataError line naming `path`) and the head names; `run_model` reads them back."""
        from deploy.metadata import ModelRig

        names = list(ModelRig.from_metadata(md, str(path)).names)
        sha = file_sha256(path)
        with self.transaction():
            self.db.execute("INSERT OR IGNORE INTO models (sha256, path, embedding_dim, meta, added) VALUES (?, ?, ?, ?, ?)",
                            (sha, str(path), int((md.get("embedding") or {}).get("dim", 0)),
                             json.dumps({"rig": names, "heads": list(md["heads"])}), time.time()))
        return self.db.execute("SELECT id FROM models WHERE sha256 = ?", (sha,)).fetchone()[0]

    def run_model(self, run_id: int) -> tuple[str, list[str]]:
        """(path, camera names in input order) of shadow run `run_id`'s model, as `add_model` recorded them ([] for a
        row that records none)."""
        path, meta = self.db.execute("SELECT m.path, m.meta FROM shadow_runs r JOIN models m ON r.model_id = m.id "
                                     "WHERE r.id = ?", (run_id,)).fetchone()
        return path, list(json.loads(meta or "{}").get("rig") or [])

    def add_fleet(self, fleet) -> tuple[int, dict[str, int], dict[tuple[str, int], int]]:
        """Register a `data_engine.fleet.Fleet`, its clips and frames: (fleet id, {clip: id}, {(clip, idx): frame id})."""
        root = str(Path(fleet.root).resolve())
        clips = [fleet.clip(name) for name in fleet.clip_names]
        with self.transaction():
            self.db.execute("INSERT OR IGNORE INTO fleets (root, rig, cameras, added) VALUES (?, ?, ?, ?)",
                            (root, fleet.rig_name, json.dumps(sorted(fleet.cameras)), time.time()))
            fid = self.db.execute("SELECT id FROM fleets WHERE root = ?", (root,)).fetchone()[0]
            for c in clips:
                self.db.execute("INSERT OR IGNORE INTO clips (fleet_id, name, num_frames) VALUES (?, ?, ?)",
                                (fid, c.name, len(c.frames)))
                cid = self.db.execute("SELECT id FROM clips WHERE fleet_id = ? AND name = ?", (fid, c.name)).fetchone()[0]
                self.db.executemany("INSERT OR IGNORE INTO frames (clip_id, idx, dir, timestamp_us) VALUES (?, ?, ?, ?)",
                                    [(cid, f["index"], f["dir"], f["timestamp_us"]) for f in c.frames])
        clip_ids = dict(self.db.execute("SELECT name, id FROM clips WHERE fleet_id = ?", (fid,)).fetchall())
        frame_ids = {(name, idx): i for name, idx, i in self.db.execute(
            "SELECT c.name, f.idx, f.id FROM frames f JOIN clips c ON f.clip_id = c.id WHERE c.fleet_id = ?", (fid,))}
        return fid, clip_ids, frame_ids

    def add_run(self, model_id: int, candidate_id: int | None, fleet_id: int) -> int:
        with self.transaction():
            self.db.execute("INSERT OR IGNORE INTO shadow_runs (model_id, candidate_id, fleet_id, started) VALUES (?, ?, ?, ?)",
                            (model_id, candidate_id or 0, fleet_id, time.time()))
        return self.db.execute("SELECT id FROM shadow_runs WHERE model_id = ? AND candidate_id = ? AND fleet_id = ?",
                               (model_id, candidate_id or 0, fleet_id)).fetchone()[0]

    def done_clips(self, run_id: int) -> set[int]:
        return {r[0] for r in self.db.execute("SELECT clip_id FROM shadow_clips WHERE run_id = ?", (run_id,))}

    # -- shadow results ---------------------------------------------------------------------------
    def write_clip(self, run_id: int, clip_id: int, rows: Sequence[Mapping[str, Any]]) -> None:
        """One clip's frames in ONE transaction with its done marker. rows: {"frame_id", "status",
        "error", "signals" {name: float}, "per_camera", "predictions", "embedding" (N, C) or None}."""
        cols = ["run_id", "frame_id", "status", "error", *SIGNALS, "per_camera", "predictions"]
        sql = f"INSERT OR IGNORE INTO signals ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        self._emb_cache.clear()
        if self.lake is not None:  # the clip's part, then its done marker
            return lk.write_clip(self.db, self.lake, run_id, clip_id, rows)
        with self.transaction():
            if self.db.execute("SELECT 1 FROM shadow_clips WHERE run_id = ? AND clip_id = ?", (run_id, clip_id)).fetchone():
                return  # done by an earlier run of this stage
            self._insert_signals(sql, [(run_id, r["frame_id"], r["status"], r.get("error"),
                                        *[_real(r.get("signals", {}).get(s)) for s in SIGNALS],
                                        json.dumps(r.get("per_camera") or {}), json.dumps(r.get("predictions") or {}))
                                       for r in rows])
            self.db.executemany("INSERT OR IGNORE INTO embeddings (run_id, frame_id, cameras, dim, vec) VALUES (?, ?, ?, ?, ?)",
                                [(run_id, r["frame_id"], *np.shape(r["embedding"]),
                                  np.ascontiguousarray(r["embedding"], np.float32).tobytes())
                                 for r in rows if r.get("embedding") is not None])
            self.db.execute("INSERT INTO shadow_clips (run_id, clip_id, frames, corrupt, finished) VALUES (?, ?, ?, ?, ?)",
                            (run_id, clip_id, len(rows), sum(r["status"] != "ok" for r in rows), time.time()))

    def commit_clip(self, run_id: int, clip_id: int) -> dict:
        """Lake: the done marker of a clip whose part a worker wrote (checked whole first); returns its footer."""
        if self.lake is None:
            raise CatalogError(f"catalog {self.path} is not a lake; shadow rows go through write_clip")
        self._emb_cache.clear()
        return lk.commit_clip(self.db, self.lake, run_id, clip_id)

    def _insert_signals(self, sql: str, values: list[tuple]) -> None:
        self.db.executemany(sql, values)

    # -- reading ----------------------------------------------------------------------------------
    def latest_run(self, run_id: int | None = None) -> int:
        """`run_id` if the catalog holds it; by default the newest run with a frame that shadowed fine, so a run
        refused for non-finite outputs (every frame 'bad') never becomes what mine, report and triggers read
        while a good one exists; the newest run of all when none is good."""
        if run_id:
            row = self.db.execute("SELECT id FROM shadow_runs WHERE id = ?", (run_id,)).fetchone()
        elif self.lake is not None:
            row = lk.latest_ok_run(self.db) or self.db.execute("SELECT id FROM shadow_runs ORDER BY id DESC LIMIT 1").fetchone()
        else:
            row = self.db.execute("SELECT r.id FROM shadow_runs r WHERE EXISTS (SELECT 1 FROM signals s WHERE "
                                  "s.run_id = r.id AND s.status = 'ok') ORDER BY r.id DESC LIMIT 1").fetchone() or \
                self.db.execute("SELECT id FROM shadow_runs ORDER BY id DESC LIMIT 1").fetchone()
        if row is None:
            raise CatalogError(f"catalog {self.path} holds no shadow run{f' {run_id}' if run_id else ''}; run "
                               "`hydranet engine shadow --onnx M --data F --catalog C` first")
        return int(row[0])

    def table(self, run_id: int, status: str | None = "ok") -> dict[str, np.ndarray]:
        """Column arrays of a run's frames: frame_id, clip, idx, status and every signal (NaN for NULL)."""
        if self.lake is not None:
            return self.rows(run_id, ["frame_id", "clip", "idx", "status", *SIGNALS], status)
        where = "WHERE s.run_id = ?" + (" AND s.status = ?" if status else "")
        rows = self.db.execute(f"SELECT s.frame_id, c.name, f.idx, s.status, {', '.join('s.' + s for s in SIGNALS)} "
                               f"FROM signals s JOIN frames f ON s.frame_id = f.id JOIN clips c ON f.clip_id = c.id {where} "
                               "ORDER BY s.frame_id", (run_id, status) if status else (run_id,)).fetchall()
        cols = list(zip(*rows)) if rows else [[] for _ in range(4 + len(SIGNALS))]
        out = {"frame_id": np.asarray(cols[0], np.int64), "clip": np.asarray(cols[1], object),
               "idx": np.asarray(cols[2], np.int64), "status": np.asarray(cols[3], object)}
        for k, s in enumerate(SIGNALS):
            out[s] = np.array(cols[4 + k], np.float64)  # None (SQL NULL) -> NaN
        return out

    def top(self, run_id: int, signal: str, k: int, descending: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(frame ids, values) of the k ok frames of a run with the highest (lowest) `signal`, ties by frame id.
        Highest: a read of k entries of the signal's index (catalogs created without it: one scan)."""
        if signal not in SIGNALS:
            raise CatalogError(f"unknown signal {signal!r}; the catalog's signals: {list(SIGNALS)}")
        if self.lake is not None:
            return lk.top(self.db, self.lake, run_id, signal, k, descending)
        rows = self.db.execute(f"SELECT frame_id, {signal} FROM signals WHERE run_id = ? AND status = 'ok' AND {signal} IS NOT NULL "
                               f"ORDER BY {signal} {'DESC' if descending else 'ASC'}, frame_id LIMIT ?", (run_id, int(k))).fetchall()
        return np.asarray([r[0] for r in rows], np.int64), np.asarray([r[1] for r in rows], np.float64)

    def _embedding_rows(self, run_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(frame ids (M,), raw per-camera vectors (M, N, C) float32) of a run, read once per Catalog
        object and kept in memory (cleared by write_clip): one bytes join and one frombuffer, not M."""
        if run_id not in self._emb_cache and self.lake is not None:
            self._emb_cache[run_id] = lk.embedding_rows(self.db, self.lake, run_id, str(self.path))
        if run_id not in self._emb_cache:
            rows = self.db.execute("SELECT frame_id, cameras, dim, vec FROM embeddings WHERE run_id = ? ORDER BY frame_id",
                                   (run_id,)).fetchall()
            if not rows:
                self._emb_cache[run_id] = (np.zeros(0, np.int64), np.zeros((0, 0, 0), np.float32))
            else:
                shapes = {(r[1], r[2]) for r in rows}
                if len(shapes) > 1:
                    raise CatalogError(f"catalog {self.path}: shadow run {run_id} holds embeddings of several shapes "
                                       f"{sorted(shapes)}; recreate the catalog")
                (n, c), = shapes
                ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
                vecs = np.frombuffer(b"".join(r[3] for r in rows), np.float32).reshape(len(rows), n, c)  # (M, N, C)
                self._emb_cache[run_id] = (ids, vecs)
        return self._emb_cache[run_id]

    def embeddings(self, run_id: int, frame_ids: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(frame ids (M,), frame embeddings (M, N*C)): each camera's vector L2-normalized, concatenated,
        the whole normalized again (cosine geometry)."""
        key = ("frame", run_id)
        if key not in self._emb_cache:
            ids, vecs = self._embedding_rows(run_id)
            if len(ids) == 0:
                self._emb_cache[key] = (ids, np.zeros((0, 0), np.float32))
            else:
                vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=-1, keepdims=True), 1e-12)
                flat = vecs.reshape(len(ids), -1)
                emb = (flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)).astype(np.float32)
                emb.flags.writeable = False  # shared by every caller of this Catalog object
                self._emb_cache[key] = (ids, emb)
        ids, emb = self._emb_cache[key]
        if frame_ids is not None:
            keep = np.isin(ids, np.fromiter((int(i) for i in frame_ids), np.int64))
            ids, emb = ids[keep], emb[keep]
        return ids, emb

    def camera_embeddings(self, run_id: int, camera: int) -> tuple[np.ndarray, np.ndarray]:
        """(frame ids (M,), camera `camera`'s embeddings (M, C), L2-normalized)."""
        ids, vecs = self._embedding_rows(run_id)
        if len(ids) == 0:
            return ids, np.zeros((0, 0), np.float32)
        v = vecs[:, camera]
        return ids, (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    def nearest(self, run_id: int, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(frame ids, cosine similarities) of the k frames whose frame embedding is closest to `query`
        (N*C,), best first (ties by frame id). The embedding matrix stays in memory between calls."""
        ids, emb = self.embeddings(run_id)
        if len(ids) == 0:
            return ids, np.zeros(0, np.float32)
        q = np.asarray(query, np.float32).reshape(-1)
        sim = emb @ (q / max(float(np.linalg.norm(q)), 1e-12))  # (M,)
        k = min(int(k), len(ids))
        if k <= 0:
            return ids[:0], np.zeros(0, np.float32)
        kth = np.partition(sim, len(ids) - k)[len(ids) - k]  # the k-th largest similarity
        part = np.flatnonzero(sim >= kth)  # the k largest and every tie of the k-th (argpartition would pick among them)
        order = part[np.lexsort((ids[part], -sim[part]))][:k]
        return ids[order], sim[order]

    def rows(self, run_id: int, columns: Sequence[str], status: str | None = None, exclude: str | None = None,
             frame_ids: Iterable[int] | None = None) -> dict[str, np.ndarray]:
        """Columns of a run's per-frame rows by frame id: frame_id, clip, idx, status, error, a signal, per_camera,
        predictions; `status` keeps one status, `exclude` drops one, `frame_ids` keeps those frames."""
        if self.lake is not None:
            return lk.rows(self.db, self.lake, run_id, columns, status, exclude, frame_ids)
        sql = {"clip": "c.name", "idx": "f.idx"}
        bad = [c for c in columns if c not in (*sql, "frame_id", "status", "error", "per_camera", "predictions", *SIGNALS)]
        if bad:
            raise CatalogError(f"unknown frames column {bad[0]!r}")
        where, args = ["s.run_id = ?"], [run_id]
        for term, value in (("s.status = ?", status), ("s.status != ?", exclude)):
            if value is not None:
                where.append(term)
                args.append(value)
        got = self.db.execute(f"SELECT {', '.join(sql.get(c, 's.' + c) for c in columns)} FROM signals s JOIN frames f ON "
                              f"s.frame_id = f.id JOIN clips c ON f.clip_id = c.id WHERE {' AND '.join(where)} ORDER BY "
                              "s.frame_id", args).fetchall()
        if frame_ids is not None:
            keep = {int(i) for i in frame_ids}
            at = columns.index("frame_id")
            got = [r for r in got if r[at] in keep]
        cols = list(zip(*got)) if got else [[] for _ in columns]
        return {c: lk.typed(c, v) for c, v in zip(columns, cols)}

    def predictions(self, run_id: int, frame_ids: Iterable[int]) -> dict[int, dict]:
        if self.lake is not None:
            return lk.predictions(self.db, self.lake, run_id, frame_ids)
        ids = [int(i) for i in frame_ids]
        out = {}
        for k in range(0, len(ids), 500):
            chunk = ids[k:k + 500]
            q = f"SELECT frame_id, predictions FROM signals WHERE run_id = ? AND frame_id IN ({', '.join('?' * len(chunk))})"
            out.update({i: json.loads(p or "{}") for i, p in self.db.execute(q, (run_id, *chunk))})
        return out

    def run_info(self, run_id: int) -> dict[str, Any]:
        m, c, root = self.db.execute("SELECT m.path, r.candidate_id, f.root FROM shadow_runs r JOIN models m ON r.model_id = m.id "
                                     "JOIN fleets f ON r.fleet_id = f.id WHERE r.id = ?", (run_id,)).fetchone()
        return {"run_id": run_id, "model": m, "candidate_id": c, "fleet": root}

    # -- offline (server-side) columns ---------------------------------------------------------------
    def write_offline(self, run_id: int, frame_ids: Sequence[int], columns: Mapping[str, np.ndarray],
                      models: Sequence[Mapping[str, Any]], overwrite: bool = False) -> None:
        """Store offline columns {name: (F,) values aligned with `frame_ids`} of a shadow run and the `models` that
        computed them, in ONE transaction; a column the run holds already is a CatalogError unless `overwrite`
        (then its old values are replaced whole). NaN and Inf are stored as NULL (no value)."""
        if self.lake is not None:
            have = sorted({r[0] for r in self.db.execute("SELECT name FROM offline_sources WHERE run_id = ?", (run_id,))}
                          & set(columns))
            if have and not overwrite:
                raise CatalogError(f"catalog {self.path}: shadow run {run_id} holds offline column(s) {have} already; "
                                   "pass --overwrite to replace them")
            return lk.write_offline(self.db, self.lake, run_id, frame_ids, columns, models)
        with self.transaction():
            have = sorted({r[0] for r in self.db.execute("SELECT name FROM offline_sources WHERE run_id = ?", (run_id,))}
                          & set(columns))
            if have and not overwrite:
                raise CatalogError(f"catalog {self.path}: shadow run {run_id} holds offline column(s) {have} already; "
                                   "pass --overwrite to replace them")
            for name, values in columns.items():
                self.db.execute("DELETE FROM offline_signals WHERE run_id = ? AND name = ?", (run_id, name))
                self.db.executemany("INSERT INTO offline_signals (run_id, name, frame_id, value) VALUES (?, ?, ?, ?)",
                                    [(run_id, name, int(f), _real(v)) for f, v in zip(frame_ids, values)])
                self.db.execute("INSERT OR REPLACE INTO offline_sources (run_id, name, models, created) VALUES (?, ?, ?, ?)",
                                (run_id, name, json.dumps(list(models)), time.time()))

    def offline(self, run_id: int) -> dict[str, dict[int, float]]:
        """The run's offline columns: {name: {frame id: value (NaN where NULL)}}."""
        if self.lake is not None:
            return lk.offline(self.db, self.lake, run_id)
        out: dict[str, dict[int, float]] = {}
        for name, f, v in self.db.execute("SELECT name, frame_id, value FROM offline_signals WHERE run_id = ?", (run_id,)):
            out.setdefault(name, {})[int(f)] = np.nan if v is None else float(v)
        return out

    def offline_sources(self, run_id: int) -> dict[str, list[dict]]:
        """{column: the models that computed it} of a run's offline columns."""
        return {n: json.loads(m) for n, m in self.db.execute("SELECT name, models FROM offline_sources WHERE run_id = ? "
                                                              "ORDER BY name", (run_id,))}

    # -- trigger hits and selections ----------------------------------------------------------------
    def write_hits(self, name: str, version: int, run_id: int, hits: Sequence[tuple[int, float]]) -> None:
        """Replace the hits of one trigger version on one run (idempotent)."""
        if self.lake is not None:
            return lk.write_hits(self.lake, name, version, run_id, hits)
        with self.transaction():
            self.db.execute("DELETE FROM trigger_hits WHERE trigger = ? AND version = ? AND run_id = ?", (name, version, run_id))
            self.db.executemany("INSERT INTO trigger_hits (trigger, version, run_id, frame_id, score) VALUES (?, ?, ?, ?, ?)",
                                [(name, version, run_id, int(f), float(s)) for f, s in hits])

    def hit_rows(self, run_id: int) -> list[tuple[str, int, int, float]]:
        """(trigger, version, frame id, score) of every stored hit of a run, by trigger, score (best first), frame id."""
        if self.lake is not None:
            return lk.hit_rows(self.lake, run_id)
        return self.db.execute("SELECT trigger, version, frame_id, score FROM trigger_hits WHERE run_id = ? ORDER BY trigger, "
                               "score DESC, frame_id", (run_id,)).fetchall()

    def hits(self, run_id: int) -> dict[str, list[tuple[int, float]]]:
        out: dict[str, list[tuple[int, float]]] = {}
        for t, _, f, s in self.hit_rows(run_id):
            out.setdefault(t, []).append((f, s))
        return out

    def write_selection(self, name: str, run_id: int, strategy: str, budget: int, unit: str, params: Mapping,
                        items: Sequence[Mapping[str, Any]]) -> int:
        """Record a selection (replacing one of the same name) in one transaction."""
        with self.transaction():
            old = self.db.execute("SELECT id FROM selections WHERE name = ?", (name,)).fetchone()
            jobs = {r[0] for r in self.db.execute("SELECT frame_id FROM label_jobs WHERE selection = ?", (name,))}
            dropped = sorted(jobs - {int(it["frame_id"]) for it in items})
            if dropped:  # a job would stay for a frame the selection no longer holds
                raise CatalogError(f"catalog {self.path}: selection {name!r} already has label jobs, {len(dropped)} of them "
                                   f"for frames the new selection drops (frame {dropped[0]}, ...); mine under a new "
                                   "--name (labelled selections are never replaced)")
            if old:
                self.db.execute("DELETE FROM selection_items WHERE selection_id = ?", (old[0],))
                self.db.execute("DELETE FROM selections WHERE id = ?", (old[0],))
            cur = self.db.execute("INSERT INTO selections (name, run_id, strategy, budget, unit, params, created) "
                                  "VALUES (?, ?, ?, ?, ?, ?, ?)", (name, run_id, strategy, budget, unit, json.dumps(params), time.time()))
            sid = cur.lastrowid
            self.db.executemany("INSERT INTO selection_items (selection_id, rank, frame_id, reason) VALUES (?, ?, ?, ?)",
                                [(sid, i, int(it["frame_id"]), json.dumps(it["reason"])) for i, it in enumerate(items)])
        return int(sid)


# -- migrations: MIGRATIONS[v](cat) turns version v into v + 1, inside the migration's transaction ------------
def _replace_placeholders(cat: Catalog, tables: tuple[str, ...], final_column: str) -> None:
    """Version-1 catalogs could hold empty placeholders of `tables` (written before those tables took
    their final layout; the first has no `final_column`): drop and recreate them. A placeholder that
    holds rows is a CatalogError: nothing holding data is dropped."""
    cols = cat.columns(tables[0])
    if not cols or final_column in cols:
        return  # absent (created by the schema) or already final
    if sum(cat.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables if cat.columns(t)):
        raise CatalogError(f"catalog {cat.path} holds {tables[0]} rows of an older layout; recreate the catalog (rows "
                           f"without a {final_column} column cannot be upgraded)")
    for t in reversed(tables):  # labels references label_jobs: drop it first
        cat.db.execute(f"DROP TABLE IF EXISTS {t}")
    for t in tables:
        cat.db.execute(TABLES[t])


def _v1_to_v2(cat: Catalog) -> None:
    """1 -> 2: the `registry` placeholder (id, model_id, role, previous_id, promoted) and the label tables'
    placeholders take their final layouts (what registry.py and labels.py did on first use in version 1);
    catalogs where those ran already keep their tables and rows as they are."""
    _replace_placeholders(cat, ("registry",), "checkpoint")
    _replace_placeholders(cat, ("label_jobs", "labels"), "selection")


def _v2_to_v3(cat: Catalog) -> None:
    """2 -> 3: label_jobs gains `note` (NULL for every existing job); label_events (the review history, empty)
    is created by the schema after the steps. A label_jobs table that 1 -> 2 just created has the column already."""
    if "note" not in cat.columns("label_jobs"):
        cat.db.execute("ALTER TABLE label_jobs ADD COLUMN note TEXT")


def _v3_to_v4(cat: Catalog) -> None:
    """3 -> 4: offline_signals and offline_sources are new tables, created (empty) by the schema after the steps;
    nothing of version 3 changes."""


MIGRATIONS: dict[int, Callable[[Catalog], None]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def _real(v) -> float | None:
    if v is None:
        return None
    v = float(v)
    return None if not np.isfinite(v) else v


def catalog_inputs(path: str | Path) -> list[Path]:
    """What a command reading the catalog at `path` reads through it: every fleet folder it names and, for a
    recorded fleet, the recording it reads in place (fleet.json's source root and followed link targets), for
    `hydranet.io.check_apart`. Empty for a file that is not a readable catalog (the command refuses it itself)."""
    from hydranet.data.recording import RECORDED_FILE

    try:
        if Path(path).is_dir() and open_folder(Path(path))[2]:  # on a PostgreSQL server
            with Catalog(path) as cat:
                roots = [Path(r) for (r,) in cat.db.execute("SELECT root FROM fleets")]
        else:
            with contextlib.closing(sqlite3.connect(f"file:{catalog_db(path)}?mode=ro", uri=True)) as db:
                roots = [Path(r) for (r,) in db.execute("SELECT root FROM fleets")]
    except (sqlite3.Error, ValueError):
        return []
    out = list(roots)
    for root in roots:
        try:
            source = json.loads((root / RECORDED_FILE).read_text()).get("source") or {}
        except (OSError, ValueError, AttributeError):
            continue  # a sim fleet (no fleet.json), or one the command will refuse when it reads it
        out += [Path(x) for x in (source.get("root"), *(source.get("linked") or ())) if isinstance(x, str)]
    return out
