"""The look switches (configs/sim.yaml `look:`) change the RGB image only, never the labels: the
colour pass may be multisampled, shadowed, textured and tone mapped while the label channels
stay one-sample and exact. Also: the gait cycle keeps pedestrians on the ground and inside their
box, and every detailed body is convex parts (the silhouette rule of sim.labels)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.agents import Agent, make_body
from sim.config import LookConfig, SimConfig
from sim.generate import render_frames

OLD = LookConfig(detailed_meshes=False, textures=False, hdr=False, sensor="gaussian", antialias=1, shadows="off", glare="off")
FULL = LookConfig(antialias=4, shadows="on", glare="on", shadow_resolution=512)


def _frame(look: LookConfig, seed: int = 3):
    cfg = SimConfig(rig="nuscenes6", image_width=80, image_height=48, frames_per_scene=1, look=look)
    return render_frames(cfg, seed)[0]


@pytest.mark.parametrize("look", [FULL, replace(FULL, detailed_meshes=False)], ids=["full", "full-boxes"])
def test_look_changes_rgb_not_labels(look):
    """Every GPU-only effect forced on (4x MSAA, shadows, glare) against every effect off with the
    same bodies: labels byte-identical, images different."""
    base = _frame(replace(OLD, detailed_meshes=look.detailed_meshes))
    fancy = _frame(look)
    assert fancy["labels"] == base["labels"]
    for a, b in zip(base["images"], fancy["images"]):
        for k in ("semantic", "instance", "depth", "normal"):
            assert np.array_equal(getattr(a, k), getattr(b, k)), k
    diff = np.mean([np.abs(a.rgb.astype(int) - b.rgb.astype(int)).mean() for a, b in zip(base["images"], fancy["images"])])
    assert diff > 2.0


def test_look_same_seed_same_pixels():
    a, b = _frame(FULL), _frame(FULL)
    assert all(np.array_equal(x.rgb, y.rgb) for x, y in zip(a["images"], b["images"]))


def test_auto_effects_follow_the_renderer():
    assert LookConfig().resolved(gpu=False) == replace(LookConfig(), antialias=1, shadows="off", glare="off")
    assert LookConfig().resolved(gpu=True) == replace(LookConfig(), antialias=4, shadows="on", glare="on")
    assert LookConfig(antialias=2, shadows="off").resolved(gpu=True).antialias == 2


def test_walkers_stay_on_the_ground_and_in_their_box():
    rng = np.random.default_rng(5)
    for i in range(6):
        a = Agent(1, "pedestrian", make_body("pedestrian", rng), None)
        assert a.animated
        lo, hi = a.box_center - a.box_size / 2 - 1e-6, a.box_center + a.box_size / 2 + 1e-6
        for s in np.linspace(0, 3.0, 13):
            a.s = s
            a.update_pose()
            pts = np.concatenate([p.points() for p in a.parts])
            assert abs(pts[:, 2].min()) < 1e-9, (i, s)  # a foot on the ground at every phase
            assert (pts >= lo).all() and (pts <= hi).all(), (i, s)


def test_children_are_drawn_and_shorter():
    rng = np.random.default_rng(0)
    heights = [Agent(1, "pedestrian", make_body("pedestrian", rng), None).box_size[2] for _ in range(60)]
    assert min(heights) < 1.45 and max(heights) > 1.55
