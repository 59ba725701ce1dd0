"""Shadow mode: the deployed ONNX model (and optionally a candidate that never drives) over every
clip of a fleet in scene order, per-frame signals into the catalog.

    hydranet engine shadow --onnx model.onnx --data DIR --catalog CAT [--candidate-onnx other.onnx]
                           [--executor local|ray] [--workers N] [--ray-address ADDR]

Car-side code only: `deploy.runtime.HydraRuntime` (numpy + onnxruntime), the stream runner
`hydranet.stream.stream` carrying the video state through each clip, `data_engine.signals`. No
torch, no sim renderer. One clip is one task: workers compute a clip's rows, the parent writes each
clip in one catalog transaction with its done marker, so a kill at any moment loses at most the
clips in flight and a rerun skips finished ones (a pool worker ends with its driver, kill -9
included; a worker killed alone stops the run with one line once the clips done are committed).
Workers: a local process pool (`spawn`, default), or Ray Data (`map_batches` over one clip per row,
an actor pool whose actors each hold their ONNX Runtime sessions with intra-op threads = the actor's
CPUs, so actors do not oversubscribe).
A frame whose image is missing or corrupt is recorded with status "corrupt" and its error, and the
video state restarts after it (the gap breaks the stream). A model (or candidate) whose outputs hold
NaN or Inf on a clip makes the whole clip bad: every frame is recorded with status "bad" and the
error naming the output, frame and camera, with no signals, predictions or embeddings (never signals
of 0, never mined); the clip is done (the same model gives the same outputs) and counted, and a run
that holds bad clips ends with `BadClipsError` ("3 of 3 clips bad: output det2d.heatmap non-finite
...") after every clip is written, on a rerun too.

Search by image (`hydranet engine similar --image`) is data_engine/similar.py.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from data_engine.fleet import Fleet, read_frame
from data_engine.lake import write_frames_part
from data_engine.lake_catalog import lake_ref, part_ready
from data_engine.signals import ClipState, ModelInfo, frame_signals
from hydranet.io import exclusive_lock
from hydranet.stream import VideoState, stream

EXECUTORS = ("local", "ray")
BAD = "bad"  # the status of every frame of a clip on which a model gave non-finite outputs
_RUNTIMES: dict[tuple[str, int | None, tuple[str, ...] | None], Any] = {}


class ShadowError(ValueError):
    """Shadow mode cannot run as asked; one line saying what to do."""


class BadClipsError(ShadowError):
    """A shadow run holding clips on which a model gave non-finite outputs. Raised after every clip is
    written; `stats` is what `run_shadow` would have returned."""

    def __init__(self, message: str, stats: dict[str, Any]):
        super().__init__(message)
        self.stats = stats


class _BadClip(Exception):
    """Inside `shadow_clip`: a model's outputs on this frame are non-finite; the clip is bad."""


def load_runtime(path: str | Path, threads: int | None = None, cameras: tuple[str, ...] | None = None):
    """A cached HydraRuntime of this process (one ONNX Runtime session per model, camera subset and worker)."""
    from deploy.runtime import HydraRuntime

    key = (str(path), threads, cameras)
    if key not in _RUNTIMES:
        _RUNTIMES[key] = HydraRuntime(path, threads=threads, cameras=cameras)
    return _RUNTIMES[key]


def runtime_for_fleet(path: str | Path, fleet: Fleet, threads: int | None = None, load=load_runtime):
    """(runtime, its camera subset or None) of model `path` on `fleet`, checked (`Fleet.check_rig`) and taking the
    fleet's camera sizes. A fleet with only some of the model's cameras (a one-camera dashcam under a six-camera
    HydraNet) runs the camera heads there (`HydraRuntime(cameras=)`; `subset_line()` says which BEV heads are not
    run); a model without camera heads, or no camera in common, is a FleetError naming the camera it lacks.
    `load(path, threads, cameras)`: the runtime (default: this process's cached one)."""
    from data_engine.fleet import FleetError
    from deploy.runtime import DeployError

    from hydranet.rig import camera_subset

    rt = load(path, threads, None)
    subset = camera_subset(rt.camera_names, fleet.cameras)
    cameras = tuple(subset) if subset else None
    if cameras:
        try:
            rt = load(path, threads, cameras)
        except DeployError:  # no camera head: every head reads every camera
            lacks = next(n for n in rt.camera_names if n not in fleet.cameras)
            raise FleetError(f"fleet {fleet.root} (cameras {sorted(fleet.cameras)}) lacks camera {lacks} of model {path}, "
                             f"whose heads ({', '.join(rt.heads)}) read every camera and which has no camera head to run "
                             "on the others; run it on a fleet of its own rig") from None
    fleet.check_rig(rt.rig, str(path), bev=rt.runs_bev)
    rt.allow_sizes(fleet.cameras, any_size=not rt.runs_bev)  # no view transform: each image resized, whatever its size
    return rt, cameras


def check_model(rt, role: str = "--onnx") -> None:
    if not (rt.meta.get("embedding") or {}).get("output") or "embedding" not in rt.output_names:
        raise ShadowError(f"{role} {rt.path} has no 'embedding' output; re-export it with `hydranet export` (metadata "
                          "version 2 adds it: diversity and similarity search need it)")


def _predictions(decoded: Mapping[str, list], n_cams: int) -> dict:
    """What the catalog keeps of a frame's decoded results: each registered head's
    `HeadSpec.predictions` (det2d per camera, det3d per frame; heads returning None are not kept)."""
    from hydranet.heads import HEADS

    out: dict[str, Any] = {}
    for name, spec in HEADS.items():
        kept = spec.predictions(decoded[name], n_cams) if name in decoded else None
        if kept is not None:
            out[name] = kept
    return out


def shadow_clip(task: Mapping[str, Any]) -> dict[str, Any]:
    """Rows of one clip. task: {"root", "clip", "clip_id", "frames": [{"index", "dir", "timestamp_us",
    "ego2world", "frame_id"}], "model", "candidate" (or None), "threads"}."""
    from deploy.runtime import NonFiniteOutput
    from hydranet.decoding import NonFiniteError

    rt = load_runtime(task["model"], task.get("threads"), task.get("cameras"))
    cand = load_runtime(task["candidate"], task.get("threads"), task.get("candidate_cameras")) \
        if task.get("candidate") else None
    for r in (rt, cand):  # the fleet's camera sizes, checked by Fleet.check_rig to be each model's calibration
        if r is not None:
            r.allow_sizes(task.get("sizes") or {}, any_size=not r.runs_bev)
    info = ModelInfo.from_runtime(rt)
    cams = rt.camera_names
    state, cand_video = ClipState(), VideoState()
    rt.reset()

    def frames() -> Iterator[dict]:
        for f in task["frames"]:
            try:
                images, error = read_frame(task["root"], task["clip"], f["dir"], cams), None
            except ValueError as e:
                images, error = None, str(e)
            yield {**f, "scene": task["clip"], "images": images, "error": error}

    def run(model, role: str, feeds: dict, frame) -> dict:
        try:
            return model.run(feeds)  # raw outputs, checked finite
        except NonFiniteOutput as e:
            cam = f", camera {e.camera}" if e.camera else ""
            raise _BadClip(f"output {e.output} non-finite ({e.value}) at frame {frame['index']}{cam} of {role} "
                           f"{model.path}") from None

    def step(frame, prev_bev, ego_motion):
        if frame["images"] is None:
            return None, None
        x = rt.preprocess(frame["images"])
        raw = run(rt, "--onnx", rt.feeds(x, prev_bev, ego_motion), frame)
        out = {"raw": raw, "decoded": rt.decode(raw, checked=True)}
        if cand is not None:
            cx = cand.preprocess(frame["images"])
            cprev, cmotion = cand_video.inputs(frame["ego2world"], frame["scene"]) if cand.state_spec and posed \
                else (None, None)
            craw = run(cand, "--candidate-onnx", cand.feeds(cx, cprev, cmotion), frame)
            if cand.state_spec and posed:
                cand_video.update(cand.state_output(craw), frame["ego2world"], frame["scene"])
            out["candidate"] = {"raw": craw, "decoded": cand.decode(craw, checked=True)}
        return out, rt.state_output(raw)

    rows = []
    # the video memory is aligned by ego motion: a clip recorded without poses runs every frame from an empty queue
    posed = all(f.get("ego2world") is not None for f in task["frames"])
    try:
        for frame, out in stream(frames(), step, video=rt.state_spec is not None and posed):
            row: dict[str, Any] = {"frame_id": frame["frame_id"], "status": "ok", "error": None}
            if out is None:
                row.update(status="corrupt", error=frame["error"])
                state.reset()
                cand_video.reset()
            else:
                try:
                    sig, per_cam = frame_signals(info, out["raw"], out["decoded"], frame["ego2world"],
                                                 frame["timestamp_us"], state, out.get("candidate"))
                except NonFiniteError as e:  # outputs `run` checked already: only a runtime that did not check
                    raise _BadClip(f"{e} at frame {frame['index']}") from None
                row.update(signals=sig, per_camera=per_cam, predictions=_predictions(out["decoded"], len(cams)),
                           embedding=np.asarray(out["raw"]["embedding"], np.float32)[:len(cams)])
            rows.append(row)
    except _BadClip as e:  # nothing of the clip is kept: the video state carried the bad outputs on
        return {"clip_id": task["clip_id"], "bad": str(e),
                "rows": [{"frame_id": f["frame_id"], "status": BAD, "error": str(e)} for f in task["frames"]]}
    return {"clip_id": task["clip_id"], "bad": None, "rows": rows}


def shadow_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """`shadow_clip`, and on a lake catalog (task "lake") the clip's part written here, by the worker, atomically:
    the driver then gets only the summary ({"clip_id", "bad", "part", "frames", "corrupt"}) and commits the marker."""
    res = shadow_clip(task)
    if not task.get("lake"):
        return res
    idx = {int(f["frame_id"]): int(f["index"]) for f in task["frames"]}
    return {"clip_id": res["clip_id"], "bad": res["bad"],
            **write_frames_part(task["lake"], task["clip_id"], task["clip"], idx, res["rows"])}


def _init_worker(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    _exit_with_driver()


def _exit_with_driver() -> None:
    """A pool worker ends the moment its driver is gone (kill -9 included): a thread waits on the spawn pipe the
    driver holds open (`multiprocessing.parent_process().sentinel`, at EOF when the driver dies). An orphaned
    worker otherwise lived on: it finished its clip and the ones queued to it, writing parts no driver commits
    (next to a rerun's workers, over the parts they wrote), then waited for work forever. A temp it leaves is
    removed by the rerun (its pid is gone)."""
    import multiprocessing as mp
    import threading
    from multiprocessing.connection import wait

    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="shadow-driver-watch", daemon=True).start()


def run_shadow(model: str | Path, fleet: str | Path, catalog: str | Path, candidate: str | Path | None = None,
               executor: str = "local", workers: int | None = None, progress: bool = True,
               ray_address: str | None = None) -> dict[str, int]:
    """`_run_shadow` while holding CATALOG.lock: two shadows writing one catalog are refused, naming the holder."""
    if Path(catalog).parent.is_dir():
        with exclusive_lock(f"{catalog}.lock", f"catalog {catalog}", ShadowError):
            return _run_shadow(model, fleet, catalog, candidate, executor, workers, progress, ray_address)
    return _run_shadow(model, fleet, catalog, candidate, executor, workers, progress, ray_address)


def _fleet_runtime(model: str | Path, fl: Fleet, role: str):
    """`runtime_for_fleet` of a model shadow mode runs (checked to have the embedding output)."""
    rt, cameras = runtime_for_fleet(str(model), fl)
    check_model(rt, role)
    return rt, cameras


def _run_shadow(model: str | Path, fleet: str | Path, catalog: str | Path, candidate: str | Path | None = None,
                executor: str = "local", workers: int | None = None, progress: bool = True,
                ray_address: str | None = None) -> dict[str, int]:
    """Shadow `model` over every clip of `fleet` not yet done for this (model, candidate, fleet);
    returns {"run_id", "clips", "done_before", "frames", "corrupt" (frames whose images could not be read), "notes"
    (a line per model running on a subset of its cameras: the BEV heads not run),
    "bad_clips", "bad" ([(clip, error)]: clips on which a model gave non-finite outputs)}, or raises
    `BadClipsError` (carrying those stats) after writing every clip when the run holds bad clips.
    `ray_address`: with executor "ray", the cluster to join (else $RAY_ADDRESS, else a local instance
    of `workers` CPUs)."""
    from tqdm import tqdm

    if executor not in EXECUTORS:
        raise ShadowError(f"unknown --executor {executor!r}; choose one of {list(EXECUTORS)}")
    if executor == "ray":
        _import_ray()
    elif ray_address is not None:
        raise ShadowError("--ray-address goes with --executor ray")
    if workers is not None and workers < 1:
        raise ShadowError(f"--workers must be at least 1, got {workers}")
    fl = Fleet(fleet)
    model = Path(model).resolve()  # workers (other processes, Ray actors) may start elsewhere
    candidate = Path(candidate).resolve() if candidate is not None else None
    rt, cameras = _fleet_runtime(model, fl, "--onnx")
    cand, cand_cameras = _fleet_runtime(candidate, fl, "--candidate-onnx") if candidate is not None else (None, None)
    if cand is not None and cand.camera_names != rt.camera_names:
        raise ShadowError(f"--candidate-onnx {candidate} runs on cameras {cand.camera_names} of fleet {fl.root}, --onnx "
                          f"{model} on {rt.camera_names}: compare models of one rig")
    notes = [r.subset_line() for r in (rt, cand) if r is not None and r.subset_line()]  # printed by the caller
    workers = workers or max(1, os.cpu_count() or 1)
    threads = max(1, (os.cpu_count() or 1) // workers)
    with Catalog(catalog, create=True) as cat:
        model_id = cat.add_model(model, rt.meta)
        cand_id = cat.add_model(candidate, cand.meta) if cand is not None else None
        fleet_id, clip_ids, frame_ids = cat.add_fleet(fl)
        run_id = cat.add_run(model_id, cand_id, fleet_id)
        if cat.lake is not None:  # parts a killed run wrote before its driver committed them: committed, not recomputed
            cat.lake.remove_stale(run_id)
            for name in fl.clip_names:
                if clip_ids[name] not in cat.done_clips(run_id) and part_ready(cat.lake, run_id, clip_ids[name]):
                    cat.commit_clip(run_id, clip_ids[name])
        done = cat.done_clips(run_id)
        tasks = []
        for name in fl.clip_names:
            if clip_ids[name] in done:
                continue
            clip = fl.clip(name)
            tasks.append({"root": str(fl.root.resolve()), "clip": name, "clip_id": clip_ids[name], "model": str(model),
                          "sizes": fl.cameras, "cameras": cameras, "candidate_cameras": cand_cameras,
                          "candidate": str(candidate) if candidate else None, "threads": threads,
                          "lake": lake_ref(cat.lake, run_id) if cat.lake is not None else None,
                          "frames": [{**f, "frame_id": frame_ids[(name, f["index"])]} for f in clip.frames]})
        stats = {"run_id": run_id, "clips": len(fl.clip_names), "done_before": len(done), "frames": 0, "corrupt": 0,
                 "bad_clips": 0, "bad": [], "notes": notes}
        bar = tqdm(total=len(tasks), desc="engine shadow", unit="clip", disable=not progress)
        for res in _execute(tasks, executor, workers, threads, ray_address, quiet=not progress):
            if "part" in res:  # a lake: the worker wrote the part, the parent commits the done marker only
                cat.commit_clip(run_id, res["clip_id"])
                stats["frames"] += res["frames"]
                stats["corrupt"] += 0 if res["bad"] else res["corrupt"]
            else:
                cat.write_clip(run_id, res["clip_id"], res["rows"])  # one clip, one transaction, in the parent only
                stats["frames"] += len(res["rows"])
                stats["corrupt"] += sum(r["status"] == "corrupt" for r in res["rows"])
            bar.update(1)
        bar.close()
        if cat.lake is not None:  # every full block of done clip parts gathered: queries pay per file
            stats["compacted"] = cat.compact(run_id)
        stats["bad"] = bad_clips(cat, run_id)  # the run's, clips done before included: a rerun says it again
        stats["bad_clips"] = len(stats["bad"])
    if stats["bad"]:
        clip, why = stats["bad"][0]
        raise BadClipsError(f"shadow run {run_id} of {catalog}: {len(stats['bad'])} of {stats['clips']} clip(s) bad: {why} "
                            f"(clip {clip}{', the first' if len(stats['bad']) > 1 else ''}); their frames are recorded with "
                            f"status '{BAD}' and no signals, never mined; the model is broken (a NaN or Inf weight, or an "
                            "overflow): export it again from a good checkpoint", stats)
    return stats


def bad_clips(cat: Catalog, run_id: int) -> list[tuple[str, str]]:
    """(clip name, error) of every clip of a shadow run on which a model gave non-finite outputs, by name."""
    got = cat.rows(run_id, ["clip", "error"], status=BAD)
    first: dict[str, str] = {}
    for c, e in zip(got["clip"], got["error"]):
        first[str(c)] = min(first.get(str(c), str(e)), str(e))
    return sorted(first.items())


def _execute(tasks: list[dict], executor: str, workers: int, threads: int, ray_address: str | None = None,
             quiet: bool = False) -> Iterator[dict]:
    if not tasks:
        return
    if executor == "ray":
        yield from _execute_ray(tasks, workers, ray_address, quiet)
        return
    if workers <= 1 or len(tasks) == 1:  # in this process; the next clip runs while the parent writes this one
        yield from _ahead(shadow_task(t) for t in tasks)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=mp.get_context("spawn"),
                             initializer=_init_worker, initargs=(threads,)) as pool:
        futures = [pool.submit(shadow_task, t) for t in tasks]
        lost = 0
        for fut in as_completed(futures):
            try:
                res = fut.result()
            except BrokenProcessPool:  # a worker was killed: the clips that finished are still yielded (committed)
                lost += 1
                continue
            yield res
    if lost:
        raise ShadowError(f"a shadow worker process died (killed, or out of memory): {lost} of {len(tasks)} clip(s) of this "
                          "run were not committed; the clips done are kept: rerun the same command to shadow the rest")


def _ahead(results: Iterator[dict]) -> Iterator[dict]:
    """`results` computed one item ahead in a thread: ONNX Runtime and numpy release the GIL, so clip
    k+1 runs while the caller writes clip k (SQLite also releases it). An error in the thread is raised
    here, in order; a consumer that stops early stops the thread after its current clip."""
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()
    end = object()

    def work() -> None:
        try:
            for r in results:
                q.put(r)
                if stop.is_set():
                    return
            q.put(end)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer thread
            q.put(e)

    th = threading.Thread(target=work, name="shadow-ahead", daemon=True)
    th.start()
    try:
        while True:
            r = q.get()
            if r is end:
                return
            if isinstance(r, BaseException):
                raise r
            yield r
    finally:
        stop.set()
        while th.is_alive():  # unblock a put() waiting on a full queue
            try:
                q.get(timeout=0.1)
            except queue.Empty:
                pass
        th.join()


# -- Ray Data ----------------------------------------------------------------------------------------
def _import_ray():
    try:
        import ray
        import ray.data  # noqa: F401 - needs pyarrow and pandas: the [data] extra
    except ImportError as e:
        raise ShadowError(f"--executor ray needs Ray Data ({e}): pip install 'ray[data]' (or pip install "
                          "'hydranet-stack[ray]'), or use --executor local") from None
    return ray


class ShadowActor:
    """One Ray actor: its own ONNX Runtime sessions (intra-op threads = its CPUs), created once and
    reused for every clip it is given. `__call__` takes a batch of rows {"clip_id", "task"} (one clip a
    row, the task pickled) and returns {"clip_id", "result"} (the clip's rows, pickled)."""

    def __init__(self, model: str, candidate: str | None, threads: int, cameras: tuple[str, ...] | None = None,
                 candidate_cameras: tuple[str, ...] | None = None):
        os.environ["OMP_NUM_THREADS"] = str(threads)
        self.threads = threads
        check_model(load_runtime(model, threads, cameras))  # the sessions shadow_clip uses (a camera subset's)
        if candidate:
            check_model(load_runtime(candidate, threads, candidate_cameras), "--candidate-onnx")

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = []
        for blob in batch["task"]:  # whole clips, each in scene order inside shadow_clip
            results.append(pickle.dumps(shadow_task({**pickle.loads(blob), "threads": self.threads})))
        return {"clip_id": np.asarray(batch["clip_id"]), "result": np.asarray(results, dtype=object)}


def _actor_class(model: str, candidate: str | None, threads: int, cameras: tuple[str, ...] | None = None,
                 candidate_cameras: tuple[str, ...] | None = None) -> type:
    """ShadowActor bound to its models (the class travels to the actors by value, with cloudpickle)."""
    class BoundShadowActor(ShadowActor):
        def __init__(self):
            super().__init__(model, candidate, threads, cameras, candidate_cameras)

    return BoundShadowActor


def ray_init(workers: int, address: str | None = None, quiet: bool = False) -> bool:
    """Connect to `address` (or $RAY_ADDRESS) or start a local instance of `workers` CPUs; True when this
    call started it (the caller shuts it down). Ray's Python loggers show errors only (`quiet`: nothing
    below CRITICAL); the workers' output stays in the session's log files (log_to_driver=False)."""
    import logging

    ray = _import_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    level = logging.CRITICAL if quiet else logging.ERROR
    opts = {"include_dashboard": False, "log_to_driver": False, "logging_level": level}
    if address:
        ray.init(address=address, **opts)
    else:
        ray.init(num_cpus=workers, **opts)
    logging.getLogger("ray.data").setLevel(level)  # no per-dataset INFO lines or notes in the CLI output
    return True


# Ray's C++ log line ([2026-12-02 14:10:59,582 E 11609 11609] core_worker.cc:2465: ...): the driver's core worker
# writes its ERROR lines (e.g. "... max_restarts > 0 ... the actor restart will fail") to fd 2, past Python's logging
RAY_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [DIWEF] \d+ \d+\] [\w./-]+:\d+: ")


@contextlib.contextmanager
def without_ray_log_lines(enabled: bool = True) -> Iterator[None]:
    """With `enabled`: fd 2 goes to a temporary file for the block, and what it received is written back
    to stderr afterwards without Ray's C++ log lines (everything else, e.g. a Python warning, is kept)."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode(errors="replace").splitlines(keepends=True) if not RAY_LOG_LINE.match(ln)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def _execute_ray(tasks: list[dict], workers: int, address: str | None = None, quiet: bool = False) -> Iterator[dict]:
    """`_ray_results` with, when `quiet` (`--quiet`), Ray's own log lines kept off stderr."""
    with without_ray_log_lines(quiet):
        yield from _ray_results(tasks, workers, address, quiet)


def _ray_results(tasks: list[dict], workers: int, address: str | None = None, quiet: bool = False) -> Iterator[dict]:
    """Ray Data: one row per clip (`override_num_blocks` = clips, so clips spread over the actors),
    `map_batches(ShadowActor, batch_size=1)` on an actor pool of `workers` actors of 1 CPU each (on a
    cluster: its CPUs), results streamed back to the parent as clips finish. Ray Data's defaults stay:
    a crashed actor is restarted and its clip retried (clips are deterministic, and only the parent
    writes); Ray logs one line per actor that its arguments live in its object store (not under `quiet`)."""
    ray = _import_ray()
    started = ray_init(workers, address, quiet)
    try:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        cpus = int(ray.cluster_resources().get("CPU", workers))
        size = max(1, min(len(tasks), workers if not address and not os.environ.get("RAY_ADDRESS") else cpus))
        ds = ray.data.from_items([{"clip_id": t["clip_id"], "task": pickle.dumps(t)} for t in tasks],
                                 override_num_blocks=len(tasks))
        ds = ds.map_batches(_actor_class(tasks[0]["model"], tasks[0]["candidate"], 1, tasks[0]["cameras"],
                                        tasks[0]["candidate_cameras"]), batch_size=1,
                            compute=ray.data.ActorPoolStrategy(size=size), num_cpus=1, batch_format="numpy")
        for row in ds.iter_rows():
            yield pickle.loads(row["result"])
    finally:
        if started:
            ray.shutdown()
