"""Write a `hydranet-sim` dataset (docs/dataset_format.md), atomically.

    with DatasetWriter(out_root, meta) as w:   # meta: every dataset.json key except "scenes"
        w.write_scene(scene_meta)              # the scene.json content
        w.write_frame("scene_0000", frame)     # images + labels of one frame

Everything goes into `ROOT.tmp-<pid>`; on a clean exit `dataset.json` is written last and the
folder is renamed to `ROOT`. On any exception (KeyboardInterrupt included) the temp folder is
removed and the exception re-raised, so `ROOT` never appears half-written.

Encodings (the reader in `hydranet.data.sim_reader` inverts them):
  rgb      uint8 (H, W, 3) RGB   -> CAM.jpg          JPEG quality 95
  depth    float32 (H, W) m      -> CAM.depth.png    uint16 round(d * 256), clipped to 65535; 0 = none
  normal   float32 (H, W, 3)     -> CAM.normal.png   uint8 round((n + 1) * 127.5); (0,0,0) where n == 0
  semantic uint8 (H, W)          -> CAM.semantic.png uint8
  instance int32 (H, W)          -> CAM.instance.png uint16 (ids above 65535 raise)
  bev      uint8 (3, X, Y)       -> bev.png          RGB
  labels   dict                  -> labels.json

JSON files have sorted keys and floats rounded to 6 decimals, so a run is byte-deterministic.
This module must not import torch (the sim runs as a car does).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cv2
import numpy as np

from hydranet.io import temp_path
from hydranet.rig import camera_sizes, check_name

FORMAT = "hydranet-sim"
VERSION = 1
META_KEYS = ("format", "version", "rig", "classes", "semantic_classes", "sign_classes", "light_states",
             "lane_types", "bev", "frame_rate_hz", "seed", "sim_config")
FLOAT_DECIMALS = 6
_PNG = [cv2.IMWRITE_PNG_COMPRESSION, 1]
_JPEG = [cv2.IMWRITE_JPEG_QUALITY, 95]


class DatasetWriteError(OSError):
    """The dataset cannot be written where asked (one line: what is wrong, what to do)."""


def to_json(obj, indent: int | None = 1) -> str:
    """Deterministic JSON: sorted keys, floats rounded, numpy scalars/arrays turned into lists."""
    return json.dumps(_plain(obj), sort_keys=True, indent=indent,
                      separators=(",", ": ") if indent is not None else (",", ":")) + "\n"


def _plain(obj):
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        x = round(float(obj), FLOAT_DECIMALS)
        if not np.isfinite(x):
            raise ValueError(f"cannot write a non-finite float ({x}) to JSON; check the labels")
        return x + 0.0  # turns -0.0 into 0.0
    if isinstance(obj, Path):
        return str(obj)
    return obj


def encode_depth(depth: np.ndarray) -> np.ndarray:
    """(H, W) float metres -> (H, W) uint16 in 1/256 m; non-finite or <= 0 -> 0 (none)."""
    d = np.where(np.isfinite(depth) & (depth > 0), depth, 0.0)
    return np.clip(np.round(d * 256.0), 0, 65535).astype(np.uint16)


def encode_normals(normal: np.ndarray) -> np.ndarray:
    """(H, W, 3) float in [-1, 1] -> (H, W, 3) uint8 RGB; all-zero (or NaN) normals stay (0, 0, 0).
    In place on one float32 copy, the zero test per channel (`any` over a last axis of 3 is slow):
    3x faster than the plain expression, the same bytes (an infinity clips to 0 or 255 either way)."""
    n = np.asarray(normal, dtype=np.float32)
    nan = np.isnan(n)
    if nan.any():
        n = np.where(nan, np.float32(0.0), n)
    e = n + np.float32(1.0)
    e *= np.float32(127.5)
    np.round(e, out=e)
    np.clip(e, 0, 255, out=e)
    enc = e.astype(np.uint8)
    enc[(n[..., 0] == 0) & (n[..., 1] == 0) & (n[..., 2] == 0)] = 0
    return enc


def encode_instance(instance: np.ndarray, where: str) -> np.ndarray:
    """(H, W) int track ids -> uint16; raises if an id does not fit."""
    if instance.size and (instance.min() < 0 or instance.max() > 65535):
        raise ValueError(f"{where}: instance ids must lie in 0..65535, got {instance.min()}..{instance.max()}; "
                         "renumber the track ids")
    return instance.astype(np.uint16)


class DatasetWriter:
    """Writes one dataset into `ROOT.tmp-<pid>` and renames it to `ROOT` on a clean exit.

    `meta` holds every dataset.json key but "scenes" (`format`/`version` may be left out); the
    writer adds "scenes" = [{"name", "num_frames"}] in the order `write_scene` was first called.
    At close every scene's written frame dirs must equal the dirs listed in its scene.json.
    """

    def __init__(self, out_root: str | os.PathLike, meta: dict):
        self.root = Path(out_root)
        self.tmp = temp_path(self.root)
        meta = {"format": FORMAT, "version": VERSION, **meta}
        missing = [k for k in META_KEYS if k not in meta]
        if missing:
            raise ValueError(f"dataset meta is missing {missing}; give every dataset.json key but 'scenes'")
        if "scenes" in meta:
            raise ValueError("dataset meta must not contain 'scenes'; the writer fills it in")
        if (meta["format"], meta["version"]) != (FORMAT, VERSION):
            raise ValueError(f"this writer writes {FORMAT} version {VERSION}, not {meta['format']} {meta['version']}")
        self.meta = meta
        self.cameras = {name: (h, w) for name, (w, h) in camera_sizes(meta["rig"], "dataset meta rig").items()}  # (H, W)
        b = meta["bev"]
        self.bev_shape = (3, round((b["x_range"][1] - b["x_range"][0]) / b["resolution"]),
                          round((b["y_range"][1] - b["y_range"][0]) / b["resolution"]))
        self._scenes: dict[str, list[str]] = {}  # scene name -> frame dirs listed in scene.json
        self._written: dict[str, list[str]] = {}  # scene name -> frame dirs written
        self._open = False
        self._attached = False  # `attach`: writes into another writer's temp folder
        self._pending = None  # a frame of write_frame(wait=False) still encoding

    # -- context -------------------------------------------------------------------------
    def __enter__(self) -> "DatasetWriter":
        if self._attached:
            raise RuntimeError("an attached DatasetWriter is not opened or closed; its parent's writer is")
        if self.root.exists():
            raise DatasetWriteError(f"{self.root} exists; pass another --out or delete it")
        try:
            if self.tmp.exists():  # left by an earlier process with our pid
                shutil.rmtree(self.tmp)
            (self.tmp / "scenes").mkdir(parents=True)
        except OSError as e:
            raise DatasetWriteError(f"cannot write to {self.root.parent}: {e.strerror or e}; choose a writable --out") from None
        self._open = True
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                self._finish()
            except BaseException:
                self._abort()
                raise
        else:
            self._abort()
        return False  # re-raise any exception

    def _abort(self) -> None:
        self._open = False
        if self._pending is not None:  # its encodings write nothing; let none run on
            _stop(self._pending[2])
            self._pending = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _finish(self) -> None:
        self.flush()
        scenes = []
        for name, dirs in self._scenes.items():
            written = self._written[name]
            if sorted(written) != sorted(dirs):
                raise ValueError(f"scene {name}: frames written {sorted(written)} differ from the frames of its "
                                 f"scene.json {sorted(dirs)}; write every listed frame")
            scenes.append({"name": name, "num_frames": len(dirs)})
        _write(self.tmp / "dataset.json", to_json({**self.meta, "scenes": scenes}))
        if self.root.exists():
            raise DatasetWriteError(f"{self.root} appeared while writing; pass another --out or delete it")
        try:
            os.replace(self.tmp, self.root)
        except OSError as e:
            raise _write_error(self.root, e) from None
        self._open = False

    # -- content -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeError("DatasetWriter is not open; use it as `with DatasetWriter(...) as w:`")

    def write_scene(self, scene_meta: dict) -> None:
        """Write scenes/<name>/scene.json ({"name", "seed", "conditions", "frames"}); may be called again to update it."""
        self.flush()
        name = check_name(str(scene_meta["name"]), "scene", "write_scene", ValueError)
        dirs = [check_name(str(f["dir"]), "frame dir", f"scene {name}", ValueError) for f in scene_meta["frames"]]
        if len(set(dirs)) != len(dirs):
            raise ValueError(f"scene {name}: frame dirs must be unique")
        folder = self.tmp / "scenes" / name
        _mkdir(folder, exist_ok=True)
        _write(folder / "scene.json", to_json(scene_meta))
        self._scenes[name] = dirs
        self._written.setdefault(name, [])

    def write_frame(self, scene_name: str, frame: dict, wait: bool = True) -> None:
        """Write one frame folder: five images per camera, bev.png and labels.json.

        frame = {"dir": "000000", "cameras": {name: {"rgb", "depth", "normal", "semantic", "instance"}},
                 "bev": uint8 (3, X, Y), "labels": dict}

        The cameras are encoded in threads (OpenCV and numpy release the GIL) while bev.png and labels.json
        are encoded here; files are written in one order, errors raised in one order (cameras first).
        `wait=False`: return while the cameras encode; the files are written, and an error raised, by the
        writer's next call (or `flush()`, or the end of the `with`). The caller must not change the frame's
        arrays until then (sim.generate renders each frame into new arrays).
        """
        self.flush()
        if scene_name not in self._scenes:
            raise ValueError(f"unknown scene '{scene_name}'; call write_scene first")
        folder = self.tmp / "scenes" / scene_name / check_name(str(frame["dir"]), "frame dir", f"scene {scene_name}", ValueError)
        where = f"{scene_name}/{frame['dir']}"
        if set(frame["cameras"]) != set(self.cameras):
            raise ValueError(f"{where}: cameras {sorted(frame['cameras'])} differ from the rig's {sorted(self.cameras)}")
        _mkdir(folder)
        jobs = [_encoders().submit(_encode_camera, folder, cam, frame["cameras"][cam], h, w, f"{where} {cam}")
                for cam, (h, w) in self.cameras.items()]
        try:  # an error here comes after the cameras' (their order): raised by flush
            bev = np.asarray(frame["bev"])
            _check(bev, self.bev_shape, np.uint8, f"{where} bev")
            bev_png = _encode(folder / "bev.png", cv2.cvtColor(np.ascontiguousarray(bev.transpose(1, 2, 0)),
                                                               cv2.COLOR_RGB2BGR), _PNG)
            extra, late = [(folder / "bev.png", bev_png), (folder / "labels.json", to_json(frame["labels"], indent=None))], None
        except Exception as e:  # noqa: BLE001 - raised by flush, after the cameras' errors
            extra, late = [], e
        self._pending = (scene_name, str(frame["dir"]), jobs, extra, late)
        if wait:
            self.flush()

    def flush(self) -> None:
        """Write the frame `write_frame(..., wait=False)` left encoding (a no-op when there is none)."""
        self._check_open()
        if self._pending is None:
            return
        scene_name, frame_dir, jobs, extra, late = self._pending
        self._pending = None
        try:
            for job in jobs:
                for path, data in job.result():
                    _write(path, data)
        finally:
            _stop(jobs)
        if late is not None:
            raise late
        for path, data in extra:
            _write(path, data)
        self._written[scene_name].append(frame_dir)

    def add_frame_files(self, scene_name: str, frame_dir: str, files: dict[str, Path], labels: dict) -> int:
        """Write one frame folder from existing files ({file name: source path}, each hard-linked, or
        copied where a link cannot be made) and `labels` as its labels.json: a dataset assembled from
        other datasets' frames (data_engine/retrain.py). Returns how many files were copied."""
        self.flush()
        if scene_name not in self._scenes:
            raise ValueError(f"unknown scene '{scene_name}'; call write_scene first")
        folder = self.tmp / "scenes" / scene_name / check_name(str(frame_dir), "frame dir", f"scene {scene_name}", ValueError)
        _mkdir(folder)
        copied = 0
        for name, src in sorted(files.items()):
            dst = folder / check_name(name, "file", f"{scene_name}/{frame_dir}", ValueError)
            try:
                os.link(src, dst)
            except FileNotFoundError:
                raise DatasetWriteError(f"{src} is missing; the source dataset lost this file (regenerate it)") from None
            except OSError:  # another filesystem, or links not allowed: copy
                try:
                    shutil.copyfile(src, dst)
                except OSError as e:
                    raise _write_error(dst, e) from None
                copied += 1
        _write(folder / "labels.json", to_json(labels, indent=None))
        self._written[scene_name].append(str(frame_dir))
        return copied

    # -- worker processes (sim.generate's `workers`) ----------------------------------------
    def part(self) -> dict:
        """What another process needs to write whole scenes into this writer's temp folder (`DatasetWriter.attach`)."""
        self._check_open()
        return {"tmp": str(self.tmp), "meta": self.meta}

    @classmethod
    def attach(cls, part: dict) -> "DatasetWriter":
        """A writer, in a worker process, into the temp folder of the parent's open writer (`part()`). It writes
        scenes and frames with the same checks and encodings, never renames or removes the folder (the parent's
        writer does, as one run); the parent records what it wrote with `adopt(w.written())`."""
        w = cls(part["tmp"] + ".part", part["meta"])  # the root is never used: no rename, no exists check
        w.tmp, w._open, w._attached = Path(part["tmp"]), True, True
        return w

    def written(self) -> dict:
        """{scene name: {"dirs": frame dirs of its scene.json, "written": frame dirs written}} in write_scene order."""
        self.flush()
        return {n: {"dirs": list(d), "written": list(self._written[n])} for n, d in self._scenes.items()}

    def adopt(self, written: dict) -> None:
        """Record scenes an attached writer wrote into this writer's temp folder (`written()`), in the order given;
        a scene name written twice is refused. dataset.json lists scenes in adoption order."""
        self._check_open()
        for name, d in written.items():
            name = check_name(str(name), "scene", "adopt", ValueError)
            if name in self._scenes:
                raise ValueError(f"scene {name} is written twice; give every scene its own name")
            self._scenes[name] = list(d["dirs"])
            self._written[name] = list(d["written"])


_ENCODER_POOL = None


def _encoders():
    """This process's threads encoding cameras (one per CPU, at most 4), made on first use."""
    global _ENCODER_POOL
    if _ENCODER_POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _ENCODER_POOL = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="sim-encode")
    return _ENCODER_POOL


def _stop(jobs: list) -> None:
    """Cancel the encodings not started and wait for the running ones (none is left running)."""
    for job in jobs:
        job.cancel() or job.exception()


def _encode_camera(folder: Path, cam: str, images: dict, h: int, w: int, where: str) -> list[tuple[Path, bytes]]:
    """The five files of one camera, checked and encoded: [(path, bytes)] (docs/dataset_format.md)."""
    rgb, depth, normal = (np.asarray(images[k]) for k in ("rgb", "depth", "normal"))
    semantic, instance = np.asarray(images["semantic"]), np.asarray(images["instance"])
    _check(rgb, (h, w, 3), np.uint8, f"{where} rgb")
    _check(depth, (h, w), None, f"{where} depth")
    _check(normal, (h, w, 3), None, f"{where} normal")
    _check(semantic, (h, w), np.uint8, f"{where} semantic")
    _check(instance, (h, w), None, f"{where} instance")
    files = [(folder / f"{cam}.jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), _JPEG),
             (folder / f"{cam}.depth.png", encode_depth(depth), _PNG),
             (folder / f"{cam}.normal.png", cv2.cvtColor(encode_normals(normal), cv2.COLOR_RGB2BGR), _PNG),
             (folder / f"{cam}.semantic.png", semantic, _PNG),
             (folder / f"{cam}.instance.png", encode_instance(instance, where), _PNG)]
    return [(path, _encode(path, img, params)) for path, img, params in files]


def _check(a: np.ndarray, shape: tuple, dtype, where: str) -> None:
    if a.shape != tuple(shape) or (dtype is not None and a.dtype != dtype):
        want = f"{np.dtype(dtype).name} " if dtype is not None else ""
        raise ValueError(f"{where}: expected {want}{tuple(shape)}, got {a.dtype} {a.shape}")


def _encode(path: Path, img: np.ndarray, params: list) -> bytes:
    ok, buf = cv2.imencode(path.suffix, img, params)
    if not ok:
        raise DatasetWriteError(f"cannot encode {path}; check the image dtype and shape")
    return buf.tobytes()


def _write_error(path: Path, e: OSError) -> DatasetWriteError:
    why = (e.strerror or str(e)).lower()
    return DatasetWriteError(f"cannot write {path}: {why}; free space or choose another --out (the partial dataset "
                             "is removed)")


def _write(path: Path, data: str | bytes) -> None:
    """Write one file; an OSError (a full disk, a read-only folder) becomes one DatasetWriteError line naming
    the file. The writer's __exit__ then removes the whole temp folder, partial file included."""
    try:
        if isinstance(data, str):
            path.write_text(data)
        else:
            path.write_bytes(data)
    except OSError as e:
        raise _write_error(path, e) from None


def _mkdir(path: Path, exist_ok: bool = False) -> None:
    try:
        path.mkdir(exist_ok=exist_ok)
    except FileExistsError:
        raise
    except OSError as e:
        raise _write_error(path, e) from None
