"""The catalog schema: one owner (data_engine/catalog.py), a version that changes with the layout, and
the migration of a version-1 catalog (as the code before schema version 2 wrote it) keeping every row."""
from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from data_engine.catalog import APPLICATION_ID, INDEXES, SCHEMA_VERSION, TABLES, Catalog, CatalogError
from data_engine.labels import accepted_labels, open_catalog
from data_engine.registry import history, production
from data_engine.signals import SIGNALS

REPO = Path(__file__).resolve().parents[1]

# -- a version-1 catalog, as data_engine/catalog.py (_SCHEMA, SCHEMA_VERSION = 1) and registry.py
# (ensure_registry's _LAYOUT) wrote it before schema version 2; copied verbatim, signal columns as today
V1_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS models (id INTEGER PRIMARY KEY, sha256 TEXT UNIQUE NOT NULL, path TEXT, embedding_dim INTEGER,
    meta TEXT, added REAL);
CREATE TABLE IF NOT EXISTS fleets (id INTEGER PRIMARY KEY, root TEXT UNIQUE NOT NULL, rig TEXT, cameras TEXT, added REAL);
CREATE TABLE IF NOT EXISTS clips (id INTEGER PRIMARY KEY, fleet_id INTEGER NOT NULL REFERENCES fleets(id), name TEXT NOT NULL,
    num_frames INTEGER, UNIQUE(fleet_id, name));
CREATE TABLE IF NOT EXISTS frames (id INTEGER PRIMARY KEY, clip_id INTEGER NOT NULL REFERENCES clips(id), idx INTEGER NOT NULL,
    dir TEXT NOT NULL, timestamp_us INTEGER, UNIQUE(clip_id, idx));
CREATE TABLE IF NOT EXISTS shadow_runs (id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL REFERENCES models(id),
    candidate_id INTEGER NOT NULL DEFAULT 0, fleet_id INTEGER NOT NULL REFERENCES fleets(id), started REAL,
    UNIQUE(model_id, candidate_id, fleet_id));
CREATE TABLE IF NOT EXISTS shadow_clips (run_id INTEGER NOT NULL REFERENCES shadow_runs(id), clip_id INTEGER NOT NULL,
    frames INTEGER, corrupt INTEGER, finished REAL, PRIMARY KEY(run_id, clip_id));
CREATE TABLE IF NOT EXISTS signals (run_id INTEGER NOT NULL, frame_id INTEGER NOT NULL REFERENCES frames(id),
    status TEXT NOT NULL, error TEXT, {", ".join(f"{s} REAL" for s in SIGNALS)}, per_camera TEXT, predictions TEXT,
    PRIMARY KEY(run_id, frame_id));
CREATE TABLE IF NOT EXISTS embeddings (run_id INTEGER NOT NULL, frame_id INTEGER NOT NULL, cameras INTEGER, dim INTEGER,
    vec BLOB NOT NULL, PRIMARY KEY(run_id, frame_id));
CREATE TABLE IF NOT EXISTS trigger_hits (trigger TEXT NOT NULL, version INTEGER NOT NULL, run_id INTEGER NOT NULL,
    frame_id INTEGER NOT NULL, score REAL, PRIMARY KEY(trigger, version, run_id, frame_id));
CREATE TABLE IF NOT EXISTS selections (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, run_id INTEGER, strategy TEXT,
    budget INTEGER, unit TEXT, params TEXT, created REAL);
CREATE TABLE IF NOT EXISTS selection_items (selection_id INTEGER NOT NULL REFERENCES selections(id), rank INTEGER NOT NULL,
    frame_id INTEGER NOT NULL, reason TEXT, PRIMARY KEY(selection_id, rank), UNIQUE(selection_id, frame_id));
CREATE TABLE IF NOT EXISTS label_jobs (id INTEGER PRIMARY KEY, selection TEXT NOT NULL, frame_id INTEGER NOT NULL
    REFERENCES frames(id), state TEXT NOT NULL, backend TEXT NOT NULL, model_id INTEGER, external_id TEXT, label_id INTEGER,
    created REAL, updated REAL, UNIQUE(selection, frame_id));
CREATE TABLE IF NOT EXISTS labels (id INTEGER PRIMARY KEY, frame_id INTEGER NOT NULL REFERENCES frames(id), version INTEGER NOT NULL,
    job_id INTEGER NOT NULL REFERENCES label_jobs(id), source TEXT NOT NULL, labeller TEXT, model_id INTEGER, payload TEXT NOT NULL,
    digest TEXT NOT NULL, created REAL, UNIQUE(frame_id, version), UNIQUE(job_id, source, digest));
CREATE TABLE IF NOT EXISTS registry (id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL, role TEXT NOT NULL,
    previous_id INTEGER, promoted REAL);
CREATE TABLE IF NOT EXISTS gate_results (id INTEGER PRIMARY KEY, candidate_id INTEGER, production_id INTEGER, suite TEXT,
    metrics TEXT, verdict TEXT, created REAL);
CREATE INDEX IF NOT EXISTS frames_clip ON frames(clip_id);
""" + "".join(f"CREATE INDEX IF NOT EXISTS signals_{s} ON signals(run_id, {s} DESC, frame_id);\n" for s in SIGNALS)
V1_REGISTRY_LAYOUT = (  # registry.ensure_registry replaced the empty placeholder with this on first use
    "CREATE TABLE registry (id INTEGER PRIMARY KEY, model_id INTEGER NOT NULL REFERENCES models(id), role TEXT NOT "
    "NULL, previous_id INTEGER REFERENCES registry(id), promoted REAL NOT NULL, action TEXT NOT NULL, checkpoint "
    "TEXT NOT NULL, sha256 TEXT NOT NULL, onnx TEXT, onnx_sha256 TEXT, note TEXT)",
    "CREATE UNIQUE INDEX registry_one_production ON registry(role) WHERE role = 'production'")
OLDER_LABEL_PLACEHOLDERS = (  # label tables of catalogs written before labels.py existed (labels.ensure_schema replaced them)
    "CREATE TABLE label_jobs (id INTEGER PRIMARY KEY, selection_id INTEGER, frame_id INTEGER NOT NULL, state TEXT NOT NULL, "
    "backend TEXT, created REAL, updated REAL)",
    "CREATE TABLE labels (id INTEGER PRIMARY KEY, frame_id INTEGER NOT NULL, version INTEGER NOT NULL, source TEXT, "
    "model_id INTEGER, payload TEXT, created REAL, UNIQUE(frame_id, version))")


def write_v1_catalog(path: Path, registry: str = "final", labels: str = "final", rows: bool = True) -> Path:
    """A version-1 catalog. registry: "final" (after a promotion: registry.py's layout, 2 entries) or
    "placeholder" (as created; with rows=True one placeholder row, which v1 refused to upgrade); labels:
    "final" (2 jobs, 2 label versions) or "placeholder" (the older layout, empty unless rows=True)."""
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("BEGIN")
    for stmt in V1_SCHEMA.split(";"):
        if stmt.strip():
            db.execute(stmt)
    db.execute("PRAGMA user_version = 1")
    x = db.execute
    x("INSERT INTO models VALUES (1, 'aaa', 'm.onnx', 8, '{}', 1.0), (2, 'bbb', 'run/checkpoint.pt', 0, '{\"kind\": \"checkpoint\"}', 2.0)")
    x("INSERT INTO fleets VALUES (1, '/fleet', 'nuscenes6', '[\"CAM_FRONT\"]', 1.0)")
    x("INSERT INTO clips VALUES (1, 1, 'clip_00000', 3), (2, 1, 'clip_00001', 3)")
    x("INSERT INTO frames VALUES " + ", ".join(f"({c * 3 + i + 1}, {c + 1}, {i}, 'scenes/clip_0000{c}/00000{i}', {i * 500000})"
                                                for c in range(2) for i in range(3)))
    x("INSERT INTO shadow_runs VALUES (1, 1, 0, 1, 3.0)")
    x("INSERT INTO shadow_clips VALUES (1, 1, 3, 0, 4.0), (1, 2, 3, 1, 5.0)")
    cols = ", ".join(["run_id", "frame_id", "status", "error", *SIGNALS, "per_camera", "predictions"])
    for f in range(1, 7):
        vals = [1, f, "corrupt" if f == 5 else "ok", "truncated" if f == 5 else None, *[f * 0.1 + k for k in range(len(SIGNALS))],
                "{}", json.dumps({"det2d": []})]
        x(f"INSERT INTO signals ({cols}) VALUES ({', '.join('?' * len(vals))})", vals)
        x("INSERT INTO embeddings VALUES (1, ?, 1, 4, ?)", (f, np.arange(4, dtype=np.float32).tobytes()))
    x("INSERT INTO trigger_hits VALUES ('flicker', 1, 1, 2, 3.0), ('novelty', 1, 1, 6, 0.2)")
    x("INSERT INTO selections VALUES (1, 'sel', 1, 'hybrid', 2, 'frame', '{}', 6.0)")
    x("INSERT INTO selection_items VALUES (1, 0, 2, '{}'), (1, 1, 6, '{}')")
    if labels == "placeholder":
        x("DROP TABLE labels")
        x("DROP TABLE label_jobs")
        for stmt in OLDER_LABEL_PLACEHOLDERS:
            x(stmt)
        if rows:
            x("INSERT INTO label_jobs (frame_id, state) VALUES (2, 'queued')")
    else:
        x("INSERT INTO label_jobs VALUES (1, 'sel', 2, 'accepted', 'oracle', 1, NULL, 1, 7.0, 8.0), "
          "(2, 'sel', 6, 'labelled', 'oracle', 1, NULL, 2, 7.0, 8.0)")
        x("INSERT INTO labels VALUES (1, 2, 1, 1, 'oracle', 'oracle', 1, '{\"det2d\": []}', 'd1', 7.5), "
          "(2, 6, 1, 2, 'oracle', 'oracle', 1, '{\"det2d\": []}', 'd2', 7.6)")
    if registry == "final":
        x("DROP TABLE registry")
        for stmt in V1_REGISTRY_LAYOUT:
            x(stmt)
        x("INSERT INTO registry VALUES (1, 2, 'retired', NULL, 9.0, 'promote', '/run/a/checkpoint.pt', 'bbb', NULL, NULL, ''), "
          "(2, 2, 'production', 1, 10.0, 'promote', '/run/b/checkpoint.pt', 'ccc', NULL, NULL, 'second')")
    elif rows:
        x("INSERT INTO registry (model_id, role) VALUES (1, 'production')")
    x("INSERT INTO gate_results VALUES (1, 2, 1, 'day@abc', '{\"frames\": 4}', 'metrics', 11.0)")
    db.execute("COMMIT")
    db.close()
    return path


def dump(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table, by table (read with plain sqlite3, not through Catalog)."""
    db = sqlite3.connect(str(path))
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    out = {n: sorted(db.execute(f"SELECT * FROM {n}").fetchall(), key=repr) for n in names}
    db.close()
    return out


def layout(path: Path) -> dict[str, list[tuple]]:
    """Per table its columns (name, type, not null, default, pk) and the file's index names."""
    db = sqlite3.connect(str(path))
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    out = {n: [tuple(r[1:]) for r in db.execute(f"PRAGMA table_info({n})")] for n in names}
    out["indexes"] = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"))
    out["version"] = db.execute("PRAGMA user_version").fetchone()[0]
    db.close()
    return out


def user_version(path: Path) -> int:
    db = sqlite3.connect(str(path))
    v = db.execute("PRAGMA user_version").fetchone()[0]
    db.close()
    return v


# -- one owner, a version that moves ------------------------------------------------------------------
def test_every_table_is_defined_in_the_catalog_module_only():
    created = {}
    for f in sorted((REPO / "data_engine").rglob("*.py")):
        for m in re.finditer(r"CREATE\s+(?:UNIQUE\s+)?(TABLE|INDEX)", f.read_text()):
            created.setdefault(f.relative_to(REPO).as_posix(), []).append(m.group(1))
    assert list(created) == ["data_engine/catalog.py"], created
    assert set(TABLES) == {"models", "fleets", "clips", "frames", "shadow_runs", "shadow_clips", "signals", "embeddings",
                           "trigger_hits", "selections", "selection_items", "label_jobs", "labels", "registry",
                           "gate_results"}
    assert SCHEMA_VERSION == 2


def test_a_new_catalog_has_the_current_layout(tmp_path):
    Catalog(tmp_path / "c.db", create=True).close()
    got = layout(tmp_path / "c.db")
    assert got["version"] == SCHEMA_VERSION
    assert [c[0] for c in got["registry"]] == ["id", "model_id", "role", "previous_id", "promoted", "action", "checkpoint",
                                               "sha256", "onnx", "onnx_sha256", "note"]
    assert len(got["indexes"]) == len(INDEXES) and "registry_one_production" in got["indexes"]


# -- migration ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("registry", ["final", "placeholder"])
def test_a_version_1_catalog_is_upgraded_keeping_every_row(tmp_path, registry):
    old = write_v1_catalog(tmp_path / "old.db", registry=registry, rows=False)
    before = dump(old)
    with Catalog(old) as cat:
        assert cat.latest_run() == 1 and list(cat.table(1)["frame_id"]) == [1, 2, 3, 4, 6]
        assert cat.hits(1) == {"flicker": [(2, 3.0)], "novelty": [(6, 0.2)]}
    assert user_version(old) == SCHEMA_VERSION == 2
    after = dump(old)
    if registry == "placeholder":  # the empty placeholder took the final layout
        assert before.pop("registry") == after.pop("registry") == []
    assert after == before  # every row of every table, as it was
    Catalog(tmp_path / "new.db", create=True).close()
    assert layout(old) == layout(tmp_path / "new.db")  # the same layout as a catalog created now
    Catalog(old).close()  # opening again changes nothing
    assert dump(old) == after if registry == "final" else dump(old) == {**after, "registry": []}


def test_the_upgraded_catalog_serves_the_registry_and_labels(tmp_path):
    old = write_v1_catalog(tmp_path / "old.db")
    assert [e["sha256"] for e in history(old)] == ["bbb", "ccc"]
    assert production(old, verify=False)["note"] == "second"
    with open_catalog(old) as cat:
        assert sorted(accepted_labels(cat)) == [2]
    with Catalog(old) as cat, pytest.raises(sqlite3.IntegrityError):  # still one production entry at most
        cat.db.execute("UPDATE registry SET role = 'production' WHERE id = 1")


def test_older_empty_label_placeholders_are_upgraded(tmp_path):
    old = write_v1_catalog(tmp_path / "old.db", labels="placeholder", rows=False)
    with Catalog(old) as cat:
        assert "selection" in cat.columns("label_jobs") and cat.columns("labels")[-1] == "created"
    assert user_version(old) == 2


@pytest.mark.parametrize("what,words", [("registry", "registry rows of an older layout"),
                                        ("labels", "label_jobs rows of an older layout")])
def test_placeholder_rows_are_refused_and_the_file_left_as_it_was(tmp_path, what, words):
    old = write_v1_catalog(tmp_path / "old.db", registry="placeholder" if what == "registry" else "final",
                           labels="placeholder" if what == "labels" else "final", rows=True)
    before, shape = dump(old), layout(old)
    with pytest.raises(CatalogError, match=f"old.db holds {words}; recreate the catalog"):
        Catalog(old)
    assert dump(old) == before and layout(old) == shape and user_version(old) == 1  # one transaction: nothing moved


def test_one_transaction_rolls_back_a_step_already_done(tmp_path):
    """The registry placeholder is replaced first, then the label placeholder refuses: the registry
    must be the placeholder again."""
    old = write_v1_catalog(tmp_path / "old.db", registry="placeholder", labels="placeholder", rows=False)
    db = sqlite3.connect(str(old))
    db.execute("INSERT INTO label_jobs (frame_id, state) VALUES (2, 'queued')")
    db.commit()
    db.close()
    shape = layout(old)
    with pytest.raises(CatalogError, match="label_jobs rows of an older layout"):
        Catalog(old)
    assert layout(old) == shape and "checkpoint" not in [c[0] for c in layout(old)["registry"]]


def test_newer_and_unknown_older_versions_are_one_line_errors(tmp_path):
    Catalog(tmp_path / "c.db", create=True).close()
    db = sqlite3.connect(str(tmp_path / "c.db"))
    db.execute("PRAGMA user_version = 3")
    db.close()
    with pytest.raises(CatalogError, match="schema version 3, newer than this package's 2; update the hydranet package"):
        Catalog(tmp_path / "c.db")
    db = sqlite3.connect(str(tmp_path / "c.db"))
    db.execute("PRAGMA user_version = 0")
    db.close()
    with pytest.raises(CatalogError, match="schema version 0, which this package cannot upgrade .*recreate it"):
        Catalog(tmp_path / "c.db")
