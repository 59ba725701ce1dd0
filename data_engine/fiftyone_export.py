"""`hydranet engine export-fiftyone`: a shadow run as a FiftyOne dataset a curator opens in the App.

    hydranet engine export-fiftyone --catalog CAT --out DIR [--selection S] [--run R] [--no-masks] [--overwrite]

DIR is in FiftyOne's own dataset format (`fiftyone.types.FiftyOneDataset`, the format
`Dataset.export(dataset_type=fo.types.FiftyOneDataset)` writes), readable without this package:

- DIR/metadata.json: the dataset document: a *grouped* dataset (`media_type` "group", one group per
  catalog frame, one slice per camera, the model's first camera the default slice), or for a fleet of one
  camera a flat image dataset (`media_type` "image", no group); `sample_fields`, the declared schema of every
  field below; `mask_targets` (1: drivable, 1: lane) of the mask fields;
- DIR/samples.json: {"samples": [...]}, one sample per camera image, `filepath` relative to DIR;
- DIR/data/<clip>/<frame dir>/<CAMERA>.jpg: the camera images, hard-linked from the fleet (copied
  across filesystems; a fleet without the file, such as a video fleet, is read through
  `data_engine.fleet.read_frame` and written as JPEG). An image that cannot be read is left out and
  counted (its frame's other cameras stay);
- DIR/fields/<mask field>/<clip>/<frame dir>/<CAMERA>.png: the Segmentation masks (uint8, 0 background, 1 the
  class), where FiftyOne's own export puts a `mask_path` field's files.

Fields of each sample: `clip`, `frame` (index in the clip), `frame_id` (the catalog's), `camera`,
`timestamp_us`, `status` (ok, corrupt, bad) and `error`; every camera of the fleet is a slice (the model's
first; cameras the model does not see have no predictions); one FloatField per catalog signal column
(`det2d_entropy`, ..., None where the catalog holds NULL: not applicable); `predictions`, the model's
det2d boxes of that camera as `Detections` (relative [x, y, w, h] of the image in [0, 1], class label,
confidence; the boxes are in model pixels in the catalog and the model input is the camera image
resized, so dividing by the model's input size places them); `triggers`, the names of the triggers
whose stored hits (`hydranet engine triggers`, newest version per trigger) hold the frame, and
`trigger_<name>`, each trigger's score (None where it did not fire); `selections`, the names of the
run's selections holding the frame, `rank_<name>` its rank in each; with `--selection S` only S's frames
are exported and `rank` is their rank in S. Labels and vectors (issue 34):
- `ground_truth`: the fleet's own 2D boxes of the camera as `Detections` (a sim fleet's labels.json, a labelled
  dataset's annotations; camera pixels divided by the camera size), None where the fleet has no labels;
  `accepted`: the catalog's accepted label of the frame (the pinned version training reads), the same way;
- `pred_drivable`, `pred_lanes`: the model's drivable and lane masks as `Segmentation` (`mask_path`): the catalog
  keeps no masks, so each ok frame is run again through the runtime (`report.mask_predictor`; `--no-masks` skips
  it); `gt_drivable` (a sim fleet's semantic file), `gt_lanes` (the truth's polylines, 1% of the height wide);
- `embedding`: the frame's embedding (every model camera's, L2-normalized, concatenated and normalized again:
  what mining and similarity search use; the same on every slice of a group) and `camera_embedding` (the
  camera's own, L2-normalized; None for a camera the model does not see), lists of floats as FiftyOne's Brain
  takes them (`fob.compute_visualization(ds, embeddings="embedding")`).

The FiftyOne document is written with `version` 1.0.0 (the schema of FiftyOne 1.x; a newer FiftyOne
migrates it on load, as it does its own older exports). Ids are derived from the catalog (the same
catalog gives the same files). DIR is written into DIR.tmp-<pid> and renamed: an existing DIR is
refused without `overwrite`, which swaps the new export in only once it is complete.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from data_engine.signals import SIGNALS
from hydranet.io import replace_folder, temp_path

FORMAT_VERSION = "1.0.0"  # the FiftyOne document version written (see the module docstring)
_F = "fiftyone.core.fields."
# the fields FiftyOne declares on every sample (names it owns: never used for ours)
_RESERVED = {"id", "_id", "filepath", "tags", "metadata", "group", "created_at", "last_modified_at", "_rand",
             "_media_type", "_dataset_id", "frames"}


class FiftyOneExportError(ValueError):
    """An export that cannot be written as asked; one line saying what to do."""


# -- schema ------------------------------------------------------------------------------------------
def _field(name: str, ftype: str, embedded: str | None = None, subfield: str | None = None,
           fields: Sequence[dict] = (), db_field: str | None = None) -> dict:
    return {"name": name, "ftype": _F + ftype, "embedded_doc_type": embedded, "subfield": None if subfield is None else _F + subfield,
            "fields": list(fields), "db_field": db_field or name, "description": None, "info": None}


def _detections_field(name: str) -> dict:
    det = [_field("id", "ObjectIdField", db_field="_id"), _field("tags", "ListField", subfield="StringField"),
           _field("attributes", "DictField", "fiftyone.core.labels.Attribute", "EmbeddedDocumentField"),
           _field("label", "StringField"), _field("bounding_box", "ListField", subfield="FloatField"),
           _field("mask", "ArrayField"), _field("mask_path", "StringField"), _field("confidence", "FloatField"),
           _field("index", "IntField")]
    return _field(name, "EmbeddedDocumentField", "fiftyone.core.labels.Detections", fields=[
        _field("detections", "ListField", "fiftyone.core.labels.Detection", "EmbeddedDocumentField", det)])


def _segmentation_field(name: str) -> dict:
    return _field(name, "EmbeddedDocumentField", "fiftyone.core.labels.Segmentation", fields=[
        _field("id", "ObjectIdField", db_field="_id"), _field("tags", "ListField", subfield="StringField"),
        _field("mask", "ArrayField"), _field("mask_path", "StringField")])


def _base_fields(with_size: bool, grouped: bool) -> list[dict]:
    meta = [_field("size_bytes", "IntField"), _field("mime_type", "StringField")]
    if with_size:
        meta += [_field("width", "IntField"), _field("height", "IntField"), _field("num_channels", "IntField")]
    return [_field("id", "ObjectIdField", db_field="_id"), _field("filepath", "StringField"),
            _field("tags", "ListField", subfield="StringField"),
            _field("metadata", "EmbeddedDocumentField", "fiftyone.core.metadata.ImageMetadata" if with_size
                   else "fiftyone.core.metadata.Metadata", fields=meta),
            _field("_media_type", "StringField"), _field("_rand", "FloatField"), _field("_dataset_id", "ObjectIdField"),
            _field("created_at", "DateTimeField"), _field("last_modified_at", "DateTimeField")] + \
        ([_field("group", "EmbeddedDocumentField", "fiftyone.core.groups.Group",
                 fields=[_field("id", "ObjectIdField", db_field="_id"), _field("name", "StringField")])] if grouped else [])


def field_name(prefix: str, name: str, taken: set[str]) -> str:
    """`prefix` + `name` made a valid FiftyOne field name (letters, digits, _; no leading _ or dot),
    unique among `taken` (a suffix _2, _3, ... where two names clean to the same)."""
    base = prefix + re.sub(r"[^0-9A-Za-z_]", "_", str(name))
    out, k = base, 2
    while out in taken or out in _RESERVED:
        out, k = f"{base}_{k}", k + 1
    taken.add(out)
    return out


def _oid(*key: Any) -> dict:
    """A deterministic ObjectId (24 hex digits) in MongoDB extended JSON."""
    return {"$oid": hashlib.sha1(repr(key).encode()).hexdigest()[:24]}


def _rand(*key: Any) -> float:
    return int(hashlib.sha1(repr(key).encode()).hexdigest()[:13], 16) / 16 ** 13  # FiftyOne's _rand in [0, 1)


def relative_box(box: Sequence[float], size: tuple[int, int]) -> list[float] | None:
    """[x1, y1, x2, y2] in model pixels -> FiftyOne's [x, y, w, h] relative to the image, clipped to
    [0, 1]; None for a box with no area left inside the image."""
    H, W = size
    x1, x2 = (min(max(float(v) / W, 0.0), 1.0) for v in (box[0], box[2]))
    y1, y2 = (min(max(float(v) / H, 0.0), 1.0) for v in (box[1], box[3]))
    if x2 <= x1 or y2 <= y1:
        return None
    return [round(x1, 6), round(y1, 6), round(x2 - x1, 6), round(y2 - y1, 6)]


# -- reading the catalog -----------------------------------------------------------------------------
def _model_meta(cat: Catalog, run_id: int) -> tuple[str, list[str], tuple[int, int] | None, list[str]]:
    """(model path, camera names, model input (H, W) or None without det2d, det2d class names)."""
    from deploy.metadata import MetadataError, ModelRig, read_metadata

    path, cams = cat.run_model(run_id)
    try:
        md = read_metadata(path)
        rig = ModelRig.from_metadata(md, str(path))
    except (OSError, MetadataError, ValueError) as e:
        raise FiftyOneExportError(f"model {path} of shadow run {run_id} cannot be read ({str(e)[:160]}): its input size places "
                                  "the boxes; put the model file back at that path") from None
    if "det2d" not in md["heads"]:
        return path, cams or list(rig.names), None, []
    classes = list(md["heads"]["det2d"].get("classes") or md.get("classes") or [])
    return path, cams or list(rig.names), rig.image_size, classes


def _camera_sizes(root: Path) -> dict[str, tuple[int, int]]:
    """{camera: (H, W)} of the fleet where its folder says so ({} otherwise: FiftyOne computes metadata itself)."""
    from data_engine.fleet import Fleet

    try:
        return dict(Fleet(root).cameras)
    except (OSError, ValueError):
        return {}


def _frames(cat: Catalog, run_id: int, only: Sequence[int] | None) -> list[dict]:
    got = cat.rows(run_id, ["frame_id", "clip", "idx", "status", "error", "predictions", *SIGNALS])
    where = {f: (d, ts) for f, d, ts in cat.db.execute("SELECT f.id, f.dir, f.timestamp_us FROM frames f JOIN clips c ON "
                                                       "f.clip_id = c.id JOIN shadow_runs r ON c.fleet_id = r.fleet_id "
                                                       "WHERE r.id = ?", (run_id,))}
    rows = []
    for k, f in enumerate(got["frame_id"].tolist()):
        rows.append((f, got["clip"][k], int(got["idx"][k]), *where[f], got["status"][k], got["error"][k],
                     got["predictions"][k], *[None if np.isnan(got[s][k]) else float(got[s][k]) for s in SIGNALS]))
    rows.sort(key=lambda r: (r[1], r[2]))
    frames = {r[0]: {"frame_id": int(r[0]), "clip": str(r[1]), "frame": int(r[2]), "dir": str(r[3]),
                     "timestamp_us": None if r[4] is None else int(r[4]), "status": str(r[5]), "error": r[6],
                     "predictions": json.loads(r[7] or "{}"), "signals": dict(zip(SIGNALS, r[8:]))} for r in rows}
    if only is None:
        return list(frames.values())
    return [frames[f] for f in only]


def _hits(cat: Catalog, run_id: int) -> dict[str, dict[int, float]]:
    """{trigger: {frame id: score}} of the newest stored version of each trigger on the run."""
    out: dict[str, dict[int, float]] = {}
    hits = cat.hit_rows(run_id)
    newest = {t: max(v for t2, v, _, _ in hits if t2 == t) for t, _, _, _ in hits}
    for t, v, f, s in sorted(hits, key=lambda h: (h[0], h[2])):
        if v == newest[t]:
            out.setdefault(str(t), {})[int(f)] = None if s is None or s != s else float(s)
    return out


def _selections(cat: Catalog, run_id: int) -> dict[str, dict[int, int]]:
    """{selection name: {frame id: rank}} of the run's selections, oldest first."""
    out: dict[str, dict[int, int]] = {}
    for name, f, rank in cat.db.execute("SELECT s.name, i.frame_id, i.rank FROM selections s JOIN selection_items i ON "
                                        "i.selection_id = s.id WHERE s.run_id = ? ORDER BY s.id, i.rank", (run_id,)):
        out.setdefault(str(name), {})[int(f)] = int(rank)
    return out


# -- images ------------------------------------------------------------------------------------------
def _place_image(root: Path, clip: str, fdir: str, cam: str, dst: Path, check: bool) -> str | None:
    """Put the camera image at dst (hard link, copy, or decoded and written as JPEG); None, or why not.
    `check`: decode the image first (a frame shadow found corrupt: only its readable images go in)."""
    import cv2

    from data_engine.fleet import read_frame
    from hydranet.io import frame_path

    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        try:
            src = frame_path(root, clip, fdir, f"{cam}.jpg", where=f"fleet {root}")
        except ValueError:  # not a path of an image folder (a recorded fleet): read_frame knows the frame
            src = None
        if check:
            read_frame(root, clip, fdir, [cam])
        if src is not None and src.is_file():
            try:
                os.link(src, dst)
            except OSError:  # another filesystem, or links refused: a copy
                shutil.copyfile(src, dst)
            return None
        img = read_frame(root, clip, fdir, [cam])[0]  # a fleet that is not an image folder
        if not cv2.imwrite(str(dst), cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95]):
            return f"could not write {dst}"
        return None
    except ValueError as e:  # FleetError, PathOutsideRoot and read_frame's errors are ValueErrors
        return str(e)


# -- labels: boxes, masks ---------------------------------------------------------------------------
def _detections(key: tuple, boxes: Sequence[tuple[Sequence[float], str, float | None]], size: tuple[int, int]) -> dict:
    """FiftyOne `Detections` of [(x1, y1, x2, y2) in pixels of an image of `size` (H, W), label, confidence or None]
    (boxes with no area inside the image left out); `key` derives the ids."""
    dets = []
    for j, (box, label, score) in enumerate(boxes):
        bb = relative_box(box, size)
        if bb is not None:
            dets.append({"_id": _oid("det", *key, j), "_cls": "Detection", "attributes": {}, "tags": [], "label": str(label),
                         "bounding_box": bb, **({} if score is None else {"confidence": float(score)})})
    return {"_cls": "Detections", "detections": dets}


def _truth_boxes(labels: Mapping[str, Any] | None, cam: str) -> list[tuple[Sequence[float], str, None]] | None:
    """A labels payload's 2D boxes of one camera (camera pixels, class names), or None where it has none for it."""
    c = ((labels or {}).get("cameras") or {}).get(cam)
    if c is None:
        return None
    return [(b["bbox"], b["class"], None) for b in c.get("boxes2d") or []]


def _segmentation(key: tuple, mask: np.ndarray, path: Path, rel: Path) -> dict:
    """FiftyOne `Segmentation` of a (H, W) bool mask, written as a PNG (0 background, 1 the class: mask_targets)."""
    import cv2

    path.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(path), np.asarray(mask, np.uint8)):
        raise OSError(28, "could not write the mask", str(path))
    return {"_id": _oid("seg", *key), "_cls": "Segmentation", "tags": [], "mask_path": rel.as_posix()}


def _frame_masks(predict, fleet: Path, fr: Mapping[str, Any], model_cams: list[str], truth: Mapping | None,
                 semantic: Sequence[str], sizes: Mapping[str, tuple[int, int]]) -> dict[str, dict[str, np.ndarray]]:
    """{field: {camera: (H, W) bool}} of one frame: pred_drivable / pred_lanes (the model run again on an ok frame),
    gt_drivable (a sim fleet's semantic file) / gt_lanes (the truth's polylines at the camera size)."""
    from data_engine.fleet import read_frame
    from data_engine.report import lane_mask, truth_drivable

    out: dict[str, dict[str, np.ndarray]] = {}
    if predict is not None and fr["status"] == "ok":
        try:
            images = read_frame(fleet, fr["clip"], fr["dir"], model_cams)
        except ValueError:  # an image gone since shadow mode: counted where its sample is placed
            images = None
        if images is not None:
            for head, masks in predict(images).items():
                out[f"pred_{head}"] = dict(zip(model_cams, masks))
    for cam in (truth or {}).get("cameras") or {}:
        if semantic:
            d = truth_drivable(fleet, fr["clip"], fr["dir"], cam, semantic)
            if d is not None:
                out.setdefault("gt_drivable", {})[cam] = d
        if cam in sizes and truth["cameras"][cam].get("lanes2d") is not None:
            out.setdefault("gt_lanes", {})[cam] = lane_mask(truth["cameras"][cam]["lanes2d"], sizes[cam])
    return out


MASK_FIELDS = {"pred_drivable": "drivable", "pred_lanes": "lane", "gt_drivable": "drivable", "gt_lanes": "lane"}


# -- the export --------------------------------------------------------------------------------------
def export_fiftyone(catalog: str | Path, out: str | Path, selection: str | Path | None = None, run: int | None = None,
                    overwrite: bool = False, masks: bool = True) -> dict[str, Any]:
    """Write DIR (module docstring). `masks`: the model's drivable and lane masks (each frame run again). Returns
    {"out", "run", "selection", "frames", "samples", "cameras", "skipped" [(frame id, camera, why)], "triggers",
    "selections", "grouped", "truth" (frames with the fleet's labels), "accepted" (with an accepted label), "no_masks"
    (why there are no predicted masks, or None)}."""
    from data_engine.fleet import Fleet
    from data_engine.labels import accepted_labels
    from data_engine.report import ReportError, fleet_truth, mask_predictor, resolve_selection

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise FiftyOneExportError(f"--out {out} is a file; give a folder path")
    if out.exists() and not overwrite:
        raise FiftyOneExportError(f"export folder {out} exists; give another --out or pass --overwrite to replace it")
    with Catalog(catalog) as cat:
        sel_name, sel_rank = None, None
        if selection is not None:
            try:
                sel_name, run_id, items = resolve_selection(cat, selection, run)
            except ReportError as e:
                raise FiftyOneExportError(str(e)) from None
            sel_rank = {int(it["frame_id"]): int(it["rank"]) for it in items}
        else:
            run_id = cat.latest_run(run)
        known = set(cat.rows(run_id, ["frame_id"])["frame_id"].tolist())
        if sel_rank is not None:
            missing = [f for f in sel_rank if f not in known]
            if missing:
                raise FiftyOneExportError(f"selection {sel_name!r} frame id {missing[0]} is not a frame of shadow run {run_id} in "
                                          f"{cat.path}; give --run of the run it was mined from")
        frames = _frames(cat, run_id, None if sel_rank is None else sorted(sel_rank, key=sel_rank.get))
        model, model_cams, model_size, classes = _model_meta(cat, run_id)
        fleet_cams = json.loads(cat.db.execute("SELECT fl.cameras FROM shadow_runs r JOIN fleets fl ON r.fleet_id = fl.id "
                                               "WHERE r.id = ?", (run_id,)).fetchone()[0] or "[]")
        cams = model_cams + [c for c in fleet_cams if c not in model_cams]  # every camera: the model's first
        fleet = Path(cat.run_info(run_id)["fleet"])
        hits = _hits(cat, run_id)
        sels = _selections(cat, run_id)
        accepted = accepted_labels(cat)
        emb_ids, emb = cat.embeddings(run_id)
        frame_emb = dict(zip(emb_ids.tolist(), emb))  # {frame id: (N*C,)} the frame embedding mining and search use
        cam_emb = [dict(zip(i.tolist(), v)) for i, v in (cat.camera_embeddings(run_id, n) for n in range(len(model_cams)))]
    if not frames:
        raise FiftyOneExportError(f"shadow run {run_id} of {catalog} holds no frame; run `hydranet engine shadow` to the end")
    sizes = _camera_sizes(fleet)
    with_size = all(c in sizes for c in cams)
    grouped = len(cams) > 1  # one camera: a flat image dataset (a group of one slice is no group)
    predict, no_masks = (None, "--no-masks") if not masks else mask_predictor(model, fleet)  # (None, why) without masks
    try:
        semantic = list(Fleet(fleet).meta.get("semantic_classes") or [])
    except ValueError:
        semantic = []

    taken = set(_RESERVED) | {"clip", "frame", "frame_id", "camera", "timestamp_us", "status", "error", "predictions",
                              "ground_truth", "accepted", "embedding", "camera_embedding", *MASK_FIELDS,
                              "triggers", "selections", "rank", *SIGNALS}
    trig_field = {t: field_name("trigger_", t, taken) for t in sorted(hits)}
    rank_field = {s: field_name("rank_", s, taken) for s in sels}

    schema = _base_fields(with_size, grouped) + [
        _field("clip", "StringField"), _field("frame", "IntField"), _field("frame_id", "IntField"), _field("camera", "StringField"),
        _field("timestamp_us", "IntField"), _field("status", "StringField"), _field("error", "StringField"),
        *[_field(s, "FloatField") for s in SIGNALS], _detections_field("predictions"), _detections_field("ground_truth"),
        _detections_field("accepted"), *[_segmentation_field(f) for f in MASK_FIELDS],
        _field("embedding", "ListField", subfield="FloatField"), _field("camera_embedding", "ListField", subfield="FloatField"),
        _field("triggers", "ListField", subfield="StringField"), *[_field(trig_field[t], "FloatField") for t in sorted(hits)],
        _field("selections", "ListField", subfield="StringField"), *[_field(rank_field[s], "IntField") for s in sels]]
    if sel_rank is not None:
        schema.append(_field("rank", "IntField"))

    tmp = temp_path(out)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        samples, skipped, n_frames, n_truth = [], [], 0, 0
        for fr in frames:
            fid = fr["frame_id"]
            group = _oid("group", str(catalog), run_id, fid)
            fired = [t for t in sorted(hits) if fid in hits[t]]
            in_sels = [s for s in sels if fid in sels[s]]
            vec = frame_emb.get(fid)
            common = {"clip": fr["clip"], "frame": fr["frame"], "frame_id": fid, "timestamp_us": fr["timestamp_us"],
                      "status": fr["status"], "error": fr["error"],
                      **{s: (None if v is None else float(v)) for s, v in fr["signals"].items()},
                      "embedding": None if vec is None else [round(float(x), 6) for x in vec],
                      "triggers": fired, **{trig_field[t]: hits[t].get(fid) for t in sorted(hits)},
                      "selections": in_sels, **{rank_field[s]: sels[s].get(fid) for s in sels}}
            if sel_rank is not None:
                common["rank"] = sel_rank[fid]
            try:
                truth = fleet_truth(fleet, fr["clip"], fr["dir"])
                frame_masks = _frame_masks(predict, fleet, fr, model_cams, truth, semantic, sizes)
            except ValueError as e:  # a truth file that exists and cannot be read; an output that is not finite
                raise FiftyOneExportError(f"frame {fr['clip']}/{fr['dir']} of fleet {fleet}: {e}") from None
            n_truth += truth is not None
            det2d = fr["predictions"].get("det2d") or []
            placed = 0
            for k, cam in enumerate(cams):
                rel = Path("data") / fr["clip"] / fr["dir"] / f"{cam}.jpg"
                why = _place_image(fleet, fr["clip"], fr["dir"], cam, tmp / rel, check=fr["status"] != "ok")
                if why is not None:
                    skipped.append((fid, cam, why))
                    continue
                placed += 1
                key = (str(catalog), run_id, fid, cam)
                seen = k < len(model_cams) and k < len(det2d) and model_size is not None
                p = det2d[k] if seen else {"boxes": [], "scores": [], "labels": []}
                preds = [(b, classes[lab] if 0 <= lab < len(classes) else str(lab), s)
                         for b, s, lab in zip(p["boxes"], p["scores"], p["labels"])]
                size = sizes.get(cam) or _image_hw(tmp / rel)
                gt, acc = _truth_boxes(truth, cam), _truth_boxes(accepted.get(fid), cam)
                cv = cam_emb[k].get(fid) if k < len(model_cams) else None
                sample = {"_id": _oid("sample", *key), "filepath": rel.as_posix(), "tags": [],
                          "_media_type": "image", "_rand": _rand(run_id, fid, cam), "camera": cam, **common,
                          "predictions": _detections(("pred", *key), preds, model_size or (1, 1)),
                          "ground_truth": None if gt is None else _detections(("gt", *key), gt, size),
                          "accepted": None if acc is None else _detections(("acc", *key), acc, size),
                          "camera_embedding": None if cv is None else [round(float(x), 6) for x in cv],
                          **{f: None for f in MASK_FIELDS}}
                for f, by_cam in frame_masks.items():
                    if cam in by_cam:
                        mrel = Path("fields") / f / fr["clip"] / fr["dir"] / f"{cam}.png"
                        sample[f] = _segmentation((f, *key), by_cam[cam], tmp / mrel, mrel)
                if grouped:
                    sample["group"] = {"_id": group, "_cls": "Group", "name": cam}
                if with_size:
                    h, w = sizes[cam]
                    sample["metadata"] = {"_cls": "ImageMetadata", "size_bytes": (tmp / rel).stat().st_size,
                                          "mime_type": "image/jpeg", "width": int(w), "height": int(h), "num_channels": 3}
                samples.append(sample)
            n_frames += placed > 0
        if not samples:
            raise FiftyOneExportError(f"no camera image of shadow run {run_id} can be read from fleet {fleet} "
                                      f"({skipped[0][2] if skipped else 'no frames'}); restore the fleet folder")
        doc = {"version": FORMAT_VERSION, "media_type": "group" if grouped else "image", "group_field": "group" if grouped else None,
               "group_media_types": {c: "image" for c in cams} if grouped else {},
               "default_group_slice": cams[0] if grouped else None, "tags": [],
               "info": {"hydranet": {"catalog": str(Path(catalog).resolve()), "shadow_run": run_id, "model": model,
                                     "fleet": str(fleet), "selection": sel_name, "signals": list(SIGNALS),
                                     "trigger_fields": trig_field, "rank_fields": rank_field,
                                     "embedding": "the frame's (every model camera's, L2-normalized, concatenated, "
                                                  "normalized again: what mining and similarity search use)"}},
               "app_config": {"media_fields": ["filepath"], "grid_media_field": "filepath", "modal_media_field": "filepath",
                              "plugins": {}},
               "classes": {f: classes for f in ("predictions", "ground_truth", "accepted")} if classes else {},
               "default_classes": classes, "mask_targets": {f: {"1": name} for f, name in MASK_FIELDS.items()},
               "default_mask_targets": {}, "skeletons": {}, "sample_fields": schema, "frame_fields": [], "saved_views": [],
               "workspaces": [], "annotation_runs": {}, "brain_methods": {}, "evaluations": {}, "runs": {}}
        (tmp / "metadata.json").write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        (tmp / "samples.json").write_text(json.dumps({"samples": samples}, allow_nan=False) + "\n")
        replace_folder(tmp, out)  # --overwrite: the old export goes only once the new one is complete
    except OSError as e:  # a full disk, a folder not writable: nothing half-written stays
        shutil.rmtree(tmp, ignore_errors=True)
        raise FiftyOneExportError(f"cannot write the export {out} ({e.strerror or e}: {e.filename or tmp}); free space or give "
                                  "another --out") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out": out, "run": run_id, "selection": sel_name, "frames": n_frames, "samples": len(samples), "cameras": cams,
            "skipped": skipped, "triggers": sorted(hits), "selections": list(sels), "grouped": grouped, "truth": n_truth,
            "accepted": sum(f["frame_id"] in accepted for f in frames), "no_masks": no_masks or None}


def _image_hw(path: Path) -> tuple[int, int]:
    """(H, W) of a placed image (a fleet that does not say its camera sizes)."""
    import cv2

    img = cv2.imread(str(path))
    return (1, 1) if img is None else img.shape[:2]


def check_export(out: str | Path) -> dict[str, Any]:
    """Validate DIR against the FiftyOneDataset schema it declares (what `Dataset.from_dir` relies on):
    every sample's file and mask file exists inside DIR, every field a sample holds is declared with a matching
    type, boxes are relative and inside [0, 1], every group has each slice at most once (a flat dataset: no
    group anywhere). Returns {"samples", "groups" (0 when flat)}; AssertionError naming the first problem.
    (The tests; a user's check without FiftyOne.)"""
    out = Path(out)
    doc = json.loads((out / "metadata.json").read_text())
    samples = json.loads((out / "samples.json").read_text())["samples"]
    declared = {f["name"]: f for f in doc["sample_fields"]}
    by_db = {f["db_field"]: f for f in doc["sample_fields"]}
    grouped = doc["media_type"] == "group"
    assert (grouped and doc["group_field"] in declared) or (doc["media_type"] == "image" and doc["group_field"] is None
                                                             and "group" not in declared), "neither grouped nor flat"
    slices: dict[str, set] = {}
    for k, s in enumerate(samples):
        where = f"sample {k} ({s.get('filepath')})"
        paths = [s["filepath"]] + [v["mask_path"] for v in s.values() if isinstance(v, dict) and v.get("_cls") == "Segmentation"]
        for rel in paths:
            path = out / rel
            assert not Path(rel).is_absolute() and path.resolve().is_relative_to(out.resolve()), f"{where}: {rel} outside"
            assert path.is_file(), f"{where}: no file {rel}"
        for key, v in s.items():
            assert key in by_db, f"{where}: field {key!r} not declared in metadata.json"
            _check_value(by_db[key], v, f"{where} field {key}")
        if not grouped:
            continue
        g = s[doc["group_field"]]
        assert g["name"] in doc["group_media_types"], f"{where}: slice {g['name']} not in group_media_types"
        seen = slices.setdefault(g["_id"]["$oid"], set())
        assert g["name"] not in seen, f"{where}: slice {g['name']} twice in one group"
        seen.add(g["name"])
    return {"samples": len(samples), "groups": len(slices)}


_PY = {"FloatField": (float, int), "IntField": (int,), "StringField": (str,), "BooleanField": (bool,)}


def _check_value(f: Mapping[str, Any], v: Any, where: str) -> None:
    ftype = f["ftype"].rsplit(".", 1)[1]
    if v is None:
        return
    if ftype in _PY:
        assert isinstance(v, _PY[ftype]) and not (ftype != "BooleanField" and isinstance(v, bool)), f"{where}: {v!r} not {ftype}"
        if ftype == "FloatField":
            assert v == v and abs(v) != float("inf"), f"{where}: {v!r} not finite"
    elif ftype == "ObjectIdField":
        assert isinstance(v, dict) and re.fullmatch(r"[0-9a-f]{24}", v.get("$oid", "")), f"{where}: {v!r} not an ObjectId"
    elif ftype == "ListField":
        assert isinstance(v, list), f"{where}: {v!r} not a list"
        sub = (f.get("subfield") or "").rsplit(".", 1)[-1]
        for x in v:
            if sub == "EmbeddedDocumentField":
                _check_doc(f, x, where)
            elif sub in _PY:
                _check_value({"ftype": _F + sub}, x, where)
    elif ftype == "EmbeddedDocumentField":
        _check_doc(f, v, where)


def _check_doc(f: Mapping[str, Any], v: Any, where: str) -> None:
    cls = f["embedded_doc_type"].rsplit(".", 1)[1]
    assert isinstance(v, dict) and v.get("_cls") == cls, f"{where}: {v!r:.80} is not a {cls}"
    sub = {g["db_field"]: g for g in f["fields"]}
    for key, x in v.items():
        if key == "_cls":
            continue
        assert key in sub or cls in ("Metadata", "ImageMetadata"), f"{where}: {cls}.{key} not declared"
        if key in sub:
            _check_value(sub[key], x, f"{where}.{key}")
    if cls == "Detection":
        bb = v["bounding_box"]
        assert len(bb) == 4 and all(0.0 <= x <= 1.0 for x in bb) and bb[0] + bb[2] <= 1.0 + 1e-6 and bb[1] + bb[3] <= 1.0 + 1e-6, \
            f"{where}: bounding_box {bb} not relative [x, y, w, h] inside the image"
