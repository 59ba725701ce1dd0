"""`hydranet engine autolabel`: the selected frames' clips through the ensemble, labels into the catalog.

    run_autolabel(catalog, selection, models, out, cfg) -> summary

For each clip that holds a selected frame, every model runs over **every** frame of the clip (a frame's label
uses the frames before and after it), the clip is fused, tracked and smoothed (clip.py), and each selected frame's
payload is recorded in the catalog as a label version of source "auto" (data_engine.labels.record_auto), with
its provenance (the models' sha256 and the parameters) and a confidence per object. The review policy
(policy.py) accepts a frame or leaves its job queued for its human backend, pre-filled. A frame holding a version
of any other source (a person's, a file's, the oracle's) is never labelled again.

OUT holds summary.json (frames labelled, boxes, tracks, accepted vs queued, the heads dropped, every frame's
decision), labels/<clip>/<frame>.json (each payload), dense/<clip>/<frame>.npz (dense heads: the ensemble
mean and the agreement, dense.dense_arrays) and preview.png (up to six labelled frames with their labels drawn:
preview.py). It is written to OUT.tmp-<pid> and renamed once the catalog holds
every label: a run killed at any point leaves no OUT, and its rerun gives the same labels (same digest: no
version twice). Nothing is written outside OUT and the catalog.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.autolabel.clip import fuse_frames, label_clip
from data_engine.autolabel.ensemble import AutolabelError, Ensemble, load_ensemble, run_member
from data_engine.autolabel.policy import decide
from data_engine.autolabel.preview import write_preview


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not overwrite:
        raise AutolabelError(f"--out {out} exists; pass --overwrite to replace it, or choose another --out")
    if out.exists() and not (out / "summary.json").is_file():
        raise AutolabelError(f"--out {out} exists and is not an autolabel output (no summary.json); it is never "
                             "replaced: choose another --out")


def _selected(cat, selection: Path) -> tuple[str, dict[str, dict[str, list[tuple[int, int]]]]]:
    """(selection name, {fleet root: {clip: [(frame index, frame id)]}}) of the selected frames."""
    from data_engine.label_queue import _frame_ids, read_selection

    name, items, sel = read_selection(selection)
    ids = _frame_ids(cat, items, sel.get("fleet") or (sel.get("run") or {}).get("fleet"), f"selection {selection}")
    q = (f"SELECT f.id, f.idx, c.name, fl.root FROM frames f JOIN clips c ON f.clip_id = c.id JOIN fleets fl ON "
         f"c.fleet_id = fl.id WHERE f.id IN ({', '.join('?' * len(ids))}) ORDER BY fl.root, c.name, f.idx")
    out: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for fid, idx, clip, root in cat.db.execute(q, ids).fetchall():
        out.setdefault(root, {}).setdefault(clip, []).append((int(idx), int(fid)))
    return name, out


def _open_fleet(root: str, clips: Sequence[str], selection: Path):
    """The fleet and its clips; AutolabelError naming the selection and the fix when they are gone."""
    from data_engine.fleet import Fleet, FleetError

    try:
        fleet = Fleet(root)
    except FleetError as e:
        raise AutolabelError(f"selection {selection}: its fleet is gone ({e}); regenerate the fleet at {root}, or mine a "
                             "new selection from a fleet that exists") from None
    found = {}
    for c in clips:
        try:
            if c not in fleet.clip_names:
                raise FleetError(f"clip {c} is not in {root}/dataset.json")
            found[c] = fleet.clip(c)
        except FleetError as e:
            raise AutolabelError(f"selection {selection}: clip {c} of fleet {root} is gone ({e}); regenerate the fleet, or "
                                 "mine a new selection") from None
    return fleet, found


def read_frames(fleet, clip, cameras: Sequence[str]) -> list[dict]:
    """Every frame of a clip: {"images": N x (H, W, 3) or None (unreadable), "ego2world", "timestamp_us", "dir"}."""
    from data_engine.fleet import read_frame

    out = []
    for f in clip.frames:
        try:
            images = read_frame(fleet.root, clip.name, f["dir"], list(cameras))
        except ValueError:
            images = None
        out.append({**f, "images": images})
    return out


def _provenance(ens: Ensemble, cfg) -> dict[str, Any]:
    return {"models": [m.sha256 for m in ens.members], "heads": list(ens.heads), "params": dataclasses.asdict(cfg)}


def labeller_name(prov: dict[str, Any]) -> str:
    """The labeller recorded with each version: the models' sha256 (short) and a digest of the parameters."""
    params = hashlib.sha256(json.dumps(prov["params"], sort_keys=True).encode()).hexdigest()[:12]
    return f"autolabel({'+'.join(s[:12] for s in prov['models'])};params {params})"


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def label_fleet_clips(ens: Ensemble, fleet, clips: dict, wanted: dict[str, list[tuple[int, int]]], cfg,
                      warnings: list[str], progress: bool = False) -> tuple[dict[int, dict], dict[int, dict], dict]:
    """({frame id: payload}, {frame id: dense arrays}, counts) of the selected frames of one fleet's clips."""
    from tqdm import tqdm

    sizes = {c: tuple(fleet.cameras[c]) for c in ens.cameras}
    payloads, dense = {}, {}
    counts = {"clips": 0, "frames_run": 0, "tracks2d": 0, "tracks3d": 0, "unreadable": 0}
    for name in tqdm(sorted(wanted), desc="engine autolabel", unit="clip", disable=not progress):
        clip = clips[name]
        frames = read_frames(fleet, clip, ens.cameras)
        posed = all(f["ego2world"] is not None for f in frames)
        if len(frames) == 1:
            warnings.append(f"clip {name} has one frame: no tracking, labelled per frame from the fused detections")
        if not posed and "det3d" in ens.heads:
            warnings.append(f"clip {name} of fleet {fleet.root} has no ego poses: 2D tracks only, no 3D labels")
        per_member = [run_member(m, ens, frames, sizes, cfg.tta, posed) for m in ens.members]
        fused = fuse_frames(per_member, ens.cameras, sizes, cfg)
        times = np.array([f["timestamp_us"] for f in frames], np.float64) / 1e6
        res = label_clip(fused, times, [f["ego2world"] for f in frames], ens.cameras, sizes, ens.classes, ens.params(cfg))
        counts["clips"] += 1
        counts["frames_run"] += len(frames)
        counts["tracks2d"] += res["tracks2d"]
        counts["tracks3d"] += res["tracks3d"]
        index = {f["index"]: t for t, f in enumerate(frames)}
        for idx, fid in wanted[name]:
            t = index.get(idx)
            if t is None or t not in res["frames"]:
                counts["unreadable"] += 1
                warnings.append(f"clip {name} frame {idx} cannot be read: not labelled")
                continue
            payloads[fid] = res["frames"][t]
            if t in res["dense"]:
                payloads[fid]["dense"]["file"] = f"dense/{name}/{frames[t]['dir']}.npz"
                dense[fid] = res["dense"][t]
    return payloads, dense, counts


def _write_files(tmp: Path, payloads: dict[int, dict], dense: dict[int, dict], where: dict[int, tuple[str, str]]) -> None:
    """labels/<clip>/<frame>.json and dense/<clip>/<frame>.npz under the temp output folder."""
    for fid, p in payloads.items():
        clip, d = where[fid]
        path = tmp / "labels" / clip / f"{d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(p, indent=1, sort_keys=True))
        if fid in dense:
            npz = tmp / p["dense"]["file"]
            npz.parent.mkdir(parents=True, exist_ok=True)
            npz.write_bytes(_npz_bytes(dense[fid]))


def _record(catalog: Path, selection: Path, name: str, backend: str, payloads: dict[int, dict], labeller: str,
            cfg) -> list[dict[str, Any]]:
    """Every payload into the catalog (data_engine.labels.record_auto, one transaction per frame): one row per frame
    {"frame_id", "decision": accepted | queued | human | left, "why", "version", "new"}."""
    from data_engine.label_queue import create_jobs, load_jobs
    from data_engine.labels import human_versions, open_catalog, record_auto

    rows = []
    with open_catalog(catalog) as cat:
        create_jobs(cat, selection, backend)
        jobs = {j.frame_id: j for j in load_jobs(cat, name)}
        human = human_versions(cat, list(payloads))
        for fid in sorted(payloads):
            accept, why = decide(payloads[fid], cfg)
            if fid in human:
                rows.append({"frame_id": fid, "decision": "human", "why": "a version of another source exists: never "
                             "overwritten", "version": None, "new": False})
                continue
            lid, new = record_auto(cat, jobs[fid], payloads[fid], labeller, accept, why)
            state = cat.db.execute("SELECT state FROM label_jobs WHERE id = ?", (jobs[fid].id,)).fetchone()[0]
            version = cat.db.execute("SELECT version FROM labels WHERE id = ?", (lid,)).fetchone()[0] if lid else None
            decision = {"accepted": "accepted", "queued": "queued"}.get(state, "left") if lid else "left"
            rows.append({"frame_id": fid, "decision": decision, "why": why if lid else f"job {jobs[fid].id} is {state}: "
                         "left as it is", "version": version, "new": new})
    return rows


def run_autolabel(catalog: str | Path, selection: str | Path, models: Sequence[str | Path], out: str | Path, cfg=None,
                  overwrite: bool = False, backend: str | None = None, progress: bool = False) -> dict[str, Any]:
    """Auto-label a selection's frames (module docstring). `backend`: the human backend the unsure frames stay queued
    for (default: the selection's jobs' backend, else "files"). Returns the summary (also OUT/summary.json)."""
    from data_engine.config import AutolabelConfig
    from data_engine.labels import open_catalog
    from hydranet.io import remove_stale_temps, replace_folder, temp_path

    cfg = cfg or AutolabelConfig()
    out, selection, catalog = Path(out), Path(selection), Path(catalog)
    _check_out(out, overwrite)
    for m in models:
        if not Path(m).is_file():
            raise AutolabelError(f"model {m} does not exist; give ONNX files written by `hydranet export`")
    if not catalog.is_file():
        raise AutolabelError(f"catalog {catalog} does not exist; shadow the fleet into it first (`hydranet engine shadow`)")
    with open_catalog(catalog) as cat:
        name, by_fleet = _selected(cat, selection)
        had = cat.db.execute("SELECT backend FROM label_jobs WHERE selection = ? LIMIT 1", (name,)).fetchone()
    backend = backend or (had[0] if had else "files")
    warnings: list[str] = []
    payloads, dense, where, roots = {}, {}, {}, {}
    counts = {"clips": 0, "frames_run": 0, "tracks2d": 0, "tracks3d": 0, "unreadable": 0}
    for root, clips in by_fleet.items():
        fleet, found = _open_fleet(root, list(clips), selection)
        ens, w = load_ensemble(models, fleet)
        warnings += [x for x in w if x not in warnings]
        p, d, c = label_fleet_clips(ens, fleet, found, clips, cfg, warnings, progress)
        payloads.update(p)
        dense.update(d)
        counts = {k: counts[k] + c[k] for k in counts}
        where.update({fid: (cname, {f["index"]: f["dir"] for f in found[cname].frames}[idx])
                      for cname, frames in clips.items() for idx, fid in frames if fid in p})
        roots.update({fid: root for fid in p})
    if "det3d" not in ens.heads:
        warnings.append("no 3D labels: the models share no det3d head (3D labels need BEV models, and a fleet with "
                        "calibration and ego poses)")
    prov = _provenance(ens, cfg)
    for p in payloads.values():
        p["provenance"] = prov
    remove_stale_temps(out.parent, dirs=True)
    tmp = temp_path(out)
    tmp.mkdir(parents=True)
    try:
        _write_files(tmp, payloads, dense, where)
        rows = _record(catalog, selection, name, backend, payloads, labeller_name(prov), cfg)
        summary = _summary(catalog, selection, name, backend, ens, prov, payloads, rows, counts, warnings, where)
        summary["preview"] = _preview(tmp / "preview.png", summary, payloads, dense, where, roots, ens)
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1))
        replace_folder(tmp, out)
    finally:
        if tmp.exists():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return summary


def _preview(path: Path, summary: dict, payloads: dict, dense: dict, where: dict, roots: dict, ens: Ensemble) -> str | None:
    """OUT/preview.png (preview.write_preview) of the labelled frames; its name, or None when no frame was labelled."""
    rows = {r["frame_id"]: r for r in summary["frames"]}
    frames = [{"fleet": roots[fid], "clip": where[fid][0], "frame": where[fid][1], "payload": payloads[fid],
               "dense": dense.get(fid), "decision": rows[fid]["decision"], "why": rows[fid]["why"]}
              for fid in sorted(payloads, key=lambda i: (roots[i], *where[i]))]
    header = (f"autolabel {summary['selection']}: {summary['frames_labelled']} frames labelled by "
              f"{len(summary['models'])} model(s) ({', '.join(Path(m['path']).name for m in summary['models'])}), "
              f"{summary['accepted']} accepted, {summary['queued']} queued for a person")
    shown = write_preview(path, frames, ens.cameras, ens.classes.get("det2d", []), header, summary["warnings"])
    return path.name if shown else None


def _summary(catalog: Path, selection: Path, name: str, backend: str, ens: Ensemble, prov: dict, payloads: dict[int, dict],
             rows: list[dict], counts: dict, warnings: list[str], where: dict) -> dict[str, Any]:
    decisions = [r["decision"] for r in rows]
    return {"catalog": str(catalog), "selection": name, "selection_file": str(selection), "human_backend": backend,
            "models": [{"path": str(m.path), "sha256": m.sha256, "heads": list(m.heads)} for m in ens.members],
            "heads_fused": list(ens.heads), "heads_dropped": ens.dropped, "params": prov["params"],
            **counts, "frames_labelled": len(payloads),
            "boxes2d": sum(len(c["boxes2d"]) for p in payloads.values() for c in p["cameras"].values()),
            "boxes3d": sum(len(p["boxes3d"]) for p in payloads.values()),
            "accepted": decisions.count("accepted"), "queued": decisions.count("queued"),
            "human": decisions.count("human"), "left": decisions.count("left"),
            "new_versions": sum(r["new"] for r in rows), "warnings": warnings,
            "frames": [{**r, "clip": where[r["frame_id"]][0], "frame": where[r["frame_id"]][1]} for r in rows]}
