"""The loader's decoded-frame cache covers clips: a video model's items (clips of T frames) come from the
cache after their first read, identical to reading them again from disk, and the augmentation still
differs per epoch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from dataset_fixtures import make_sim

from hydranet.data import SimDataset
from hydranet.loader import Augmenter, LabelledFrames
from hydranet.tasks import build_task


@pytest.mark.parametrize("on_bad_frame", ["raise", "skip"])
def test_clip_items_from_the_cache_equal_a_fresh_read(tmp_path, monkeypatch, on_bad_frame):
    """Every item equals the dataset's own clip at the model size, read again or not. Each frame is decoded once,
    however many clips hold it; a reader skipping bad frames (which may swap a clip for another) has its clips
    cached whole instead."""
    data = SimDataset(make_sim(tmp_path / "sim"), on_bad_frame=on_bad_frame)
    tasks = {"drivable": build_task("drivable", data.meta, 16)}
    cached = LabelledFrames(data, tasks, (64, 96), clip_length=3)
    fresh = LabelledFrames(data, tasks, (64, 96), clip_length=3, cache_mb=0)
    loads = []
    original = data.load
    monkeypatch.setattr(data, "load", lambda i: loads.append(i) or original(i))
    for i in range(len(cached)):
        first = cached[i]
        n = len(loads)
        again = cached[i]
        assert len(loads) == n, "a cached clip was read from disk again"
        other = fresh[i]
        for k in ("images", "intrinsics", "cam2ego", "ego2world"):
            assert torch.equal(first[k], again[k]) and torch.equal(first[k], other[k]), (i, k)
        assert (first["targets"]["drivable"]["mask"] == other["targets"]["drivable"]["mask"]).all()
        clip = [cached.fitted(s) for s in data.clip(cached.ends[i], 3, pad=True)]
        assert np.array_equal(first["images"].movedim(-3, -1).numpy(), np.stack([s["images"] for s in clip]))
    loads.clear()
    for i in range(len(cached)):
        cached[i]
    assert not loads, "every clip comes from the cache the second time round"
    keys = set(cached.cache.entries)
    assert keys == (set(range(len(data))) if on_bad_frame == "raise" else {("clip", end) for end in cached.ends})
    if on_bad_frame == "raise":  # frames shared by clips: one decode each (clips overlap by T - 1 frames)
        counted = LabelledFrames(data, tasks, (64, 96), clip_length=3)
        for i in range(len(counted)):
            counted[i]
        assert sorted(loads) == list(range(len(data)))


def test_cached_clips_are_augmented_per_epoch(tmp_path):
    data = SimDataset(make_sim(tmp_path / "sim"))
    tasks = {"drivable": build_task("drivable", data.meta, 16)}
    aug = Augmenter(True, False, (1.0, 1.25), 0.5, 0.0, None)
    frames = LabelledFrames(data, tasks, (64, 96), aug, seed=0, clip_length=2)
    a, b, a2 = frames[(0, 1)], frames[(1, 1)], frames[(0, 1)]
    assert torch.equal(a["images"], a2["images"]), "the same (epoch, item) is augmented the same"
    assert not torch.equal(a["images"], b["images"]), "another epoch is augmented otherwise"


def test_mixed_and_class_mapped_datasets_name_the_frames_of_their_clips(tmp_path):
    """A clip of source 1 in a mixed run names that source's frames at their flat indices, and a class-mapped
    dataset its reader's: the frames `clip` reads, labels mapped alike."""
    from hydranet.data.sources import ClassMapped, MixedDataset, Source

    a, b = SimDataset(make_sim(tmp_path / "a")), SimDataset(make_sim(tmp_path / "b"))
    mixed = MixedDataset([Source("a", "sim", a), Source("b", "sim", b)])
    mapped = ClassMapped(b, {"car": "vehicle", "truck": None}, unscored=("signs_lights",))
    for ds in (mixed, mapped):
        for end in ds.clip_ends(3, pad=True):
            frames = ds.clip_indices(end, 3, pad=True)
            assert len(frames) == 3 and frames[-1] == end
            want = ds.clip(end, 3, pad=True)
            got = [ds[i] for i in frames]
            assert [s["scene"] for s in got] == [s["scene"] for s in want]
            assert all(np.array_equal(g["images"], s["images"]) and g["labels"] == s["labels"]
                       and g.get("supervises") == s.get("supervises") for g, s in zip(got, want))
    assert any(b3["class"] == "vehicle" for s in (mapped[i] for i in range(len(mapped))) for b3 in s["labels"]["boxes3d"])
