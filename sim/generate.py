"""`hydranet sim generate`: seeded scenes rendered into a dataset on disk (docs/dataset_format.md)."""
from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from hydranet.config import to_dict
from hydranet.rig import Rig, load_rig
from sim.classes import LANE_TYPES, OBJECT_CLASSES, SEMANTIC_CLASSES
from sim.config import DEMO_SIM, SimConfig, demo_train_sim
from sim.render import Renderer, RenderError
from sim.scene import simulate
from sim.world import LIGHT_STATES, SIGN_CLASSES, World
from sim.writer import DatasetWriter


def scene_seed(seed: int, index: int) -> int:
    """Independent seed of scene `index` of a run with `seed`."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def sim_rig(cfg: SimConfig) -> Rig:
    """The config's rig, resized if the config asks for another resolution."""
    rig = load_rig(cfg.rig)
    if cfg.image_width or cfg.image_height:
        if not (cfg.image_width > 0 and cfg.image_height > 0):
            raise ValueError("set both sim image_width and image_height (or neither)")
        rig = rig.resized(cfg.image_width, cfg.image_height)
    return rig


def render_frames(cfg: SimConfig, seed: int, n_frames: int | None = None) -> list[dict]:
    """The first `n_frames` (default cfg.frames_per_scene) frames of world `seed` in memory, as
    `sim.scene.simulate` yields them; the renderer is created and released here."""
    rig = sim_rig(cfg)
    renderer = Renderer(rig)
    try:
        return list(simulate(World(cfg, seed), rig, cfg, renderer, cfg.frames_per_scene if n_frames is None else n_frames))
    finally:
        renderer.ctx.release()


def dataset_meta(cfg: SimConfig, rig: Rig, seed: int) -> dict:
    r = cfg.bev_range
    return {
        "rig": rig.to_dict(),
        "classes": list(OBJECT_CLASSES),
        "semantic_classes": list(SEMANTIC_CLASSES),
        "sign_classes": list(SIGN_CLASSES),
        "light_states": list(LIGHT_STATES),
        "lane_types": list(LANE_TYPES),
        "bev": {"x_range": [-r, r], "y_range": [-r, r], "resolution": cfg.bev_resolution},
        "frame_rate_hz": cfg.frame_rate_hz,
        "seed": seed,
        "sim_config": to_dict(cfg),
    }


def check_workers(workers) -> int:
    """`workers` as an int >= 1 (worker processes that render whole scenes), or a one-line ValueError."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"--workers must be a whole number of processes, at least 1, got {workers!r}")
    return int(workers)


def generate_dataset(out: str | Path, cfg: SimConfig, scenes: int, seed: int, progress: bool = True,
                     workers: int = 1) -> Path:
    """Render `scenes` scenes of `cfg.frames_per_scene` frames into `out` (atomically). `workers` > 1:
    scenes are rendered by that many processes (`render_scenes`), the output byte-identical to one."""
    if scenes < 1:
        raise ValueError(f"--scenes must be at least 1, got {scenes}")
    workers = check_workers(workers)
    rig = sim_rig(cfg)
    tasks = [SceneTask(f"scene_{i:04d}", scene_seed(seed, i), cfg) for i in range(scenes)]
    with DatasetWriter(out, dataset_meta(cfg, rig, seed)) as writer, \
            tqdm(total=scenes * cfg.frames_per_scene, desc="sim generate", unit="frame", disable=not progress) as bar:
        render_scenes(writer, tasks, rig, workers, bar)
    return Path(out)


HELD_OUT_SEED = 1000  # held-out scenes of a split: world seeds this far from the training scenes


def generate_split(out: str | Path, cfg: SimConfig, scenes: int, val_scenes: int, seed: int = 0,
                   progress: bool = True, workers: int = 1, val_cfg: SimConfig | None = None) -> tuple[Path, Path]:
    """A training dataset of `scenes` scenes of `cfg` (out/sim) and held-out scenes of other world seeds (out/sim_val,
    seed + HELD_OUT_SEED) of `val_cfg` (default: `cfg`), each replaced if present, rendered by `workers` processes
    (the output byte-identical to one); returns their paths. `make demo` and its benchmarks train on
    `DEMO_TRAIN_SIM` and hold out `DEMO_SIM` (sim.config)."""
    data, val = Path(out) / "sim", Path(out) / "sim_val"
    for d in (data, val):
        if d.exists():
            shutil.rmtree(d)
    return (generate_dataset(data, cfg, scenes, seed, progress=progress, workers=workers),
            generate_dataset(val, cfg if val_cfg is None else val_cfg, val_scenes, seed + HELD_OUT_SEED, progress=False, workers=workers))


def generate_demo_split(out: str | Path, scenes: int, val_scenes: int, seed: int = 0, sim_set: Sequence[str] = (),
                        progress: bool = True, workers: int = 1, rig: str | None = None) -> tuple[Path, Path]:
    """`generate_split` of the demo's data: training scenes of DEMO_TRAIN_SIM with the `sim_set` KEY=VALUE overrides
    (a benchmark's `--sim-set`), held-out scenes of DEMO_SIM; `rig` (a preset name or calibration YAML) renders both
    from another rig than the demo's. `make demo`, demo_seeds and time_to_accuracy use it."""
    train, val = demo_train_sim(sim_set), DEMO_SIM
    if rig:
        train, val = replace(train, rig=rig), replace(val, rig=rig)
    return generate_split(out, train, scenes, val_scenes, seed, progress, workers, val_cfg=val)


@dataclass(frozen=True)
class SceneTask:
    """One scene to render: its name in the dataset, world seed, config, and `render_scene`'s withhold_conditions."""

    name: str
    seed: int
    cfg: SimConfig
    withhold_conditions: str | None = None


def render_scenes(writer: DatasetWriter, tasks: list[SceneTask], rig: Rig, workers: int = 1, bar=None) -> list[dict]:
    """Render and write every task's scene (`render_scene`); returns their conditions in task order.

    workers > 1: that many spawned processes (an OpenGL context must not cross a fork), each with its own
    Renderer, render whole scenes and write them into the writer's temp folder (`DatasetWriter.attach`);
    the parent adopts the scenes in task order, so dataset.json, file names and contents are byte-identical
    to one process. A worker's exception is raised here as it is (the writer then removes the temp folder);
    on any exception (Ctrl-C included) the workers are terminated first, so nothing writes after the removal.
    Each worker keeps llvmpipe's and the writer's default threads (one per CPU; LP_NUM_THREADS set by the
    user is inherited): on 2 cores 2 workers of 2 threads each measured faster than of 1 (docs/benchmarks.md)."""
    workers = check_workers(workers)
    if workers == 1 or len(tasks) <= 1:
        renderer = Renderer(rig)
        try:
            return [render_scene(writer, t.name, t.seed, t.cfg, rig, renderer, bar, t.withhold_conditions) for t in tasks]
        finally:
            renderer.ctx.release()
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    workers = min(workers, len(tasks))
    part = writer.part()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_init_worker)
    try:
        futures = [pool.submit(_render_task, part, rig, t) for t in tasks]
        out = []
        for fut, t in zip(futures, tasks):
            try:
                conditions, written = fut.result()
            except BrokenProcessPool:
                raise RenderError(f"a worker process rendering {t.name} ended abruptly (killed, or out of memory); nothing "
                                  "was written: rerun, with fewer --workers or smaller images") from None
            writer.adopt(written)
            out.append(conditions)
            if bar is not None:
                bar.update(t.cfg.frames_per_scene)
    except BaseException:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):  # stop them writing, now
            proc.terminate()
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.join()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return out


_RENDERERS: dict = {}  # in a worker process: its Renderer, per rig


def _init_worker() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it terminates the workers


def _render_task(part: dict, rig: Rig, task: SceneTask) -> tuple[dict, dict]:
    """In a worker: render one scene into the parent writer's temp folder; (conditions, the writer's `written()`)."""
    key = repr(rig.to_dict())
    if key not in _RENDERERS:
        for r in _RENDERERS.values():
            r.ctx.release()
        _RENDERERS.clear()
        _RENDERERS[key] = Renderer(rig)
    writer = DatasetWriter.attach(part)
    conditions = render_scene(writer, task.name, task.seed, task.cfg, rig, _RENDERERS[key], None, task.withhold_conditions)
    return conditions, writer.written()


def render_scene(writer: DatasetWriter, name: str, seed: int, cfg: SimConfig, rig: Rig, renderer: Renderer,
                 bar=None, withhold_conditions: str | None = None) -> dict:
    """Simulate and write one scene of `cfg.frames_per_scene` frames; returns its conditions
    {"time_of_day", "weather", "rare"}. `withhold_conditions`: scene.json gets {"withheld": <that
    text>} instead of the conditions (a fleet keeps its scenario tags in a separate file)."""
    world = World(cfg, seed)
    conditions = {"time_of_day": world.conditions.time_of_day, "weather": world.conditions.weather,
                  "rare": list(world.conditions.rare)}
    frames_meta = [{"index": f, "dir": f"{f:06d}", "timestamp_us": 0, "ego2world": None}
                   for f in range(cfg.frames_per_scene)]
    scene = {"name": name, "seed": seed, "frames": frames_meta,
             "conditions": conditions if withhold_conditions is None else {"withheld": withhold_conditions}}
    if withhold_conditions is None:  # a fleet clip withholds it too (the miner sees only the pixels)
        scene["road_layout"] = world.layout  # cross, t_junction or arterial (docs/sim_look.md "Road layouts")
    for frame in simulate(world, rig, cfg, renderer, cfg.frames_per_scene):
        fm = frames_meta[frame["index"]]
        fm["timestamp_us"], fm["ego2world"] = frame["timestamp_us"], frame["ego2world"].tolist()
        if any(c is not r for c, r in zip(frame["cameras"], rig.cameras)):
            fm["cam2ego"] = {c.name: np.round(c.cam2ego, 12).tolist() for c in frame["cameras"]}  # its own calibration
        if frame["index"] == 0:
            writer.write_scene(scene)
        writer.write_frame(name, {
            "dir": fm["dir"],
            "cameras": {cam.name: {"rgb": im.rgb, "depth": im.depth, "normal": im.normal,
                                   "semantic": im.semantic, "instance": im.instance}
                        for cam, im in zip(rig.cameras, frame["images"])},
            "bev": frame["bev"],
            "labels": frame["labels"],
        }, wait=False)  # encoded while the next frame renders; written by the writer's next call
        if bar is not None:
            bar.update(1)
    writer.write_scene(scene)  # now with every ego pose
    return conditions
