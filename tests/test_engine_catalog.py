"""The catalog schema: one owner (data_engine/catalog_schema.py), a version that changes with the layout, and
the migration of a version-1 catalog (as the code before schema version 2 wrote it) keeping every row."""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from engine_catalogs import write_v1_catalog

from data_engine.catalog import Catalog
from data_engine.catalog_schema import INDEXES, SCHEMA_VERSION, TABLES, CatalogError
from data_engine.labels import accepted_labels, open_catalog
from data_engine.registry import history, production

REPO = Path(__file__).resolve().parents[1]

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
def test_every_table_is_defined_in_the_schema_module_only():
    created = {}
    for f in sorted((REPO / "data_engine").rglob("*.py")):
        for m in re.finditer(r"CREATE\s+(?:UNIQUE\s+)?(TABLE|INDEX)", f.read_text()):
            created.setdefault(f.relative_to(REPO).as_posix(), []).append(m.group(1))
    assert list(created) == ["data_engine/catalog_schema.py"], created
    assert set(TABLES) == {"models", "fleets", "clips", "frames", "shadow_runs", "shadow_clips", "signals", "embeddings",
                           "trigger_hits", "selections", "selection_items", "label_jobs", "labels", "registry",
                           "gate_results", "label_events", "offline_signals", "offline_sources"}
    assert SCHEMA_VERSION == 4


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
    assert user_version(old) == SCHEMA_VERSION == 4
    after = dump(old)
    if registry == "placeholder":  # the empty placeholder took the final layout
        assert before.pop("registry") == after.pop("registry") == []
    assert after.pop("label_events") == []  # version 3: the review history starts empty
    assert after.pop("offline_signals") == after.pop("offline_sources") == []  # version 4: no offline column yet
    after["label_jobs"] = [r[:-1] for r in after["label_jobs"] if r[-1] is None]  # and every job's note is NULL
    assert after == before  # every row of every table, as it was
    Catalog(tmp_path / "new.db", create=True).close()
    assert layout(old) == layout(tmp_path / "new.db")  # the same layout as a catalog created now
    after = dump(old)
    Catalog(old).close()  # opening again changes nothing
    assert dump(old) == after


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
    assert user_version(old) == 4


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
    db.execute("PRAGMA user_version = 5")
    db.close()
    with pytest.raises(CatalogError, match="schema version 5, newer than this package's 4; update the hydranet package"):
        Catalog(tmp_path / "c.db")
    db = sqlite3.connect(str(tmp_path / "c.db"))
    db.execute("PRAGMA user_version = 0")
    db.close()
    with pytest.raises(CatalogError, match="schema version 0, which this package cannot upgrade .*recreate it"):
        Catalog(tmp_path / "c.db")
