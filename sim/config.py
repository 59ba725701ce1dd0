"""The simulator's config schema (configs/sim.yaml: conditions, traffic, roads, look), as frozen
dataclasses loaded by hydranet.config.

Every value is checked when the config is built: a probability outside [0, 1], a negative agent
count, `frames_per_scene <= 0` or a zero BEV resolution raise `ConfigError` naming the key, so a
bad config never renders an empty or wrong dataset with exit status 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Literal

from hydranet.config import ConfigError


def need(ok: bool, key: str, value, what: str) -> None:
    """ConfigError "sim config key 'KEY': VALUE is not allowed; WHAT" unless `ok` (engine configs use it too)."""
    if not ok:
        raise ConfigError(f"sim config key '{key}': {value!r} is not allowed; {what}")


def check_weights(names: tuple, weights: tuple, key: str) -> None:
    """One finite, non-negative weight per name, not all zero; ConfigError naming `key` otherwise."""
    need(len(names) > 0, key.replace("_weights", ""), names, "give at least one value")
    need(len(weights) == len(names), key, weights, f"give one weight per value of {list(names)}")
    need(all(math.isfinite(w) and w >= 0 for w in weights) and sum(weights) > 0, key, weights,
         "weights must be finite, >= 0 and not all 0")


_need, _weights = need, check_weights  # the old names, until data_engine/fleet.py imports the public ones


@dataclass(frozen=True)
class ConditionsConfig:
    """Sampling weights of the scene conditions and the sensor model."""

    time_of_day: tuple[str, ...] = ("day", "dusk", "night")
    time_of_day_weights: tuple[float, ...] = (0.6, 0.2, 0.2)
    weather: tuple[str, ...] = ("clear", "rain", "fog")
    weather_weights: tuple[float, ...] = (0.6, 0.2, 0.2)
    noise_std: float = 2.0  # sensor noise, 8-bit grey levels
    exposure_jitter: float = 0.15  # per camera and frame, relative gain
    # per-frame calibration (0 = off: every frame has the rig's cam2ego): pitch and roll of the car
    # body on its suspension, shared by every camera (the horizon moves), and each camera's own mount
    # jitter about its three axes; standard deviations in degrees (docs/sim_look.md)
    body_motion_deg: float = 0.0
    mount_jitter_deg: float = 0.0
    # structured lighting randomization per scene (0 = off; 1 = the widest): the sun's elevation by day,
    # its strength, the ambient and the sky's, and a warm/cool colour tilt (sim.scene.light_jitter)
    light_jitter: float = 0.0

    def __post_init__(self):
        check_weights(self.time_of_day, self.time_of_day_weights, "conditions.time_of_day_weights")
        check_weights(self.weather, self.weather_weights, "conditions.weather_weights")
        need(0 <= self.noise_std <= 255, "conditions.noise_std", self.noise_std, "give grey levels in [0, 255]")
        need(0 <= self.exposure_jitter < 1, "conditions.exposure_jitter", self.exposure_jitter,
             "give a relative gain in [0, 1)")
        need(0 <= self.light_jitter <= 1, "conditions.light_jitter", self.light_jitter,
             "give a strength in [0, 1] (0: off)")
        for key in ("body_motion_deg", "mount_jitter_deg"):
            need(0 <= getattr(self, key) <= 3, f"conditions.{key}", getattr(self, key),
                 "give a standard deviation in degrees in [0, 3] (0: off)")


@dataclass(frozen=True)
class RareConfig:
    """Probability per scene of each rare scenario the data engine can mine."""

    cones_on_road: float = 0.15
    debris_on_road: float = 0.1
    night_pedestrian_crossing: float = 0.1
    unusual_vehicle: float = 0.1

    def __post_init__(self):
        for f in fields(self):
            p = getattr(self, f.name)
            need(0 <= p <= 1, f"rare.{f.name}", p, "a probability lies in [0, 1]")


@dataclass(frozen=True)
class TrafficConfig:
    """Road users (counts are scaled by SimConfig.density)."""

    vehicles: int = 40  # cars, trucks and buses in the main road's lanes
    pedestrians: int = 10  # on sidewalks (some in pairs, some standing) and on crosswalks
    cyclists: int = 2
    motorcycles: int = 4  # ridden motorcycles in the traffic lanes
    truck_share: float = 0.2  # of the vehicles, the share that are trucks
    bus_share: float = 0.1  # of the vehicles, the share that are buses
    standing_share: float = 0.25  # of the sidewalk pedestrians, the share standing still
    pair_share: float = 0.3  # of the sidewalk pedestrians, the share walking beside a companion

    def __post_init__(self):
        for name in ("vehicles", "pedestrians", "cyclists", "motorcycles"):
            n = getattr(self, name)
            need(0 <= n <= 10000, f"traffic.{name}", n, "give a count from 0 to 10000")
        for name in ("truck_share", "bus_share", "standing_share", "pair_share"):
            p = getattr(self, name)
            need(0 <= p <= 1, f"traffic.{name}", p, "a share lies in [0, 1]")
        need(self.truck_share + self.bus_share <= 1, "traffic.bus_share", self.bus_share,
             f"truck_share + bus_share must not exceed 1 (truck_share is {self.truck_share})")


@dataclass(frozen=True)
class RoadsideConfig:
    """Static objects by the road (0 turns each off)."""

    parked_vehicles: int = 32  # parked beside the sidewalk, attribute parked (nuScenes vehicle.parked)
    parked_row: int = 4  # at most this many parked end to end in one row (1: each on its own)
    parked_trailer_share: float = 0.08  # of the parked vehicles, the share that are trailers
    parked_truck_share: float = 0.25  # of the parked vehicles, the share that are trucks
    parked_against_traffic: float = 0.1  # of the parked vehicles, the share facing against their side's traffic (0.5: either way)
    barrier_groups: int = 4  # rows of 2-5 barrier segments along a kerb, a cone before each
    cone_groups: int = 1  # rows of 2-4 traffic cones along a kerb
    clutter: float = 0.0  # hedges, fences, walls, distractor blocks beyond the sidewalk: runs per 100 m of road edge (sim.clutter)

    def __post_init__(self):
        for name in ("parked_vehicles", "barrier_groups", "cone_groups"):
            n = getattr(self, name)
            need(0 <= n <= 10000, f"roadside.{name}", n, "give a count from 0 to 10000")
        need(0 <= self.clutter <= 100, "roadside.clutter", self.clutter, "give runs per 100 m of road edge, 0 to 100")
        need(1 <= self.parked_row <= 100, "roadside.parked_row", self.parked_row, "give a row length from 1 to 100")
        for name in ("parked_trailer_share", "parked_truck_share", "parked_against_traffic"):
            p = getattr(self, name)
            need(0 <= p <= 1, f"roadside.{name}", p, "a share lies in [0, 1]")
        need(self.parked_trailer_share + self.parked_truck_share <= 1, "roadside.parked_truck_share",
             self.parked_truck_share,
             f"parked_trailer_share + parked_truck_share must not exceed 1 (trailers: {self.parked_trailer_share})")


@dataclass(frozen=True)
class LayoutMix:
    """Probability per scene of each road layout (`sim.roads`); they sum to 1."""

    cross: float = 0.4  # 4-way intersections
    t_junction: float = 0.3  # T-junctions: a side street from one side
    arterial: float = 0.3  # a multi-lane road narrowing by one lane per direction over a taper

    def __post_init__(self):
        for f in fields(self):
            p = getattr(self, f.name)
            need(isinstance(p, (int, float)) and 0 <= p <= 1, f"roads.layouts.{f.name}", p,
                 "a probability lies in [0, 1]")
        total = sum(getattr(self, f.name) for f in fields(self))
        need(abs(total - 1) < 1e-6, "roads.layouts", {f.name: getattr(self, f.name) for f in fields(self)},
             f"the layout probabilities sum to {total:g}, not 1 (set all three, e.g. "
             "--set 'roads.layouts={cross: 0, t_junction: 1, arterial: 0}')")


@dataclass(frozen=True)
class RoadsConfig:
    """The road network's layout mix and the arterial's taper."""

    layouts: LayoutMix = field(default_factory=LayoutMix)
    taper_length: float = 60.0  # metres over which the arterial loses a lane per direction

    def __post_init__(self):
        need(20 <= self.taper_length <= 150 and math.isfinite(self.taper_length), "roads.taper_length",
             self.taper_length, "give metres from 20 to 150")


@dataclass(frozen=True)
class LookConfig:
    """How the images look. Only detailed_meshes changes labels (the objects' shapes, so their
    masks and boxes); the rest touch the RGB image alone. Every switch off and antialias 1 is
    the old look: box bodies, flat colours, one-sample pixels, clamped colour,
    a flat sky, Gaussian noise, no shadows."""

    detailed_meshes: bool = True  # recognizable parts (sim/bodies.py), walking cycle, round trees and poles
    textures: bool = True  # procedural asphalt, concrete, facades with windows, foliage, paint wear
    hdr: bool = True  # sky gradient and sun, specular paint/glass/wet roads, lit windows, filmic tone mapping, auto-exposure
    sensor: Literal["gaussian", "realistic"] = "realistic"  # realistic: shot + read noise in linear light, vignetting
    # costly on llvmpipe (CPU), cheap on a GPU: "auto" turns them on only where a GPU renders
    antialias: int = 0  # multisamples per pixel of the colour image: 1 (off), 2, 4, 8; 0 = auto (4 on a GPU, else 1)
    shadows: Literal["auto", "on", "off"] = "auto"  # the sun's shadow map (day and dusk)
    glare: Literal["auto", "on", "off"] = "auto"  # light spilled around lamps and headlights (needs hdr)
    shadow_resolution: int = 1024  # texels a side of the sun's shadow map (covers 120 m around the ego)
    # motion blur from the exact velocities: the colour image averages `shutter_samples` sub-frames
    # spread over the exposure (day: shutter_ms, dusk 2x, night 3x); labels stay at its midpoint
    shutter_ms: float = 0.0  # exposure time by day, milliseconds; 0 = no motion blur
    shutter_samples: int = 5  # odd: the middle sub-frame is the labelled instant
    # rolling shutter: rows are read out top to bottom over rolling_shutter_ms, drawn as shutter_samples
    # bands of rows, each at its own instant; the middle band is the labelled instant (0 = global shutter)
    rolling_shutter_ms: float = 0.0

    def __post_init__(self):
        need(self.antialias in (0, 1, 2, 4, 8), "look.antialias", self.antialias, "give 0 (auto), 1 (off), 2, 4 or 8 samples")
        need(128 <= self.shadow_resolution <= 8192, "look.shadow_resolution", self.shadow_resolution,
             "give texels from 128 to 8192")
        need(0 <= self.shutter_ms <= 100 and math.isfinite(self.shutter_ms), "look.shutter_ms", self.shutter_ms,
             "give milliseconds from 0 (no motion blur) to 100")
        need(3 <= self.shutter_samples <= 31 and self.shutter_samples % 2 == 1, "look.shutter_samples",
             self.shutter_samples, "give an odd count from 3 to 31 (the middle one is the labelled instant)")
        need(0 <= self.rolling_shutter_ms <= 100 and math.isfinite(self.rolling_shutter_ms), "look.rolling_shutter_ms",
             self.rolling_shutter_ms, "give milliseconds from 0 (a global shutter) to 100")
        need(not (self.rolling_shutter_ms > 0 and self.shutter_ms > 0), "look.rolling_shutter_ms",
             self.rolling_shutter_ms, "set look.shutter_ms=0 with it (rolling shutter and motion blur are not combined)")

    def resolved(self, gpu: bool) -> "LookConfig":
        """The look with every "auto" decided for a GPU (gpu=True) or llvmpipe."""
        auto = "on" if gpu else "off"
        return replace(self, antialias=self.antialias or (4 if gpu else 1),
                       shadows=auto if self.shadows == "auto" else self.shadows,
                       glare=auto if self.glare == "auto" else self.glare)


@dataclass(frozen=True)
class SimConfig:
    rig: str = "nuscenes6"
    image_width: int = 0  # 0 = the rig's own resolution
    image_height: int = 0
    frames_per_scene: int = 20
    frame_rate_hz: float = 10.0  # frames per second of sim time (nuScenes keyframes: 2)
    lanes_per_direction: tuple[int, ...] = (1, 2, 3)  # the arterial layout takes at least 2 (before its taper)
    roads: RoadsConfig = field(default_factory=RoadsConfig)
    density: float = 1.0  # scales every count of traffic and roadside (0.5: half as many objects)
    traffic: TrafficConfig = field(default_factory=TrafficConfig)
    roadside: RoadsideConfig = field(default_factory=RoadsideConfig)
    conditions: ConditionsConfig = field(default_factory=ConditionsConfig)
    rare: RareConfig = field(default_factory=RareConfig)
    look: LookConfig = field(default_factory=LookConfig)
    bev_range: float = 50.0  # metres each side of the ego
    bev_resolution: float = 0.5  # metres per cell
    label_range: float = 60.0  # 3D boxes and lane lines within this distance

    def __post_init__(self):
        need(self.frame_rate_hz > 0 and math.isfinite(self.frame_rate_hz), "frame_rate_hz", self.frame_rate_hz,
             "sim frame_rate_hz must be > 0")
        need(self.frames_per_scene >= 1, "frames_per_scene", self.frames_per_scene,
             "a scene needs at least 1 frame")
        need(self.image_width >= 0, "image_width", self.image_width, "give pixels > 0, or 0 for the rig's own")
        need(self.image_height >= 0, "image_height", self.image_height, "give pixels > 0, or 0 for the rig's own")
        need(len(self.lanes_per_direction) > 0 and all(1 <= n <= 8 for n in self.lanes_per_direction),
             "lanes_per_direction", self.lanes_per_direction, "give a non-empty list of lane counts from 1 to 8")
        need(0 <= self.density <= 10 and math.isfinite(self.density), "density", self.density,
             "give a scale of the object counts from 0 to 10")
        need(self.bev_range > 0 and math.isfinite(self.bev_range), "bev_range", self.bev_range, "give metres > 0")
        need(self.bev_resolution > 0 and math.isfinite(self.bev_resolution), "bev_resolution", self.bev_resolution,
             "give metres per cell > 0")
        need(2 * self.bev_range / self.bev_resolution <= 4096, "bev_resolution", self.bev_resolution,
             f"the BEV grid would have {2 * self.bev_range / self.bev_resolution:.0f} cells a side (at most 4096)")
        need(self.label_range > 0 and math.isfinite(self.label_range), "label_range", self.label_range,
             "give metres > 0")


# the data of `make demo` and its benchmarks: many short scenes (6 frames at 2 Hz, like nuScenes keyframes)
# rather than few long ones, since frames of one scene are alike
DEMO_SIM = SimConfig(frames_per_scene=6, image_width=320, image_height=192, frame_rate_hz=2.0)
# the demo's training scenes: 1.5x the road users and roadside objects of the held-out ones (DEMO_SIM), since busier
# scenes give every head more to learn per CPU-second (docs/benchmarks.md "Round 7": signs matched in 3 of 3 seeds)
DEMO_TRAIN_SIM = replace(DEMO_SIM, density=1.5)


def demo_train_sim(overrides: list[str] | tuple[str, ...] = ()) -> SimConfig:
    """DEMO_TRAIN_SIM with `KEY=VALUE` overrides (`hydranet sim generate --set`'s): a benchmark's training scenes."""
    from hydranet.config import apply_overrides, from_dict, to_dict

    return from_dict(SimConfig, apply_overrides(to_dict(DEMO_TRAIN_SIM), list(overrides)))


# keys added since a dataset could be written whose default is not what the sim did before them: a stored sim_config
# (a dataset.json) that lacks one holds this value, not the default. None: no value of the key reproduces the scenes
# of the code before it (parked vehicles faced either way, turned by other draws than 0.5 turns today's), so no
# config of this code is that data
BEFORE_KEY = {"roadside": {"parked_against_traffic": None}}
