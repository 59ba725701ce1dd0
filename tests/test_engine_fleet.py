"""data_engine.fleet: seeded per-clip conditions at the configured rates, rendered exactly, tags kept
apart in truth/scenarios.json (scene.json withholds them), the same dataset format as the sim."""
from __future__ import annotations

import collections
import json

import pytest

from data_engine.fleet import Fleet, FleetConfig, FleetError, clip_config, draw_clip, generate_fleet, read_frame
from hydranet.cli import main
from hydranet.config import load_config
from sim.config import SimConfig


def test_drawn_rates_follow_the_config():
    cfg = load_config(FleetConfig, "fleet")
    n, counts = 3000, collections.Counter()
    for i in range(n):
        d = draw_clip(cfg, 0, i)
        counts[d["time_of_day"]] += 1
        counts[d["weather"]] += 1
        counts.update(d["rare"])
        assert len(d["rare"]) <= cfg.max_rare_per_clip
    assert abs(counts["night"] / n - 0.15) < 0.03 and abs(counts["fog"] / n - 0.10) < 0.02
    for name in ("cones_on_road", "debris_on_road", "unusual_vehicle"):
        assert 0.015 < counts[name] / n < 0.05, (name, counts[name])
    assert draw_clip(cfg, 0, 5) == draw_clip(cfg, 0, 5) and [draw_clip(cfg, 1, i) for i in range(20)] != \
        [draw_clip(cfg, 0, i) for i in range(20)]


def test_clip_config_is_one_hot():
    cfg = FleetConfig()
    sc = clip_config(cfg, {"time_of_day": "night", "weather": "fog", "rare": ["debris_on_road"]})
    assert sc.conditions.time_of_day == ("night",) and sc.conditions.weather == ("fog",)
    assert sc.rare.debris_on_road == 1.0 and sc.rare.cones_on_road == 0.0


def test_fleet_on_disk(tmp_path):
    out = tmp_path / "fleet"
    assert main(["engine", "fleet", "--out", str(out), "--clips", "2", "--seed", "3", "--quiet",
                 "--set", "sim.frames_per_scene=2", "--set", "sim.image_width=64", "--set", "sim.image_height=48",
                 "--set", "rare.debris_on_road=1.0"]) == 0
    truth = json.loads((out / "truth" / "scenarios.json").read_text())["clips"]
    assert sorted(truth) == ["clip_00000", "clip_00001"] and all(t["rare"] == ["debris_on_road"] for t in truth.values())
    scene = json.loads((out / "scenes" / "clip_00000" / "scene.json").read_text())
    assert "rare" not in json.dumps(scene["conditions"])  # withheld
    fleet = Fleet(out)
    assert fleet.clip_names == ["clip_00000", "clip_00001"] and len(fleet.cameras) == 6
    clip = fleet.clip("clip_00001")
    assert [f["index"] for f in clip.frames] == [0, 1] and clip.frames[1]["ego2world"].shape == (4, 4)
    imgs = read_frame(out, "clip_00001", clip.frames[0]["dir"], ["CAM_FRONT", "CAM_BACK"])
    assert imgs[0].shape == (48, 64, 3)
    from hydranet.data import SimDataset  # the same format: the training reader takes it

    assert len(SimDataset(out)) == 4
    # the sim renders what was drawn: debris boxes in the labels
    labels = json.loads((out / "scenes" / "clip_00000" / "000000" / "labels.json").read_text())
    assert any(b["class"] == "debris" for b in labels["boxes3d"])  # placed 20-50 m ahead, inside the label range
    cut = out / "scenes" / "clip_00000" / "000001" / "CAM_FRONT.jpg"
    cut.write_bytes(cut.read_bytes()[:200])
    with pytest.raises(ValueError, match="CAM_FRONT.jpg"):
        read_frame(out, "clip_00000", "000001", ["CAM_FRONT"])


def test_fleet_errors(tmp_path):
    with pytest.raises(FleetError, match="does not exist"):
        Fleet(tmp_path / "nope")
    (tmp_path / "x").mkdir()
    with pytest.raises(FleetError, match="dataset.json is missing"):
        Fleet(tmp_path / "x")
    with pytest.raises(ValueError, match="clips"):
        generate_fleet(tmp_path / "y", FleetConfig(sim=SimConfig(image_width=64, image_height=48, frames_per_scene=1)), 0, 0)
