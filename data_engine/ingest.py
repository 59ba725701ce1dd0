"""Fleets from recorded data: any dataset reader, camera videos, or image sequences, registered in place.

    hydranet engine ingest --out FLEET --source dataset --root D [--format F] [--split S] [--version V] [--sweeps N]
    hydranet engine ingest --out FLEET --source video --videos DIR --rig RIG.yaml [--hz H] [--timestamps F] [--poses F]
                           [--on-bad-clip raise|skip]
    hydranet engine ingest --out FLEET --source images --root D --rig RIG.yaml [--hz H] [--poses F] [--on-bad-clip ...]

A recorded fleet is FLEET/fleet.json (docs/recordings.md): the source (kind, absolute root, reader
options), the rig, and per clip its tags and time-ordered frames, each frame naming where every camera
image lives: a file under the source root, a frame index of a video, or a sample of a dataset reader.
No image is copied; `data_engine.fleet` reads them in place through the one image decoder (files), PyAV
(videos) or the reader (datasets). Tags (a nuScenes scene's description and log location, a folder's
name) are for suites, reports and benchmarks; the miner never reads them.

Ingest decodes every video once (a damaged one is found here, not mid-shadow), writes FLEET.tmp-<pid>
and renames it: a killed ingest leaves no fleet, a rerun writes the same one; an existing FLEET is
refused without --overwrite.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.io import TMP, check_apart, check_name, pid_alive
from hydranet.rig import camera_sizes

FORMAT = "hydranet-fleet"
VERSION = 1
FLEET_FILE = "fleet.json"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
SOURCES = ("dataset", "video", "images")
_DESCRIPTION_TAGS = ("night", "rain", "fog", "snow", "dusk", "construction", "pedestrians", "parking", "highway",
                     "intersection")


class IngestError(ValueError):
    """A recording that cannot become a fleet; one line naming the file, camera or clip and what to do."""


# -- the fleet file ------------------------------------------------------------------------------------------
def write_fleet(out: Path, fleet: Mapping[str, Any], overwrite: bool = False) -> Path:
    """out/fleet.json written into out.tmp-<pid> and renamed (an existing `out` only with `overwrite`)."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise IngestError(f"{out} exists; choose a new --out or pass --overwrite to replace it")
    for stale in out.parent.glob(f"{out.name}{TMP}*"):  # an ingest killed mid-write (kill -9): its temp goes
        pid = stale.name.rsplit(TMP, 1)[1]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = out.with_name(f"{out.name}{TMP}{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        (tmp / FLEET_FILE).write_text(json.dumps(fleet, indent=1, allow_nan=False) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def fleet_dict(kind: str, root: Path, options: Mapping[str, Any], rig, clips: list[dict]) -> dict[str, Any]:
    if not clips or not any(c["frames"] for c in clips):
        raise IngestError(f"{root}: no frames found for --source {kind}; see docs/recordings.md for the layout")
    from sim.classes import LANE_TYPES, OBJECT_CLASSES
    from sim.world import LIGHT_STATES, SIGN_CLASSES

    calibrated = all(np.isfinite(c.K).all() and np.isfinite(c.cam2ego).all() for c in rig.cameras)
    rig_dict = rig.to_dict() if calibrated else {  # BDD100K: no calibration at all, the cameras' names and sizes only
        "name": rig.name, "cameras": [{"name": c.name, "width": c.width, "height": c.height} for c in rig.cameras]}
    return {"format": FORMAT, "version": VERSION,
            "source": {"kind": kind, "root": str(Path(root).resolve()), **options},
            "calibrated": calibrated, "rig": rig_dict,
            # the label vocabulary a labeller picks from: the project's (the models') classes
            "classes": list(OBJECT_CLASSES), "sign_classes": list(SIGN_CLASSES), "light_states": list(LIGHT_STATES),
            "lane_types": list(LANE_TYPES), "clips": clips}


# -- timestamps and poses files ------------------------------------------------------------------------------
def _read_table(path: Path, what: str) -> list[dict[str, str]] | Any:
    """A CSV file as a list of row dicts, or a JSON file's content."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise IngestError(f"--{what} {path}: {e.strerror or e}") from None
    if Path(path).suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise IngestError(f"--{what} {path}: not valid JSON ({e})") from None
    return list(csv.DictReader(text.splitlines()))


def _finite(value, where: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise IngestError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(v):
        raise IngestError(f"{where}: {value!r} is not a finite number")
    return v


def read_timestamps(path: Path) -> dict[tuple[str, str], list[int]]:
    """{(clip, camera): [timestamp_us per video frame]} from CSV rows `clip,camera,frame,timestamp_us` or JSON
    {clip: {camera: [timestamp_us, ...]}}; frames must be 0..n-1 and timestamps increasing."""
    data = _read_table(path, "timestamps")
    out: dict[tuple[str, str], dict[int, int]] = {}
    if isinstance(data, dict):
        for clip, cams in data.items():
            if not isinstance(cams, dict):
                raise IngestError(f"--timestamps {path}: clip {clip!r} must map camera names to lists of timestamp_us")
            for cam, ts in cams.items():
                if not isinstance(ts, list):
                    raise IngestError(f"--timestamps {path}: {clip}/{cam} must be a list of timestamp_us")
                out[(clip, cam)] = {k: int(_finite(t, f"--timestamps {path}: {clip}/{cam}[{k}]")) for k, t in enumerate(ts)}
    else:
        for k, row in enumerate(data):
            where = f"--timestamps {path}: row {k + 2}"
            missing = [c for c in ("clip", "camera", "frame", "timestamp_us") if row.get(c) in (None, "")]
            if missing:
                raise IngestError(f"{where}: column {missing[0]!r} is missing (columns: clip,camera,frame,timestamp_us)")
            frame = int(_finite(row["frame"], f"{where} frame"))
            out.setdefault((row["clip"], row["camera"]), {})[frame] = int(_finite(row["timestamp_us"], f"{where} timestamp_us"))
    result = {}
    for key, by_frame in out.items():
        if sorted(by_frame) != list(range(len(by_frame))):
            raise IngestError(f"--timestamps {path}: {key[0]}/{key[1]} lists frames {sorted(by_frame)[:5]}...; give every "
                              "frame 0..n-1 once")
        ts = [by_frame[i] for i in range(len(by_frame))]
        if any(b <= a for a, b in zip(ts, ts[1:])):
            raise IngestError(f"--timestamps {path}: {key[0]}/{key[1]}: timestamps must increase frame by frame")
        result[key] = ts
    return result


def read_poses(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{clip: (timestamps_us (P,), ego2world (P, 4, 4))} from CSV rows `clip,timestamp_us,m00..m33` (row-major
    ego-to-world) or JSON {clip: [{"timestamp_us", "ego2world": 4x4}]}; rigid, finite, time-ordered."""
    from hydranet.geometry import is_rotation

    data = _read_table(path, "poses")
    rows: dict[str, list[tuple[int, np.ndarray]]] = {}
    if isinstance(data, dict):
        for clip, poses in data.items():
            for k, p in enumerate(poses if isinstance(poses, list) else [None]):
                where = f"--poses {path}: {clip}[{k}]"
                if not isinstance(p, dict) or "timestamp_us" not in p or "ego2world" not in p:
                    raise IngestError(f"{where}: must be {{\"timestamp_us\", \"ego2world\": 4x4}}")
                m = np.asarray([[_finite(v, where) for v in r] for r in p["ego2world"]], np.float64) \
                    if isinstance(p["ego2world"], list) else np.zeros(0)
                rows.setdefault(clip, []).append((int(_finite(p["timestamp_us"], where)), m))
    else:
        keys = [f"m{i}{j}" for i in range(4) for j in range(4)]
        for k, row in enumerate(data):
            where = f"--poses {path}: row {k + 2}"
            missing = [c for c in ("clip", "timestamp_us", *keys) if row.get(c) in (None, "")]
            if missing:
                raise IngestError(f"{where}: column {missing[0]!r} is missing (columns: clip,timestamp_us,m00,...,m33)")
            m = np.asarray([_finite(row[c], f"{where} {c}") for c in keys]).reshape(4, 4)
            rows.setdefault(row["clip"], []).append((int(_finite(row["timestamp_us"], f"{where} timestamp_us")), m))
    out = {}
    for clip, ps in rows.items():
        ps.sort(key=lambda p: p[0])
        for t, m in ps:
            if m.shape != (4, 4) or not is_rotation(m[:3, :3]) or not np.allclose(m[3], [0, 0, 0, 1]):
                raise IngestError(f"--poses {path}: clip {clip} at {t} us: ego2world must be a rigid 4x4 transform")
        out[clip] = (np.asarray([p[0] for p in ps], np.int64), np.stack([p[1] for p in ps]))
    return out


def pose_at(poses: tuple[np.ndarray, np.ndarray], t_us: int, tolerance_us: int, where: str) -> list:
    """The ego2world of the pose nearest to t_us (4x4 list); IngestError when none is within tolerance."""
    ts, mats = poses
    i = int(np.argmin(np.abs(ts - t_us)))
    if abs(int(ts[i]) - t_us) > tolerance_us:
        raise IngestError(f"{where}: no pose within {tolerance_us / 1000:.0f} ms of frame time {t_us} us (poses cover "
                          f"{ts[0]}..{ts[-1]} us); give poses that cover the whole clip")
    return mats[i].tolist()


# -- sampling cameras in time ---------------------------------------------------------------------------------
def sample_times(times: dict[str, list[int]], hz: float | None, where: str) -> list[tuple[int, dict[str, int]]]:
    """[(timestamp_us, {camera: frame index})]: the first camera's frames (all, or one per 1/hz s from its
    first frame), each camera's frame nearest in time. IngestError when a camera has no frame within half
    a sample period (dropped frames, variable frame rate, or cameras that do not overlap in time)."""
    cams = list(times)
    ref = np.asarray(times[cams[0]], np.int64)
    if hz is not None:
        period = int(round(1e6 / hz))
        targets = np.arange(ref[0], ref[-1] + 1, period)
        picks = sorted({int(np.argmin(np.abs(ref - t))) for t in targets})
    else:
        picks = list(range(len(ref)))
        period = int(np.median(np.diff(ref))) if len(ref) > 1 else 10**6
    tol = max(period // 2, 1)
    out = []
    for p in picks:
        t = int(ref[p])
        frame = {cams[0]: p}
        for cam in cams[1:]:
            ts = np.asarray(times[cam], np.int64)
            j = int(np.argmin(np.abs(ts - t)))
            if t - int(ts[-1]) > tol:
                raise IngestError(f"{where}: camera {cam}'s recording ends at t = {ts[-1] / 1e6:.3f} s, {cams[0]}'s runs to "
                                  f"{ref[-1] / 1e6:.3f} s: a truncated video or a shorter recording; cut the clip's videos to one "
                                  "length, or pass --on-bad-clip skip to leave the clip out")
            if abs(int(ts[j]) - t) > tol:
                raise IngestError(f"{where}: camera {cam} has no frame within {tol / 1000:.1f} ms of {cams[0]}'s frame {p} "
                                  f"(t = {t / 1e6:.3f} s): dropped frames or a variable frame rate; resample it to a "
                                  "constant rate or ingest with a lower --hz")
            frame[cam] = j
        out.append((t, frame))
    return out


def _check_hz(hz: float | None) -> None:
    if hz is not None and not (isinstance(hz, (int, float)) and math.isfinite(hz) and hz > 0):
        raise IngestError(f"--hz must be a positive number of frames per second, got {hz!r}")


def _clip_frames(samples, refs: Mapping[str, list], poses, where: str) -> list[dict[str, Any]]:
    """Fleet frames of one clip; refs: {camera: [where frame i of that camera lives, per i]}; `where` names the
    poses file and clip (a pose gap is an error of that file)."""
    frames = []
    for k, (t, picks) in enumerate(samples):
        tol = 50_000 if len(samples) < 2 else max((samples[1][0] - samples[0][0]) // 2, 1)
        frames.append({"index": k, "dir": f"{k:06d}", "timestamp_us": int(t),
                       "ego2world": None if poses is None else pose_at(poses, t, tol, f"{where} frame {k}"),
                       "images": {cam: refs[cam][i] for cam, i in picks.items()}})
    return frames


def _clip_poses(poses, clip: str, path) -> tuple[np.ndarray, np.ndarray] | None:
    if poses is None:
        return None
    if clip not in poses:
        raise IngestError(f"--poses {path}: no poses for clip {clip!r}; give poses for every clip or leave --poses out")
    return poses[clip]


ON_BAD_CLIP = ("raise", "skip")


def each_clip(clip_dirs, one, on_bad_clip: str) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(clips, skipped): `one(folder)` of every clip folder. A clip it refuses (IngestError: a truncated or
    undecodable video, a missing camera, dropped frames) stops the ingest, or with `on_bad_clip` "skip" is left out
    and listed as {"clip", "reason"}; IngestError when every clip was left out."""
    if on_bad_clip not in ON_BAD_CLIP:
        raise IngestError(f"--on-bad-clip must be one of {list(ON_BAD_CLIP)}, got {on_bad_clip!r}")
    clips, skipped = [], []
    for cdir in clip_dirs:
        try:
            clips.append(one(cdir))
        except IngestError as e:
            if on_bad_clip == "raise":
                raise
            skipped.append({"clip": Path(cdir).name, "reason": str(e)})
    if not clips:
        raise IngestError(f"every clip was unreadable ({len(skipped)}; first: {skipped[0]['reason']})")
    return clips, skipped


# -- where a recording's files are ------------------------------------------------------------------------------
def source_ref(root: Path, rel: str, flag: str, follow_links: bool, linked: set[str]) -> str:
    """How fleet.json names `root/rel` (a clip's video, image or camera folder found by listing `root`): `rel` when it
    resolves inside `root` (a link within it included); else, where a symbolic link on the way points outside `root`,
    its resolved path, allowed only with `follow_links` (the link's resolved target is added to `linked`: the reader
    accepts those paths, and no --out may overlap them). Without it, one line naming the link, what it resolves to and
    the two ways out."""
    path = root / rel
    real, real_root = path.resolve(), root.resolve()
    if real == real_root or real_root in real.parents:
        return rel
    link, target = path, real
    for k in range(1, len(Path(rel).parts) + 1):  # the first link on the way that points outside root
        step = root.joinpath(*Path(rel).parts[:k])
        if step.is_symlink() and real_root not in step.resolve().parents:
            link, target = step, step.resolve()
            break
    if not follow_links:
        raise IngestError(f"{flag} {root}: {link} is a symbolic link to {target}, outside {flag} (its files would be "
                          f"read from there); pass --follow-links to ingest them where the link points, or move the "
                          f"files under {flag}")
    linked.add(str(target))
    return str(real)


# -- sources ---------------------------------------------------------------------------------------------------
def _check_cameras(clip_dir: Path, found: Mapping[str, Path], rig, rig_file: Path, what: str) -> None:
    """IngestError unless a clip folder holds one `what` (video, image folder) per rig camera, and no other."""
    unknown = sorted(set(found) - set(rig.names))
    if unknown:
        raise IngestError(f"{found[unknown[0]]}: camera {unknown[0]!r} is not in rig {rig_file} ({rig.names}); rename it "
                          "or add the camera to the rig")
    missing = [c for c in rig.names if c not in found]
    if missing:
        raise IngestError(f"{clip_dir}: no {what} for camera {missing[0]} of rig {rig_file}; add it or drop the camera "
                          "from the rig")


def _recording(folder: Path, flag: str, layout: str, rig_file: Path, hz: float | None, poses: Path | None):
    """(rig, poses table or None, clip folders) of a recordings folder, each checked with a one-line error."""
    from hydranet.rig import load_rig

    _check_hz(hz)
    if not folder.is_dir():
        raise IngestError(f"{flag} {folder} is not a folder; lay recordings out as {layout} (docs/recordings.md)")
    rig = load_rig(rig_file)
    pose_table = read_poses(poses) if poses is not None else None
    clip_dirs = sorted(p for p in folder.iterdir() if p.is_dir())
    if not clip_dirs:
        raise IngestError(f"{flag} {folder} holds no clip folder; lay recordings out as {layout} (docs/recordings.md)")
    return rig, pose_table, clip_dirs


def ingest_video(videos: Path, rig_file: Path, hz: float | None = None, timestamps: Path | None = None,
                 poses: Path | None = None, progress: bool = False, on_bad_clip: str = "raise",
                 follow_links: bool = False) -> dict[str, Any]:
    """videos/<clip>/<CAMERA>.mp4|mov|mkv (camera names those of the rig file) -> a fleet dict. `follow_links`: a
    video or clip folder that is a link out of `videos` is read where it points (`source_ref`)."""
    from tqdm import tqdm

    from hydranet.data.video import VIDEO_SUFFIXES, VideoError, index_video

    videos = Path(videos)
    rig, pose_table, clip_dirs = _recording(videos, "--videos", "DIR/<clip>/<CAMERA>.mp4", rig_file, hz, poses)
    stamps = read_timestamps(timestamps) if timestamps is not None else None
    linked: set[str] = set()

    def one(cdir: Path) -> dict[str, Any]:
        clip = check_name(cdir.name, "clip", f"--videos {videos}", IngestError)
        files = {p.stem: p for p in sorted(cdir.iterdir()) if p.suffix.lower() in VIDEO_SUFFIXES}
        _check_cameras(cdir, files, rig, rig_file, "video")  # <CAMERA>.mp4, .mov or .mkv
        times, names = {}, {}
        for cam in rig.names:
            names[cam] = source_ref(videos, f"{clip}/{files[cam].name}", "--videos", follow_links, linked)
            path = videos / names[cam]  # names[cam] is absolute for a followed link
            try:
                secs, (h, w) = index_video(path)
            except VideoError as e:
                raise IngestError(str(e)) from None
            camera = rig.cameras[rig.names.index(cam)]
            if (h, w) != (camera.height, camera.width):
                raise IngestError(f"{path}: video is {w}x{h}, rig {rig_file} camera {cam} is {camera.width}x{camera.height}; "
                                  "give the rig at the video's resolution (intrinsics scale with the image)")
            if stamps is not None:
                if (clip, cam) not in stamps:
                    raise IngestError(f"--timestamps {timestamps}: no timestamps for {clip}/{cam}")
                ts = stamps[(clip, cam)]
                if len(ts) != len(secs):
                    raise IngestError(f"{path}: {len(secs)} frames, --timestamps {timestamps} lists {len(ts)} for "
                                      f"{clip}/{cam}; the video is {'shorter' if len(secs) < len(ts) else 'longer'} than "
                                      "its timestamp file: give the file of this recording")
                times[cam] = list(ts)
            else:
                times[cam] = [int(round(s * 1e6)) for s in secs]
        where = f"clip {clip} ({cdir})"
        samples = sample_times(times, hz, where)
        refs = {cam: [{"video": names[cam], "frame": i} for i in range(len(times[cam]))] for cam in rig.names}
        frames = _clip_frames(samples, refs, _clip_poses(pose_table, clip, poses), f"--poses {poses}: clip {clip}")
        return {"name": clip, "tags": [f"folder:{clip}"], "frames": frames}

    clips, skipped = each_clip(tqdm(clip_dirs, desc="ingest videos", unit="clip", disable=not progress), one, on_bad_clip)
    options = {"hz": hz, "timestamps": str(timestamps) if timestamps else None, "poses": str(poses) if poses else None,
               "rig_file": str(rig_file), "on_bad_clip": on_bad_clip, **_links(follow_links, linked)}
    return {**fleet_dict("video", videos, options, rig, clips), "skipped": skipped}


def _links(follow_links: bool, linked: set[str]) -> dict[str, Any]:
    """fleet.json's source keys of followed links: the resolved link targets its absolute references lie under."""
    return {"follow_links": True, "linked": sorted(linked)} if follow_links else {}


_STAMP = re.compile(r"^\d+(\.\d+)?$")


def _stamp_us(stem: str, path: Path) -> int:
    """A file name's timestamp: an integer is microseconds, a decimal is seconds."""
    if not _STAMP.match(stem):
        raise IngestError(f"{path}: the file name must be its timestamp (microseconds, e.g. 1533151603512404.jpg, or "
                          "seconds with a decimal point, e.g. 12.500.jpg); rename it")
    return int(round(float(stem) * 1e6)) if "." in stem else int(stem)


def ingest_images(root: Path, rig_file: Path, hz: float | None = None, poses: Path | None = None,
                  on_bad_clip: str = "raise", follow_links: bool = False) -> dict[str, Any]:
    """root/<clip>/<CAMERA>/<timestamp>.jpg|png (camera names those of the rig) -> a fleet dict. `follow_links`: a
    clip or camera folder or image that is a link out of `root` is read where it points (`source_ref`)."""
    root = Path(root)
    rig, pose_table, clip_dirs = _recording(root, "--root", "ROOT/<clip>/<CAMERA>/<timestamp>.jpg", rig_file, hz, poses)
    linked: set[str] = set()

    def one(cdir: Path) -> dict[str, Any]:
        clip = check_name(cdir.name, "clip", f"--root {root}", IngestError)
        _check_cameras(cdir, {p.name: p for p in cdir.iterdir() if p.is_dir()}, rig, rig_file, "image folder")
        times, names = {}, {}
        for cam in rig.names:  # a camera folder or image linked outside --root: only with --follow-links
            source_ref(root, f"{clip}/{cam}", "--root", follow_links, linked)
            files = sorted((p for p in (cdir / cam).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES),
                           key=lambda p: _stamp_us(p.stem, p))
            refs = [source_ref(root, f"{clip}/{cam}/{f.name}", "--root", follow_links, linked) for f in files]
            if not files:
                raise IngestError(f"{cdir / cam}: no .jpg or .png images")
            ts = [_stamp_us(p.stem, p) for p in files]
            dup = next((p for p, a, b in zip(files[1:], ts, ts[1:]) if a == b), None)
            if dup is not None:
                raise IngestError(f"{dup}: two images of camera {cam} have the same timestamp; keep one")
            times[cam], names[cam] = ts, refs
        where = f"clip {clip} ({cdir})"
        samples = sample_times(times, hz, where)
        refs = {cam: [{"file": n} for n in names[cam]] for cam in rig.names}
        frames = _clip_frames(samples, refs, _clip_poses(pose_table, clip, poses), f"--poses {poses}: clip {clip}")
        return {"name": clip, "tags": [f"folder:{clip}"], "frames": frames}

    clips, skipped = each_clip(clip_dirs, one, on_bad_clip)
    options = {"hz": hz, "poses": str(poses) if poses else None, "rig_file": str(rig_file), "on_bad_clip": on_bad_clip,
               **_links(follow_links, linked)}
    return {**fleet_dict("images", root, options, rig, clips), "skipped": skipped}


def description_tags(description: str) -> list[str]:
    """Tags from a scene description ("Night, rain, peds at intersection" -> night, rain, intersection)."""
    words = set(re.findall(r"[a-z]+", description.lower()))
    return [t for t in _DESCRIPTION_TAGS if t in words or (t == "pedestrians" and words & {"ped", "peds"})]


def ingest_dataset(root: Path, format: str | None = None, split: str | None = None, version: str | None = None,
                   sweeps: int = 0, progress: bool = False) -> dict[str, Any]:
    """Every frame of a dataset reader (keyframes and, with `sweeps`, nuScenes' unlabelled sweeps), in time
    order per scene; each camera image read in place through the reader."""
    from tqdm import tqdm

    from hydranet.data.formats import detect_format, open_dataset

    fmt = format if format not in (None, "auto") else detect_format(root)
    ds = open_dataset(root, fmt, split, version, channels=(), sweeps=sweeps)  # labels and poses only: no image decoded
    descriptions = _scene_descriptions(ds)
    clips, i = [], 0
    bar = tqdm(total=len(ds), desc="ingest dataset", unit="frame", disable=not progress)
    for scene in ds.scenes:
        name = check_name(scene["name"], "scene", f"{root}", IngestError)
        frames = []
        for k in range(len(scene["frames"])):
            sample = ds.load(i)  # raises naming the file when a frame's table entry is broken
            pose = sample.get("ego2world")
            known = pose is not None and bool(np.isfinite(np.asarray(pose, np.float64)).all())  # BDD100K: NaN, unknown
            frames.append({"index": k, "dir": f"{k:06d}", "timestamp_us": int(sample["timestamp_us"]),
                           "ego2world": np.asarray(pose, np.float64).tolist() if known else None,
                           "images": {"sample": i}})
            i += 1
            bar.update(1)
        tags = [f"location:{scene['location']}"] if scene.get("location") else []
        desc = descriptions.get(name, "")
        tags += ([f"description:{desc}"] if desc else []) + description_tags(desc)
        clips.append({"name": name, "tags": tags, "frames": frames})
    bar.close()
    options = {"format": fmt, "split": split, "version": version, "sweeps": sweeps}
    return fleet_dict("dataset", Path(root), options, ds.rig, clips)


def _scene_descriptions(ds) -> dict[str, str]:
    """nuScenes scene descriptions (scene.json's `description`), where the reader has its tables."""
    table = getattr(ds, "table_root", None)
    if table is None or not (Path(table) / "scene.json").is_file():
        return {}
    try:
        return {s["name"]: str(s.get("description", "")) for s in json.loads((Path(table) / "scene.json").read_text())}
    except (json.JSONDecodeError, KeyError, TypeError):
        return {}


def ingest(out: Path, source: str, overwrite: bool = False, progress: bool = False, **kw) -> dict[str, Any]:
    """`hydranet engine ingest`: build the fleet of `source` and write out/fleet.json atomically."""
    if source not in SOURCES:
        raise IngestError(f"unknown --source {source!r}; choose one of {list(SOURCES)}")
    if Path(out).exists() and not overwrite:
        raise IngestError(f"{out} exists; choose a new --out or pass --overwrite to replace it")
    policy, follow = kw.get("on_bad_clip") or "raise", bool(kw.get("follow_links"))
    if source == "video":
        fleet = ingest_video(kw["videos"], kw["rig"], kw.get("hz"), kw.get("timestamps"), kw.get("poses"), progress, policy,
                             follow)
    elif source == "images":
        fleet = ingest_images(kw["root"], kw["rig"], kw.get("hz"), kw.get("poses"), policy, follow)
    else:
        fleet = ingest_dataset(kw["root"], kw.get("format"), kw.get("split"), kw.get("version"), kw.get("sweeps") or 0,
                               progress)
    # the followed links' targets are inputs too: --out must not be, hold or sit inside one (as for --root, --videos)
    check_apart({"--out": out}, {"a followed link's target": fleet["source"].get("linked") or []}, IngestError)
    write_fleet(Path(out), fleet, overwrite)
    return {"out": str(out), "clips": len(fleet["clips"]), "frames": sum(len(c["frames"]) for c in fleet["clips"]),
            "cameras": list(camera_sizes(fleet["rig"], f"{Path(out) / FLEET_FILE} rig")), "source": fleet["source"]["kind"],
            "skipped": fleet.get("skipped", []), "linked": fleet["source"].get("linked") or []}

