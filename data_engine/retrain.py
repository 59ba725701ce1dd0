"""Retrain: fine-tune the production model on its base training set plus the accepted labels.

    hydranet engine retrain --production CKPT --catalog CAT --out RUN [--steps N] [--mix R] [--base DATA]
                            [--resume] [--overwrite] [--config engine.yaml] [--set retrain.lr=1e-3]

1. `materialize_accepted(catalog, RUN/accepted)`: the catalog's accepted labels (the only view
   training reads, `data_engine.labels.accepted_labels`) as a sim-format dataset
   (docs/dataset_format.md): per accepted frame its camera images, hard-linked from a sim fleet's frame
   folder or, for a recorded fleet, read in place (scene.json's `"recording"` names the fleet, clip and
   frame: the one frame reader, hydranet.data.recording, decodes them at training time), and labels.json
   = the accepted payload. An oracle label is the sim's exact truth, so its
   per-pixel label channels (depth, normal, semantic, instance PNGs, bev.png) come with it; a
   human or file label supervises only what its 2D boxes can (HUMAN_HEADS: det2d, signs_lights),
   which scene.json records per frame (`"supervises"`; the reader gives it as sample["supervises"]
   and the other heads get no loss from that frame). One scene per fleet clip, frames in clip order,
   so video/BEV models still see ordered clips. Written to a temp folder and renamed; deterministic.
2. The run's config is the production checkpoint's with data.sources = [the production's base
   training set (or --base), the accepted set], batches drawn from the accepted set with
   probability `mix` (`hydranet.loader.SourceBatchSampler`), `retrain.steps`, `retrain.lr`, and
   `init_from` = the production checkpoint (weights from there; optimizer and schedule fresh).
3. `hydranet.train.train` writes RUN/checkpoint.pt and RUN/config.json; RUN/retrain.json records
   the production's sha256, the catalog, the label versions used and the mix. --resume continues
   exactly (the accepted set recorded at the start is kept, labels accepted since are not added).

configs/engine.yaml `retrain: {steps, mix, lr, norm_eval}` (`RetrainConfig`, a section of data_engine.config.EngineConfig).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from data_engine.config import RetrainConfig
from data_engine.fleet import RECORDED_FILE, Fleet, FleetError, recorded_fleet
from data_engine.labels import accepted_versions, open_catalog
from hydranet.io import atomic_write_text, file_sha256, frame_path, read_json
from hydranet.heads import heads_where
from hydranet.rig import camera_sizes

RECORD = "retrain.json"
ACCEPTED = "accepted"  # the run's sub-folder and data source name of the accepted labels
# what a person's 2D boxes (Label Studio, COCO/CVAT files) supervise: the heads whose spec says so
HUMAN_HEADS = heads_where("human_labels")


class RetrainError(ValueError):
    """A retrain that cannot run as asked; one line saying what to do."""


# -- the accepted labels as a dataset -------------------------------------------------------------
def _frame_rows(cat: Catalog, frame_ids: list[int]) -> dict[int, tuple[int, str, str, int, str, int]]:
    """{frame id: (fleet id, fleet root, clip, idx, dir, timestamp_us)}."""
    out = {}
    for k in range(0, len(frame_ids), 500):
        chunk = frame_ids[k:k + 500]
        q = ("SELECT f.id, fl.id, fl.root, c.name, f.idx, f.dir, f.timestamp_us FROM frames f JOIN clips c ON f.clip_id = c.id "
             f"JOIN fleets fl ON c.fleet_id = fl.id WHERE f.id IN ({', '.join('?' * len(chunk))})")
        out.update({int(r[0]): tuple(r[1:]) for r in cat.db.execute(q, chunk)})
    return out


def _read_json(path: Path, what: str) -> Any:
    """The JSON at `path`, or one RetrainError line naming the file, what it is and to regenerate it."""
    return read_json(path, what, RetrainError, f"regenerate the {what}")


def _fleet_meta(root: str) -> dict[str, Any]:
    """The fleet's dataset.json without what describes only its own scenes and render; for a recorded fleet
    (engine ingest) the same keys from its fleet.json: its rig and label vocabulary, with the sim's BEV grid and
    semantic classes (human labels supervise no BEV or pixel head, so these only make the set readable)."""
    if (Path(root) / RECORDED_FILE).is_file():
        from sim.config import SimConfig
        from sim.generate import dataset_meta

        fl = Fleet(root)
        base = dataset_meta(SimConfig(), fl.rig, 0)
        vocab = {k: fl.meta[k] for k in ("classes", "sign_classes", "light_states", "lane_types") if k in fl.meta}
        return {k: v for k, v in {**base, **vocab}.items() if k not in ("scenes", "seed", "sim_config")}
    meta = _read_json(Path(root) / "dataset.json", "fleet")
    return {k: v for k, v in meta.items() if k not in ("scenes", "seed", "sim_config")}


def _clip_poses(root: Path, clip: str) -> dict[str, Any]:
    """{frame dir: ego2world (4x4 list) or None} of a fleet clip (scene.json of a sim fleet, fleet.json of a recorded one)."""
    if (root / RECORDED_FILE).is_file():
        return {f["dir"]: None if f["ego2world"] is None else f["ego2world"].tolist() for f in Fleet(root).clip(clip).frames}
    scene = _read_json(frame_path(root, clip, file="scene.json", where=f"catalog clip {clip!r} of fleet {root}",
                                  error=RetrainError), "fleet")
    return {str(f.get("dir")): f.get("ego2world") for f in scene.get("frames", []) if isinstance(f, dict)}


def _dataset_images(root: Path, clip: str, fdir: str, cameras: list[str], tmp: Path) -> dict[str, Path]:
    """{CAM.jpg: file} of a dataset fleet's frame for the accepted set: the reader's decoded frame (the pixels the
    labeller saw) written as JPEG quality 95 into `tmp` (a dataset's frames come through its reader, which the
    training-side reader cannot open in place: hydranet.data.recording)."""
    import cv2

    fl = recorded_fleet(root)
    out = {}
    for cam in cameras:
        try:
            rgb = fl.read(clip, fdir, [cam])[0]
        except ValueError as e:
            raise RetrainError(f"accepted frame {clip}/{fdir} of fleet {root}: {e}") from None
        path = tmp / f"{clip}_{fdir}_{cam}.jpg"
        if not cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95]):
            raise RetrainError(f"{path}: could not write the frame image (disk full?)")
        out[f"{cam}.jpg"] = path
    return out


def _check_recorded(root: Path, clip: str, fdir: str, cameras: list[str]) -> None:
    """RetrainError unless every camera of a recorded frame is still there (the set reads it in place)."""
    try:
        recorded_fleet(root).frame_refs(clip, fdir)
    except FleetError as e:
        raise RetrainError(f"accepted frame {clip}/{fdir} of fleet {root}: {e}") from None
    missing = [c for c in cameras if c not in recorded_fleet(root).cameras]
    if missing:
        raise RetrainError(f"accepted frame {clip}/{fdir} of fleet {root} has no camera {missing[0]}; ingest it again")


def supervised(payload: Mapping[str, Any], source: str, recorded: bool) -> list[str]:
    """The heads an accepted label supervises: the sim oracle's exact truth all the sim's heads; a dataset's own
    annotations (the stand-in oracle of a recorded fleet) the heads it names; the auto-labeller's the heads it fused
    (its payload's "supervises": det2d boxes without sign classes must not train signs_lights); a person's 2D boxes
    HUMAN_HEADS."""
    from hydranet.data.sim_reader import SIM_HEADS

    if source == "auto":
        return [h for h in payload.get("supervises") or ("det2d",) if h in SIM_HEADS]
    if source != "oracle":
        return list(HUMAN_HEADS)
    if not recorded:
        return list(SIM_HEADS)
    return [h for h in payload.get("supervises") or () if h in SIM_HEADS]


def _labels_file(payload: Mapping[str, Any], source: str, cameras: list[str], where: str) -> dict[str, Any]:
    """The labels.json of a frame: the payload; a human label's 2D part with empty 3D lists (not read:
    the frame does not supervise det3d)."""
    labels = json.loads(json.dumps(payload))
    labels.pop("supervises", None)  # a stand-in oracle's heads (scene.json records them), not a label
    cams = labels.get("cameras")
    if not isinstance(cams, dict):
        raise RetrainError(f"{where} has no 'cameras'; reject the job and label the frame again")
    missing = [c for c in cameras if c not in cams]
    if missing:
        raise RetrainError(f"{where} has no labels for camera {missing[0]} (labelled: {sorted(cams)}); an unlabelled camera "
                           "would train as 'no objects': reject the job and label every camera")
    if source != "oracle" or "supervises" in payload:
        labels.setdefault("boxes3d", [])
        labels.setdefault("lanes3d", [])
    return labels


def materialize_accepted(catalog: str | Path | Catalog, out_dir: str | Path, overwrite: bool = False,
                         progress: bool = False, classes: list[str] | None = None) -> dict[str, Any]:
    """Write the catalog's accepted labels as a sim-format dataset at `out_dir` (see the module
    docstring). Refuses an existing `out_dir` unless `overwrite`, and (with `classes`, a model's)
    fleets with classes the model lacks; a temp folder of a killed earlier call is removed. Returns {"root", "frames",
    "scenes", "by_source" {source: frames}, "labels" [{"frame_id", "label_id", "version", "job_id",
    "source"}], "copied" (files copied where a hard link was impossible)}."""
    from tqdm import tqdm

    from hydranet.io import remove_stale_temps
    from hydranet.data.reader import DatasetError
    from hydranet.data.sim_reader import BEV_FILE, CHANNEL_SUFFIX, check_labels
    from sim.writer import DatasetWriter

    if not isinstance(catalog, Catalog):
        with open_catalog(catalog) as cat:
            return materialize_accepted(cat, out_dir, overwrite, progress, classes)
    cat, out = catalog, Path(out_dir)
    accepted = accepted_versions(cat)
    if not accepted:
        raise RetrainError(f"catalog {cat.path} has no accepted labels; label frames and accept them "
                           f"(`hydranet engine jobs --catalog {cat.path} --accept all`)")
    rows = _frame_rows(cat, sorted(accepted))
    fleets = sorted({(r[0], r[1]) for r in rows.values()})
    metas = {fid: _fleet_meta(root) for fid, root in fleets}
    first_id, first_root = fleets[0]
    for fid, root in fleets[1:]:
        diff = sorted(k for k in set(metas[fid]) | set(metas[first_id]) if metas[fid].get(k) != metas[first_id].get(k))
        if diff:
            raise RetrainError(f"accepted labels come from fleets that differ in {diff[0]!r} ({first_root} vs {root}); "
                               "one training set needs one rig and one class list: retrain per fleet rig")
    meta = metas[first_id]
    extra = [c for c in meta["classes"] if classes is not None and c not in classes]
    if extra:
        raise RetrainError(f"the accepted labels' fleet {first_root} has classes {extra} that the model lacks; fine-tuning "
                           "keeps the model's classes: retrain from a model trained with them")
    sizes = camera_sizes(meta["rig"], f"fleet {first_root} rig")  # {name: (width, height)}
    cameras = list(sizes)

    # scenes: one per (fleet, clip), in catalog order; frames in clip order
    clips: dict[tuple[int, str], list[int]] = {}
    for f in sorted(accepted, key=lambda f: (rows[f][0], rows[f][2], rows[f][3])):
        clips.setdefault((rows[f][0], rows[f][2]), []).append(f)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it, or choose another folder")
    remove_stale_temps(out.parent, dirs=True)
    if out.exists():
        shutil.rmtree(out)
    summary: dict[str, Any] = {"root": str(out), "frames": len(accepted), "scenes": len(clips), "by_source": {},
                               "labels": [], "copied": 0}
    by_source: dict[str, int] = {}
    for lab in accepted.values():
        by_source[lab["source"]] = by_source.get(lab["source"], 0) + 1
    dataset_meta = {**meta, "seed": None, "sim_config": None,
                    "accepted": {"catalog": _abs(str(cat.path)), "catalog_frames": len(accepted),
                                 "by_source": dict(sorted(by_source.items())), "fleets": [root for _, root in fleets]}}
    with DatasetWriter(out, dataset_meta) as writer, tqdm(total=len(accepted), desc="materialize accepted labels",
                                                           unit="frame", disable=not progress) as bar:
        for (fid, clip), frame_ids in clips.items():
            root = Path(dict(fleets)[fid])
            recorded = (root / RECORDED_FILE).is_file()
            in_place = recorded and recorded_fleet(root).kind != "dataset"  # videos and image files: read where they are
            poses = _clip_poses(root, clip)
            name = f"fleet{fid}_{clip}"
            frames = []
            for f in frame_ids:
                _, _, _, idx, fdir, ts = rows[f]
                lab = accepted[f]
                src = lab["source"]
                if fdir not in poses:
                    raise RetrainError(f"fleet {root} clip {clip} has no frame {fdir}; the fleet changed since it was "
                                       "shadowed: regenerate or ingest it again and shadow it again")
                heads = supervised(lab["payload"], src, recorded)
                frames.append({"index": int(idx), "dir": fdir, "timestamp_us": int(ts), "ego2world": poses[fdir],
                               "supervises": heads, "label": {k: lab[k] for k in ("label_id", "version", "job_id", "source")}
                               | {"frame_id": f}}
                              | ({"recording": {"fleet": str(root), "clip": clip, "dir": fdir}} if in_place else {}))
            if all(fr["ego2world"] is not None for fr in frames):
                scenes = [(name, frames)]
            else:  # recorded without poses: each frame its own scene, its ego frame the world's (no motion to align)
                scenes = [(f"{name}_{fr['dir']}", [{**fr, "ego2world": np.eye(4).tolist()}]) for fr in frames]
            for scene_name, scene_frames in scenes:
                writer.write_scene({"name": scene_name, "clip": {"fleet": str(root), "name": clip}, "frames": scene_frames})
            scene_of = {fr["dir"]: sn for sn, sfs in scenes for fr in sfs}
            for f, fr in zip(frame_ids, frames):
                lab, fdir = accepted[f], fr["dir"]
                where = f"accepted label {lab['label_id']} (v{lab['version']}, {lab['source']}) of frame {clip}/{fdir}"
                labels = _labels_file(lab["payload"], lab["source"], cameras, where)
                try:
                    check_labels(labels, Path(where), sizes, meta["classes"])
                except DatasetError as e:
                    raise RetrainError(str(e).replace("; fix or regenerate the file", "; reject the job and label it again")) from None
                if in_place:  # the camera images stay where they were recorded: the reader reads them in place
                    _check_recorded(root, clip, fdir, cameras)
                    files = {}
                elif recorded:
                    files = _dataset_images(root, clip, fdir, cameras, writer.tmp)
                else:
                    folder = frame_path(root, clip, fdir, where=f"catalog frame {clip}/{fdir!r} of fleet {root}",
                                        error=RetrainError)
                    chans = list(CHANNEL_SUFFIX) if lab["source"] == "oracle" else ["images"]
                    files = {f"{c}{CHANNEL_SUFFIX[ch]}": folder / f"{c}{CHANNEL_SUFFIX[ch]}" for c in cameras for ch in chans}
                    if lab["source"] == "oracle":
                        files[BEV_FILE] = folder / BEV_FILE
                summary["copied"] += writer.add_frame_files(scene_of[fdir], fdir, files, labels)
                for p in files.values():  # frames decoded for the set were written next to it: drop the temp copy
                    if p.parent == writer.tmp:
                        p.unlink()
                summary["by_source"][lab["source"]] = summary["by_source"].get(lab["source"], 0) + 1
                summary["labels"].append({"frame_id": f, **{k: lab[k] for k in ("label_id", "version", "job_id", "source")}})
                bar.update(1)
    return summary


def label_sources_line(record: Mapping[str, Any]) -> str:
    """retrain.json's label sets in one line: each set's frames by label source and its catalog, then what was left
    out and why (records written before "label_sources": the accepted set alone)."""
    def counts(by: Mapping[str, int] | None) -> str:
        return f" ({', '.join(f'{s} {n}' for s, n in sorted(by.items()))})" if by else ""

    sets = record.get("label_sources") or [{"name": ACCEPTED, "catalog": record.get("catalog"),
                                             **{k: (record.get("accepted") or {}).get(k) for k in ("frames", "by_source")},
                                             "carried": False}]
    parts = [f"{s['name']}{' (carried)' if s.get('carried') else ''}: {s.get('frames', '?')} frames{counts(s.get('by_source'))} "
             f"from catalog {s.get('catalog') or 'not recorded'}" for s in sets]
    left = [f"{d['root']} ({d['why']})" for d in record.get("dropped_labels") or ()]
    return "labels: " + "; ".join(parts) + (f"; left out: {', '.join(left)}" if left else "")


# -- the run ----------------------------------------------------------------------------------------------
def _retrain_config(cfg) -> RetrainConfig:
    """cfg: a RetrainConfig, an EngineConfig (its `retrain` section) or None (the defaults)."""
    if cfg is None:
        return RetrainConfig()
    return cfg if isinstance(cfg, RetrainConfig) else cfg.retrain


def _abs(path: str) -> str:
    return str(Path(path).resolve())


def is_label_set(source) -> bool:
    """A data source that is an earlier retrain's accepted labels ("accepted", or "accepted-K" when carried)."""
    return bool(source.name) and (source.name == ACCEPTED or source.name.startswith(f"{ACCEPTED}-"))


def label_set_info(root: str | Path) -> dict[str, Any]:
    """{"catalog" (absolute path or None: not recorded), "frames", "by_source"} of an accepted-labels set: its
    dataset.json's "accepted" entry, else (sets written before it recorded them) its retrain run's retrain.json."""
    root = Path(root)
    meta = _read_json(root / "dataset.json", "accepted labels set").get("accepted") or {}
    if "catalog" not in meta and (root.parent / RECORD).is_file():
        rec = _read_json(root.parent / RECORD, "retrain record")
        meta = {**meta, "catalog": rec.get("catalog"), **{k: v for k, v in (rec.get("accepted") or {}).items()
                                                           if k in ("frames", "by_source")}}
    return {"catalog": meta.get("catalog"), "frames": meta.get("frames", meta.get("catalog_frames")),
            "by_source": meta.get("by_source")}


def carried_label_sets(pdata, catalog: str | Path, drop: tuple[str | Path, ...] = ()) -> tuple[list, list[dict[str, Any]]]:
    """The production's accepted-labels sources that this retrain keeps: every one, except one from `catalog` itself
    (its labels are all in the new accepted set, at their latest versions: superseded) and one a person removed
    (`drop`: the set's folder or its catalog). Returns (kept SourceConfigs, [{"root", "catalog", "why"}] left out).
    RetrainError for a set that is gone and not removed: labels never leave training silently."""
    here = _abs(str(catalog))
    dropped_paths = {_abs(str(d)) for d in drop}
    kept, left = [], []
    for s in (x for x in pdata.sources if is_label_set(x)):
        root = _abs(s.root)
        if not (Path(root) / "dataset.json").is_file():
            if root in dropped_paths:
                left.append({"root": root, "catalog": None, "why": "removed (--drop-labels)"})
                continue
            raise RetrainError(f"the production trained on accepted labels at {root}, which no longer exist; restore "
                               f"them, or retrain without them with --drop-labels {root} (recorded in {RECORD})")
        info = label_set_info(root)
        if info["catalog"] is not None and _abs(info["catalog"]) == here:
            left.append({"root": root, "catalog": info["catalog"], "why": "superseded: the catalog's accepted labels are "
                                                                          "materialized again"})
        elif root in dropped_paths or (info["catalog"] is not None and _abs(info["catalog"]) in dropped_paths):
            left.append({"root": root, "catalog": info["catalog"], "why": "removed (--drop-labels)"})
        else:
            kept.append(dataclasses.replace(s, root=root, name=f"{ACCEPTED}-{len(kept) + 1}"))
    unknown = sorted(dropped_paths - {d["root"] for d in left} - {_abs(d["catalog"]) for d in left if d["catalog"]})
    if unknown:
        raise RetrainError(f"--drop-labels {unknown[0]} is neither an accepted-labels set the production trained on nor "
                           f"its catalog; the production's label sets: "
                           f"{[_abs(x.root) for x in pdata.sources if is_label_set(x)] or 'none'}")
    return kept, left


def base_sources(pdata, mix: float, base: str | Path | None, carried: list | tuple = ()) -> list:
    """The production's base training set as data.sources, with the `carried` accepted-labels sets, weights summing
    to 1 - mix in their old proportions: `base` (a dataset folder) in place of the production's other sources,
    else the production's data.sources that are not accepted labels, else its data.root."""
    from hydranet.data.sources import model_cameras
    from hydranet.experiment import SourceConfig

    cams = model_cameras(pdata)
    cams = tuple(cams) if cams else None
    plain = [s for s in pdata.sources if not is_label_set(s)]
    if base is not None:
        if not Path(base).is_dir():
            raise RetrainError(f"--base {base} is not a folder; give the base training dataset")
        kept = [SourceConfig(root=_abs(str(base)), cameras=cams, name="base",
                             weight=sum(s.weight for s in plain) if plain else 1.0)]
    elif pdata.sources:
        kept = [dataclasses.replace(s, root=_abs(s.root)) for s in plain]
    else:
        kept = [SourceConfig(root=_abs(pdata.root), format=pdata.format, split=pdata.split, version=pdata.version,
                             cameras=pdata.cameras, name="base", weight=1.0)]
    kept += list(carried)
    total = sum(s.weight for s in kept)
    return [dataclasses.replace(s, weight=s.weight * (1.0 - mix) / total) for s in kept]


def retrain_experiment(pcfg, production: Path, accepted_root: Path, rc: RetrainConfig,
                       base: str | Path | None = None, carried: list | tuple = ()):
    """The fine-tuning config: the production's, on base (+ `carried` earlier label sets) + accepted, from the
    production's weights, with `rc`'s steps, mix, rate and norm_eval."""
    from hydranet.experiment import SourceConfig, check_experiment

    src = base_sources(pcfg.data, rc.mix, base, carried)
    missing = next((s.root for s in src if not Path(s.root).exists()), None)
    if missing is not None:
        raise RetrainError(f"the production's base training set {missing} does not exist here; pass --base DATA "
                           "(the dataset it was trained on, or another)")
    cams = src[0].cameras
    src.append(SourceConfig(root=_abs(str(accepted_root)), format="sim", cameras=cams, name=ACCEPTED, weight=rc.mix))
    data = dataclasses.replace(pcfg.data, root=src[0].root, format="auto", split=None, version=None, cameras=None,
                               sources=tuple(src))
    optim = dataclasses.replace(pcfg.optim, lr=rc.lr) if rc.lr is not None else pcfg.optim
    cfg = dataclasses.replace(pcfg, data=data, optim=optim, steps=rc.steps, init_from=str(production.resolve()),
                              norm_eval=rc.norm_eval)
    check_experiment(cfg)
    return cfg


def _write_record(path: Path, record: Mapping[str, Any]) -> None:
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")


def _checkpoint_file(path: str | Path) -> Path:
    p = Path(path)
    p = p / "checkpoint.pt" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"production checkpoint {p} does not exist; give the production model's checkpoint.pt "
                                "or run folder")
    return p


def _clear_run(out: Path) -> None:
    """--overwrite: the earlier retrain's files (checkpoint, config, events, record, accepted set)."""
    for name in ("checkpoint.pt", "config.json", RECORD):
        (out / name).unlink(missing_ok=True)
    for name in ("tb", ACCEPTED):
        shutil.rmtree(out / name, ignore_errors=True)


def retrain(production: str | Path, catalog: str | Path, out: str | Path, steps: int | None = None, mix: float | None = None,
            base: str | Path | None = None, resume: bool = False, overwrite: bool = False, progress: bool = True, *,
            cfg=None, stop_at: int | None = None, drop_labels: tuple[str | Path, ...] = ()) -> Path:
    """Fine-tune `production` (a checkpoint or run folder) on its base training set plus the accepted
    labels of `catalog` into run folder `out`; returns `out`. `cfg`: an EngineConfig (its `retrain`
    section, configs/engine.yaml) or a RetrainConfig; `steps`/`mix` override it; `base` replaces the production's training set.
    `resume`: continue the run in `out` exactly (a finished run is left as it is). `stop_at`: stop
    after this step as if killed (tests). Accepted labels an earlier retrain trained on (from another catalog) are
    carried into this one (`carried_label_sets`) unless `drop_labels` names their set or catalog; retrain.json's
    "label_sources" lists every label set with its catalog and counts, "dropped_labels" what was left out and why."""
    from hydranet.checkpoint import config_from_checkpoint, load_checkpoint
    from hydranet.config import ConfigError, to_dict
    from hydranet.experiment import experiment_from_json
    from hydranet.train import train

    rc = _retrain_config(cfg)
    given = {k: v for k, v in (("steps", steps), ("mix", mix)) if v is not None}
    try:
        rc = dataclasses.replace(rc, **given)  # checked by RetrainConfig
    except ConfigError as e:
        raise ConfigError(f"{' '.join(f'--{k} {v}' for k, v in given.items())}: {e}") from None
    out = Path(out)
    if resume and overwrite:
        raise RetrainError("--resume continues the run in --out and --overwrite replaces it; give one of them")
    prod = _checkpoint_file(production)
    cat_path = Path(catalog)
    with open_catalog(cat_path):  # exists and is a catalog
        pass
    record_path, ckpt_path = out / RECORD, out / "checkpoint.pt"
    has_run = record_path.exists() or ckpt_path.exists() or (out / ACCEPTED).exists()

    if resume:
        if not record_path.exists():
            raise RetrainError(f"{out} holds no retrain run to resume (no {RECORD}); start one without --resume"
                               + (" (or --overwrite the partial one)" if has_run else ""))
        rec = _read_json(record_path, "retrain record")
        for key, given, recorded in (("--mix", mix, rec["mix"]), ("--base", _abs(str(base)) if base else None, rec["base"]),
                                     ("--catalog", _abs(str(cat_path)), rec["catalog"]), ("--production", _abs(str(prod)),
                                                                                          rec["production"])):
            if given is not None and given != recorded:
                raise RetrainError(f"{key} {given} differs from the run being resumed ({out / RECORD}: {recorded}); a resumed "
                                   "retrain keeps its inputs: start a new run (another --out, or --overwrite)")
        exp = experiment_from_json(json.dumps(rec["experiment"]))
        if steps is not None:
            exp = dataclasses.replace(exp, steps=steps)
        if not (Path(exp.data.sources[-1].root) / "dataset.json").exists():
            raise RetrainError(f"{exp.data.sources[-1].root} (the run's accepted labels) is missing; start again with --overwrite")
        ckpt = load_checkpoint(ckpt_path) if ckpt_path.exists() else None
        if ckpt is not None and int(ckpt["step"]) >= exp.steps:
            return out  # finished: nothing to do (a loop rerun after a kill lands here)
        if ckpt is None and file_sha256(prod) != rec["production_sha256"]:
            raise RetrainError(f"production checkpoint {prod} changed since this retrain started (sha256 differs from "
                               f"{record_path}); start a new run with --overwrite")
        if exp.steps != rec["experiment"]["steps"]:
            _write_record(record_path, {**rec, "steps": exp.steps, "experiment": to_dict(exp)})
        train(exp, out, resume=out if ckpt is not None else None, progress=progress, stop_at=stop_at)
        return out

    if has_run:
        if not overwrite:
            raise FileExistsError(f"{out} already holds a retrain run; continue it with --resume, write to another --out, "
                                  "or pass --overwrite to replace it")
        _clear_run(out)
    pckpt = load_checkpoint(prod)
    pcfg = config_from_checkpoint(pckpt)
    pclasses = json.loads(pckpt["meta"]).get("classes", [])
    with open_catalog(cat_path) as cat:
        n = len(accepted_versions(cat))
        if not n:
            raise RetrainError(f"catalog {cat_path} has no accepted labels; label frames and accept them "
                               f"(`hydranet engine jobs --catalog {cat_path} --accept all`)")
        # what can be checked before anything is written: the config (base exists), enough frames
        carried, left = carried_label_sets(pcfg.data, cat_path, tuple(drop_labels))
        exp = retrain_experiment(pcfg, prod, out / ACCEPTED, rc, base, carried)
        if n < exp.batch_size:
            raise RetrainError(f"catalog {cat_path} has {n} accepted frames, fewer than the production's batch_size "
                               f"{exp.batch_size}; accept more labels first")
        summary = materialize_accepted(cat, out / ACCEPTED, progress=progress, classes=pclasses)
    record = {"format": "hydranet-retrain", "version": 1, "production": _abs(str(prod)), "production_sha256": file_sha256(prod),
              "production_step": int(pckpt["step"]), "catalog": _abs(str(cat_path)), "mix": rc.mix, "steps": rc.steps,
              "lr": exp.optim.lr, "norm_eval": exp.norm_eval, "base": _abs(str(base)) if base else None,
              "sources": [{"name": s.name, "root": s.root, "weight": s.weight} for s in exp.data.sources],
              "accepted": {k: summary[k] for k in ("root", "frames", "scenes", "by_source")}, "labels": summary["labels"],
              "label_sources": [{"name": ACCEPTED, "root": _abs(str(out / ACCEPTED)), "catalog": _abs(str(cat_path)),
                                 "frames": summary["frames"], "by_source": summary["by_source"], "carried": False}]
              + [{"name": s.name, "root": s.root, **label_set_info(s.root), "carried": True} for s in carried],
              "dropped_labels": left, "experiment": to_dict(exp)}
    _write_record(record_path, record)
    train(exp, out, progress=progress, stop_at=stop_at)
    return out
