"""`hydranet sim generate`: seeded scenes rendered into a dataset on disk (docs/dataset_format.md)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm import tqdm

from hydranet.config import to_dict
from hydranet.rig import Rig, load_rig
from sim.classes import LANE_TYPES, OBJECT_CLASSES, SEMANTIC_CLASSES
from sim.config import SimConfig
from sim.render import Renderer
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


def generate_dataset(out: str | Path, cfg: SimConfig, scenes: int, seed: int, progress: bool = True) -> Path:
    """Render `scenes` scenes of `cfg.frames_per_scene` frames into `out` (atomically)."""
    if scenes < 1:
        raise ValueError(f"--scenes must be at least 1, got {scenes}")
    rig = sim_rig(cfg)
    renderer = Renderer(rig)
    total = scenes * cfg.frames_per_scene
    with DatasetWriter(out, dataset_meta(cfg, rig, seed)) as writer, \
            tqdm(total=total, desc="sim generate", unit="frame", disable=not progress) as bar:
        for i in range(scenes):
            render_scene(writer, f"scene_{i:04d}", scene_seed(seed, i), cfg, rig, renderer, bar)
    return Path(out)


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
        })
        if bar is not None:
            bar.update(1)
    writer.write_scene(scene)  # now with every ego pose
    return conditions
