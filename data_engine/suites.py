"""Frozen held-out scenario suites, and the growing "unit tests" suite of frames an earlier model failed.

    hydranet engine suites --out DIR [--config engine] [--fleet-config fleet] [--clips N] [--seed S] [--overwrite]

DIR/<slice>/ is one sim dataset per slice (docs/dataset_format.md): day, night, rain, fog and one per rare
scenario (configs/engine.yaml `suites.slices`). Every clip of a slice is forced to the slice's time of day,
weather and rare scenario through the fleet's own `clip_config` (a one-hot `SimConfig`), on the fleet's rig,
image size and frame rate (configs/fleet.yaml), so a suite measures exactly the conditions the fleet meets.
Clip seeds come from `suite_seed(seed, slice, i)`, a SeedSequence keyed by the slice's name and a tag the
fleet never uses: disjoint from every fleet clip, and a slice's clips do not change when slices are added.

DIR/suites.json records the slices, their conditions, seeds, clip and frame counts and a content digest per
slice (sha256 over every file's path and bytes). `load_suites` recomputes the digests: a suite modified after
it was generated is refused, never silently evaluated. Generation is atomic (DIR.tmp-<pid>, renamed whole)
and refuses an existing DIR unless `overwrite`; the unit tests and the slices frozen from fleets
(data_engine/fleet_suites.py; an entry with "source", its folder "dir" when not the slice's name) of the
replaced DIR are carried over.

Unit tests (Tesla's "unit tests" of a release): `add_unit_tests(DIR, [(frame_dir, payload)])` adds fleet
frames, with their accepted labels.json payloads, to DIR/unit_tests/vNNNN/, a sim dataset of one scene per
frame. An append writes version N+1 (the earlier entries hard-linked, the new ones copied) next to version
N, then points suites.json at it in one atomic rename: a process killed at any moment leaves version N in
force, and adding the same frame with the same label twice adds nothing.
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import zlib
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.io import atomic_write_text, file_sha256
from data_engine.fleet import FleetConfig, clip_config
from data_engine.config import UNIT_TESTS, SliceSpec, SuitesConfig  # noqa: F401 (SliceSpec: the suites' API too)
from hydranet.io import frame_path, path_inside
from hydranet.rig import camera_sizes

SUITES_FILE = "suites.json"
FORMAT = "hydranet-suites"
VERSION = 1
_SEED_TAG = 0x5017E5  # in every suite seed, in no fleet seed (fleet.clip_seed, sim.generate.scene_seed)


class SuiteError(ValueError):
    """A suites folder that cannot be used as asked; one line naming the folder or slice and what to do."""


def suite_seed(seed: int, slice_name: str, index: int) -> int:
    """Seed of clip `index` of slice `slice_name` (keyed by the name: adding a slice changes no other)."""
    return int(np.random.SeedSequence([seed, zlib.crc32(slice_name.encode()), index, _SEED_TAG]).generate_state(1)[0])


def folder_digest(root: str | Path) -> str:
    """sha256 over every file under `root`: its relative path and its bytes' sha256, in path order."""
    root = Path(root)
    h = hashlib.sha256()
    for p in sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.relative_to(root).as_posix()):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + file_sha256(p).encode() + b"\n")
    return h.hexdigest()


def _atomic_text(path: Path, text: str) -> None:
    atomic_write_text(path, text)


@contextmanager
def _locked(suites_dir: Path):
    """One writer at a time per suites folder (flock on DIR/.lock)."""
    with open(suites_dir / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# -- generation ----------------------------------------------------------------------------------------
def generate_suites(out: str | Path, cfg: SuitesConfig | None = None, fleet: FleetConfig | None = None,
                    clips: int | None = None, seed: int | None = None, overwrite: bool = False,
                    progress: bool = True) -> Path:
    """Render every slice of `cfg` into out/<slice>/ and write out/suites.json (atomically). `fleet`: the
    fleet config whose rig/size/frame rate the suites share (default: the shipped configs/fleet.yaml)."""
    from tqdm import tqdm

    from hydranet.config import load_config
    from sim.generate import dataset_meta, render_scene, sim_rig
    from sim.render import Renderer
    from sim.writer import DatasetWriter

    cfg = cfg or SuitesConfig()
    fleet = fleet or load_config(FleetConfig, "fleet")
    clips = cfg.clips if clips is None else clips
    seed = cfg.seed if seed is None else seed
    if clips < 1:
        raise SuiteError(f"--clips must be at least 1, got {clips}")
    out = Path(out)
    if out.exists() and not overwrite:
        raise SuiteError(f"{out} exists; pass --overwrite to replace it, or choose another --out")
    if out.exists() and not (out / SUITES_FILE).is_file():
        raise SuiteError(f"{out} exists and is not a suites folder (no {SUITES_FILE}); it is not replaced even with "
                         "--overwrite: choose another --out")
    try:
        old_index = _read_json(out / SUITES_FILE) if out.exists() else {"slices": {}}
        old_units = old_index.get(UNIT_TESTS)
    except SuiteError as e:
        raise SuiteError(f"{out} holds an unreadable {SUITES_FILE} ({str(e).split(';')[0]}), so its unit tests cannot be "
                         "carried over: move or delete the folder yourself, then generate again") from None
    clash = next((n for n, s in old_index["slices"].items() if "source" in s and n in cfg.slices), None)
    if clash:
        raise SuiteError(f"slice {clash} of {out} was frozen from fleet {old_index['slices'][clash]['source'].get('fleet')} "
                         "and the config renders a slice of the same name; rename one of them")
    sim = fleet.sim
    if cfg.frames:
        sim = dataclasses.replace(sim, frames_per_scene=cfg.frames)
    if cfg.image_width:
        sim = dataclasses.replace(sim, image_width=cfg.image_width, image_height=cfg.image_height)
    base = dataclasses.replace(fleet, sim=sim)
    rig = sim_rig(sim)
    renderer = Renderer(rig)
    staging = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
        slices: dict[str, Any] = {}
        with tqdm(total=len(cfg.slices) * clips * sim.frames_per_scene, desc="engine suites", unit="frame",
                  disable=not progress) as bar:
            for name, spec in cfg.slices.items():
                seeds = [suite_seed(seed, name, i) for i in range(clips)]
                drawn = {"time_of_day": spec.time_of_day, "weather": spec.weather, "rare": list(spec.rare)}
                clip_cfg = clip_config(base, drawn)
                with DatasetWriter(staging / name, dataset_meta(clip_cfg, rig, seed)) as writer:
                    for i, s in enumerate(seeds):
                        got = render_scene(writer, f"{name}_{i:03d}", s, clip_cfg, rig, renderer, bar)
                        if {**got, "rare": sorted(got["rare"])} != {**drawn, "rare": sorted(drawn["rare"])}:
                            raise SuiteError(f"suite slice {name}: clip {i} rendered {got}, not the forced {drawn}; "
                                             "the sim config overrides the slice's conditions")
                slices[name] = {**drawn, "seeds": seeds, "clips": clips, "frames": clips * sim.frames_per_scene,
                                "digest": folder_digest(staging / name)}
        index = {"format": FORMAT, "version": VERSION, "seed": seed, "rig": rig.name,
                 "image_size": [sim.image_height, sim.image_width] if sim.image_width else None,
                 "frames_per_clip": sim.frames_per_scene, "slices": slices, UNIT_TESTS: None}
        for name, s in old_index["slices"].items():  # slices frozen from fleets (fleet_suites.py) outlive it too
            if "source" in s:
                rel = str(s.get("dir", name))
                src = path_inside(out, rel, f"{out / SUITES_FILE}: slice {name}", SuiteError)
                shutil.copytree(src, staging / rel, copy_function=_link_or_copy)
                slices[name] = s
        if old_units:  # the unit tests outlive a regeneration of the frozen slices
            src = path_inside(out, old_units["dir"], f"{out / SUITES_FILE}: {UNIT_TESTS}", SuiteError)
            shutil.copytree(src, staging / old_units["dir"], copy_function=_link_or_copy)
            index[UNIT_TESTS] = old_units
        _atomic_text(staging / SUITES_FILE, json.dumps(index, indent=1) + "\n")
        if out.exists():
            old = out.with_name(f"{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(staging, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


# -- reading -------------------------------------------------------------------------------------------
def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SuiteError(f"{path} is missing: {path.parent} is not a suites folder; generate one with "
                         f"`hydranet engine suites --out {path.parent}`") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path} is not valid JSON ({e}); regenerate the suites with `hydranet engine suites --out "
                         f"{path.parent} --overwrite`") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("slices"), dict):
        raise SuiteError(f"{path} is not a {FORMAT} index; regenerate with `hydranet engine suites --out {path.parent} "
                         "--overwrite`")
    if data.get("version") != VERSION:
        raise SuiteError(f"{path} has suites version {data.get('version')!r}, this package reads {VERSION}; regenerate")
    return data


def load_suites(suites_dir: str | Path, verify: bool = True) -> dict[str, Any]:
    """{"index": suites.json, "suites": {name: {"path", "digest", "frames"}}} (frozen slices in order, then
    unit_tests when it holds frames). `verify`: recompute every digest; a modified suite is a SuiteError."""
    root = Path(suites_dir)
    if not root.is_dir():
        raise SuiteError(f"suites folder {root} does not exist; generate it with `hydranet engine suites --out {root}`")
    index = _read_json(root / SUITES_FILE)
    where = f"{root / SUITES_FILE}"
    suites = {name: {"path": path_inside(root, str(s.get("dir", name)), f"{where}: slice {name}", SuiteError),
                     "digest": s.get("digest"), "frames": s.get("frames")} for name, s in index["slices"].items()}
    units = index.get(UNIT_TESTS)
    if units:
        suites[UNIT_TESTS] = {"path": path_inside(root, units["dir"], f"{where}: {UNIT_TESTS}", SuiteError),
                              "digest": units["digest"], "frames": units["frames"]}
    for name, s in suites.items():
        if not (s["path"] / "dataset.json").is_file():
            raise SuiteError(f"suite {name}: {s['path']} is missing or not a dataset; regenerate the suites with "
                             f"`hydranet engine suites --out {root} --overwrite`")
        if verify and folder_digest(s["path"]) != s["digest"]:
            raise SuiteError(f"suite {name} in {root} was modified after it was generated (content digest differs from "
                             f"{SUITES_FILE}); a frozen suite is never evaluated changed: regenerate with "
                             f"`hydranet engine suites --out {root} --overwrite`")
    return {"index": index, "suites": suites}


# -- the unit-tests suite ------------------------------------------------------------------------------
def _frame_source(frame_dir: Path) -> tuple[Path, str, dict[str, Any], dict[str, Any]]:
    """(fleet root, clip, the frame's scene.json entry, the fleet's dataset.json) of a fleet frame folder."""
    clip_dir = frame_dir.parent
    root = clip_dir.parent.parent
    if clip_dir.parent.name != "scenes" or not frame_dir.is_dir():
        raise SuiteError(f"unit test frame {frame_dir} is not a frame folder of a fleet (FLEET/scenes/<clip>/<frame>)")
    try:
        meta = json.loads((root / "dataset.json").read_text())
        scene = json.loads((clip_dir / "scene.json").read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SuiteError(f"unit test frame {frame_dir}: its fleet's dataset.json or scene.json is unreadable ({e}); "
                         "regenerate the fleet") from None
    entry = next((f for f in scene.get("frames", []) if f.get("dir") == frame_dir.name), None)
    if entry is None:
        raise SuiteError(f"unit test frame {frame_dir}: {clip_dir / 'scene.json'} does not list frame {frame_dir.name}")
    return root, clip_dir.name, entry, meta


def _entry_key(frame_dir: Path, cameras: list[str], payload: Mapping[str, Any]) -> str:
    """sha256 of the frame's images and its label: the same frame with the same label is the same entry."""
    from data_engine.labeling.base import digest

    h = hashlib.sha256()
    for cam in cameras:
        h.update(file_sha256(frame_dir / f"{cam}.jpg").encode())
    h.update(digest(payload).encode())
    return h.hexdigest()


def _check_payload(frame_dir: Path, payload: Any, meta: Mapping[str, Any]) -> None:
    from hydranet.data.reader import DatasetError
    from hydranet.data.sim_reader import check_labels

    cams = camera_sizes(meta["rig"], f"unit test frame {frame_dir}: its fleet's rig")  # {name: (width, height)}
    if not isinstance(payload, Mapping) or not isinstance(payload.get("cameras"), Mapping):
        raise SuiteError(f"unit test frame {frame_dir}: its label payload has no 'cameras'; give the accepted labels.json")
    if set(payload["cameras"]) != set(cams):
        raise SuiteError(f"unit test frame {frame_dir}: its label names cameras {sorted(payload['cameras'])}, the fleet "
                         f"has {sorted(cams)}; a unit test needs a label for every camera")
    if "boxes3d" not in payload:
        raise SuiteError(f"unit test frame {frame_dir}: its label has no 'boxes3d' (a 2D-only label from a human tool); "
                         "a unit test needs a complete labels.json (the oracle's)")
    try:
        check_labels(json.loads(json.dumps(payload)), frame_dir / "labels.json (payload)", cams, list(meta["classes"]))
    except DatasetError as e:
        raise SuiteError(f"unit test frame {frame_dir}: bad label ({e})") from None


def add_unit_tests(suites_dir: str | Path, frames: Iterable[tuple[str | Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """Append labelled fleet frames (frame folder, accepted labels.json payload) to DIR/unit_tests/ as a new
    version of that sim dataset. Returns {"added", "existing", "frames" (in all), "version", "dir"}."""
    root = Path(suites_dir)
    load_suites(root, verify=False)  # a suites folder, or a one-line error
    with _locked(root):
        info = load_suites(root, verify=False)
        units = info["index"].get(UNIT_TESTS)
        cur = path_inside(root, units["dir"], f"{root / SUITES_FILE}: suite {UNIT_TESTS}", SuiteError) if units else None
        if cur is not None and folder_digest(cur) != units["digest"]:
            raise SuiteError(f"suite {UNIT_TESTS} in {root} was modified after it was written (digest differs from "
                             f"{SUITES_FILE}); restore it or regenerate the suites")
        cur_meta = json.loads((cur / "dataset.json").read_text()) if cur else None
        have = {s["name"] for s in cur_meta["scenes"]} if cur_meta else set()
        new: dict[str, tuple[Path, Mapping[str, Any], str, dict, dict]] = {}
        for frame_dir, payload in frames:
            frame_dir = Path(frame_dir).resolve()
            fleet, clip, entry, meta = _frame_source(frame_dir)
            _check_payload(frame_dir, payload, meta)
            if cur_meta is not None and meta["rig"] != cur_meta["rig"]:
                raise SuiteError(f"unit test frame {frame_dir}: its fleet's rig differs from the unit tests' rig "
                                 f"({cur_meta['rig'].get('name')}); unit tests of one suites folder share one rig")
            if new and meta["rig"] != next(iter(new.values()))[4]["rig"]:
                raise SuiteError(f"unit test frame {frame_dir}: its fleet's rig differs from the other frames'")
            name = "ut_" + _entry_key(frame_dir, list(camera_sizes(meta["rig"])), payload)[:20]
            if name not in have:
                new[name] = (frame_dir, payload, clip, entry, meta)
        existing = len(have)
        if not new:
            return {"added": 0, "existing": existing, "frames": existing, "version": units["version"] if units else 0,
                    "dir": str(cur) if cur else None}
        version = (units["version"] if units else 0) + 1
        rel = f"{UNIT_TESTS}/v{version:04d}"
        final = root / rel
        staging = final.with_name(f"{final.name}.tmp-{os.getpid()}")
        for p in (final, staging):  # an orphan of a killed append: never referenced by suites.json
            shutil.rmtree(p, ignore_errors=True)
        try:
            (staging / "scenes").mkdir(parents=True)
            scenes = list(cur_meta["scenes"]) if cur_meta else []
            if cur is not None:
                for s in cur_meta["scenes"]:
                    src = frame_path(cur, s["name"], where=f"{cur / 'dataset.json'}", error=SuiteError)
                    shutil.copytree(src, staging / "scenes" / s["name"], copy_function=_link_or_copy)
            for name, (frame_dir, payload, clip, entry, meta) in new.items():
                _write_entry(staging / "scenes" / name, name, frame_dir, payload, clip, entry, meta)
                scenes.append({"name": name, "num_frames": 1})
            base = cur_meta or next(iter(new.values()))[4]
            dmeta = {**{k: v for k, v in base.items() if k != "scenes"}, "seed": None, "scenes": scenes,
                     UNIT_TESTS: {"version": version}}
            _atomic_text(staging / "dataset.json", json.dumps(dmeta, indent=1) + "\n")
            os.replace(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        index = dict(info["index"])
        index[UNIT_TESTS] = {"version": version, "dir": rel, "frames": len(scenes), "digest": folder_digest(final)}
        _atomic_text(root / SUITES_FILE, json.dumps(index, indent=1) + "\n")  # the commit point
        for old in (root / UNIT_TESTS).iterdir():  # keep this version and the one before it
            if old.name.startswith("v") and old.name[1:].isdigit() and int(old.name[1:]) < version - 1:
                shutil.rmtree(old, ignore_errors=True)
        return {"added": len(new), "existing": existing, "frames": len(scenes), "version": version, "dir": str(final)}


def _write_entry(dst: Path, name: str, frame_dir: Path, payload: Mapping[str, Any], clip: str, entry: Mapping[str, Any],
                 meta: Mapping[str, Any]) -> None:
    """One unit test: a one-frame scene with the fleet frame's images and label channels and `payload` as labels.json."""
    fdir = dst / "000000"
    fdir.mkdir(parents=True)
    for f in frame_dir.iterdir():
        if f.is_file() and f.name != "labels.json":
            shutil.copy2(f, fdir / f.name)
    (fdir / "labels.json").write_text(json.dumps(payload))
    scene = {"name": name, "seed": None, "conditions": {"withheld": "unit test"},
             "source": {"frame": str(frame_dir), "clip": clip, "dataset_seed": meta.get("seed")},
             "frames": [{"index": 0, "dir": "000000", "timestamp_us": int(entry["timestamp_us"]),
                         "ego2world": entry["ego2world"]}]}
    (dst / "scene.json").write_text(json.dumps(scene, indent=1))
