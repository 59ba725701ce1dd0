"""The loader's decoded-frame cache covers clips: a video model's items (clips of T frames) come from the
cache after their first read, identical to reading them again from disk, and the augmentation still
differs per epoch."""
from __future__ import annotations

import torch
from dataset_fixtures import make_sim

from hydranet.data import SimDataset
from hydranet.loader import Augmenter, LabelledFrames
from hydranet.tasks import build_task


def test_clip_items_from_the_cache_equal_a_fresh_read(tmp_path, monkeypatch):
    data = SimDataset(make_sim(tmp_path / "sim"))
    tasks = {"drivable": build_task("drivable", data.meta, 16)}
    cached = LabelledFrames(data, tasks, (64, 96), clip_length=3)
    fresh = LabelledFrames(data, tasks, (64, 96), clip_length=3, cache_mb=0)
    reads = []
    original = data.clip
    monkeypatch.setattr(data, "clip", lambda *a, **k: reads.append(a) or original(*a, **k))
    for i in range(len(cached)):
        first = cached[i]
        n = len(reads)
        again = cached[i]
        assert len(reads) == n, "a cached clip was read from disk again"
        other = fresh[i]
        for k in ("images", "intrinsics", "cam2ego", "ego2world"):
            assert torch.equal(first[k], again[k]) and torch.equal(first[k], other[k]), (i, k)
        assert (first["targets"]["drivable"]["mask"] == other["targets"]["drivable"]["mask"]).all()


def test_cached_clips_are_augmented_per_epoch(tmp_path):
    data = SimDataset(make_sim(tmp_path / "sim"))
    tasks = {"drivable": build_task("drivable", data.meta, 16)}
    aug = Augmenter(True, False, (1.0, 1.25), 0.5, 0.0, None)
    frames = LabelledFrames(data, tasks, (64, 96), aug, seed=0, clip_length=2)
    a, b, a2 = frames[(0, 1)], frames[(1, 1)], frames[(0, 1)]
    assert torch.equal(a["images"], a2["images"]), "the same (epoch, item) is augmented the same"
    assert not torch.equal(a["images"], b["images"]), "another epoch is augmented otherwise"
