"""Frozen suites from a fleet's own frames: slices chosen by clip tags or catalog signals, with their labels.

    hydranet engine suites --from-fleet FLEET --slice NAME=QUERY [--slice NAME=QUERY ...] --out DIR [--catalog CAT]
                           [--overwrite]

A slice is the frames of FLEET (a sim fleet, FLEET/dataset.json, or a recorded one, FLEET/fleet.json; both opened
through `data_engine.fleet.Fleet`) that a QUERY selects, frozen as a sim-format dataset at DIR/<dir>/ (docs/
dataset_format.md) with a content digest in DIR/suites.json, exactly as the rendered slices of `engine suites`:
`suites.load_suites` recomputes every digest and the gate evaluates such a slice as any other.

QUERY: terms joined with `&`, all of which must hold:
  tag:VALUE           a tag of the frame's clip equals VALUE (recorded: fleet.json tags; sim: the clip's
                      conditions and rare scenario, `night`, `weather:rain`, `rare:cones_on_road`, ...)
  description~TEXT    TEXT is a substring of one of the clip's tags (a nuScenes description included), any case
  clip:NAME           the clip's name equals NAME
  signal:NAME<op>X    per frame: signal column NAME of the fleet's newest shadow run in --catalog compared with the
                      number X (op: > >= < <= == !=); a frame the run has no value for (NaN, corrupt) never matches

Labels (suites are evaluation, which may read truth; docs/data_engine.md "withheld truth"):
- sim fleet: the frame's own labels.json and label channels (the sim's exact truth; every head);
- recorded fleet: the catalog's accepted label of the frame (`data_engine.labels.accepted_versions`: a person's
  2D boxes supervise the heads their boxes can, `retrain.HUMAN_HEADS`), else, for a dataset-source fleet, the
  reader's own annotations (its `supervises`, without the pixel heads: only labels.json is frozen; an unlabelled
  nuScenes sweep has none).
A frame without labels is left out and counted; a slice with no labelled frame is an error.

Images go through the fleet's one frame reader (`fleet.frame_image`): a JPEG file is frozen byte for byte, any
other frame (a video frame, a dataset reader's decode, a PNG) is written as JPEG quality 95 of its decoded pixels.

Writing: a new DIR is assembled in DIR.tmp-<pid> and renamed; into an existing suites folder the new slices are
written beside the others (a replaced slice under a new folder name) and suites.json is replaced in one rename, the
commit point: a process killed before it leaves the folder as it was. An existing slice name is refused unless
`overwrite`; other slices (rendered, recorded, unit tests) are never touched. One writer per folder (DIR/.lock).
"""
from __future__ import annotations

import json
import math
import operator
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.fleet import RECORDED_FILE, TRUTH_FILE, Fleet, FleetError, frame_image
from data_engine.suites import FORMAT, SUITES_FILE, UNIT_TESTS, VERSION, SuiteError, _read_json, folder_digest
from hydranet.io import atomic_write_text, exclusive_lock, frame_path, path_inside, remove_stale_temps, temp_path
from hydranet.rig import camera_sizes

KEYS = ("tag:VALUE", "description~TEXT", "clip:NAME", "signal:NAME>X")
OPS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt}
_SIGNAL = re.compile(r"^([A-Za-z0-9_]+)\s*(>=|<=|==|!=|>|<)\s*(\S+)$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_ALLOWED = (f"allowed: {', '.join(KEYS)} (signal operators {' '.join(OPS)}), terms joined with '&' "
            "(docs/data_engine.md 'Suites from fleets')")
JPEG_QUALITY = 95


# -- slices and queries ------------------------------------------------------------------------------------
def parse_slices(specs: Iterable[str]) -> dict[str, list[tuple]]:
    """{slice name: terms} of `--slice NAME=QUERY` strings; SuiteError naming the slice or query that is wrong."""
    out: dict[str, list[tuple]] = {}
    for spec in specs:
        name, eq, query = str(spec).partition("=")
        name = name.strip()
        if not eq:
            raise SuiteError(f"--slice {spec!r} is not NAME=QUERY (e.g. --slice night=tag:night); {_ALLOWED}")
        check_slice_name(name)
        if name in out:
            raise SuiteError(f"--slice {name} is given twice; give each slice once")
        out[name] = parse_query(name, query)
    if not out:
        raise SuiteError("--from-fleet needs at least one --slice NAME=QUERY (e.g. --slice night=tag:night)")
    return out


def check_slice_name(name: str) -> str:
    if not _NAME.match(name) or ".." in name or ".tmp-" in name or ".old-" in name or name in (UNIT_TESTS, SUITES_FILE):
        raise SuiteError(f"slice name {name!r} cannot be used: a slice is a folder of the suites, so its name is letters, "
                         f"digits, '_', '-' and '.' (not first), without '..', and not {UNIT_TESTS!r}; rename the slice")
    return name


def parse_query(name: str, query: str) -> list[tuple]:
    """[(key, value) | ("signal", column, op, x)] of one slice's query."""
    from data_engine.signals import SIGNALS

    where = f"slice {name}: query {query!r}"
    terms = [t.strip() for t in str(query).split("&")]
    if not query.strip() or any(not t for t in terms):
        raise SuiteError(f"{where} has an empty term; {_ALLOWED}")
    out: list[tuple] = []
    for t in terms:
        m = re.match(r"^([A-Za-z_]+)\s*(:|~)(.*)$", t)
        key, sep, rest = (m.group(1), m.group(2), m.group(3).strip()) if m else (t, "", "")
        if not m or (key, sep) not in (("tag", ":"), ("description", "~"), ("clip", ":"), ("signal", ":")):
            raise SuiteError(f"{where}: term {t!r} is not understood; {_ALLOWED}")
        if not rest:
            raise SuiteError(f"{where}: term {t!r} has no value; {_ALLOWED}")
        if key != "signal":
            out.append((key, rest))
            continue
        s = _SIGNAL.match(rest)
        if s is None:
            raise SuiteError(f"{where}: term {t!r} is not signal:NAME<op>NUMBER with op one of {' '.join(OPS)}; {_ALLOWED}")
        col, op, x = s.groups()
        if col not in SIGNALS:
            raise SuiteError(f"{where}: unknown signal {col!r}; the catalog's signals are {', '.join(SIGNALS)}")
        try:
            value = float(x)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise SuiteError(f"{where}: {x!r} in term {t!r} is not a finite number")
        out.append(("signal", col, op, value))
    return out


# -- what the fleet holds ------------------------------------------------------------------------------------
def clip_tags(fleet: Fleet, clip: str) -> list[str]:
    """A clip's tags: a recorded fleet's own (fleet.json); a sim clip's conditions (scene.json, or the fleet's
    withheld truth/scenarios.json: suites are evaluation and may read truth) as `night`, `time_of_day:night`,
    `clear`, `weather:clear`, `cones_on_road`, `rare:cones_on_road`."""
    if (fleet.root / RECORDED_FILE).is_file():
        return fleet.tags(clip)
    scene = _json(frame_path(fleet.root, clip, file="scene.json", where=f"fleet {fleet.root} clip {clip!r}",
                             error=SuiteError), "clip's scene.json")
    cond = scene.get("conditions") if isinstance(scene, dict) else None
    if not isinstance(cond, dict) or "withheld" in cond:
        truth = getattr(fleet, "_suite_truth", None)
        if truth is None:
            path = fleet.root / TRUTH_FILE
            truth = _json(path, "fleet's scenario tags").get("clips", {}) if path.is_file() else {}
            fleet._suite_truth = truth
        cond = truth.get(clip) if isinstance(truth, dict) else None
    if not isinstance(cond, dict):
        return []
    tags = []
    for key in ("time_of_day", "weather"):
        if cond.get(key):
            tags += [str(cond[key]), f"{key}:{cond[key]}"]
    for r in cond.get("rare") or []:
        tags += [str(r), f"rare:{r}"]
    return tags


def _json(path: Path, what: str) -> Any:
    from hydranet.io import read_json

    return read_json(path, what, SuiteError, "regenerate the fleet")


def _fleet_run(cat, root: Path) -> tuple[int | None, int | None]:
    """(fleet id, its newest shadow run id) in the catalog, None where there is none."""
    row = cat.db.execute("SELECT id FROM fleets WHERE root = ?", (str(root.resolve()),)).fetchone()
    if row is None:
        return None, None
    run = cat.db.execute("SELECT id FROM shadow_runs WHERE fleet_id = ? ORDER BY id DESC LIMIT 1", (row[0],)).fetchone()
    return int(row[0]), (int(run[0]) if run else None)


def select_frames(fleet: Fleet, name: str, query: str, terms: Sequence[tuple], frame_ids: Mapping[tuple[str, int], int],
                  signals: Mapping[str, Mapping[int, float]]) -> list[tuple[str, dict]]:
    """[(clip, frame)] of the fleet that every term selects, clips in fleet order, frames in clip order."""
    out = []
    for clip in fleet.clip_names:
        tags = None
        ok = True
        for t in terms:
            if t[0] == "clip":
                ok = clip == t[1]
            elif t[0] in ("tag", "description"):
                tags = clip_tags(fleet, clip) if tags is None else tags
                ok = t[1] in tags if t[0] == "tag" else any(t[1].lower() in g.lower() for g in tags)
            if not ok:
                break
        if not ok:
            continue
        for f in fleet.clip(clip).frames:
            fid = frame_ids.get((clip, f["index"]))
            if all(t[0] != "signal" or _holds(signals[t[1]].get(fid, math.nan), t[2], t[3]) for t in terms):
                out.append((clip, f))
    if not out:
        raise SuiteError(f"slice {name}: query {query!r} selects no frame of fleet {fleet.root}; check its tags (docs/"
                         "recordings.md) or signal thresholds, or drop the slice")
    return out


def _holds(v: float, op: str, x: float) -> bool:
    return v is not None and math.isfinite(v) and OPS[op](v, x)


# -- labels --------------------------------------------------------------------------------------------------
class _Labels:
    """The labels of a fleet's frames for a suite: {"labels", "supervises", "label" (provenance)} or None."""

    def __init__(self, fleet: Fleet, meta: Mapping[str, Any], accepted: Mapping[tuple[str, int], Mapping[str, Any]]):
        from hydranet.data.sim_reader import SIM_HEADS

        self.fleet, self.meta, self.accepted = fleet, meta, accepted
        self.recorded = (fleet.root / RECORDED_FILE).is_file()
        self.sizes = camera_sizes(meta["rig"], f"fleet {fleet.root} rig")  # {name: (width, height)}
        self.cameras = list(self.sizes)
        self.all_heads = list(SIM_HEADS)

    def get(self, clip: str, frame: Mapping[str, Any]) -> dict[str, Any] | None:
        from data_engine.retrain import supervised

        if not self.recorded:  # the sim's exact truth
            path = frame_path(self.fleet.root, clip, frame["dir"], "labels.json", where=f"fleet {self.fleet.root}",
                              error=SuiteError)
            if not path.is_file():
                return None
            return self._checked(_json(path, "frame's labels"), None, {"source": "truth"}, f"{path}")
        acc = self.accepted.get((clip, frame["index"]))
        if acc is not None:
            where = f"accepted label {acc['label_id']} (v{acc['version']}, {acc['source']}) of frame {clip}/{frame['dir']}"
            labels = json.loads(json.dumps(acc["payload"]))
            heads = sorted(supervised(labels, acc["source"], recorded=True))  # a person's boxes: HUMAN_HEADS
            labels.pop("supervises", None)
            labels.setdefault("boxes3d", [])
            labels.setdefault("lanes3d", [])
            prov = {"source": "catalog", **{k: acc[k] for k in ("label_id", "version", "job_id")}, "by": acc["source"]}
            return self._checked(labels, heads, prov, where)
        if self.fleet.kind == "dataset":
            return self._from_reader(clip, frame)
        return None

    def _from_reader(self, clip: str, frame: Mapping[str, Any]) -> dict[str, Any] | None:
        from data_engine.fleet import truth_of

        where = f"fleet {self.fleet.root} clip {clip} frame {frame['dir']}"
        try:
            got = self.fleet.sample(clip, frame["dir"])
        except ValueError as e:
            raise SuiteError(f"{where}: {e}") from None
        labels = truth_of(got)
        if labels is None:
            return None  # an unlabelled sweep, or labels only the pixel heads read
        heads = labels.pop("supervises")
        sample = self.fleet.frame_refs(clip, frame["dir"])["sample"]
        out = self._checked(labels, heads, {"source": "reader", "sample": int(sample)}, f"{where} (reader sample {sample})")
        names = list(self.fleet.reader(()).rig.names)
        if "cam2ego" in got:  # the reader's own extrinsics of this sample (nuScenes: motion-compensated per camera)
            out["cam2ego"] = {c: np.asarray(got["cam2ego"][names.index(c)], np.float64).tolist() for c in self.cameras}
        return out

    def _checked(self, labels: Any, heads: list[str] | None, prov: dict, where: str) -> dict[str, Any]:
        from hydranet.data.reader import DatasetError
        from hydranet.data.sim_reader import check_labels
        from sim.writer import to_json

        labels = json.loads(to_json(labels))
        cams = labels.get("cameras") if isinstance(labels, dict) else None
        missing = [c for c in self.cameras if not isinstance(cams, dict) or c not in cams]
        if missing:
            raise SuiteError(f"{where} has no labels for camera {missing[0]}; an unlabelled camera would score as 'no "
                             "objects': label every camera (reject the job and label it again)")
        try:
            check_labels(json.loads(json.dumps(labels)), Path(where), self.sizes, list(self.meta["classes"]))
        except DatasetError as e:
            raise SuiteError(f"bad label for a suite: {e}") from None
        return {"labels": labels, "supervises": heads, "label": prov}


def _accepted(cat, fleet_id: int | None) -> dict[tuple[str, int], dict[str, Any]]:
    """{(clip, frame index): accepted version} of one fleet of the catalog."""
    from data_engine.labels import accepted_versions

    if fleet_id is None:
        return {}
    acc = accepted_versions(cat)
    rows = cat.db.execute("SELECT f.id, c.name, f.idx FROM frames f JOIN clips c ON f.clip_id = c.id WHERE c.fleet_id = ?",
                          (fleet_id,)).fetchall()
    return {(str(c), int(i)): acc[int(f)] for f, c, i in rows if int(f) in acc}


# -- writing -------------------------------------------------------------------------------------------------
def _frame_images(fleet: Fleet, clip: str, fdir: str, cameras: list[str], sizes: Mapping[str, tuple[int, int]],
                  tmp: Path, key: str) -> dict[str, Path]:
    """{CAM.jpg: file written in tmp}: each camera image through the fleet's one frame reader; a JPEG kept byte for
    byte, anything else (video, dataset reader, PNG) encoded as JPEG of its decoded pixels."""
    import cv2

    out = {}
    for cam in cameras:
        try:
            data, suffix = frame_image(fleet.root, clip, fdir, cam)
        except (ValueError, FleetError) as e:
            raise SuiteError(f"fleet {fleet.root} clip {clip} frame {fdir} camera {cam}: {e}; restore the recording or "
                             "leave the frame out of the slice") from None
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        w, h = sizes[cam]
        if img is None or img.shape[:2] != (h, w):
            got = "undecodable" if img is None else f"{img.shape[1]}x{img.shape[0]}"
            raise SuiteError(f"fleet {fleet.root} clip {clip} frame {fdir} camera {cam}: image is {got}, the rig says "
                             f"{w}x{h}; ingest the recordings again")
        if suffix not in (".jpg", ".jpeg"):
            ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            if not ok:
                raise SuiteError(f"could not encode camera {cam} of {clip}/{fdir} as JPEG")
            data = buf.tobytes()
        path = tmp / f"{key}_{cam}.jpg"
        path.write_bytes(data)
        out[f"{cam}.jpg"] = path
    return out


def _sim_frame(fleet: Fleet, clip: str) -> dict[str, dict]:
    """{frame dir: scene.json frame entry} of a sim fleet's clip (its own cam2ego, if any, kept)."""
    scene = _json(frame_path(fleet.root, clip, file="scene.json", where=f"fleet {fleet.root} clip {clip!r}",
                             error=SuiteError), "clip's scene.json")
    return {str(f.get("dir")): f for f in scene.get("frames", []) if isinstance(f, dict)}


def write_slice(dst: Path, fleet: Fleet, meta: Mapping[str, Any], picked: list[tuple[str, dict, dict]],
                source: Mapping[str, Any], bar=None) -> None:
    """One slice as a sim-format dataset at `dst` (written to dst.tmp-<pid> by the sim's writer, then renamed)."""
    from hydranet.data.sim_reader import BEV_FILE, CHANNEL_SUFFIX
    from sim.writer import DatasetWriter

    sizes = camera_sizes(meta["rig"], f"fleet {fleet.root} rig")  # {name: (width, height)}
    cameras = list(sizes)
    recorded = (fleet.root / RECORDED_FILE).is_file()
    by_clip: dict[str, list[tuple[dict, dict]]] = {}
    for clip, f, lab in picked:
        by_clip.setdefault(clip, []).append((f, lab))
    with DatasetWriter(dst, {**meta, "seed": None, "sim_config": None, "suite": dict(source)}) as writer:
        for clip, items in by_clip.items():
            sim_entries = {} if recorded else _sim_frame(fleet, clip)
            frames = []
            for f, lab in items:
                entry = {"index": int(f["index"]), "dir": f["dir"], "timestamp_us": int(f["timestamp_us"]),
                         "ego2world": None if f["ego2world"] is None else np.asarray(f["ego2world"]).tolist(),
                         "label": lab["label"]}
                if "cam2ego" in sim_entries.get(f["dir"], {}):
                    entry["cam2ego"] = sim_entries[f["dir"]]["cam2ego"]
                if "cam2ego" in lab:
                    entry["cam2ego"] = lab["cam2ego"]
                if lab["supervises"] is not None:
                    entry["supervises"] = lab["supervises"]
                frames.append(entry)
            if all(fr["ego2world"] is not None for fr in frames):
                scenes = [(clip, frames)]
            else:  # recorded without poses: each frame its own scene (no motion to align), as shadow mode runs it
                scenes = [(f"{clip}_{fr['dir']}", [{**fr, "ego2world": np.eye(4).tolist()}]) for fr in frames]
            for scene_name, scene_frames in scenes:
                writer.write_scene({"name": scene_name, "seed": None, "conditions": {"withheld": "suite from a fleet"},
                                    "clip": {"fleet": str(fleet.root.resolve()), "name": clip}, "frames": scene_frames})
            scene_of = {fr["dir"]: sn for sn, sfs in scenes for fr in sfs}
            for f, lab in items:
                files = _frame_images(fleet, clip, f["dir"], cameras, sizes, writer.tmp, f"{clip}_{f['dir']}")
                if not recorded and lab["supervises"] is None:  # the sim's truth: its label channels too, hard-linked
                    folder = frame_path(fleet.root, clip, f["dir"], where=f"fleet {fleet.root}", error=SuiteError)
                    files.update({f"{c}{CHANNEL_SUFFIX[ch]}": folder / f"{c}{CHANNEL_SUFFIX[ch]}"
                                  for c in cameras for ch in CHANNEL_SUFFIX if ch != "images"})
                    files[BEV_FILE] = folder / BEV_FILE
                writer.add_frame_files(scene_of[f["dir"]], f["dir"], files, lab["labels"])
                for p in files.values():
                    if p.parent == writer.tmp:
                        p.unlink()
                if bar is not None:
                    bar.update(1)


def _fleet_meta(fleet: Fleet) -> dict[str, Any]:
    from data_engine.retrain import _fleet_meta as meta_of

    return meta_of(str(fleet.root))


# -- the command ---------------------------------------------------------------------------------------------
def freeze_fleet_slices(out: str | Path, fleet_root: str | Path, slices: Iterable[str] | Mapping[str, str],
                        catalog: str | Path | None = None, overwrite: bool = False, progress: bool = False) -> dict[str, Any]:
    """Freeze `slices` (["NAME=QUERY", ...] or {name: query}) of fleet `fleet_root` into suites folder `out` (created,
    or added to). Returns {"out", "created" (a new folder), "slices": {name: its suites.json entry + "skipped"}}."""
    from tqdm import tqdm

    specs = [f"{k}={v}" for k, v in slices.items()] if isinstance(slices, Mapping) else list(slices)
    terms = parse_slices(specs)
    queries = {s.partition("=")[0].strip(): s.partition("=")[2].strip() for s in specs}
    out = Path(out)
    index = _existing_index(out)
    if index is not None and not overwrite:
        taken = [n for n in terms if n in index["slices"]]
        if taken:
            raise SuiteError(f"slice {taken[0]} already exists in {out / SUITES_FILE}; pass --overwrite to replace it (the "
                             "other slices stay as they are), or choose another slice name")
    needs_signals = [n for n, ts in terms.items() if any(t[0] == "signal" for t in ts)]
    if needs_signals and catalog is None:
        raise SuiteError(f"slice {needs_signals[0]}: query {queries[needs_signals[0]]!r} compares a signal, which is read "
                         "from a shadow run: give --catalog CAT (the catalog the fleet was shadowed into)")
    fleet_root = Path(fleet_root)
    if not fleet_root.is_dir():
        raise SuiteError(f"--from-fleet {fleet_root} does not exist; give a fleet folder (`hydranet engine fleet` or "
                         "`hydranet engine ingest`)")
    fleet = Fleet(fleet_root)
    recorded = (fleet_root / RECORDED_FILE).is_file()
    meta = _fleet_meta(fleet)
    frame_ids: dict[tuple[str, int], int] = {}
    signals: dict[str, dict[int, float]] = {}
    accepted: dict = {}
    run_id = None
    if catalog is not None:
        from data_engine.labels import open_catalog

        with open_catalog(catalog) as cat:
            fleet_id, run_id = _fleet_run(cat, fleet_root)
            if needs_signals and run_id is None:
                raise SuiteError(f"slice {needs_signals[0]}: fleet {fleet_root} has no shadow run in catalog {catalog}; "
                                 f"run `hydranet engine shadow --data {fleet_root} --catalog {catalog}` first")
            if fleet_id is not None:
                frame_ids = {(str(c), int(i)): int(f) for f, c, i in cat.db.execute(
                    "SELECT f.id, c.name, f.idx FROM frames f JOIN clips c ON f.clip_id = c.id WHERE c.fleet_id = ?",
                    (fleet_id,))}
            for col in sorted({t[1] for ts in terms.values() for t in ts if t[0] == "signal"}):
                got = cat.rows(run_id, ["frame_id", col], status="ok")
                signals[col] = {int(f): float(v) for f, v in zip(got["frame_id"], got[col])}
            if recorded:
                accepted = _accepted(cat, fleet_id)
    labeller = _Labels(fleet, meta, accepted)
    chosen: dict[str, tuple[list[tuple[str, dict, dict]], int]] = {}
    for name, ts in terms.items():
        picked, skipped = [], 0
        for clip, f in select_frames(fleet, name, queries[name], ts, frame_ids, signals):
            lab = labeller.get(clip, f)
            if lab is None:
                skipped += 1
            else:
                picked.append((clip, f, lab))
        if not picked:
            how = ("label them first (`hydranet engine label` / `hydranet engine import-labels` into a catalog, accept "
                   "with `hydranet engine jobs`) and give that --catalog" if recorded else "regenerate the fleet")
            raise SuiteError(f"slice {name}: none of its {skipped} frames of fleet {fleet_root} has labels; {how}")
        chosen[name] = (picked, skipped)
    fleet_kind = fleet.kind if recorded else "sim"
    entries = {}
    for name, (picked, skipped) in chosen.items():
        by = {}
        for _, _, lab in picked:
            by[lab["label"]["source"]] = by.get(lab["label"]["source"], 0) + 1
        entries[name] = {"source": {"kind": "fleet", "fleet": str(fleet_root.resolve()), "fleet_source": fleet_kind,
                                    "query": queries[name], "catalog": str(Path(catalog).resolve()) if catalog else None,
                                    "run": run_id if any(t[0] == "signal" for t in terms[name]) else None},
                         "rig": meta["rig"].get("name"), "labels": by, "unlabelled": skipped,
                         "clips": len({c for c, _, _ in picked}), "frames": len(picked)}
    total = sum(len(p) for p, _ in chosen.values())
    with tqdm(total=total, desc="engine suites --from-fleet", unit="frame", disable=not progress) as bar:
        if index is None:
            _write_new(out, fleet, meta, chosen, entries, bar)
        else:
            _add_to(out, fleet, meta, chosen, entries, overwrite, bar)
    return {"out": str(out), "created": index is None,
            "slices": {n: {**e, "skipped": e["unlabelled"]} for n, e in entries.items()}}


def _existing_index(out: Path) -> dict[str, Any] | None:
    """The suites.json of an existing suites folder, None where `out` does not exist; SuiteError for another folder."""
    if not out.exists():
        return None
    if not (out / SUITES_FILE).is_file():
        raise SuiteError(f"{out} exists and is not a suites folder (no {SUITES_FILE}); choose another --out, or give a "
                         "folder written by `hydranet engine suites`")
    return _read_json(out / SUITES_FILE)


def _write_new(out: Path, fleet: Fleet, meta, chosen, entries, bar) -> None:
    staging = temp_path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out.parent, dirs=True)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        for name, (picked, _) in chosen.items():
            write_slice(staging / name, fleet, meta, picked, entries[name]["source"], bar)
            entries[name] = {"dir": name, **entries[name], "digest": folder_digest(staging / name)}
        index = {"format": FORMAT, "version": VERSION, "seed": None, "rig": meta["rig"].get("name"), "image_size": None,
                 "frames_per_clip": None, "slices": entries, UNIT_TESTS: None}
        atomic_write_text(staging / SUITES_FILE, json.dumps(index, indent=1) + "\n")
        if out.exists():
            raise SuiteError(f"{out} appeared while the slices were written; rerun the command")
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _add_to(out: Path, fleet: Fleet, meta, chosen, entries, overwrite: bool, bar) -> None:
    with exclusive_lock(out / ".lock", f"suites folder {out}", SuiteError):
        index = _read_json(out / SUITES_FILE)  # again, under the lock
        taken = [n for n in chosen if n in index["slices"]]
        if taken and not overwrite:
            raise SuiteError(f"slice {taken[0]} already exists in {out / SUITES_FILE}; pass --overwrite to replace it")
        remove_stale_temps(out, dirs=True)
        units = (index.get(UNIT_TESTS) or {}).get("dir")
        used = {str(s.get("dir", n)) for n, s in index["slices"].items()} | ({units.split("/")[0]} if units else set())
        for p in out.iterdir():  # a folder of a slice named here that suites.json does not reference: a killed run's
            base, _, k = p.name.partition(".r")
            if p.is_dir() and base in chosen and (not k or k.isdigit()) and p.name not in used:
                shutil.rmtree(p, ignore_errors=True)
        written: list[Path] = []
        old_dirs: list[Path] = []
        try:
            for name, (picked, _) in chosen.items():
                rel = name
                k = 1
                while rel in used or (out / rel).exists():  # a replaced slice gets a new folder: the old one stays in force
                    rel, k = f"{name}.r{k}", k + 1
                if name in index["slices"]:
                    old_dirs.append(path_inside(out, str(index["slices"][name].get("dir", name)), f"{out / SUITES_FILE}",
                                                SuiteError))
                write_slice(out / rel, fleet, meta, picked, entries[name]["source"], bar)
                written.append(out / rel)
                used.add(rel)
                entries[name] = {"dir": rel, **entries[name], "digest": folder_digest(out / rel)}
            new = {**index, "slices": {**index["slices"], **entries}}
            atomic_write_text(out / SUITES_FILE, json.dumps(new, indent=1) + "\n")  # the commit point
        except BaseException:
            for p in written:
                shutil.rmtree(p, ignore_errors=True)
            raise
        for p in old_dirs:
            shutil.rmtree(p, ignore_errors=True)
