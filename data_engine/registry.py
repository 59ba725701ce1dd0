"""The model registry, in the catalog: which model is in production, what was before, and a rollback.

    hydranet engine promote --catalog CAT --checkpoint C [--onnx M] [--note TEXT]
    hydranet engine rollback --catalog CAT
    hydranet engine registry --catalog CAT

A model is identified by the sha256 of its checkpoint file (and its deployed ONNX by that file's sha256).
Table `registry` is an append-only log: each promotion or rollback adds one entry, exactly one entry has
role "production" (a partial UNIQUE index), the entry it replaced becomes "retired" (or "rolled_back")
and is named by the new entry's `previous_id`. Moving the pointer is one SQLite transaction (demote the
old entry, insert the new one): a failure or kill -9 at any point leaves the old production in force.

`production()` checks the production files at use time: a checkpoint or ONNX model that no longer
exists, or whose sha256 changed since it was promoted, is a one-line RegistryError, never a silent load
of another model. Rollback returns to the entry before the current one (as a new entry, so the log keeps
what happened); rolling back past the first production is an error.
"""
from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from data_engine.catalog import Catalog
from hydranet.io import checkpoint_file as run_or_checkpoint, file_sha256

_COLUMNS = ("id", "model_id", "role", "previous_id", "promoted", "action", "checkpoint", "sha256", "onnx", "onnx_sha256",
            "note")
class RegistryError(ValueError):
    """A promotion, rollback or production lookup that cannot be done; one line saying what to do."""


# -- catalog handles (the `registry` table is defined in data_engine/catalog_schema.py) ---------------------------
@contextmanager
def open_registry(catalog: str | Path | Catalog, create: bool = False) -> Iterator[Catalog]:
    """The catalog: a path, opened (created with `create`) and closed here, or an open Catalog."""
    if isinstance(catalog, Catalog):
        yield catalog
        return
    with Catalog(catalog, create=create) as cat:
        yield cat


def model_id(cat: Catalog, path: str | Path, sha: str, kind: str = "checkpoint") -> int:
    """The `models` row of a file (by sha256), added if new; call inside a transaction."""
    cat.db.execute("INSERT OR IGNORE INTO models (sha256, path, embedding_dim, meta, added) VALUES (?, ?, 0, ?, ?)",
                   (sha, str(path), json.dumps({"kind": kind}), time.time()))
    return int(cat.db.execute("SELECT id FROM models WHERE sha256 = ?", (sha,)).fetchone()[0])


def checkpoint_file(checkpoint: str | Path) -> Path:
    """The checkpoint file of a file or run folder (RUN/checkpoint.pt), resolved; RegistryError if missing."""
    path = run_or_checkpoint(checkpoint)
    if not path.is_file():
        raise RegistryError(f"checkpoint {path} does not exist; give a file written by `hydranet train` or its run folder")
    return path.resolve()


# -- entries ------------------------------------------------------------------------------------------------
def _entry(row) -> dict[str, Any]:
    e = dict(zip(_COLUMNS, row))
    e["when"] = datetime.datetime.fromtimestamp(e["promoted"]).isoformat(timespec="seconds")
    return e


def _select(cat: Catalog, where: str, args: tuple = ()) -> list[dict[str, Any]]:
    return [_entry(r) for r in cat.db.execute(f"SELECT {', '.join(_COLUMNS)} FROM registry {where}", args)]


def _current(cat: Catalog) -> dict[str, Any] | None:
    rows = _select(cat, "WHERE role = 'production'")
    return rows[0] if rows else None


def file_status(entry: dict[str, Any]) -> str:
    """"ok", or what is wrong with the entry's files now ("checkpoint missing", "onnx changed", ...)."""
    for key, sha_key in (("checkpoint", "sha256"), ("onnx", "onnx_sha256")):
        if entry.get(key) is None:
            continue
        p = Path(entry[key])
        if not p.is_file():
            return f"{key} missing"
        if file_sha256(p) != entry[sha_key]:
            return f"{key} changed"
    return "ok"


def check_files(entry: dict[str, Any], what: str = "production") -> None:
    """RegistryError naming the file when an entry's checkpoint or ONNX model is gone or changed."""
    status = file_status(entry)
    if status == "ok":
        return
    key = status.split()[0]
    if status.endswith("missing"):
        raise RegistryError(f"{what} {key} {entry[key]} (registry entry {entry['id']}, promoted {entry['when']}) no longer "
                            f"exists; restore the file, or `hydranet engine rollback` / `promote` another model")
    raise RegistryError(f"{what} {key} {entry[key]} (registry entry {entry['id']}, promoted {entry['when']}) changed since "
                        "it was promoted (sha256 differs); restore the promoted file, or promote the new one explicitly")


# -- the API ------------------------------------------------------------------------------------------------
def _insert_entry(cat: Catalog, entry: dict[str, Any]) -> int:
    cur = cat.db.execute(f"INSERT INTO registry ({', '.join(_COLUMNS[1:])}) VALUES ({', '.join('?' * (len(_COLUMNS) - 1))})",
                         tuple(entry[c] for c in _COLUMNS[1:]))
    return int(cur.lastrowid)


def check_onnx_source(onnx_path: Path, ckpt: Path, sha: str) -> None:
    """RegistryError unless `onnx_path` is a HydraNet export of the checkpoint whose sha256 is `sha` (its
    metadata's source.checkpoint_sha256, written by `hydranet export`; kept by `hydranet quantize`)."""
    from deploy.metadata import file_metadata

    if not onnx_path.is_file():
        raise RegistryError(f"--onnx {onnx_path} does not exist; export the checkpoint with `hydranet export`")
    try:
        md = file_metadata(onnx_path)  # without importing onnx; a file it cannot parse goes to onnx.load
    except Exception as e:  # noqa: BLE001 - onnx raises its own types for a file that is not a model
        raise RegistryError(f"--onnx {onnx_path} is not a HydraNet ONNX model ({str(e).splitlines()[0][:160]}); "
                            "give the file `hydranet export` wrote") from None
    source = md.get("source") if isinstance(md.get("source"), dict) else {}
    exported_from = source.get("checkpoint_sha256")
    if exported_from is None:
        raise RegistryError(f"--onnx {onnx_path} does not record which checkpoint it was exported from (an older export); "
                            f"re-export it with `hydranet export --checkpoint {ckpt}`")
    if exported_from != sha:
        raise RegistryError(f"--onnx {onnx_path} was exported from another checkpoint (sha256 {str(exported_from)[:12]}, "
                            f"{source.get('checkpoint')}), not {ckpt} (sha256 {sha[:12]}): the registry would name one model "
                            f"while shadow mode runs another; export this checkpoint with `hydranet export`")


def gate_rejection(cat: Catalog, sha: str) -> dict[str, Any] | None:
    """The latest gate decision of this catalog on the candidate `sha` when it was a rejection, else None."""
    row = cat.db.execute("SELECT g.id, g.created, g.metrics FROM gate_results g JOIN models m ON g.candidate_id = m.id "
                         "WHERE m.sha256 = ? AND g.verdict IN ('promote', 'reject') ORDER BY g.id DESC LIMIT 1",
                         (sha,)).fetchone()
    if row is None:
        return None
    report = json.loads(row[2])
    if report.get("verdict") != "reject":
        return None
    return {"id": row[0], "when": datetime.datetime.fromtimestamp(row[1]).isoformat(timespec="seconds"),
            "failing": report.get("failing", [])}


def promote(catalog: str | Path | Catalog, checkpoint: str | Path, onnx: str | Path | None = None,
            note: str = "", force: bool = False) -> dict[str, Any]:
    """Make `checkpoint` (file or run folder; `onnx`: its deployed export) the production model, in one
    transaction; the previous production is kept (retired). Promoting the current production again
    (same checkpoint and ONNX sha256) changes nothing. A candidate whose latest gate decision in this
    catalog was a rejection is refused unless `force` (then recorded as action "force-promote").
    Returns the production entry."""
    from hydranet.checkpoint_scan import checkpoint_sound

    ckpt = checkpoint_file(checkpoint)
    if not checkpoint_sound(ckpt):  # read without torch (its import was most of promote's time); else torch decides
        from hydranet.checkpoint import load_checkpoint

        load_checkpoint(ckpt)  # a readable hydranet checkpoint with finite weights, or a one-line error
    sha = file_sha256(ckpt)
    onnx_path = onnx_sha = None
    if onnx is not None:
        onnx_path = Path(onnx)
        check_onnx_source(onnx_path, ckpt, sha)
        onnx_path = onnx_path.resolve()
        onnx_sha = file_sha256(onnx_path)
    with open_registry(catalog, create=True) as cat:
        with cat.transaction():
            cur = _current(cat)
            if cur is not None and cur["sha256"] == sha and cur["onnx_sha256"] == onnx_sha:
                return cur
            rejected = gate_rejection(cat, sha)
            if rejected is not None and not force:
                raise RegistryError(f"checkpoint {ckpt} was rejected by the gate in {cat.path} (gate result {rejected['id']}, "
                                    f"{rejected['when']}, failing {', '.join(rejected['failing']) or '-'}); fix the "
                                    "regression, or promote it anyway with --force (recorded as forced)")
            mid = model_id(cat, ckpt, sha)
            if cur is not None:
                cat.db.execute("UPDATE registry SET role = 'retired' WHERE id = ?", (cur["id"],))
            forced = rejected is not None
            new = _insert_entry(cat, {"model_id": mid, "role": "production", "previous_id": cur["id"] if cur else None,
                                      "promoted": time.time(), "action": "force-promote" if forced else "promote",
                                      "checkpoint": str(ckpt), "sha256": sha,
                                      "onnx": None if onnx_path is None else str(onnx_path), "onnx_sha256": onnx_sha,
                                      "note": (f"forced past gate rejection {rejected['id']}; " if forced else "") + note})
        return _select(cat, "WHERE id = ?", (new,))[0]


def production(catalog: str | Path | Catalog, missing_ok: bool = False, verify: bool = True) -> dict[str, Any] | None:
    """The production entry {"id", "checkpoint", "sha256", "onnx", "onnx_sha256", "promoted", "when", "note",
    "action", "previous_id", ...}. None with `missing_ok` when there is none (or no catalog yet);
    `verify`: RegistryError when its files are gone or changed."""
    if missing_ok and not isinstance(catalog, Catalog) and not Path(catalog).exists():
        return None
    with open_registry(catalog) as cat:
        cur = _current(cat)
    if cur is None:
        if missing_ok:
            return None
        raise RegistryError(f"catalog {getattr(catalog, 'path', catalog)} has no production model; promote one with "
                            "`hydranet engine promote --catalog CAT --checkpoint C`")
    if verify:
        check_files(cur)
    return cur


def rollback(catalog: str | Path | Catalog, note: str = "") -> dict[str, Any]:
    """Return to the production before the current one (a new entry; the current becomes "rolled_back")."""
    with open_registry(catalog) as cat:
        with cat.transaction():
            cur = _current(cat)
            if cur is None:
                raise RegistryError(f"catalog {cat.path} has no production model, so nothing to roll back")
            if cur["previous_id"] is None:
                raise RegistryError(f"catalog {cat.path}: production {cur['checkpoint']} (entry {cur['id']}) has no previous "
                                    "production to roll back to")
            prev = _select(cat, "WHERE id = ?", (cur["previous_id"],))[0]
            check_files(prev, "previous production")
            cat.db.execute("UPDATE registry SET role = 'rolled_back' WHERE id = ?", (cur["id"],))
            new = _insert_entry(cat, {**prev, "role": "production", "previous_id": prev["previous_id"],
                                      "promoted": time.time(), "action": "rollback",
                                      "note": note or f"rollback from entry {cur['id']}"})
        return _select(cat, "WHERE id = ?", (new,))[0]


def history(catalog: str | Path | Catalog) -> list[dict[str, Any]]:
    """Every registry entry, oldest first, each with "status" (file_status: "ok", "checkpoint missing", ...)."""
    with open_registry(catalog) as cat:
        rows = _select(cat, "ORDER BY id")
    return [{**r, "status": file_status(r)} for r in rows]


def format_history(rows: list[dict[str, Any]]) -> str:
    lines = ["| entry | role | action | when | checkpoint | sha256 | onnx | previous | files | note |",
             "|---:|---|---|---|---|---|---|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['id']} | {'**production**' if r['role'] == 'production' else r['role']} | {r['action']} | "
                     f"{r['when']} | {r['checkpoint']} | {r['sha256'][:12]} | {r['onnx'] or '-'} | "
                     f"{r['previous_id'] if r['previous_id'] is not None else '-'} | {r['status']} | {r['note'] or ''} |")
    return "\n".join(lines)
