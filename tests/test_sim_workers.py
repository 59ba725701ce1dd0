"""`workers` of `sim generate` and `engine fleet`: scenes rendered by several processes give the same bytes
as one process (scene order, file names, JSON contents), a worker's error is the one-process error, and a
failed run leaves nothing behind (sim/generate.py `render_scenes`)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from data_engine.fleet import FleetConfig, generate_fleet
from sim.config import SimConfig
from sim.generate import SceneTask, dataset_meta, generate_dataset, render_scenes, sim_rig
from sim.writer import DatasetWriter

TINY = dict(rig="nuscenes6", image_width=64, image_height=48, frames_per_scene=2)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def same_tree(a: Path, b: Path) -> None:
    ta, tb = tree(a), tree(b)
    assert sorted(ta) == sorted(tb)
    differ = [k for k in ta if ta[k] != tb[k]]
    assert not differ, differ


def test_dataset_workers_byte_identical(tmp_path):
    cfg = SimConfig(**TINY)
    one = generate_dataset(tmp_path / "one", cfg, scenes=2, seed=11, progress=False)
    two = generate_dataset(tmp_path / "two", cfg, scenes=2, seed=11, progress=False, workers=2)
    same_tree(one, two)
    assert (two / "scenes" / "scene_0001" / "000001" / "labels.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]  # no temp folders left


def test_fleet_workers_byte_identical(tmp_path):
    cfg = FleetConfig(sim=SimConfig(**TINY))
    one = generate_fleet(tmp_path / "one", cfg, clips=2, seed=3, progress=False)
    two = generate_fleet(tmp_path / "two", cfg, clips=2, seed=3, progress=False, workers=2)
    same_tree(one, two)
    assert (two / "truth" / "scenarios.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]


@pytest.mark.parametrize("workers", [0, -1, 1.5, True, "2"])
def test_bad_workers_refused_before_writing(tmp_path, workers):
    with pytest.raises(ValueError, match="--workers must be a whole number of processes, at least 1"):
        generate_dataset(tmp_path / "ds", SimConfig(**TINY), scenes=1, seed=0, progress=False, workers=workers)
    with pytest.raises(ValueError, match="--workers"):
        generate_fleet(tmp_path / "fl", FleetConfig(sim=SimConfig(**TINY)), clips=1, seed=0, progress=False, workers=workers)
    assert list(tmp_path.iterdir()) == []


def failing_run(out: Path, workers: int) -> BaseException:
    """A run whose second scene fails inside `render_scene` (a name the writer refuses) after the first was written."""
    cfg = SimConfig(**TINY)
    rig = sim_rig(cfg)
    tasks = [SceneTask("scene_0000", 1, cfg), SceneTask("bad/name", 2, cfg)]
    with pytest.raises(ValueError) as err, DatasetWriter(out, dataset_meta(cfg, rig, 0)) as writer:
        render_scenes(writer, tasks, rig, workers)
    return err.value


def test_worker_error_is_the_one_process_error(tmp_path):
    one, two = failing_run(tmp_path / "one", 1), failing_run(tmp_path / "two", 2)
    assert type(one) is type(two) and str(one) == str(two) and "bad/name" in str(two)
    assert list(tmp_path.iterdir()) == []  # neither the outputs nor their temp folders


def blank_frame(rig, cfg: SimConfig, k: int) -> dict:
    n = round(2 * cfg.bev_range / cfg.bev_resolution)
    cams = {c.name: {"rgb": np.zeros((c.height, c.width, 3), np.uint8), "depth": np.zeros((c.height, c.width), np.float32),
                     "normal": np.zeros((c.height, c.width, 3), np.float32),
                     "semantic": np.zeros((c.height, c.width), np.uint8),
                     "instance": np.zeros((c.height, c.width), np.int32)} for c in rig.cameras}
    return {"dir": f"{k:06d}", "cameras": cams, "bev": np.zeros((3, n, n), np.uint8), "labels": {"boxes3d": []}}


def test_deferred_frame_error_raised_by_the_next_call(tmp_path):
    """write_frame(wait=False) (what render_scene uses): an encoding error of that frame is raised by the
    writer's next call, the same line as wait=True gives, and the run leaves nothing."""
    cfg = SimConfig(**TINY)
    rig = sim_rig(cfg)
    bad = blank_frame(rig, cfg, 0)
    next(iter(bad["cameras"].values()))["instance"][0, 0] = 70000  # does not fit the uint16 PNG
    messages = []
    for wait in (True, False):
        out = tmp_path / f"ds{wait}"
        with pytest.raises(ValueError, match="instance ids must lie in 0..65535") as err:
            with DatasetWriter(out, dataset_meta(cfg, rig, 0)) as w:
                w.write_scene({"name": "s", "seed": 0, "conditions": {}, "frames": [{"dir": f"{k:06d}"} for k in range(2)]})
                w.write_frame("s", bad, wait=wait)
                w.write_frame("s", blank_frame(rig, cfg, 1), wait=wait)
        messages.append(str(err.value))
    assert messages[0] == messages[1]
    assert list(tmp_path.iterdir()) == []


def test_generate_split_holds_out_its_own_config(tmp_path):
    from sim.config import DEMO_SIM, DEMO_TRAIN_SIM, demo_train_sim
    from sim.generate import HELD_OUT_SEED, generate_split

    train_cfg, val_cfg = SimConfig(**TINY, density=1.5), SimConfig(**TINY)
    data, val = generate_split(tmp_path, train_cfg, 1, 1, seed=2, progress=False, val_cfg=val_cfg)
    meta = {p.name: json.loads((p / "dataset.json").read_text()) for p in (data, val)}
    assert meta["sim"]["sim_config"]["density"] == 1.5 and meta["sim"]["seed"] == 2
    assert meta["sim_val"]["sim_config"]["density"] == 1.0 and meta["sim_val"]["seed"] == 2 + HELD_OUT_SEED
    # the demo trains on busier scenes than it holds out, and they differ in nothing else
    assert DEMO_TRAIN_SIM.density > DEMO_SIM.density
    assert dataclasses.replace(DEMO_TRAIN_SIM, density=DEMO_SIM.density) == DEMO_SIM
    assert demo_train_sim() == DEMO_TRAIN_SIM and demo_train_sim(["density=1.0"]) == DEMO_SIM  # benchmarks' --sim-set


def test_the_demo_split_trains_on_its_busier_scenes_and_holds_out_the_demo_sim(tmp_path):
    from hydranet.config import to_dict
    from sim.config import DEMO_SIM
    from sim.generate import generate_demo_split

    small = ["image_width=64", "image_height=48", "frames_per_scene=1"]  # a benchmark's --sim-set, training side only
    data, val = generate_demo_split(tmp_path, 1, 1, sim_set=small, progress=False)
    train_cfg = json.loads((data / "dataset.json").read_text())["sim_config"]
    assert train_cfg["density"] == 1.5 and train_cfg["image_width"] == 64
    assert json.loads((val / "dataset.json").read_text())["sim_config"] == json.loads(json.dumps(to_dict(DEMO_SIM)))


def test_the_demo_split_from_another_rig_renders_both_splits_from_it(tmp_path):
    import dataclasses

    from hydranet.config import to_dict
    from sim.config import DEMO_SIM
    from sim.generate import generate_demo_split

    data, val = generate_demo_split(tmp_path, 1, 1, sim_set=["frames_per_scene=1"], progress=False, rig="dashcam")
    train_meta, val_meta = (json.loads((d / "dataset.json").read_text()) for d in (data, val))
    assert train_meta["sim_config"]["rig"] == "dashcam" and train_meta["sim_config"]["density"] == 1.5
    assert val_meta["sim_config"] == json.loads(json.dumps(to_dict(dataclasses.replace(DEMO_SIM, rig="dashcam"))))
    assert [c["name"] for c in val_meta["rig"]["cameras"]] == ["CAM_FRONT"]
