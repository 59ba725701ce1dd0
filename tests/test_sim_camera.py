"""Camera realism with exact labels (issue 14.4): motion blur from the exact velocities blurs the
colour image only; the labels and label channels are the exposure midpoint's."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hydranet.config import ConfigError, load_config
from sim.agents import Agent, Part
from sim.config import ConditionsConfig, LookConfig, SimConfig
from sim.generate import render_frames, sim_rig
from sim.meshes import DynamicMesh, static_mesh
from sim.render import Renderer
from sim.roads import Path
from sim.scene import ego_pose, scene_lighting, shutter_offsets, subframes
from sim.world import World

PLAIN = LookConfig(detailed_meshes=False, textures=False, hdr=False, sensor="gaussian", antialias=1, shadows="off",
                   glare="off")
DAY = ConditionsConfig(time_of_day=("day",), time_of_day_weights=(1.0,), weather=("clear",), weather_weights=(1.0,),
                       noise_std=0.0, exposure_jitter=0.0)


def _frames(look: LookConfig, seed: int = 2) -> list[dict]:
    cfg = SimConfig(image_width=80, image_height=48, frames_per_scene=2, look=look)
    return render_frames(cfg, seed)


def test_motion_blur_changes_rgb_not_labels():
    sharp, blurred, again = _frames(LookConfig()), _frames(LookConfig(shutter_ms=30.0)), _frames(LookConfig(shutter_ms=30.0))
    moved = 0
    for a, b, c in zip(sharp, blurred, again):
        assert a["labels"] == b["labels"]
        np.testing.assert_array_equal(a["bev"], b["bev"])
        np.testing.assert_array_equal(a["ego2world"], b["ego2world"])
        for x, y, z in zip(a["images"], b["images"], c["images"]):
            for ch in ("semantic", "instance", "depth", "normal"):
                np.testing.assert_array_equal(getattr(x, ch), getattr(y, ch))
            np.testing.assert_array_equal(y.rgb, z.rgb)  # same seed, same pixels
            moved += int(np.abs(x.rgb.astype(int) - y.rgb).mean() > 0.2)
    assert moved >= 6  # the ego drives: the side cameras see the world slide by


def test_shutter_offsets():
    look = LookConfig(shutter_ms=20.0, shutter_samples=5)
    t = shutter_offsets(SimConfig(look=look), "day")
    np.testing.assert_allclose(t, [-0.008, -0.004, 0.0, 0.004, 0.008], atol=1e-12)
    np.testing.assert_allclose(shutter_offsets(SimConfig(look=look), "night"), 3 * t, atol=1e-12)
    assert len(shutter_offsets(SimConfig(), "day")) == 0  # off by default


@pytest.mark.parametrize("key, value, words", [("look.shutter_ms", "-1", "look.shutter_ms"),
                                               ("look.shutter_ms", "500", "look.shutter_ms"),
                                               ("look.shutter_samples", "4", "odd"),
                                               ("look.rolling_shutter_ms", "-2", "look.rolling_shutter_ms"),
                                               ("look.rolling_shutter_ms", "nan", "look.rolling_shutter_ms")])
def test_shutter_knobs_are_checked(key, value, words):
    with pytest.raises(ConfigError, match=words):
        load_config(SimConfig, None, [f"{key}={value}"])


def test_rolling_shutter_and_motion_blur_are_not_combined():
    with pytest.raises(ConfigError, match="set look.shutter_ms=0"):
        load_config(SimConfig, None, ["look.rolling_shutter_ms=30", "look.shutter_ms=10"])


def _crossing_cube(look: LookConfig, height: float, time_of_day: str = "day"):
    """A white cube of `height` (1.2 m wide) crossing 10 m ahead at 10 m/s in an emptied world, the
    ego standing, drawn in CAM_FRONT at 160x96: the background, the sharp image and the image with
    the look's sub-frames, plus what the checks need ({"cam", "ego", "agent", "offsets", ...})."""
    cfg = SimConfig(image_width=160, image_height=96, frames_per_scene=1, conditions=DAY, look=look)
    rig = sim_rig(cfg)
    world = World(cfg, 1)
    world.props, world.lights, world.agents = [], [], []
    world.ego.speed = 0.0
    ego = ego_pose(world)
    cross = Path((ego @ np.array([[10.0, y, 0.0, 1.0] for y in np.arange(20.0, -20.5, -0.5)]).T).T[:, :2])
    cube = [Part(np.array([0.0, 0.0, height / 2]), np.array([1.2, 1.2, height]), np.array([0.95, 0.95, 0.95]))]
    agent = Agent(99, "debris", cube, cross, s=20.0, speed=10.0, follows_traffic=False)
    renderer = Renderer(rig)
    renderer.set_look(look)
    renderer.set_static(static_mesh(world))
    lighting, ones = scene_lighting(world, cfg), np.ones(len(rig))
    offsets = shutter_offsets(cfg, time_of_day)
    try:
        world.agents = []
        bg = renderer.render(DynamicMesh(world).build(), ego, lighting, ones, 0)[0]
        world.agents = [agent]
        dyn = DynamicMesh(world)
        sharp = renderer.render(dyn.build(), ego, lighting, ones, 0)[0]
        moved = renderer.render(dyn.build(), ego, lighting, ones, 0, subframes=subframes(world, dyn, offsets))[0]
    finally:
        renderer.ctx.release()
    assert rig.cameras[0].name == "CAM_FRONT"
    return {"cam": rig.cameras[0], "ego": ego, "agent": agent, "offsets": offsets, "bg": bg, "sharp": sharp,
            "moved": moved}


def test_blur_smear_is_the_velocity_over_the_exposure():
    """A white cube crossing 10 m ahead at 10 m/s, the ego standing: with a 50 ms exposure it is
    smeared along the row by the distance its projection moves between the first and the last
    sub-frame, and its instance mask stays the sharp one."""
    r = _crossing_cube(replace(PLAIN, shutter_ms=50.0, shutter_samples=5), 1.2)
    cam, ego, agent, offsets, bg, sharp, blurred = (r[k] for k in ("cam", "ego", "agent", "offsets", "bg", "sharp", "moved"))
    np.testing.assert_array_equal(sharp.instance, blurred.instance)
    rows = np.flatnonzero((sharp.instance == 99).any(1))
    row = int(rows[len(rows) // 2])

    def extent(img) -> int:  # columns of the row the cube changes
        cols = np.flatnonzero(np.abs(img.rgb[row].astype(int) - bg.rgb[row]).max(1) > 4)
        return int(cols[-1] - cols[0] + 1)

    # where the cube's centre projects at the first and the last sub-frame
    u = [cam.project_ego((np.linalg.inv(ego) @ agent.pose_at(float(t)) @ [0, 0, 0.6, 1])[None, :3])[0][0, 0]
         for t in (offsets[0], offsets[-1])]
    smear = abs(u[1] - u[0])
    assert smear > 3.0  # the test sees a real smear (~5 px)
    assert abs((extent(blurred) - extent(sharp)) - smear) <= 1.5, (extent(blurred), extent(sharp), smear)


def test_rolling_shutter_skews_a_crossing_object_band_by_band():
    """A tall white cube crossing 10 m ahead at 10 m/s, the ego standing, a 60 ms rolling shutter in
    7 bands: each band of rows shows the cube where it is at that band's instant (its left edge
    moves by the projection's travel), the middle band and every label channel stay the labelled
    instant's."""
    r = _crossing_cube(replace(PLAIN, rolling_shutter_ms=60.0, shutter_samples=7), 5.0, "night")
    cam, ego, agent, offsets, bg, sharp, rolled = (r[k] for k in ("cam", "ego", "agent", "offsets", "bg", "sharp", "moved"))
    np.testing.assert_allclose(offsets, 0.06 * ((np.arange(7) + 0.5) / 7 - 0.5), atol=1e-12)  # not longer at night
    for ch in ("semantic", "instance", "depth", "normal"):
        np.testing.assert_array_equal(getattr(sharp, ch), getattr(rolled, ch))

    def left(img, row) -> int:  # the cube's first column on a row
        return int(np.flatnonzero(np.abs(img.rgb[row].astype(int) - bg.rgb[row]).max(1) > 4)[0])

    rows = np.flatnonzero((sharp.instance == 99).any(1))
    checked = 0
    for k, t in enumerate(offsets):
        y0, y1 = round(k * cam.height / 7), round((k + 1) * cam.height / 7)
        band = [row for row in rows if y0 + 1 <= row < y1 - 1]  # rows well inside band k
        if not band:
            continue
        r = band[len(band) // 2]
        u = [cam.project_ego((np.linalg.inv(ego) @ agent.pose_at(float(tau)) @ [0.6, 0.6, 2.5, 1])[None, :3])[0][0, 0]
             for tau in (0.0, t)]
        assert abs((left(rolled, r) - left(sharp, r)) - (u[1] - u[0])) <= 1.5, (k, left(rolled, r), left(sharp, r), u)
        checked += 1 if abs(u[1] - u[0]) > 2.0 else 0
    assert checked >= 2  # bands away from the middle show a real skew (~2-5 px)
