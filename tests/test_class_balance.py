"""Repeat-factor sampling (`data.repeat_threshold`, hydranet/class_balance.py): LVIS's factors, the sampler's
epochs with repeated draws, and a training run that uses it."""
from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from hydranet.class_balance import classes_in, frame_classes, repeat_counts
from hydranet.config import ConfigError
from hydranet.data import DatasetError, SimDataset
from hydranet.data.sources import MixedDataset, Source
from hydranet.experiment import load_experiment
from hydranet.loader import StepBatchSampler
from hydranet.train import train

TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"


def test_repeat_counts_follow_lvis():
    # 10 frames: car in all, bus in 1 (f = 0.1), truck in 4 (f = 0.4); t = 0.4: r_bus = 2, r_truck = 1
    sets = [{"car"}] * 5 + [{"car", "truck"}] * 4 + [{"car", "bus"}]
    counts, factor = repeat_counts(sets, 0.4)
    assert factor == pytest.approx({"car": 1.0, "truck": 1.0, "bus": 2.0})
    assert counts.tolist() == [1] * 9 + [2]
    counts, factor = repeat_counts(sets + [set()], 0.9)  # a frame without objects: drawn once
    assert factor["bus"] == pytest.approx((0.9 / (1 / 11)) ** 0.5) and counts[-2] == 4 and counts[-1] == 1
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="repeat threshold"):
            repeat_counts(sets, bad)


def test_sampler_draws_each_frame_its_count_with_its_own_augmentation():
    counts = np.array([1, 3, 1, 2, 1, 1])
    s = StepBatchSampler(6, 3, seed=5, total_steps=3, repeats=counts)  # 9 draws: one epoch of 3 batches
    items = [it for b in s for it in b]
    assert Counter(i for _, i in items) == {i: int(c) for i, c in enumerate(counts)}
    assert len(set(items)) == len(items)  # the copies of a frame differ in their augmentation key
    late = StepBatchSampler(6, 3, seed=5, total_steps=3, start_step=2, repeats=counts)
    assert list(s)[2:] == list(late)  # resuming replays the same batches
    plain = StepBatchSampler(6, 3, seed=5, total_steps=4)
    ones = StepBatchSampler(6, 3, seed=5, total_steps=4, repeats=np.ones(6, int))
    assert list(plain) == list(ones)
    assert [i for b in list(plain)[:2] for _, i in b] == np.random.default_rng([5, 0]).permutation(6).tolist()
    with pytest.raises(ValueError, match="repeats must be 6 counts"):
        StepBatchSampler(6, 3, seed=5, total_steps=1, repeats=np.array([1, 0, 1, 1, 1, 1]))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("sim") / "tiny",
                            SimConfig(image_width=160, image_height=96, frames_per_scene=3), scenes=2, seed=3,
                            progress=False)


def test_a_sim_frames_classes_come_from_its_labels_alone(data):
    ds = SimDataset(data)
    for i in range(len(ds)):
        assert frame_classes(ds, i) == classes_in(ds[i]["labels"]) != set()


def test_training_with_class_balanced_sampling(data, tmp_path, capsys):
    base = [f"data.root={data}", "data.cameras=[CAM_FRONT]", "num_workers=0", "batch_size=2", "steps=2",
            "checkpoint_every=2", "optim.warmup_steps=1"]
    train(load_experiment(TINY, base + ["data.repeat_threshold=1.0"]), tmp_path / "run", progress=False)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("class-balanced sampling"))
    assert "6 frames ->" in line and "draws an epoch" in line
    with pytest.raises(ConfigError, match="data.repeat_threshold"):
        load_experiment(TINY, base + ["data.repeat_threshold=0"])


def test_classes_of_the_run_cameras_through_the_class_map_and_a_skipped_file(data, tmp_path):
    labels = {"boxes3d": [{"class": "car"}], "cameras": {"CAM_FRONT": {"boxes2d": [{"class": "bus"}]},
                                                         "CAM_BACK": {"boxes2d": [{"class": "trailer"}]}}}
    assert classes_in(labels) == {"car", "bus", "trailer"}
    assert classes_in(labels, ["CAM_FRONT", "CAM_LEFT"]) == {"car", "bus"}
    front = SimDataset(data, cameras=["CAM_FRONT"])
    assert frame_classes(front, 0) == classes_in(front[0]["labels"], ["CAM_FRONT"])
    ds = SimDataset(data)
    mixed = MixedDataset([Source("sim", "sim", ds, class_map={c: None for c in ds.classes if c != "car"})])
    assert frame_classes(mixed, 1) == {"car"} & frame_classes(ds, 1)  # the class map as training sees it
    bad = tmp_path / "bad"
    shutil.copytree(data, bad)
    scene, frame = ds.frame_ids[0]
    (bad / "scenes" / scene / frame / "labels.json").write_text("{ not json")
    assert frame_classes(SimDataset(bad, on_bad_frame="skip"), 0) == set()
    with pytest.raises(DatasetError, match="labels.json"):
        frame_classes(SimDataset(bad), 0)
