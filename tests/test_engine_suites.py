"""The frozen scenario suites (docs/data_engine.md "Gate, suites, registry"): every slice rendered with its
forced conditions, seeds disjoint from the fleet's, deterministic and keyed by slice name, refused when
modified or overwritten without the flag, and nothing left behind by a failed generation."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_engine.fleet import FleetConfig, clip_seed
from data_engine.gate import evaluate_suites
from data_engine.suites import SUITES_FILE, SliceSpec, SuiteError, SuitesConfig, generate_suites, load_suites, suite_seed

TINY = dict(clips=1, frames=2, image_width=96, image_height=64)


# -- suites ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def suites(tmp_path_factory) -> Path:
    """Every default slice, 1 clip of 2 frames at 96x64."""
    return generate_suites(tmp_path_factory.mktemp("suites") / "all", SuitesConfig(**TINY), FleetConfig(), progress=False)


def test_suites_force_each_slice_condition(suites):
    from hydranet.data.sim_reader import SimDataset

    index = json.loads((suites / SUITES_FILE).read_text())
    assert list(index["slices"]) == ["day", "night", "rain", "fog", "cones_on_road", "debris_on_road",
                                     "night_pedestrian_crossing", "unusual_vehicle"]
    for name, spec in SuitesConfig().slices.items():
        s = index["slices"][name]
        assert s["clips"] == 1 and s["frames"] == 2 and len(s["seeds"]) == 1
        scene = json.loads((suites / name / "scenes" / f"{name}_000" / "scene.json").read_text())
        assert scene["conditions"] == {"time_of_day": spec.time_of_day, "weather": spec.weather, "rare": list(spec.rare)}
        assert scene["seed"] == s["seeds"][0] == suite_seed(index["seed"], name, 0)
        ds = SimDataset(suites / name)
        assert len(ds) == 2 and ds[0]["images"].shape == (6, 64, 96, 3)
    assert index["slices"]["night"]["time_of_day"] == "night" and index["slices"]["fog"]["weather"] == "fog"
    # seeds disjoint from every fleet clip seed of fleet seeds 0..199, clips 0..199 (and the sim's scene seeds)
    from sim.generate import scene_seed

    fleet_seeds = {f(s, i) for s in range(200) for i in range(200) for f in (scene_seed, clip_seed)}
    assert not {x for s in index["slices"].values() for x in s["seeds"]} & fleet_seeds


def test_suites_are_deterministic_and_keyed_by_slice_name(suites, tmp_path):
    night = {"night": SuitesConfig().slices["night"]}  # the second slice of the full suites, the only one here
    again = generate_suites(tmp_path / "again", SuitesConfig(**TINY, slices=night), FleetConfig(), progress=False)
    a, b = (json.loads((p / SUITES_FILE).read_text())["slices"] for p in (suites, again))
    # same seed, same slice name: same seeds and byte-identical content, whatever the other slices
    assert b["night"]["seeds"] == a["night"]["seeds"] and b["night"]["digest"] == a["night"]["digest"]
    other = generate_suites(tmp_path / "other", SuitesConfig(**TINY, slices=night), FleetConfig(), seed=1, progress=False)
    assert json.loads((other / SUITES_FILE).read_text())["slices"]["night"]["digest"] != a["night"]["digest"]


def test_suites_refuse_overwrite_and_modified_content(suites, tmp_path):
    one = {"day": SliceSpec("day", "clear")}
    out = generate_suites(tmp_path / "s", SuitesConfig(**TINY, slices=one), FleetConfig(), progress=False)
    digest = load_suites(out)["suites"]["day"]["digest"]
    with pytest.raises(SuiteError, match="exists; pass --overwrite"):
        generate_suites(out, SuitesConfig(**TINY, slices=one), FleetConfig(), progress=False)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "keep.txt").write_text("x")
    with pytest.raises(SuiteError, match="not a suites folder"):
        generate_suites(tmp_path / "plain", SuitesConfig(**TINY, slices=one), FleetConfig(), overwrite=True, progress=False)
    assert (tmp_path / "plain" / "keep.txt").exists()
    jpg = next((out / "day").rglob("CAM_FRONT.jpg"))
    jpg.write_bytes(jpg.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(SuiteError, match="suite day in .* was modified after it was generated"):
        load_suites(out)
    with pytest.raises(SuiteError, match="suite day .* was modified"):
        evaluate_suites(tmp_path / "no_such_model", out)  # refused before any model is opened
    generate_suites(out, SuitesConfig(**TINY, slices=one), FleetConfig(), overwrite=True, progress=False)
    assert load_suites(out)["suites"]["day"]["digest"] == digest
    assert not list(tmp_path.glob("*.tmp-*")) and not list(tmp_path.glob("*.old-*"))


def test_failed_generation_leaves_nothing(tmp_path, monkeypatch):
    import sim.generate

    calls = []
    real = sim.generate.render_scene

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("disk full (simulated)")
        return real(*a, **k)

    monkeypatch.setattr(sim.generate, "render_scene", flaky)
    two = {k: SuitesConfig().slices[k] for k in ("day", "night")}
    with pytest.raises(OSError, match="simulated"):
        generate_suites(tmp_path / "s", SuitesConfig(**TINY, slices=two), FleetConfig(), progress=False)
    assert list(tmp_path.iterdir()) == []
