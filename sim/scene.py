"""One scene over time: world -> rendered cameras -> labels, frame by frame at cfg.frame_rate_hz."""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from hydranet.rig import Rig
from sim.config import SimConfig
from sim.labels import frame_labels
from sim.meshes import DynamicMesh, scene_lights, static_mesh
from sim.render import Lighting, Renderer
from sim.world import World

FRAME_DT = 0.1  # s between frames at the default 10 Hz
MAX_SUBSTEP = 0.05  # s: the traffic model's integration step is at most this
_SKY = {"day": (0.55, 0.7, 0.9), "dusk": (0.8, 0.5, 0.35), "night": (0.02, 0.025, 0.05)}
_SUN = {"day": (1.1, 1.05, 0.95), "dusk": (0.9, 0.55, 0.3), "night": (0.04, 0.04, 0.06)}
_AMBIENT = {"day": (0.42, 0.46, 0.55), "dusk": (0.22, 0.2, 0.26), "night": (0.03, 0.03, 0.045)}


def scene_lighting(world: World, cfg: SimConfig) -> Lighting:
    c = world.conditions
    sky, sun, amb = (np.array(d[c.time_of_day]) for d in (_SKY, _SUN, _AMBIENT))
    fog, rain = 0.002, 0.0
    if c.weather == "rain":
        sun, sky, fog, rain = sun * 0.45, sky * 0.7 + 0.12, 0.008, 1.0
    elif c.weather == "fog":
        sun, fog = sun * 0.5, 0.035
        sky = np.full(3, 0.65) * (1.0 if c.time_of_day == "day" else 0.5 if c.time_of_day == "dusk" else 0.08)
    noise = cfg.conditions.noise_std * (2.0 if c.time_of_day == "night" else 1.0)
    return Lighting(c.sun_direction, sun, amb, sky, fog, rain, noise, [])


def ego_pose(world: World) -> np.ndarray:
    """Ego-to-world 4x4 of the ego car (origin on the ground under its centre)."""
    return world.ego.pose()


def simulate(world: World, rig: Rig, cfg: SimConfig, renderer: Renderer, n_frames: int) -> Iterator[dict]:
    """Yield one dict per frame: index, timestamp_us, ego2world, images (per camera), labels, bev."""
    renderer.set_static(static_mesh(world))
    dynamic = DynamicMesh(world)
    lighting = scene_lighting(world, cfg)
    base_exposure = {"day": 1.0, "dusk": 1.25, "night": 1.8}[world.conditions.time_of_day]
    dt = 1.0 / cfg.frame_rate_hz
    for f in range(n_frames):
        if f:
            world.step(dt, substeps=max(2, math.ceil(dt / MAX_SUBSTEP - 1e-9)))
        ego2world = ego_pose(world)
        lighting.lights = scene_lights(world)
        jitter = world.rng.normal(0.0, cfg.conditions.exposure_jitter, len(rig))
        exposures = np.clip(base_exposure * (1.0 + jitter), 0.4, 3.0)
        images = renderer.render(dynamic.build(), ego2world, lighting, exposures, seed=int(world.rng.integers(1 << 30)))
        labels, bev = frame_labels(world, list(rig.cameras), images, ego2world, cfg.label_range, cfg.bev_range, cfg.bev_resolution)
        yield {"index": f, "timestamp_us": int(round(f * dt * 1e6)), "ego2world": ego2world,
               "images": images, "labels": labels, "bev": bev}
