"""The catalog's schema: every table and index of the catalog, defined here and nowhere else (TABLES, INDEXES), its
version, the migrations of older versions, and the opening of the database under a `data_engine.catalog.Catalog`.

- the file carries `PRAGMA application_id` (HYD1) and `user_version` = SCHEMA_VERSION: a foreign SQLite file, a file
  that is not SQLite, or a newer schema is a one-line `CatalogError`; an older schema is upgraded on open, in one
  transaction, keeping every row (MIGRATIONS);
- on PostgreSQL (data_engine/catalog_pg.py) the same statements run, translated; application_id and user_version
  live in the table PG_META creates.

Every other module (catalog.py, registry.py, the label modules, gate.py ...) reads and writes these tables but never
creates or alters them.

Tables: models, fleets, clips, frames, shadow_runs, shadow_clips (done markers), signals (one
column per `data_engine.signals.SIGNALS`), embeddings, offline_signals and offline_sources (server-side
columns added after shadow mode), trigger_hits, selections, selection_items;
and, for the labelling loop, label_jobs, labels (versioned, never overwritten), label_events (the review
history), registry, gate_results.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path

from data_engine import catalog_pg
from data_engine.signals import SIGNALS

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
    # the relabel queue and the versioned label store (data_engine/label_queue.py, labels.py)
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


def connect(path: Path, db_path: Path, pg: Mapping[str, str] | None):
    """The open connection to the tables of the catalog at `path`: the SQLite file `db_path`, or the PostgreSQL schema
    `pg` ({"url", "schema"}); a new catalog gets the current schema, an older one is upgraded (`migrate`), anything
    else is a one-line CatalogError."""
    new = pg is None and (not db_path.exists() or db_path.stat().st_size == 0)
    if new:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = catalog_pg.connect(pg["url"], pg["schema"], TABLES, PG_META, str(path)) if pg else \
            sqlite3.connect(str(db_path), timeout=30.0, isolation_level=None)
        db.execute("PRAGMA foreign_keys = ON")
        app, ver = db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0]
        if new or (app == 0 and ver == 0 and not table_names(db)):
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute("PRAGMA journal_mode = WAL")
            with Transaction(db):
                for stmt in schema():
                    db.execute(stmt)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif app != APPLICATION_ID:
            raise CatalogError(f"{path} is an SQLite file but not a hydranet catalog; give another --catalog path")
        elif ver > SCHEMA_VERSION:
            raise CatalogError(f"catalog {path} has schema version {ver}, newer than this package's {SCHEMA_VERSION}; "
                               "update the hydranet package")
        elif ver < SCHEMA_VERSION:
            migrate(db, path)
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA cache_size = -131072")  # 128 MiB of pages: the signal indexes stay in memory while writing
        db.execute("SELECT count(*) FROM signals").fetchone()
    except sqlite3.DatabaseError as e:
        raise CatalogError(f"catalog {path} is not a readable catalog ({e}); give another --catalog path or "
                           "delete the corrupt file") from None
    return db


def migrate(db, path: Path) -> None:
    """Upgrade an older catalog to SCHEMA_VERSION in ONE transaction (every step of MIGRATIONS from its
    version on, then any table or index of the current schema it lacks), keeping every row; a step
    that cannot keep the rows raises and leaves the file as it was."""
    with Transaction(db):
        ver = db.execute("PRAGMA user_version").fetchone()[0]  # another process may have migrated it meanwhile
        for v in range(ver, SCHEMA_VERSION):
            if v not in MIGRATIONS:
                raise CatalogError(f"catalog {path} has schema version {ver}, which this package cannot upgrade "
                                   f"(it knows versions {min(MIGRATIONS)}..{SCHEMA_VERSION}); recreate it")
            MIGRATIONS[v](db, path)
        for stmt in schema():
            db.execute(stmt)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def table_columns(db, table: str) -> list[str]:
    """The column names of `table` as the database has it ([] when it has no such table)."""
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def table_names(db) -> list[str]:
    return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]


# -- migrations: MIGRATIONS[v](db, path) turns version v into v + 1, inside the migration's transaction ------------
def _replace_placeholders(db, path: Path, tables: tuple[str, ...], final_column: str) -> None:
    """Version-1 catalogs could hold empty placeholders of `tables` (written before those tables took
    their final layout; the first has no `final_column`): drop and recreate them. A placeholder that
    holds rows is a CatalogError: nothing holding data is dropped."""
    cols = table_columns(db, tables[0])
    if not cols or final_column in cols:
        return  # absent (created by the schema) or already final
    if sum(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables if table_columns(db, t)):
        raise CatalogError(f"catalog {path} holds {tables[0]} rows of an older layout; recreate the catalog (rows "
                           f"without a {final_column} column cannot be upgraded)")
    for t in reversed(tables):  # labels references label_jobs: drop it first
        db.execute(f"DROP TABLE IF EXISTS {t}")
    for t in tables:
        db.execute(TABLES[t])


def _v1_to_v2(db, path: Path) -> None:
    """1 -> 2: the `registry` placeholder (id, model_id, role, previous_id, promoted) and the label tables'
    placeholders take their final layouts (what registry.py and labels.py did on first use in version 1);
    catalogs where those ran already keep their tables and rows as they are."""
    _replace_placeholders(db, path, ("registry",), "checkpoint")
    _replace_placeholders(db, path, ("label_jobs", "labels"), "selection")


def _v2_to_v3(db, path: Path) -> None:
    """2 -> 3: label_jobs gains `note` (NULL for every existing job); label_events (the review history, empty)
    is created by the schema after the steps. A label_jobs table that 1 -> 2 just created has the column already."""
    if "note" not in table_columns(db, "label_jobs"):
        db.execute("ALTER TABLE label_jobs ADD COLUMN note TEXT")


def _v3_to_v4(db, path: Path) -> None:
    """3 -> 4: offline_signals and offline_sources are new tables, created (empty) by the schema after the steps;
    nothing of version 3 changes."""


MIGRATIONS: dict[int, Callable[..., None]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False
