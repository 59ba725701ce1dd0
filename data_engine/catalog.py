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
- the file's schema (every table and index, its version, the upgrade of an older catalog on open, in one transaction,
  keeping every row) is data_engine/catalog_schema.py's; a file that cannot be used is a one-line `CatalogError`.

A catalog is a file (SQLite, the embedded default) or a catalog folder (`hydranet engine catalog create --out DIR
--backend sqlite|lake`, data_engine/lake.py): on a lake the per-frame tables (signals, embeddings, predictions,
offline columns, trigger hits) are Parquet parts that shadow workers write themselves and DuckDB reads
(data_engine/lake_catalog.py), and the tables here hold the rest; the methods below answer the same on both. A
folder made with `--postgres URL` keeps these tables on a PostgreSQL server (data_engine/catalog_pg.py: the same
statements, translated).
"""
from __future__ import annotations

import contextlib

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from data_engine import lake_catalog as lk
from data_engine.catalog_schema import CatalogError, Transaction, connect, table_columns
from data_engine.lake import catalog_db, open_folder
from data_engine.signals import SIGNALS
from hydranet.io import file_sha256


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
        self.db = connect(self.path, self.db_path, pg)

    def columns(self, table: str) -> list[str]:
        """The column names of `table` as the file has it ([] when it has no such table)."""
        return table_columns(self.db, table)

    def close(self) -> None:
        self._emb_cache.clear()  # gigabytes at fleet scale: a closed catalog holds none of it
        self.db.close()
        if self.lake is not None:
            self.lake.close()

    def __enter__(self) -> "Catalog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def transaction(self):
        return Transaction(self.db)

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
        row that records none), narrowed to the run's fleet's cameras: a fleet with only some of the model's cameras
        ran its camera heads there (`data_engine.shadow.runtime_for_fleet`), and the run's per-camera rows are
        those cameras'."""
        path, meta, fleet_cams = self.db.execute(
            "SELECT m.path, m.meta, f.cameras FROM shadow_runs r JOIN models m ON r.model_id = m.id "
            "JOIN fleets f ON r.fleet_id = f.id WHERE r.id = ?", (run_id,)).fetchone()
        names = list(json.loads(meta or "{}").get("rig") or [])
        present = set(json.loads(fleet_cams or "[]"))
        return path, [n for n in names if n in present] or names

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

    def compact(self, run_id: int, rows: int | None = None) -> dict[str, int]:
        """Lake: the run's done clip parts gathered into blocks of at least `rows` rows (default lake.BLOCK_ROWS;
        data_engine/lake.py, compaction); the rows every query answers are unchanged. {"blocks", "clips", "removed"}."""
        if self.lake is None:
            raise CatalogError(f"catalog {self.path} is not a lake; only a lake's parts are compacted")
        return lk.compact(self.db, self.lake, run_id, rows)

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
                emb = np.empty((len(ids), vecs.shape[1] * vecs.shape[2]), np.float32)  # (M, N*C), one copy
                for s in range(0, len(ids), 65_536):  # in chunks: at 10M frames a temporary is gigabytes
                    v = vecs[s:s + 65_536]
                    v = (v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)).reshape(len(v), -1)
                    emb[s:s + len(v)] = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
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
