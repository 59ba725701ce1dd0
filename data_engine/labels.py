"""The relabel queue and the versioned label store, in the catalog's SQLite file (docs/labeling.md).

    selection.json --create_jobs--> label_jobs (queued) --send--> sent --import_labels--> labelled
                                                           --accept--> accepted | --reject--> rejected (--requeue--> queued)
    accepted --reopen--> labelled (the pin dropped, kept in the history) | accepted --accept --label-version N--> accepted (re-pin)

A selection is the miner's output ({"name", "items": [{"frame_id", "clip", "frame", "frame_ids"}]}) or
the minimal hand-written form {"name": optional, "frames": [{"clip": "clip_00003", "frame": 2}]}; each
selected frame becomes one job (UNIQUE(selection, frame): creating the jobs twice adds nothing).

Labels are versioned and never overwritten: each version of a frame has its source (oracle |
label_studio | file | auto: `record_auto`, the auto-labeller's, docs/autolabel.md), labeller, time, the model
that was deployed when the frame was mined, and a digest of its content. Guarantees, each tested with kill -9
(tests/test_engine_labeling.py):
- a label and its job's move to "labelled" are one transaction; the same content for the same job
  from the same source is the same version (UNIQUE(job_id, source, digest)): an import killed at
  any moment and rerun loses no label and duplicates none;
- a job is marked sent only after its backend accepted it, and backends' send is idempotent (Label
  Studio tasks carry their job id and are looked up before any is created): a send killed and rerun
  creates nothing twice;
- two versions of a frame that disagree (a box unmatched, a class changed, a corner moved more than
  0.5 px) are a conflict: reported by import and `conflicts`, and `accept` refuses to pick one
  unless told which version;
- a person's label of a frame pre-filled with auto-labels carries its edit record (what the person changed against
  them: `edits`, docs/autolabel.md); a label without a pre-fill carries none;
- training reads `accepted_labels` only: a label exists for training once its job is accepted;
- every review move (accept, reject, requeue, reopen, re-pin) and every quarantine is a row of
  label_events (who, when, the pin before and after) written in the move's transaction: a correction
  after acceptance reaches training by a re-pin or a reopen + accept, and the old pin stays in the history;
- one bad task never blocks an import: a backend yields `Held` for a job it cannot read (a box outside
  the image: quarantined) or that is partly done ("3 of 6 cameras done"); the job keeps its state, its
  `note` says why (listed by `engine jobs`), and every other label is recorded.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from data_engine.catalog import Catalog
from data_engine.labeling.base import (Backend, FetchedLabel, Held, Job, LabelingError, as_shown, canonical, check_bbox, compare,
                                      describe_changes, digest, edit_record)

STATES = ("queued", "sent", "labelled", "accepted", "rejected")
TRANSITIONS = {"queued": ("sent",), "sent": ("labelled", "rejected"), "labelled": ("accepted", "rejected"), "rejected": ("queued",),
               "accepted": ("labelled", "accepted")}
# how each move is asked for (in the one-line refusals)
MOVES = {("queued", "sent"): "sent", ("sent", "labelled"): "labelled (by an import)",
         ("sent", "rejected"): "rejected (the frame cannot be labelled)", ("labelled", "accepted"): "accepted",
         ("labelled", "rejected"): "rejected", ("rejected", "queued"): "queued", ("accepted", "labelled"): "labelled (--reopen)",
         ("accepted", "accepted"): "accepted again on another version (re-pin: --accept ID --label-version N)"}
ACTIONS = {("labelled", "accepted"): "accept", ("labelled", "rejected"): "reject", ("sent", "rejected"): "reject",
           ("rejected", "queued"): "requeue",
           ("accepted", "labelled"): "reopen", ("accepted", "accepted"): "repin"}
SOURCES = ("oracle", "label_studio", "file", "auto")  # auto: `hydranet engine autolabel` (data_engine/autolabel/)
AUTO = "auto"


class LabelError(LabelingError):
    """An illegal job transition or an unusable selection; one line naming the job or item."""


# -- the catalog (label_jobs and labels are defined in data_engine/catalog.py) ----------------------------
def open_catalog(path: str | Path) -> Catalog:
    """An existing catalog (older schemas are upgraded by Catalog itself)."""
    return Catalog(path)


# -- selections -> jobs ----------------------------------------------------------------------------------
def read_selection(path: str | Path) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """(name, items, the whole JSON) of a selection file; items are {"frame_id"?, "clip", "frame", "frame_ids"?}."""
    path = Path(path)
    try:
        sel = json.loads(path.read_text())
    except OSError as e:
        raise LabelError(f"selection {path}: {e.strerror or e}; give the file `hydranet engine mine --out` wrote") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LabelError(f"selection {path} is not valid JSON ({e})") from None
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


def with_predictions(cat: Catalog, jobs: Sequence[Job], min_score: float = 0.1) -> list[Job]:
    """The jobs with pre-annotations ({camera: [{"bbox", "label", "score"}]}, camera pixels): the frame's newest
    auto-label (`hydranet engine autolabel`: its boxes and per-object confidence; model_version its labeller, which
    names the models' sha256) where there is one, else the deployed model's det2d predictions where the catalog has
    them and the model file still exists; otherwise unchanged."""
    from deploy.metadata import ModelRig, read_metadata

    out = []
    meta: dict[int, Any] = {}
    for j in jobs:
        auto = latest_auto(cat, j.frame_id)
        if auto is not None:  # the auto-labeller's boxes (tracked, smoothed, with their confidence) are the pre-fill
            # labelled by class, as the shadow predictions: a traffic_sign box without its sign class is not pre-filled
            cams = {cam: [{"bbox": b["bbox"], "label": b["class"], "score": float(b.get("confidence", 1.0))}
                          for b in (auto["payload"]["cameras"].get(cam) or {}).get("boxes2d") or []]
                    for cam in j.cameras if cam in auto["payload"]["cameras"]}
            out.append(dataclasses.replace(j, predictions=cams, model_version=auto["labeller"]))
            continue
        row = cat.db.execute("SELECT r.id, r.model_id, m.path, m.sha256 FROM selections sel JOIN shadow_runs r ON "
                             "sel.run_id = r.id JOIN models m ON r.model_id = m.id WHERE sel.name = ?", (j.selection,)).fetchone()
        preds = cat.predictions(row[0], [j.frame_id]).get(j.frame_id) if row is not None else None
        if not preds:
            out.append(j)
            continue
        mid, path, sha = row[1], row[2], row[3]
        if mid not in meta:
            try:
                md = read_metadata(path)
                meta[mid] = md, ModelRig.from_metadata(md, str(path))
            except Exception:  # noqa: BLE001 - a moved model file only loses the pre-annotations
                meta[mid] = None
        if meta[mid] is None or "det2d" not in preds or "det2d" not in meta[mid][0]["heads"]:
            out.append(j)
            continue
        md, rig = meta[mid]
        classes = md["heads"]["det2d"].get("classes") or md.get("classes") or []
        H, W = rig.image_size
        cams = {}
        for cam, p in zip(rig.names, preds["det2d"]):
            if cam not in j.cameras:
                continue
            h, w = j.sizes[j.cameras.index(cam)]
            sx, sy = w / W, h / H
            cams[cam] = [{"bbox": [b[0] * sx, b[1] * sy, b[2] * sx, b[3] * sy], "label": classes[lab] if lab < len(classes) else str(lab),
                          "score": float(s)} for b, s, lab in zip(p["boxes"], p["scores"], p["labels"]) if s >= min_score]
        out.append(dataclasses.replace(j, predictions=cams, model_version=sha))  # the model's sha256: a file name says nothing
    return out


# -- transitions ----------------------------------------------------------------------------------------
def _move(cat: Catalog, job: Job | tuple[int, str], to: str, **cols: Any) -> None:
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


def _event(cat: Catalog, job_id: int, action: str, from_state: str | None, to_state: str | None, old: int | None = None,
           new: int | None = None, by: str | None = None, note: str | None = None) -> None:
    cat.db.execute("INSERT INTO label_events (job_id, action, from_state, to_state, old_label_id, new_label_id, by, at, note) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (job_id, action, from_state, to_state, old, new, who(by), time.time(), note))


def transition(cat: Catalog, job_ids: Iterable[int], to: str, version: int | None = None, by: str | None = None) -> list[int]:
    """Move jobs to `to` in one transaction (all or none), each move a row of label_events (who, when, the pin
    before and after). Accepting pins a label version: the one given, else the latest, refused when the frame's
    versions disagree (a conflict is never settled silently). An accepted job is re-opened (to "labelled": the
    pin is dropped, kept in the history) or re-pinned (to "accepted" again with `version`: a newer version, or any
    other one of the frame); re-pinning to the version it holds changes nothing."""
    ids = [int(i) for i in job_ids]
    with cat.transaction():
        rows = cat.db.execute(f"SELECT id, state, label_id FROM label_jobs WHERE id IN ({', '.join('?' * len(ids))})", ids)
        states = {r[0]: (r[1], r[2]) for r in rows.fetchall()}
        for jid in ids:
            if jid not in states:
                raise LabelError(f"job {jid} is not in catalog {cat.path}; `hydranet engine jobs` lists them")
            state, pinned = states[jid]
            cols: dict[str, Any] = {}
            if to == "labelled" and state == "sent":
                raise LabelError(f"job {jid} is sent: it becomes labelled when its label is imported (`hydranet engine "
                                 "import-labels`)")
            if to == "accepted" and state == "accepted":
                if version is None:
                    raise LabelError(f"job {jid} is accepted (pinned to v{_version_of(cat, pinned)}): re-pin it with --accept "
                                     f"{jid} --label-version N, or re-open it with --reopen {jid}")
                cols["label_id"] = _pick_version(cat, jid, version)
                if cols["label_id"] == pinned:
                    continue  # already pinned there: nothing to do (a rerun after kill -9)
            elif to == "accepted" and state == "labelled":
                cols["label_id"] = _pick_version(cat, jid, version)
            if to == "labelled" and state == "accepted":
                cols["label_id"] = None
            if to == "queued":
                cols["external_id"] = None
            _move(cat, (jid, state), to, **cols)
            _event(cat, jid, ACTIONS.get((state, to), to), state, to, pinned, cols.get("label_id", pinned), by)
    return ids


def _version_of(cat: Catalog, label_id: int | None) -> int | None:
    row = cat.db.execute("SELECT version FROM labels WHERE id = ?", (label_id,)).fetchone() if label_id is not None else None
    return row[0] if row else None


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


def _pick_version(cat: Catalog, job_id: int, version: int | None) -> int:
    fid = cat.db.execute("SELECT frame_id FROM label_jobs WHERE id = ?", (job_id,)).fetchone()[0]
    vers = versions(cat, fid)
    if version is not None:
        pick = [v for v in vers if v["version"] == version]
        if not pick:
            raise LabelError(f"job {job_id}: frame {fid} has no label version {version} (versions {[v['version'] for v in vers]})")
        return pick[0]["id"]
    own = [v for v in vers if v["job_id"] == job_id]
    latest = own[-1]
    if latest["source"] != AUTO:  # the auto-labeller's versions were the pre-fill the person corrected
        vers = [v for v in vers if v["source"] != AUTO]
    bad = [(v, c) for v in vers if v["id"] != latest["id"] for c in [compare(v["payload"], latest["payload"])] if not c["agree"]]
    if bad:
        v, c = bad[0]
        raise LabelError(f"job {job_id}: frame {fid} has label versions that disagree (v{v['version']} {v['source']} by "
                         f"{v['labeller']} vs v{latest['version']} {latest['source']} by {latest['labeller']}: "
                         f"{_describe(c, v['version'], latest['version'])}); "
                         "accept one with --label-version V")
    return latest["id"]


def _describe(c: Mapping[str, Any], a: int | None = None, b: int | None = None) -> str:
    """What changed between two versions: each box named by camera, box and change (class, corners, missing), then
    the counts."""
    what = describe_changes(c, f"v{a}" if a is not None else "the first", f"v{b}" if b is not None else "the second")
    return (f"{what} ({c['boxes'][0]} vs {c['boxes'][1]} boxes, {c['unmatched']} unmatched, {c['class_changes']} class "
            f"changes, corners up to {c['max_px']} px apart)")


# -- send / import --------------------------------------------------------------------------------------
def send(cat: Catalog, backend: Backend, selection: str | None = None, batch: int | None = None,
         progress: bool = False) -> dict[str, int]:
    """Hand the queued jobs to the backend, `batch` jobs per call (default: the backend's); each
    batch is marked sent in one transaction after the backend took it."""
    from tqdm import tqdm

    jobs = load_jobs(cat, selection, ("queued",), backend=backend.name)
    size = batch or getattr(backend, "batch", 0) or len(jobs) or 1
    if getattr(backend, "wants_predictions", False):
        jobs = with_predictions(cat, jobs)
    sent = 0
    with tqdm(total=len(jobs), desc=f"send to {backend.name}", unit="job", disable=not progress) as bar:
        for k in range(0, len(jobs), size):
            chunk = jobs[k:k + size]
            ext = backend.send(chunk)
            with cat.transaction():
                for j in chunk:
                    _move(cat, j, "sent", external_id=ext.get(j.id))
            sent += len(chunk)
            bar.update(len(chunk))
    return {"sent": sent}


def import_labels(cat: Catalog, backend: Backend, selection: str | None = None, progress: bool = False) -> dict[str, Any]:
    """Fetch finished labels and record each as a version (one transaction per label, with its job's
    move to labelled). A job the backend holds back (`Held`: a quarantined task, a partly done frame) keeps its
    state and gets its reason as its note (a new quarantine is a label_events row too); a label recorded clears
    its job's note. Returns {"new", "duplicate", "conflicts": [...], "waiting": jobs still without a label,
    "quarantined": [{"job", "frame", "reason", "new"}], "partial": [{"job", "frame", "reason"}], "edits": the edit records
    of the new versions that corrected an auto pre-fill (`edits`)}."""
    from tqdm import tqdm

    jobs = load_jobs(cat, selection, ("sent", "labelled", "accepted", "rejected"), backend=backend.name)
    by_id = {j.id: j for j in jobs}
    new = dup = 0
    fresh_ids: list[int] = []
    conflicts: list[dict[str, Any]] = []
    quarantined: list[dict[str, Any]] = []
    partial: list[dict[str, Any]] = []
    for lab in tqdm(backend.fetch(jobs), desc=f"import from {backend.name}", unit="label", disable=not progress):
        job = by_id.get(lab.job_id)
        if job is None:
            raise LabelError(f"{backend.name} returned a label for job {lab.job_id}, which is not a sent job of backend "
                             f"{backend.name!r}{f' in selection {selection!r}' if selection else ''} in {cat.path}")
        if isinstance(lab, Held):
            fresh = hold(cat, job, lab.reason, lab.quarantine)
            entry = {"job": job.id, "frame": f"{job.clip}/{job.dir}", "reason": lab.reason}
            (quarantined if lab.quarantine else partial).append({**entry, "new": fresh} if lab.quarantine else entry)
            continue
        try:
            lid, created, conf = record_label(cat, job, lab)
        except LabelingError as e:  # a label the backend could read but the store cannot take: this job only
            if isinstance(e, LabelError) or lab.source == "oracle":  # the sim's truth broken: the fleet is, not one task
                raise
            fresh = hold(cat, job, str(e), True)
            quarantined.append({"job": job.id, "frame": f"{job.clip}/{job.dir}", "reason": str(e), "new": fresh})
            continue
        new, dup = new + created, dup + (not created)
        conflicts += conf
        fresh_ids += [lid] if created else []
    waiting = cat.db.execute(f"SELECT count(*) FROM label_jobs WHERE state = 'sent' AND backend = ?"
                             f"{' AND selection = ?' if selection else ''}",
                             (backend.name, selection) if selection else (backend.name,)).fetchone()[0]
    return {"new": new, "duplicate": dup, "conflicts": conflicts, "waiting": waiting, "quarantined": quarantined,
            "partial": partial, "edits": edits(cat, label_ids=fresh_ids)}


QUARANTINE = "quarantined: "


def hold(cat: Catalog, job: Job, reason: str, quarantine: bool) -> bool:
    """Record why `job` has no new label (its note; a quarantine also as a label_events row), in one transaction.
    True when the note is new (a quarantine is printed once: when it first appears or its reason changes)."""
    note = (QUARANTINE if quarantine else "") + reason
    with cat.transaction():
        row = cat.db.execute("SELECT state, note FROM label_jobs WHERE id = ?", (job.id,)).fetchone()
        if row[1] == note:
            return False
        cat.db.execute("UPDATE label_jobs SET note = ? WHERE id = ?", (note, job.id))
        if quarantine:
            _event(cat, job.id, "quarantine", row[0], row[0], by="import", note=reason)
    return True


def check_payload(job: Job, payload: Mapping[str, Any], where: str) -> dict[str, Any]:
    cams = payload.get("cameras") if isinstance(payload, Mapping) else None
    if not isinstance(cams, Mapping):
        raise LabelingError(f"{where}: label of job {job.id} has no 'cameras'")
    for cam, c in cams.items():
        if cam not in job.cameras:
            raise LabelingError(f"{where}: label of job {job.id} names camera {cam!r}, not one of the fleet's {list(job.cameras)}")
        size = job.sizes[job.cameras.index(cam)]
        for k, b in enumerate(c.get("boxes2d") or []):
            check_bbox(b.get("bbox"), size, f"{where} job {job.id} {cam} box {k}")
    return canonical(payload)


def record_label(cat: Catalog, job: Job, lab: FetchedLabel) -> tuple[int, bool, list[dict[str, Any]]]:
    """(label id, whether new, conflicts with the frame's other versions). A label of a frame holding an auto version
    (the pre-fill `send` showed: `with_predictions`) carries its edit record as `payload["edits"]` (`edit_record`
    against that version, "prefill" its number); a label without a pre-fill has none."""
    if lab.source not in SOURCES:
        raise LabelError(f"label source {lab.source!r} is not one of {list(SOURCES)}")
    payload = check_payload(job, lab.payload, lab.source)
    with cat.transaction():
        prefill = latest_auto(cat, job.frame_id) if lab.source != AUTO else None
        if prefill is not None:  # a correction of the auto-labels the job was pre-filled with: what the person changed
            payload["edits"] = {"prefill": prefill["version"], **edit_record(as_shown(prefill["payload"]), payload)}
        dg = digest(payload)
        row = cat.db.execute("SELECT id FROM labels WHERE job_id = ? AND source = ? AND digest = ?", (job.id, lab.source, dg)).fetchone()
        if row:
            cat.db.execute("UPDATE label_jobs SET note = NULL WHERE id = ? AND note IS NOT NULL", (job.id,))
            return int(row[0]), False, []
        state = cat.db.execute("SELECT state FROM label_jobs WHERE id = ?", (job.id,)).fetchone()[0]
        if state == "queued":
            raise LabelError(f"job {job.id} is queued: a label arrives only for a sent job; run `hydranet engine label` first")
        version = cat.db.execute("SELECT coalesce(max(version), 0) + 1 FROM labels WHERE frame_id = ?", (job.frame_id,)).fetchone()[0]
        cur = cat.db.execute("INSERT INTO labels (frame_id, version, job_id, source, labeller, model_id, payload, digest, created) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (job.frame_id, version, job.id, lab.source, lab.labeller,
                                                                    job.model_id, json.dumps(payload), dg, time.time()))
        if state == "sent":
            _move(cat, (job.id, state), "labelled")
        cat.db.execute("UPDATE label_jobs SET note = NULL WHERE id = ?", (job.id,))
    conf = []
    for v in versions(cat, job.frame_id):
        if v["version"] != version and AUTO not in (v["source"], lab.source):  # a person correcting a pre-fill: no conflict
            c = compare(v["payload"], payload)
            if not c["agree"]:
                conf.append({"frame_id": job.frame_id, "frame": f"{job.clip}/{job.dir}", "versions": [v["version"], version],
                             "sources": [v["source"], lab.source], "detail": _describe(c, v["version"], version)})
    return int(cur.lastrowid), True, conf


def human_versions(cat: Catalog, frame_ids: Sequence[int]) -> set[int]:
    """The frames among `frame_ids` that hold a version not made by the auto-labeller (a person's, a file's, the
    oracle's): the auto-labeller never labels them again."""
    ids = [int(f) for f in frame_ids]
    if not ids:
        return set()
    q = f"SELECT DISTINCT frame_id FROM labels WHERE source != ? AND frame_id IN ({', '.join('?' * len(ids))})"
    return {int(r[0]) for r in cat.db.execute(q, (AUTO, *ids))}


def record_auto(cat: Catalog, job: Job, payload: Mapping[str, Any], labeller: str, accept: bool,
                why: str) -> tuple[int | None, bool]:
    """Record the auto-labeller's label of a queued job's frame as a version (source "auto"), in one transaction
    with the job's move: `accept` -> queued, sent, labelled, accepted (pinned to it; label_events rows by
    "autolabel"); else the job stays queued for its human backend, pre-filled (its note says `why`). Nothing is
    written for a frame holding a version of another source (a human version is never overwritten) or a job that
    is not queued or pinned to an auto version. The same content for the same job is the same version (UNIQUE(job,
    source, digest)): a rerun after kill -9 duplicates nothing. Returns (label id or None, whether new)."""
    payload = check_payload(job, payload, AUTO)
    dg = digest(payload)
    with cat.transaction():
        if human_versions(cat, [job.frame_id]):
            return None, False
        row = cat.db.execute("SELECT id FROM labels WHERE job_id = ? AND source = ? AND digest = ?", (job.id, AUTO, dg)).fetchone()
        state = cat.db.execute("SELECT state FROM label_jobs WHERE id = ?", (job.id,)).fetchone()[0]
        if row:
            return int(row[0]), False
        if state != "queued":  # sent to a person, or accepted on an earlier auto version: left as it is
            return None, False
        version = cat.db.execute("SELECT coalesce(max(version), 0) + 1 FROM labels WHERE frame_id = ?", (job.frame_id,)).fetchone()[0]
        cur = cat.db.execute("INSERT INTO labels (frame_id, version, job_id, source, labeller, model_id, payload, digest, created) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (job.frame_id, version, job.id, AUTO, labeller, job.model_id,
                                                                    json.dumps(payload), dg, time.time()))
        lid = int(cur.lastrowid)
        if accept:
            for a, b in (("queued", "sent"), ("sent", "labelled")):
                _move(cat, (job.id, a), b, **({"external_id": AUTO} if b == "sent" else {}))
            _move(cat, (job.id, "labelled"), "accepted", label_id=lid, note=None)
            _event(cat, job.id, "accept", "labelled", "accepted", None, lid, "autolabel", note=why)
        else:
            cat.db.execute("UPDATE label_jobs SET note = ? WHERE id = ?", (f"pre-filled by autolabel v{version}: {why}", job.id))
    return lid, True


def latest_auto(cat: Catalog, frame_id: int) -> dict[str, Any] | None:
    """The frame's newest auto version {"version", "labeller", "payload"}, or None."""
    row = cat.db.execute("SELECT version, labeller, payload FROM labels WHERE frame_id = ? AND source = ? ORDER BY version DESC "
                         "LIMIT 1", (frame_id, AUTO)).fetchone()
    return None if row is None else {"version": row[0], "labeller": row[1], "payload": json.loads(row[2])}


def edits(cat: Catalog, selection: str | None = None, label_ids: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The edit records of the label versions (of a selection's jobs, or the given ids, or all) that corrected an auto
    pre-fill, by label id: {"label_id", "job", "frame", "version", "source", "labeller", "prefill", "boxes", *EDIT_COUNTS,
    "changes"} (`labeling.base.edit_record`). A version without a pre-fill has no record (it is left out, not counted as zero edits)."""
    where, args = ["l.source != ?"], [AUTO]
    if selection is not None:
        where.append("j.selection = ?")
        args.append(selection)
    if label_ids is not None:
        if not label_ids:
            return []
        where.append(f"l.id IN ({', '.join('?' * len(label_ids))})")
        args += [int(i) for i in label_ids]
    rows = cat.db.execute("SELECT l.id, l.job_id, c.name, f.dir, l.version, l.source, l.labeller, l.payload FROM labels l "
                          "JOIN label_jobs j ON l.job_id = j.id JOIN frames f ON l.frame_id = f.id JOIN clips c ON "
                          f"f.clip_id = c.id WHERE {' AND '.join(where)} ORDER BY l.id", args).fetchall()
    out = []
    for lid, jid, clip, d, version, source, labeller, payload in rows:
        rec = json.loads(payload).get("edits")
        if rec is not None:
            out.append({"label_id": lid, "job": jid, "frame": f"{clip}/{d}", "version": version, "source": source,
                        "labeller": labeller, **rec})
    return out


# -- reading labels -------------------------------------------------------------------------------------
def versions(cat: Catalog, frame_id: int) -> list[dict[str, Any]]:
    return [{"id": i, "version": v, "job_id": j, "source": s, "labeller": lb, "model_id": m, "created": t, "payload": json.loads(p)}
            for i, v, j, s, lb, m, t, p in cat.db.execute(
                "SELECT id, version, job_id, source, labeller, model_id, created, payload FROM labels WHERE frame_id = ? "
                "ORDER BY version", (frame_id,))]


def conflicts(cat: Catalog, selection: str | None = None) -> list[dict[str, Any]]:
    """Every pair of disagreeing versions of a frame (of the selection's frames, or all)."""
    q = "SELECT DISTINCT l.frame_id FROM labels l" + (" JOIN label_jobs j ON l.job_id = j.id WHERE j.selection = ?" if selection else "")
    out = []
    for (fid,) in cat.db.execute(q, (selection,) if selection else ()).fetchall():
        vers = versions(cat, fid)
        for a in range(len(vers)):
            for b in range(a + 1, len(vers)):
                if AUTO in (vers[a]["source"], vers[b]["source"]):
                    continue  # the auto-labeller's pre-fill and its correction are not a conflict
                c = compare(vers[a]["payload"], vers[b]["payload"])
                if not c["agree"]:
                    out.append({"frame_id": fid, "versions": [vers[a]["version"], vers[b]["version"]],
                                "sources": [vers[a]["source"], vers[b]["source"]],
                                "detail": _describe(c, vers[a]["version"], vers[b]["version"])})
    return out


def accepted_labels(cat: Catalog | str | Path) -> dict[int, dict[str, Any]]:
    """{frame id: payload} of the accepted jobs' pinned versions: all that training may read. `cat`: an
    open Catalog, or a catalog file path (opened and closed here)."""
    return {f: v["payload"] for f, v in accepted_versions(cat).items()}


def accepted_versions(cat: Catalog | str | Path) -> dict[int, dict[str, Any]]:
    """`accepted_labels` with provenance: {frame id: {"label_id", "version", "job_id", "source",
    "labeller", "digest", "payload"}}; a frame accepted in several selections keeps the latest accept.
    `cat`: an open Catalog, or a catalog file path (opened and closed here)."""
    if not isinstance(cat, Catalog):
        with open_catalog(cat) as opened:
            return accepted_versions(opened)
    rows = cat.db.execute("SELECT j.frame_id, l.id, l.version, j.id, l.source, l.labeller, l.digest, l.payload FROM label_jobs j "
                          "JOIN labels l ON j.label_id = l.id WHERE j.state = 'accepted' ORDER BY j.updated, j.id").fetchall()
    return {int(f): {"label_id": int(lid), "version": int(v), "job_id": int(jid), "source": src, "labeller": who, "digest": dg,
                     "payload": json.loads(p)} for f, lid, v, jid, src, who, dg, p in rows}


def job_table(cat: Catalog, selection: str | None = None) -> list[dict[str, Any]]:
    rows = cat.db.execute("SELECT j.id, j.selection, j.frame_id, c.name, f.idx, j.state, j.backend, "
                          "(SELECT count(*) FROM labels l WHERE l.frame_id = j.frame_id), "
                          "(SELECT version FROM labels l WHERE l.id = j.label_id), j.note FROM label_jobs j JOIN frames f ON "
                          f"j.frame_id = f.id JOIN clips c ON f.clip_id = c.id {'WHERE j.selection = ?' if selection else ''} "
                          "ORDER BY j.id", (selection,) if selection else ()).fetchall()
    return [{"job": r[0], "selection": r[1], "frame_id": r[2], "frame": f"{r[3]}/{r[4]}", "state": r[5], "backend": r[6],
             "versions": r[7], "pinned": r[8], "note": r[9]} for r in rows]
