"""Shadow mode: the deployed ONNX model (and optionally a candidate that never drives) over every
clip of a fleet in scene order, per-frame signals into the catalog.

    hydranet engine shadow --model model.onnx --fleet DIR --catalog CAT [--candidate other.onnx]
                           [--executor local|ray] [--workers N]

Car-side code only: `deploy.runtime.HydraRuntime` (numpy + onnxruntime), the stream runner
`hydranet.stream.stream` carrying the video state through each clip, `data_engine.signals`. No
torch, no sim renderer. One clip is one task: workers (a local process pool by default, or Ray
tasks) compute a clip's rows, the parent writes each clip in one catalog transaction with its done
marker, so a kill at any moment loses at most the clips in flight and a rerun skips finished ones.
A frame whose image is missing or corrupt is recorded with status "corrupt" and its error, and the
video state restarts after it (the gap breaks the stream).
"""
from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from data_engine.fleet import Fleet, read_frame
from data_engine.signals import ClipState, ModelInfo, frame_signals
from hydranet.stream import VideoState, stream

EXECUTORS = ("local", "ray")
_RUNTIMES: dict[tuple[str, int | None], Any] = {}


class ShadowError(ValueError):
    """Shadow mode cannot run as asked; one line saying what to do."""


def load_runtime(path: str | Path, threads: int | None = None):
    """A cached HydraRuntime of this process (one ONNX Runtime session per model and worker)."""
    from deploy.runtime import HydraRuntime

    key = (str(path), threads)
    if key not in _RUNTIMES:
        _RUNTIMES[key] = HydraRuntime(path, threads=threads)
    return _RUNTIMES[key]


def check_model(rt, role: str = "--model") -> None:
    if not (rt.meta.get("embedding") or {}).get("output") or "embedding" not in rt.output_names:
        raise ShadowError(f"{role} {rt.path} has no 'embedding' output; re-export it with `hydranet export` (metadata "
                          "version 2 adds it: diversity and similarity search need it)")


def _predictions(decoded: Mapping[str, list], n_cams: int) -> dict:
    out: dict[str, Any] = {}
    if "det2d" in decoded:
        cams = []
        for r in decoded["det2d"][:n_cams]:
            keep = np.asarray(r["scores"]) >= 0.1
            cams.append({"boxes": np.round(np.asarray(r["boxes"])[keep], 1).tolist(),
                         "scores": np.round(np.asarray(r["scores"])[keep], 3).tolist(),
                         "labels": np.asarray(r["labels"])[keep].astype(int).tolist()})
        out["det2d"] = cams
    if "det3d" in decoded:
        r = decoded["det3d"][0]
        keep = np.asarray(r["scores"]) >= 0.1
        out["det3d"] = {"boxes": np.round(np.asarray(r["boxes"])[keep], 2).tolist(),
                        "scores": np.round(np.asarray(r["scores"])[keep], 3).tolist(),
                        "labels": np.asarray(r["labels"])[keep].astype(int).tolist()}
    return out


def shadow_clip(task: Mapping[str, Any]) -> dict[str, Any]:
    """Rows of one clip. task: {"root", "clip", "clip_id", "frames": [{"index", "dir", "timestamp_us",
    "ego2world", "frame_id"}], "model", "candidate" (or None), "threads"}."""
    rt = load_runtime(task["model"], task.get("threads"))
    cand = load_runtime(task["candidate"], task.get("threads")) if task.get("candidate") else None
    info = ModelInfo.from_metadata(rt.meta)
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

    def step(frame, prev_bev, ego_motion):
        if frame["images"] is None:
            return None, None
        x = rt.preprocess(frame["images"])
        raw = rt.run(rt.feeds(x, prev_bev, ego_motion))
        out = {"raw": raw, "decoded": rt.decode(raw)}
        if cand is not None:
            cx = cand.preprocess(frame["images"])
            cprev, cmotion = cand_video.inputs(frame["ego2world"], frame["scene"]) if cand.state_spec else (None, None)
            craw = cand.run(cand.feeds(cx, cprev, cmotion))
            if cand.state_spec:
                cand_video.update(cand.state_output(craw), frame["ego2world"], frame["scene"])
            out["candidate"] = {"raw": craw, "decoded": cand.decode(craw)}
        return out, rt.state_output(raw)

    rows = []
    for frame, out in stream(frames(), step, video=rt.state_spec is not None):
        row: dict[str, Any] = {"frame_id": frame["frame_id"], "status": "ok", "error": None}
        if out is None:
            row.update(status="corrupt", error=frame["error"])
            state.reset()
            cand_video.reset()
        else:
            sig, per_cam = frame_signals(info, out["raw"], out["decoded"], frame["ego2world"], frame["timestamp_us"], state,
                                         out.get("candidate"))
            row.update(signals=sig, per_camera=per_cam, predictions=_predictions(out["decoded"], len(cams)),
                       embedding=np.asarray(out["raw"]["embedding"], np.float32)[:len(cams)])
        rows.append(row)
    return {"clip_id": task["clip_id"], "rows": rows}


def _init_worker(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)


def run_shadow(model: str | Path, fleet: str | Path, catalog: str | Path, candidate: str | Path | None = None,
               executor: str = "local", workers: int | None = None, progress: bool = True) -> dict[str, int]:
    """Shadow `model` over every clip of `fleet` not yet done for this (model, candidate, fleet);
    returns {"clips", "done_before", "frames", "corrupt"}."""
    from tqdm import tqdm

    if executor not in EXECUTORS:
        raise ShadowError(f"unknown --executor {executor!r}; choose one of {list(EXECUTORS)}")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise ShadowError("--executor ray needs the 'ray' package: pip install 'ray[default]' (or use --executor local)")
    if workers is not None and workers < 1:
        raise ShadowError(f"--workers must be at least 1, got {workers}")
    fl = Fleet(fleet)
    rt = load_runtime(model)
    check_model(rt)
    fl.check_rig(rt.camera_names, rt.source_sizes, rt.image_size, str(model))
    cand = None
    if candidate is not None:
        cand = load_runtime(candidate)
        check_model(cand, "--candidate")
        fl.check_rig(cand.camera_names, cand.source_sizes, cand.image_size, str(candidate))
    workers = workers or max(1, os.cpu_count() or 1)
    threads = max(1, (os.cpu_count() or 1) // workers)
    with Catalog(catalog, create=True) as cat:
        model_id = cat.add_model(model, rt.meta)
        cand_id = cat.add_model(candidate, cand.meta) if cand is not None else None
        fleet_id, clip_ids, frame_ids = cat.add_fleet(fl)
        run_id = cat.add_run(model_id, cand_id, fleet_id)
        done = cat.done_clips(run_id)
        tasks = []
        for name in fl.clip_names:
            if clip_ids[name] in done:
                continue
            clip = fl.clip(name)
            tasks.append({"root": str(fl.root), "clip": name, "clip_id": clip_ids[name], "model": str(model),
                          "candidate": str(candidate) if candidate else None, "threads": threads,
                          "frames": [{**f, "frame_id": frame_ids[(name, f["index"])]} for f in clip.frames]})
        stats = {"run_id": run_id, "clips": len(fl.clip_names), "done_before": len(done), "frames": 0, "corrupt": 0}
        bar = tqdm(total=len(tasks), desc="engine shadow", unit="clip", disable=not progress)
        for res in _execute(tasks, executor, workers, threads):
            cat.write_clip(run_id, res["clip_id"], res["rows"])
            stats["frames"] += len(res["rows"])
            stats["corrupt"] += sum(r["status"] != "ok" for r in res["rows"])
            bar.update(1)
        bar.close()
    return stats


def _execute(tasks: list[dict], executor: str, workers: int, threads: int) -> Iterator[dict]:
    if not tasks:
        return
    if executor == "ray":
        yield from _execute_ray(tasks, workers)
        return
    if workers <= 1 or len(tasks) == 1:
        for t in tasks:
            yield shadow_clip(t)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=mp.get_context("spawn"),
                             initializer=_init_worker, initargs=(threads,)) as pool:
        futures = [pool.submit(shadow_clip, t) for t in tasks]
        for fut in as_completed(futures):
            yield fut.result()


def _execute_ray(tasks: list[dict], workers: int) -> Iterator[dict]:
    """One Ray task per clip on a local instance (`ray.init(num_cpus=workers)`) or the cluster named by
    RAY_ADDRESS; each worker process keeps its ONNX Runtime sessions (see load_runtime) with 1 intra-op thread."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    remote = ray.remote(num_cpus=1)(shadow_clip)
    pending = [remote.remote({**t, "threads": 1}) for t in tasks]
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        yield ray.get(ready[0])
