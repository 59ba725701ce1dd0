"""Label jobs to a labelling backend and back (data_engine/labeling/, docs/labeling.md): `send` hands the queued jobs
over (pre-filled by `with_predictions` where the backend shows pre-annotations), `import_labels` records what it
returns as label versions (data_engine/labels.py). Guarantees, each tested with kill -9 (tests/test_engine_labeling.py):
- a job is marked sent only after its backend accepted it, and backends' send is idempotent (Label
  Studio tasks carry their job id and are looked up before any is created): a send killed and rerun
  creates nothing twice;
- each label is recorded in one transaction with its job's move to "labelled": an import killed at any moment and
  rerun loses no label and duplicates none;
- one bad task never blocks an import: a backend yields `Held` for a job it cannot read (a box outside
  the image: quarantined) or that is partly done ("3 of 6 cameras done"); the job keeps its state, its
  `note` says why (`hold`, listed by `engine jobs`), and every other label is recorded.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from data_engine.catalog import Catalog
from data_engine.label_queue import LabelError, load_jobs, log_event, move_job
from data_engine.labeling.base import Backend, Held, Job, LabelingError
from data_engine.labels import edits, latest_auto, record_label


# -- pre-annotations -----------------------------------------------------------------------------------
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
        for cam, p in zip(cat.run_model(row[0])[1] or rig.names, preds["det2d"]):  # the run's cameras (a subset's)
            if cam not in j.cameras:
                continue
            h, w = j.sizes[j.cameras.index(cam)]
            sx, sy = w / W, h / H
            cams[cam] = [{"bbox": [b[0] * sx, b[1] * sy, b[2] * sx, b[3] * sy], "label": classes[lab] if lab < len(classes) else str(lab),
                          "score": float(s)} for b, s, lab in zip(p["boxes"], p["scores"], p["labels"]) if s >= min_score]
        out.append(dataclasses.replace(j, predictions=cams, model_version=sha))  # the model's sha256: a file name says nothing
    return out


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
                    move_job(cat, j, "sent", external_id=ext.get(j.id))
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
            log_event(cat, job.id, "quarantine", row[0], row[0], by="import", note=reason)
    return True
