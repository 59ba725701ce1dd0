"""Structured lighting randomization (`conditions.light_jitter`, issue 32 item 2): the sun, the ambient
and the sky vary per scene within their stated ranges, from a random stream of their own, so the
world's objects and every label stay exactly those of the unjittered scene."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hydranet.config import ConfigError, load_config
from sim.config import ConditionsConfig, SimConfig
from sim.generate import render_frames
from sim.scene import light_jitter, scene_lighting
from sim.world import World

DAY = ConditionsConfig(time_of_day=("day",), time_of_day_weights=(1.0,), weather=("clear",), weather_weights=(1.0,))


def _cfg(j: float, conditions: ConditionsConfig = DAY, **kw) -> SimConfig:
    return SimConfig(conditions=replace(conditions, light_jitter=j), **kw)


def _elevation(direction: np.ndarray) -> float:
    return float(np.degrees(np.arcsin(direction[2] / np.linalg.norm(direction))))


def _azimuth(direction: np.ndarray) -> float:
    return float(np.arctan2(direction[1], direction[0]))


def test_off_by_default_and_the_world_is_untouched():
    """A guard: the jitter draws from its own stream, so turning it on must never move an object (were it drawn
    from the world's generator, every later draw of the world would change)."""
    assert SimConfig().conditions.light_jitter == 0.0
    for seed in (0, 5):
        plain, jittered = World(_cfg(0.0), seed), World(_cfg(1.0), seed)
        assert [a.cls for a in plain.agents] == [a.cls for a in jittered.agents]
        np.testing.assert_array_equal([a.pose()[:3, 3] for a in plain.agents], [a.pose()[:3, 3] for a in jittered.agents])
        np.testing.assert_array_equal(plain.conditions.sun_direction, jittered.conditions.sun_direction)
        off, on = scene_lighting(plain, _cfg(0.0)), scene_lighting(jittered, _cfg(1.0))
        np.testing.assert_array_equal(off.sun_dir, plain.conditions.sun_direction)  # 0: the world's own sun
        assert not np.allclose(off.sun_color, on.sun_color)


@pytest.mark.parametrize("j", [0.4, 1.0])
def test_each_draw_within_its_stated_range_and_the_range_used(j):
    elev, sun_gain, amb, tilts = [], [], [], []
    for seed in range(60):
        world = World(_cfg(j), seed)
        base, lit = scene_lighting(world, _cfg(0.0)), scene_lighting(world, _cfg(j))
        e = _elevation(lit.sun_dir)
        assert 35 - 25 * j - 1e-9 <= e <= 65 + 15 * j + 1e-9
        assert _azimuth(lit.sun_dir) == pytest.approx(_azimuth(base.sun_dir))  # the azimuth is the world's
        gain = lit.sun_color / base.sun_color  # (3,) = 2^u * (1 + t, 1, 1 - t)
        tilt = (gain[0] - gain[2]) / (gain[0] + gain[2])  # = 0.15 t
        assert 2 ** -j - 1e-9 <= gain[1] <= 2 ** j + 1e-9
        assert abs(tilt) <= 0.15 * j + 1e-9
        a = lit.ambient / base.ambient
        np.testing.assert_allclose(a, a[0])  # one gain: the ambient's hue is kept
        assert 2 ** (-j / 2) - 1e-9 <= a[0] <= 2 ** (j / 2) + 1e-9
        sky = lit.fog_color / base.fog_color  # (3,) = 2^(u/2) * (1 + t, 1, 1 - t)
        for name in ("sky_zenith", "sky_horizon"):  # the sky's colours take one and the same gain
            np.testing.assert_allclose(getattr(lit, name) / getattr(base, name), sky)
        assert 2 ** (-j / 2) - 1e-9 <= sky[1] <= 2 ** (j / 2) + 1e-9
        assert abs((sky[0] - sky[2]) / (sky[0] + sky[2])) <= 0.15 * j + 1e-9
        elev.append(e), sun_gain.append(gain[1]), amb.append(a[0]), tilts.append(tilt)
    # the range is used, not a corner of it: 60 uniform draws reach each end's outer fifth
    for v, lo, hi in ((elev, 35 - 25 * j, 65 + 15 * j), (np.log2(sun_gain), -j, j), (np.log2(amb), -j / 2, j / 2),
                      (tilts, -0.15 * j, 0.15 * j)):
        assert min(v) < lo + 0.2 * (hi - lo) and max(v) > hi - 0.2 * (hi - lo)


def test_deterministic_per_seed_and_different_across_seeds():
    a, b, c = (light_jitter(World(_cfg(1.0), s), 1.0) for s in (3, 3, 4))
    assert a.elevation_deg == b.elevation_deg and np.array_equal(a.sun, b.sun)
    assert a.elevation_deg != c.elevation_deg


def test_dusk_and_night_keep_the_worlds_sun():
    for tod in ("dusk", "night"):
        cond = replace(DAY, time_of_day=(tod,))
        world = World(_cfg(1.0, cond), 2)
        assert light_jitter(world, 1.0).elevation_deg is None
        np.testing.assert_array_equal(scene_lighting(world, _cfg(1.0, cond)).sun_dir, world.conditions.sun_direction)


def test_the_rgb_changes_and_no_label_does():
    small = dict(image_width=80, image_height=48, frames_per_scene=2)
    plain, jittered = render_frames(_cfg(0.0, **small), 7), render_frames(_cfg(1.0, **small), 7)
    moved = []
    for a, b in zip(plain, jittered):
        assert a["labels"] == b["labels"]
        np.testing.assert_array_equal(a["bev"], b["bev"])
        for x, y in zip(a["images"], b["images"]):
            for ch in ("semantic", "instance", "depth", "normal"):
                np.testing.assert_array_equal(getattr(x, ch), getattr(y, ch))
            moved.append(np.abs(x.rgb.astype(float) - y.rgb.astype(float)).mean())
    assert np.median(moved) > 2.0  # grey levels: the light is visibly different


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
def test_out_of_range_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match="conditions.light_jitter"):
        load_config(SimConfig, None, [f"conditions.light_jitter={value}"])
