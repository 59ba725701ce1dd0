"""Simulator configuration (frozen dataclasses, loaded by hydranet.config)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConditionsConfig:
    """Sampling weights of the scene conditions and the sensor model."""

    time_of_day: tuple[str, ...] = ("day", "dusk", "night")
    time_of_day_weights: tuple[float, ...] = (0.6, 0.2, 0.2)
    weather: tuple[str, ...] = ("clear", "rain", "fog")
    weather_weights: tuple[float, ...] = (0.6, 0.2, 0.2)
    noise_std: float = 2.0  # sensor noise, 8-bit grey levels
    exposure_jitter: float = 0.15  # per camera and frame, relative gain


@dataclass(frozen=True)
class RareConfig:
    """Probability per scene of each rare scenario the data engine can mine."""

    cones_on_road: float = 0.15
    debris_on_road: float = 0.1
    night_pedestrian_crossing: float = 0.1
    unusual_vehicle: float = 0.1


@dataclass(frozen=True)
class TrafficConfig:
    vehicles: int = 26
    pedestrians: int = 14
    cyclists: int = 3


@dataclass(frozen=True)
class SimConfig:
    rig: str = "nuscenes6"
    image_width: int = 0  # 0 = the rig's own resolution
    image_height: int = 0
    frames_per_scene: int = 20
    frame_rate_hz: float = 10.0  # frames per second of sim time (nuScenes keyframes: 2)
    lanes_per_direction: tuple[int, ...] = (1, 2, 3)
    traffic: TrafficConfig = field(default_factory=TrafficConfig)
    conditions: ConditionsConfig = field(default_factory=ConditionsConfig)
    rare: RareConfig = field(default_factory=RareConfig)
    bev_range: float = 50.0  # metres each side of the ego
    bev_resolution: float = 0.5  # metres per cell
    label_range: float = 60.0  # 3D boxes and lane lines within this distance

    def __post_init__(self):
        if not self.frame_rate_hz > 0:
            raise ValueError(f"sim frame_rate_hz must be > 0, got {self.frame_rate_hz}")
