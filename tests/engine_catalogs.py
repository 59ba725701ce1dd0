"""Catalogs written without a model for the engine's table tests: a seeded fixture catalog (one shadow
run, signals and embeddings, tests/test_engine_triggers.py and test_engine_mining.py) and a version-1
catalog as the code before schema version 2 wrote it (tests/test_engine_catalog.py, test_engine_gate.py)."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np

from data_engine.catalog import Catalog
from data_engine.catalog_schema import APPLICATION_ID
from data_engine.signals import SIGNALS

# the scale of each column in the fixture: values drawn around the trigger's threshold
SCALE = {"det2d_uncertain": 6, "det3d_uncertain": 4, "signs_lights_entropy": 0.9, "drivable_entropy_p95": 1.2, "flicker": 3,
         "jitter": 0.16, "cross_camera": 1.0, "box2d_vs_3d": 1.0, "depth_vs_3d": 1.0, "speed_excess": 2.0, "accel": 30.0,
         "disagree_det2d": 1.0}


def write_fixture_catalog(path: Path, clips: int = 4, frames: int = 10, seed: int = 3) -> Path:
    """A catalog with one shadow run of clips x frames ok frames (+ one corrupt frame), seeded signals
    (integers for the count signals, ~10% NaN) and 2-camera embeddings, written through SQL and
    Catalog.write_clip only (no model, no fleet on disk)."""
    rng = np.random.default_rng(seed)
    with Catalog(path, create=True) as cat:
        db = cat.db
        with cat.transaction():
            db.execute("INSERT INTO models (sha256, path, embedding_dim, meta, added) VALUES ('m', 'm.onnx', 8, '{}', 0)")
            db.execute("INSERT INTO fleets (root, rig, cameras, added) VALUES ('/fleet', 'rig', '[]', 0)")
            for c in range(clips):
                db.execute("INSERT INTO clips (fleet_id, name, num_frames) VALUES (1, ?, ?)", (f"clip_{c:05d}", frames))
                db.executemany("INSERT INTO frames (clip_id, idx, dir, timestamp_us) VALUES (?, ?, ?, ?)",
                               [(c + 1, i, f"scenes/clip_{c:05d}/{i:06d}", i * 100_000) for i in range(frames)])
            db.execute("INSERT INTO shadow_runs (model_id, candidate_id, fleet_id, started) VALUES (1, 0, 1, 0)")
        centres = rng.normal(size=(2, 2, 8))  # clips 0, 2, ... look alike, as do 1, 3, ...: novelty fires on outliers
        for c in range(clips):
            rows = []
            for i in range(frames):
                sig = {}
                for col, s in SCALE.items():
                    v = rng.uniform(0, s)
                    sig[col] = float(np.round(v)) if col in ("det2d_uncertain", "det3d_uncertain", "flicker") else v
                    if rng.random() < 0.1:
                        sig[col] = float("nan")
                emb = centres[c % 2] + rng.normal(scale=1.0 if i == frames - 1 else 0.1, size=(2, 8))
                bad = c == 1 and i == 4
                rows.append({"frame_id": c * frames + i + 1, "status": "corrupt" if bad else "ok",
                             "error": "truncated JPEG" if bad else None, "signals": {} if bad else sig,
                             "embedding": None if bad else emb})
            cat.write_clip(1, c + 1, rows)
    return path


def write_fixture_offline(path: Path) -> None:
    """The fixture's offline columns (what `engine uncertainty` stores: data_engine.mining.OFFLINE, one NaN), seeded,
    the same on every backend."""
    from data_engine.mining import OFFLINE

    with Catalog(path) as cat:
        ids = cat.table(1)["frame_id"]
        rng = np.random.default_rng(5)
        cols = {n: rng.uniform(size=len(ids)) for n in OFFLINE}
        cols["ensemble"][3] = np.nan
        cat.write_offline(1, ids.tolist(), cols, [{"path": "a.onnx"}, {"path": "b.onnx"}])

def both_backends(root: Path) -> dict[str, Path]:
    """The seeded fixture catalog (with its offline columns) written twice under `root`: {"sqlite": a catalog file,
    "lake": a lake catalog folder}."""
    from data_engine.lake import create

    db = write_fixture_catalog(root / "catalog.db")
    lake = write_fixture_catalog(create(root / "lake", "lake"))
    for p in (db, lake):
        write_fixture_offline(p)
    return {"sqlite": db, "lake": lake}


def assert_same_answers(ref: Path, other: Path) -> None:
    """Every per-frame answer of catalog `other` equals `ref`'s (tables, top-k both ways, embeddings byte for byte,
    predictions, offline columns, each per-frame table's fingerprint): the lake against the SQLite file, a compacted
    lake against the clip parts."""
    from data_engine.catalog_migrate import PER_FRAME, fingerprint

    with Catalog(ref) as a, Catalog(other) as b:
        assert a.latest_run() == b.latest_run() == 1
        for status in (None, "ok"):
            ta, tb = a.table(1, status=status), b.table(1, status=status)
            assert ta.keys() == tb.keys()
            for k in ta:
                np.testing.assert_array_equal(ta[k], tb[k], err_msg=k)
        for sig in ("flicker", "jitter"):
            for desc in (True, False):
                np.testing.assert_array_equal(np.stack(a.top(1, sig, 7, desc)), np.stack(b.top(1, sig, 7, desc)))
        ea, eb = a.embeddings(1), b.embeddings(1)
        assert np.array_equal(ea[0], eb[0]) and ea[1].tobytes() == eb[1].tobytes()
        assert a.predictions(1, ta["frame_id"]) == b.predictions(1, tb["frame_id"])
        oa, ob = a.offline(1), b.offline(1)
        assert oa.keys() == ob.keys() and all(np.allclose(list(oa[k].values()), list(ob[k].values()), equal_nan=True) for k in oa)
        fa, fb = fingerprint(a), fingerprint(b)
        assert all(fa[t] == fb[t] for t in PER_FRAME), [t for t in PER_FRAME if fa[t] != fb[t]]  # row for row


def mine_to_file(path: Path, strategy: str, unit: str, out: Path) -> bytes:
    """The selection file of `strategy` over the fixture catalog (6 frames or 2 clips, min gap 0.25 s), as bytes:
    what the backend tests compare byte for byte."""
    import dataclasses

    from data_engine.config import EngineConfig
    from data_engine.mining import mine, write_selection

    cfg = EngineConfig()
    cfg = dataclasses.replace(cfg, mining=dataclasses.replace(cfg.mining, min_gap_s=0.25))
    write_selection(mine(path, 6 if unit == "frame" else 2, strategy, cfg, unit, name=f"{strategy}-{unit}"), out)
    return out.read_bytes()

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


def catalog_env(fleet: Path, tmp_path: Path) -> dict:
    """The labelling tests' set-up: a catalog holding `fleet` (2 clips x 2 frames) and a selection of its 4 frames."""
    from data_engine.fleet import Fleet

    cat = tmp_path / "catalog.db"
    with Catalog(cat, create=True) as c:
        c.add_fleet(Fleet(fleet))
    sel = tmp_path / "selection.json"
    sel.write_text(json.dumps({"name": "sel", "frames": [{"clip": f"clip_{c:05d}", "frame": f} for c in range(2) for f in range(2)]}))
    return {"fleet": fleet, "catalog": cat, "selection": sel, "tmp": tmp_path}


def catalog_rows(out: Path) -> dict:
    """What must not depend on interruptions: selections, label jobs, label versions, registry actions."""
    db = sqlite3.connect(out / "catalog.sqlite")
    try:
        return {"selected": db.execute("SELECT s.name, i.rank, i.frame_id FROM selection_items i JOIN selections s "
                                       "ON i.selection_id = s.id ORDER BY 1, 2").fetchall(),
                "jobs": db.execute("SELECT selection, frame_id, state FROM label_jobs ORDER BY 1, 2").fetchall(),
                "labels": db.execute("SELECT frame_id, version, source, digest FROM labels ORDER BY 1, 2").fetchall(),
                "registry": db.execute("SELECT action, role FROM registry ORDER BY id").fetchall()}
    finally:
        db.close()


def matched_boxes(expected: dict, payload: dict, cameras, vocab, tol_px: float = 0.5) -> int:
    """Assert an imported label's 2D boxes are the expected ones camera by camera (same label names, every corner
    within `tol_px`); returns how many boxes were compared."""
    n = 0
    for cam in cameras:
        ref = sorted(expected["cameras"][cam]["boxes2d"], key=lambda b: b["bbox"])
        mine = sorted(payload["cameras"][cam]["boxes2d"], key=lambda b: b["bbox"])
        assert [vocab.name_of(b) for b in ref] == [vocab.name_of(b) for b in mine], cam
        assert all(max(abs(p - q) for p, q in zip(a["bbox"], b["bbox"])) <= tol_px for a, b in zip(ref, mine)), cam
        n += len(ref)
    return n
