"""The relabel queue: label jobs and their states, in the catalog (docs/labeling.md).

    selection.json --create_jobs--> label_jobs (queued) --send--> sent --import_labels--> labelled
                                                           --accept--> accepted | --reject--> rejected (--requeue--> queued)
    accepted --reopen--> labelled (the pin dropped, kept in the history) | accepted --accept --label-version N--> accepted (re-pin)

A selection is the miner's output ({"name", "items": [{"frame_id", "clip", "frame", "frame_ids"}]}) or
the minimal hand-written form {"name": optional, "frames": [{"clip": "clip_00003", "frame": 2}]}; each
selected frame becomes one job (UNIQUE(selection, frame): creating the jobs twice adds nothing).

A job changes state through `move_job` only (a legal move, inside the caller's transaction), and every review move
and quarantine is a row of label_events (`log_event`: who, when, the pin before and after) written in the move's
transaction; `history` reads them back. The versioned label store and the review moves are data_engine/labels.py's;
sending jobs to a backend and importing its labels, data_engine/label_exchange.py's.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from data_engine.catalog import Catalog
from data_engine.labeling.base import Job, LabelingError
from hydranet.io import read_json

STATES = ("queued", "sent", "labelled", "accepted", "rejected")
TRANSITIONS = {"queued": ("sent",), "sent": ("labelled", "rejected"), "labelled": ("accepted", "rejected"), "rejected": ("queued",),
               "accepted": ("labelled", "accepted")}
# how each move is asked for (in the one-line refusals)
MOVES = {("queued", "sent"): "sent", ("sent", "labelled"): "labelled (by an import)",
         ("sent", "rejected"): "rejected (the frame cannot be labelled)", ("labelled", "accepted"): "accepted",
         ("labelled", "rejected"): "rejected", ("rejected", "queued"): "queued", ("accepted", "labelled"): "labelled (--reopen)",
         ("accepted", "accepted"): "accepted again on another version (re-pin: --accept ID --label-version N)"}


class LabelError(LabelingError):
    """An illegal job transition or an unusable selection; one line naming the job or item."""


# -- selections -> jobs ----------------------------------------------------------------------------------
def read_selection(path: str | Path) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """(name, items, the whole JSON) of a selection file; items are {"frame_id"?, "clip", "frame", "frame_ids"?}."""
    path = Path(path)
    sel = read_json(path, "selection", LabelError, "give the file `hydranet engine mine --out` wrote")
    items = sel.get("items", sel.get("frames")) if isinstance(sel, dict) else None
    if not isinstance(items, list) or not items:
        raise LabelError(f"selection {path} has no 'items' (miner output) or 'frames' list [{{\"clip\", \"frame\"}}]")
    for k, it in enumerate(items):
        if not isinstance(it, dict) or not ("frame_id" in it or ("clip" in it and "frame" in it)):
            raise LabelError(f"selection {path} item {k} needs 'frame_id' or 'clip' and 'frame', got {it!r:.80}")
    name = str(sel.get("name") or path.stem)
    return name, items, sel


def _frame_ids(cat: Catalog, items: Sequence[Mapping], fleet: str | None, where: str) -> list[int]:
    ids: list[int] = []
    for k, it in enumerate(items):
        if it.get("frame_ids"):
            ids += [int(f) for f in it["frame_ids"]]
            continue
        if "frame_id" in it:
            ids.append(int(it["frame_id"]))
            continue
        q = ("SELECT f.id, fl.root FROM frames f JOIN clips c ON f.clip_id = c.id JOIN fleets fl ON c.fleet_id = fl.id "
             "WHERE c.name = ? AND f.idx = ?")
        rows = cat.db.execute(q, (str(it["clip"]), int(it["frame"]))).fetchall()
        if fleet is not None:
            rows = [r for r in rows if r[1] == str(Path(fleet).resolve())]
        if len(rows) != 1:
            hint = "add \"fleet\": ROOT to the selection" if rows else "shadow its fleet first"
            raise LabelError(f"{where} item {k}: frame {it['clip']}/{it['frame']} is "
                             f"{'in several fleets of' if rows else 'not in'} catalog {cat.path}; {hint}")
        ids.append(int(rows[0][0]))
    known = {r[0] for r in cat.db.execute(f"SELECT id FROM frames WHERE id IN ({', '.join('?' * len(ids))})", ids)}
    missing = [f for f in ids if f not in known]
    if missing:
        raise LabelError(f"{where}: frame id {missing[0]} is not in catalog {cat.path}; was the selection mined from another catalog?")
    return list(dict.fromkeys(ids))


def create_jobs(cat: Catalog, selection: str | Path, backend: str) -> dict[str, Any]:
    """Queue one job per selected frame (idempotent); returns {"selection", "created", "existing"}."""
    name, items, sel = read_selection(selection)
    fleet = sel.get("fleet") or (sel.get("run") or {}).get("fleet")
    ids = _frame_ids(cat, items, fleet, f"selection {selection}")
    row = cat.db.execute("SELECT r.model_id FROM selections s JOIN shadow_runs r ON s.run_id = r.id WHERE s.name = ?",
                         (name,)).fetchone()
    model_id = row[0] if row else None
    if backend == "oracle" and ids:  # checked before any job is queued: a refused backend leaves nothing behind
        q = f"SELECT DISTINCT fl.root FROM frames f JOIN clips c ON f.clip_id = c.id JOIN fleets fl ON c.fleet_id = fl.id " \
            f"WHERE f.id IN ({', '.join('?' * len(ids))})"
        from data_engine.fleet import RECORDED_FILE, FleetError, recorded_fleet

        for (root,) in cat.db.execute(q, ids).fetchall():
            try:
                kind = recorded_fleet(root).kind if (Path(root) / RECORDED_FILE).is_file() else "sim"
            except FleetError as e:
                raise LabelError(str(e)) from None
            if kind not in ("sim", "dataset"):  # a labelled dataset's own annotations are the stand-in oracle's truth
                raise LabelError(f"the oracle answers from a source's own labels; fleet {root} is {kind} recordings "
                                 "without any (engine ingest): label it with --backend files or --backend label_studio")
    now = time.time()
    with cat.transaction():
        before = cat.db.execute("SELECT count(*) FROM label_jobs WHERE selection = ?", (name,)).fetchone()[0]
        other = cat.db.execute("SELECT DISTINCT backend FROM label_jobs WHERE selection = ? AND backend != ?",
                               (name, backend)).fetchone()
        if other:
            raise LabelError(f"selection {name!r} is already queued for backend {other[0]!r}; label it there, or mine a "
                             f"selection under another --name for {backend!r}")
        cat.db.executemany("INSERT OR IGNORE INTO label_jobs (selection, frame_id, state, backend, model_id, created, updated) "
                           "VALUES (?, ?, 'queued', ?, ?, ?, ?)", [(name, f, backend, model_id, now, now) for f in ids])
        after = cat.db.execute("SELECT count(*) FROM label_jobs WHERE selection = ?", (name,)).fetchone()[0]
    return {"selection": name, "created": after - before, "existing": before, "frames": len(ids)}


# -- reading jobs -----------------------------------------------------------------------------------------
_RIGS: dict[str, tuple[tuple[str, ...], tuple[tuple[int, int], ...]]] = {}


def _rig(root: str) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
    """(camera names, (H, W) each) of a fleet (a sim fleet or a recorded one)."""
    from data_engine.fleet import Fleet, FleetError

    if root not in _RIGS:
        try:
            cams = Fleet(root).cameras
        except FleetError as e:
            raise LabelError(f"{e} (the fleet moved or is damaged)") from None
        _RIGS[root] = (tuple(cams), tuple(cams.values()))
    return _RIGS[root]


def load_jobs(cat: Catalog, selection: str | None = None, states: Sequence[str] | None = None,
              ids: Iterable[int] | None = None, backend: str | None = None) -> list[Job]:
    where, args = [], []
    if selection is not None:
        where.append("j.selection = ?")
        args.append(selection)
    if states is not None:
        where.append(f"j.state IN ({', '.join('?' * len(states))})")
        args += list(states)
    if backend is not None:
        where.append("j.backend = ?")
        args.append(backend)
    id_list = None if ids is None else [int(i) for i in ids]
    rows = cat.db.execute("SELECT j.id, j.selection, j.frame_id, c.name, f.idx, f.dir, fl.root, j.state, j.backend, j.model_id, "
                          "j.external_id FROM label_jobs j JOIN frames f ON j.frame_id = f.id JOIN clips c ON f.clip_id = c.id "
                          f"JOIN fleets fl ON c.fleet_id = fl.id {'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY j.id",
                          args).fetchall()
    if id_list is not None:
        keep = set(id_list)
        rows = [r for r in rows if r[0] in keep]
        missing = sorted(keep - {r[0] for r in rows})
        if missing:
            raise LabelError(f"job {missing[0]} is not in catalog {cat.path}"
                             f"{f' (selection {selection!r})' if selection else ''}; `hydranet engine jobs` lists them")
    out = []
    for jid, sel, fid, clip, idx, d, root, state, be, mid, ext in rows:
        cams, sizes = _rig(root)
        out.append(Job(jid, sel, fid, clip, idx, d, root, cams, sizes, state, be, mid, ext))
    return out


# -- moves and the review history ------------------------------------------------------------------------
def move_job(cat: Catalog, job: Job | tuple[int, str], to: str, **cols: Any) -> None:
    """Inside a transaction: one job from its state to `to`, or LabelError naming the job."""
    jid, state = (job.id, job.state) if isinstance(job, Job) else job
    if to not in STATES:
        raise LabelError(f"unknown job state {to!r}; states are {list(STATES)}")
    if to not in TRANSITIONS[state]:
        raise LabelError(f"job {jid} is {state}: it cannot become {to} (from {state} only to "
                         f"{' or '.join(MOVES[(state, t)] for t in TRANSITIONS[state]) or 'nothing: final'})")
    sets = ", ".join(f"{k} = ?" for k in ["state", "updated", *cols])
    cur = cat.db.execute(f"UPDATE label_jobs SET {sets} WHERE id = ? AND state = ?", (to, time.time(), *cols.values(), jid, state))
    if cur.rowcount != 1:
        raise LabelError(f"job {jid} changed state while being moved to {to}; rerun the command")


def who(by: str | None = None) -> str:
    """The reviewer's name: `by`, else the login name."""
    if by:
        return str(by)
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container): say so rather than guess
        return "unknown"


def log_event(cat: Catalog, job_id: int, action: str, from_state: str | None, to_state: str | None, old: int | None = None,
              new: int | None = None, by: str | None = None, note: str | None = None) -> None:
    cat.db.execute("INSERT INTO label_events (job_id, action, from_state, to_state, old_label_id, new_label_id, by, at, note) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (job_id, action, from_state, to_state, old, new, who(by), time.time(), note))


def history(cat: Catalog, job_id: int | None = None, selection: str | None = None) -> list[dict[str, Any]]:
    """The review history: one dict per event {"job", "action", "from", "to", "old_version", "new_version", "by", "at",
    "note"}, oldest first."""
    where, args = [], []
    if job_id is not None:
        where.append("e.job_id = ?")
        args.append(int(job_id))
    if selection is not None:
        where.append("j.selection = ?")
        args.append(selection)
    rows = cat.db.execute("SELECT e.job_id, e.action, e.from_state, e.to_state, lo.version, ln.version, e.by, e.at, e.note "
                          "FROM label_events e JOIN label_jobs j ON e.job_id = j.id LEFT JOIN labels lo ON e.old_label_id = lo.id "
                          f"LEFT JOIN labels ln ON e.new_label_id = ln.id {'WHERE ' + ' AND '.join(where) if where else ''} "
                          "ORDER BY e.id", args).fetchall()
    return [{"job": r[0], "action": r[1], "from": r[2], "to": r[3], "old_version": r[4], "new_version": r[5], "by": r[6],
             "at": r[7], "note": r[8]} for r in rows]


def job_table(cat: Catalog, selection: str | None = None) -> list[dict[str, Any]]:
    rows = cat.db.execute("SELECT j.id, j.selection, j.frame_id, c.name, f.idx, j.state, j.backend, "
                          "(SELECT count(*) FROM labels l WHERE l.frame_id = j.frame_id), "
                          "(SELECT version FROM labels l WHERE l.id = j.label_id), j.note FROM label_jobs j JOIN frames f ON "
                          f"j.frame_id = f.id JOIN clips c ON f.clip_id = c.id {'WHERE j.selection = ?' if selection else ''} "
                          "ORDER BY j.id", (selection,) if selection else ()).fetchall()
    return [{"job": r[0], "selection": r[1], "frame_id": r[2], "frame": f"{r[3]}/{r[4]}", "state": r[5], "backend": r[6],
             "versions": r[7], "pinned": r[8], "note": r[9]} for r in rows]
