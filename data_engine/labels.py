"""The versioned label store and the review of label jobs, in the catalog (docs/labeling.md). The jobs and their
states are data_engine/label_queue.py's; sending jobs to a backend and importing its labels,
data_engine/label_exchange.py's.

Labels are versioned and never overwritten: each version of a frame has its source (oracle |
label_studio | file | auto: `record_auto`, the auto-labeller's, docs/autolabel.md), labeller, time, the model
that was deployed when the frame was mined, and a digest of its content. Guarantees, each tested with kill -9
(tests/test_engine_labeling.py):
- a label and its job's move to "labelled" are one transaction (`record_label`); the same content for the same job
  from the same source is the same version (UNIQUE(job_id, source, digest)): an import killed at
  any moment and rerun loses no label and duplicates none;
- two versions of a frame that disagree (a box unmatched, a class changed, a corner moved more than
  0.5 px) are a conflict: reported by import and `conflicts`, and `accept` refuses to pick one
  unless told which version;
- a person's label of a frame pre-filled with auto-labels carries its edit record (what the person changed against
  them: `edits`, docs/autolabel.md); a label without a pre-fill carries none;
- training reads `accepted_labels` only: a label exists for training once its job is accepted;
- every review move (`transition`: accept, reject, requeue, reopen, re-pin) is a row of label_events (who, when, the
  pin before and after) written in the move's transaction: a correction after acceptance reaches training by a
  re-pin or a reopen + accept, and the old pin stays in the history.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from data_engine.catalog import Catalog
from data_engine.label_queue import LabelError, log_event, move_job
from data_engine.labeling.base import (FetchedLabel, Job, LabelingError, as_shown, canonical, check_bbox, compare, describe_changes,
                                      digest, edit_record)

SOURCES = ("oracle", "label_studio", "file", "auto")  # auto: `hydranet engine autolabel` (data_engine/autolabel/)
AUTO = "auto"
ACTIONS = {("labelled", "accepted"): "accept", ("labelled", "rejected"): "reject", ("sent", "rejected"): "reject",
           ("rejected", "queued"): "requeue",
           ("accepted", "labelled"): "reopen", ("accepted", "accepted"): "repin"}


# -- the catalog (label_jobs and labels are defined in data_engine/catalog_schema.py) ---------------------
def open_catalog(path: str | Path) -> Catalog:
    """An existing catalog (older schemas are upgraded by Catalog itself)."""
    return Catalog(path)


# -- recording versions ------------------------------------------------------------------------------------
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
            move_job(cat, (job.id, state), "labelled")
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
                move_job(cat, (job.id, a), b, **({"external_id": AUTO} if b == "sent" else {}))
            move_job(cat, (job.id, "labelled"), "accepted", label_id=lid, note=None)
            log_event(cat, job.id, "accept", "labelled", "accepted", None, lid, "autolabel", note=why)
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


# -- review: the moves a person asks for (accept pins a version) ------------------------------------------
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
            move_job(cat, (jid, state), to, **cols)
            log_event(cat, jid, ACTIONS.get((state, to), to), state, to, pinned, cols.get("label_id", pinned), by)
    return ids


def _version_of(cat: Catalog, label_id: int | None) -> int | None:
    row = cat.db.execute("SELECT version FROM labels WHERE id = ?", (label_id,)).fetchone() if label_id is not None else None
    return row[0] if row else None


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
