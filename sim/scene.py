"""One scene over time: world -> rendered cameras -> labels, frame by frame at cfg.frame_rate_hz."""
from __future__ import annotations

import dataclasses
import math
from typing import Iterator

import numpy as np

from hydranet.geometry import Camera, rot_x, rot_y, rot_z
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
# the HDR look's sky (post.frag.glsl): radiance overhead and at the horizon; night has a faint city glow
_ZENITH = {"day": (0.22, 0.42, 0.85), "dusk": (0.1, 0.13, 0.32), "night": (0.002, 0.003, 0.008)}
_HORIZON = {"day": (0.72, 0.8, 0.92), "dusk": (1.0, 0.52, 0.28), "night": (0.025, 0.022, 0.03)}
EXPOSURE = {"day": 1.0, "dusk": 1.25, "night": 1.8}
AUTO_EXPOSURE_TARGET = {"day": 0.45, "dusk": 0.36, "night": 0.13}  # mean output level the HDR look's auto-exposure aims at
SHUTTER_FACTOR = {"day": 1.0, "dusk": 2.0, "night": 3.0}  # longer exposures in less light (look.shutter_ms is by day)
LIGHT_STREAM = 0x11647  # the light jitter's own random stream: the world's draws (objects, frames) stay as they were


@dataclasses.dataclass(frozen=True)
class LightJitter:
    """One scene's draw of `conditions.light_jitter` (j in [0, 1]), SDR-style: randomness within the
    scene's structure. By day the sun's elevation spans [35 - 25j, 65 + 15j] degrees (its azimuth kept);
    the sun's strength is scaled by 2^u, the ambient's and the sky's by 2^(u/2) (u ~ U(-j, j) each); the
    sun and the sky each get a warm/cool tilt (1 + t, 1, 1 - t), t ~ U(-0.15j, 0.15j)."""

    elevation_deg: float | None  # None: the world's own sun (dusk, night)
    sun: np.ndarray  # (3,) gain on the sun's colour
    ambient: float
    sky: np.ndarray  # (3,) gain on the sky's colours (flat sky, zenith, horizon)


def light_jitter(world: World, j: float) -> LightJitter:
    rng = np.random.default_rng([world.seed, LIGHT_STREAM])
    u_sun, u_amb, u_sky, t_sun, t_sky = rng.uniform(-1.0, 1.0, 5) * j
    elev = float(rng.uniform(35 - 25 * j, 65 + 15 * j)) if world.conditions.time_of_day == "day" else None

    def tilt(t):
        return np.array([1.0 + 0.15 * t, 1.0, 1.0 - 0.15 * t])

    return LightJitter(elev, 2.0 ** u_sun * tilt(t_sun), float(2.0 ** (u_amb / 2)), 2.0 ** (u_sky / 2) * tilt(t_sky))


def _with_elevation(direction: np.ndarray, elev_deg: float) -> np.ndarray:
    """(3,) unit vector of `direction`'s azimuth at `elev_deg` above the horizon."""
    az, e = math.atan2(direction[1], direction[0]), math.radians(elev_deg)
    return np.array([math.cos(e) * math.cos(az), math.cos(e) * math.sin(az), math.sin(e)])


def scene_lighting(world: World, cfg: SimConfig) -> Lighting:
    c = world.conditions
    sky, sun, amb = (np.array(d[c.time_of_day]) for d in (_SKY, _SUN, _AMBIENT))
    zenith, horizon = np.array(_ZENITH[c.time_of_day]), np.array(_HORIZON[c.time_of_day])
    fog, rain = 0.002, 0.0
    if c.weather == "rain":
        dark = 0.1 if c.time_of_day == "night" else 1.0  # overcast night: no grey glow
        sun, sky, fog, rain = sun * 0.45, sky * 0.7 + 0.12 * dark, 0.008, 1.0
        zenith = horizon = np.full(3, 0.5 * np.mean(horizon))
    elif c.weather == "fog":
        sun, fog = sun * 0.5, 0.035
        sky = np.full(3, 0.65) * (1.0 if c.time_of_day == "day" else 0.5 if c.time_of_day == "dusk" else 0.08)
    sun_dir = c.sun_direction
    if cfg.conditions.light_jitter > 0:
        lj = light_jitter(world, cfg.conditions.light_jitter)
        sun, amb = sun * lj.sun, amb * lj.ambient
        sky, zenith, horizon = sky * lj.sky, zenith * lj.sky, horizon * lj.sky
        if lj.elevation_deg is not None:
            sun_dir = _with_elevation(sun_dir, lj.elevation_deg)
    noise = cfg.conditions.noise_std * (2.0 if c.time_of_day == "night" else 1.0)
    night = 1.0 if c.time_of_day == "night" else 0.0
    return Lighting(sun_dir, sun, amb, sky, fog, rain, noise, [], zenith, horizon, night,
                    shot_gain=0.0004 * (3.0 if night else 1.0))


def auto_exposure(gain: np.ndarray, images, target: float, rate: float = 0.5) -> np.ndarray:
    """Next frame's auto-exposure gains: each camera moves part of the way (in log) towards the
    gain that brings its image's mean level (gamma-encoded, 0..1) to `target`."""
    out = gain.copy()
    for i, im in enumerate(images):
        mean = float(im.rgb[::8, ::8].mean()) / 255.0
        out[i] = np.clip(gain[i] * (target / max(mean, 0.02)) ** (2.2 * rate), 0.5, 2.0)
    return out


def ego_pose(world: World) -> np.ndarray:
    """Ego-to-world 4x4 of the ego car (origin on the ground under its centre)."""
    return world.ego.pose()


def shutter_offsets(cfg: SimConfig, time_of_day: str) -> np.ndarray:
    """The sub-frame instants (S,) in seconds around the labelled one (the middle, 0): the midpoints
    of S equal slices of motion blur's exposure, or of a rolling shutter's readout (band k of the
    rows, top first); empty with neither."""
    look = cfg.look
    if look.rolling_shutter_ms > 0:
        T = look.rolling_shutter_ms / 1000.0  # the readout does not lengthen in the dark
    elif look.shutter_ms > 0:
        T = look.shutter_ms / 1000.0 * SHUTTER_FACTOR[time_of_day]
    else:
        return np.zeros(0)
    S = look.shutter_samples
    return T * ((np.arange(S) + 0.5) / S - 0.5)


def subframes(world: World, dynamic: DynamicMesh, offsets: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(dynamic vertices, ego2world) at each non-zero offset: every agent and the ego moved on along
    its path at its current speed (the exact velocity of the labelled instant)."""
    return [(dynamic.build(float(t)), world.ego.pose_at(float(t))) for t in offsets if t != 0]


def frame_cameras(rig: Rig, cfg: SimConfig, seed: int, frame: int) -> list[Camera]:
    """The rig's cameras at one frame: every cam2ego tilted by the body's pitch and roll
    (conditions.body_motion_deg, about the ego origin on the ground) and each camera turned by its
    own mount jitter (conditions.mount_jitter_deg, about its centre); seeded by (scene seed, frame),
    so the world's own random stream is the same with or without them. Both 0: the rig itself."""
    c = cfg.conditions
    if c.body_motion_deg == 0 and c.mount_jitter_deg == 0:
        return list(rig.cameras)
    rng = np.random.default_rng([seed, frame, 0xCA11B])
    pitch, roll = np.radians(rng.normal(0.0, c.body_motion_deg, 2))
    body = rot_y(pitch) @ rot_x(roll)  # ego axes: pitch about y (left), roll about x (forward)
    out = []
    for cam in rig.cameras:
        a = np.radians(rng.normal(0.0, c.mount_jitter_deg, 3))
        T = cam.cam2ego.copy()
        T[:3, :3] = body @ rot_z(a[0]) @ rot_y(a[1]) @ rot_x(a[2]) @ cam.cam2ego[:3, :3]
        T[:3, 3] = body @ cam.cam2ego[:3, 3]
        out.append(dataclasses.replace(cam, cam2ego=T))
    return out


def simulate(world: World, rig: Rig, cfg: SimConfig, renderer: Renderer, n_frames: int) -> Iterator[dict]:
    """Yield one dict per frame: index, timestamp_us, ego2world, images (per camera), labels, bev,
    and cameras (this frame's, with its own cam2ego: `frame_cameras`)."""
    renderer.set_look(cfg.look)
    renderer.set_static(static_mesh(world))
    dynamic = DynamicMesh(world)
    lighting = scene_lighting(world, cfg)
    tod = world.conditions.time_of_day
    base_exposure = EXPOSURE[tod]
    auto = np.ones(len(rig))  # auto-exposure gain per camera (HDR look), from the previous frame's image
    dt = 1.0 / cfg.frame_rate_hz
    offsets = shutter_offsets(cfg, tod)
    for f in range(n_frames):
        if f:
            world.step(dt, substeps=max(2, math.ceil(dt / MAX_SUBSTEP - 1e-9)))
        ego2world = ego_pose(world)
        lighting.lights = scene_lights(world)
        jitter = world.rng.normal(0.0, cfg.conditions.exposure_jitter, len(rig))
        exposures = np.clip(base_exposure * (1.0 + jitter), 0.4, 3.0) * auto
        cams = frame_cameras(rig, cfg, world.seed, f)
        images = renderer.render(dynamic.build(), ego2world, lighting, exposures, seed=int(world.rng.integers(1 << 30)),
                                 subframes=subframes(world, dynamic, offsets), cam2ego=[c.cam2ego for c in cams])
        if cfg.look.hdr:
            auto = auto_exposure(auto, images, AUTO_EXPOSURE_TARGET[tod])
        labels, bev = frame_labels(world, cams, images, ego2world, cfg.label_range, cfg.bev_range, cfg.bev_resolution)
        yield {"index": f, "timestamp_us": int(round(f * dt * 1e6)), "ego2world": ego2world,
               "images": images, "labels": labels, "bev": bev, "cameras": cams}
