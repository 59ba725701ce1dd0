"""Training: exact resume, 2-process DDP, loss goes down, NaN stop, bad checkpoints and frames,
geometric augmentation consistency. Tiny: 96x160 sim images, 1-2 cameras, a few steps."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hydranet.data import DatasetError, SimDataset
from hydranet.loader import Augmenter, StepBatchSampler, resize_crop
from hydranet.experiment import load_experiment
from hydranet.checkpoint import load_checkpoint, model_from_checkpoint
from hydranet.config import ConfigError
from hydranet.train import TrainingDiverged, build_training_data, train
from hydranet.models import build_model

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny.yaml"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("sim") / "tiny",
                            SimConfig(image_width=160, image_height=96, frames_per_scene=4), scenes=2, seed=0,
                            progress=False)


def cfg(root, *overrides):
    base = [f"data.root={root}", "data.cameras=[CAM_FRONT]", "num_workers=0", "batch_size=2", "steps=4",
            "checkpoint_every=2", "log_every=1", "optim.warmup_steps=2"]
    return load_experiment(TINY, base + list(overrides))


def states_equal(a: dict, b: dict) -> list[str]:
    return [k for k in a if not torch.equal(a[k], b[k])]


def test_resume_matches_uninterrupted_run(data, tmp_path):
    c = cfg(data, "steps=6", "checkpoint_every=3", "data.cameras=[CAM_FRONT,CAM_BACK]", "model.balancer=pcgrad")
    full = train(c, tmp_path / "a", progress=False)
    train(c, tmp_path / "b", progress=False, stop_at=3)
    assert load_checkpoint(tmp_path / "b")["step"] == 3
    resumed = train(c, tmp_path / "b", resume=tmp_path / "b", progress=False)
    assert not states_equal(full.state_dict(), resumed.state_dict())
    ca, cb = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    assert ca["step"] == cb["step"] == 6
    assert ca["scheduler"] == cb["scheduler"]
    for sa, sb in zip(ca["optimizer"]["state"].values(), cb["optimizer"]["state"].values()):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    assert torch.equal(ca["rng"]["torch"], cb["rng"]["torch"])


def test_batch_order_is_a_function_of_seed_and_step():
    s = StepBatchSampler(10, 2, seed=3, total_steps=12)
    late = StepBatchSampler(10, 2, seed=3, total_steps=12, start_step=7)
    assert list(s)[7:] == list(late)
    ranks = [StepBatchSampler(10, 2, seed=3, total_steps=2, rank=r, world=2) for r in (0, 1)]
    first = [i for r in ranks for b in r for _, i in b]
    assert len(set(first)) == len(first) == 8  # the two ranks read disjoint frames


def test_two_process_ddp_ends_with_identical_weights(data, tmp_path):
    out = tmp_path / "ddp"
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(REPO / "tests" / "ddp_worker.py"), str(out), f"data.root={data}", "data.cameras=[CAM_FRONT]",
           "num_workers=0", "batch_size=2", "steps=3", "checkpoint_every=3", "device=cpu"]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    w0 = torch.load(out / "rank0.pt", weights_only=True)
    w1 = torch.load(out / "rank1.pt", weights_only=True)
    assert not states_equal(w0, w1)
    # the weights moved away from the initialization, and rank 0's checkpoint holds them
    assert states_equal(w0, build_model(cfg(data).model, SimDataset(data, channels=()).meta).state_dict())
    assert not states_equal(w0, load_checkpoint(out)["model"])


def test_short_training_lowers_every_head_loss(data, tmp_path):
    history: list[dict[str, float]] = []
    c = cfg(data, "steps=40", "checkpoint_every=40", "augment.photometric=false", "augment.geometric=false",
            "optim.lr=0.004", "optim.warmup_steps=3")
    model = train(c, tmp_path / "run", progress=False, on_step=lambda s, l: history.append(l))
    assert len(history) == 40
    for head in model.heads:
        first = np.mean([h[head] for h in history[:4]])
        last = np.mean([h[head] for h in history[-4:]])
        assert last < first, f"{head}: loss {first:.4f} -> {last:.4f}"


def test_nan_loss_stops_naming_head_and_step_and_keeps_last_good_checkpoint(data, tmp_path, monkeypatch):
    from hydranet.tasks.depth import DepthTask

    calls = {"n": 0}
    real = DepthTask.loss

    def flaky(self, outputs, targets):
        calls["n"] += 1
        out = real(self, outputs, targets)
        return {k: v * float("nan") for k, v in out.items()} if calls["n"] == 3 else out

    monkeypatch.setattr(DepthTask, "loss", flaky)
    with pytest.raises(TrainingDiverged, match=r"head 'depth' is nan at step 3.*checkpoint\.pt \(step 2\)"):
        train(cfg(data, "checkpoint_every=1"), tmp_path / "run", progress=False)
    assert load_checkpoint(tmp_path / "run")["step"] == 2


def test_checkpoint_from_another_head_set_lists_mismatched_keys(data, tmp_path):
    train(cfg(data, "steps=1", "checkpoint_every=1", "model.tasks=[{name: depth}]"), tmp_path / "run", progress=False)
    ckpt = load_checkpoint(tmp_path / "run")
    other = cfg(data, "model.tasks=[{name: depth}, {name: drivable}]")
    with pytest.raises(ValueError, match=r"missing keys \[heads\.drivable\."):
        model_from_checkpoint(ckpt, other)
    model_from_checkpoint(ckpt)  # its own config fits


def test_missing_camera_image_is_an_error_naming_the_file(data, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(data, broken)
    victim = next((broken / "scenes").glob("scene_*/000001/CAM_FRONT.jpg"))
    victim.unlink()
    c = cfg(broken)
    frames = build_training_data(c, build_model(c.model, SimDataset(broken, channels=()).meta))
    loader = torch.utils.data.DataLoader(frames, batch_size=1, num_workers=0, collate_fn=lambda x: x)
    with pytest.raises(DatasetError, match=str(victim).replace(".", r"\.")):
        for _ in loader:
            pass


def test_geometric_augmentation_keeps_boxes_lanes_and_intrinsics_consistent(data):
    sample = SimDataset(data, cameras=["CAM_FRONT", "CAM_BACK"])[2]
    scales, offsets = [(1.3, 1.3), (1.15, 1.15)], [(11.0, 7.0), (5.0, 9.0)]
    out = resize_crop(sample, scales, offsets, (96, 160))
    n_boxes = 0
    for i, cam in enumerate(sample["camera_names"]):
        inst = out["instance"][i]
        for b in out["labels"]["cameras"][cam]["boxes2d"]:
            ys, xs = np.nonzero(inst == b["track_id"])
            if not len(xs):
                continue
            n_boxes += 1
            x0, y0, x1, y1 = b["bbox"]
            # pixel column c covers [c, c + 1); nearest resampling may move an edge by one pixel
            assert x0 - 1 <= xs.min() and xs.max() + 1 <= x1 + 1 and y0 - 1 <= ys.min() and ys.max() + 1 <= y1 + 1, b
        # intrinsics: a camera point projects where the old projection maps to
        p = np.array([1.5, -0.7, 12.0])
        u0 = sample["intrinsics"][i] @ p
        u1 = out["intrinsics"][i] @ p
        (sx, sy), (ox, oy) = scales[i], offsets[i]
        expect = np.array([sx * (u0[0] / u0[2] + 0.5) - 0.5 - ox, sy * (u0[1] / u0[2] + 0.5) - 0.5 - oy])
        np.testing.assert_allclose(u1[:2] / u1[2], expect, atol=1e-3)
        for lane in out["labels"]["cameras"][cam]["lanes2d"]:
            pts = np.asarray(lane["points"])
            assert (pts >= -0.5).all() and (pts[:, 0] < 159.5).all() and (pts[:, 1] < 95.5).all()
    assert n_boxes > 0
    assert out["depth"].shape == (2, 96, 160) and out["drivable"].dtype == bool


def test_augmentation_is_seeded(data):
    sample = SimDataset(data, cameras=["CAM_FRONT"])[0]
    aug = Augmenter(scale_range=(1.0, 1.4), geometric_p=1.0)
    a, b, c = aug(sample, (0, 1, 2)), aug(sample, (0, 1, 2)), aug(sample, (0, 1, 3))
    assert np.array_equal(a["images"], b["images"]) and np.array_equal(a["intrinsics"], b["intrinsics"])
    assert not np.array_equal(a["images"], c["images"])


def test_frame_cache_gives_the_same_items_and_skips_decoding(data, monkeypatch):
    """Items from the decoded-frame cache equal freshly loaded ones, augmentation included, and a
    cached frame is not read from disk again."""
    c = cfg(data)
    model = build_model(c.model, SimDataset(data, channels=()).meta)
    cached, fresh = build_training_data(c, model), build_training_data(c, model)
    fresh.cache.room = 0  # nothing fits: every item is loaded and decoded again
    items = [(0, 1), (3, 2), (1, 1)]  # (epoch, index): frame 1 twice, with other augmentations
    for it in items:
        a, b = cached[it], fresh[it]
        assert torch.equal(a["images"], b["images"]) and torch.equal(a["intrinsics"], b["intrinsics"])
        for head in a["targets"]:
            for k, v in a["targets"][head].items():
                if isinstance(v, np.ndarray):
                    assert np.array_equal(v, b["targets"][head][k]), (head, k)
    assert set(cached.cache.entries) == {1, 2} and not fresh.cache.entries
    monkeypatch.setattr(type(cached.data), "__getitem__", lambda self, i: pytest.fail("cached frame decoded again"))
    cached[(5, 1)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 autocast training needs a CUDA device")
def test_bf16_amp_on_cuda(data, tmp_path):
    history: list[dict[str, float]] = []
    train(cfg(data, "amp=true", "device=cuda", "steps=2"), tmp_path / "run", progress=False,
          on_step=lambda s, l: history.append(l))
    assert len(history) == 2 and all(np.isfinite(v) for h in history for v in h.values())


def test_two_runs_of_the_same_config_give_bit_identical_weights(data, tmp_path):
    """Same command, same seed, same machine: the same weights, with augmentation and a loader
    worker (every random source is seeded: batch order, augmentation per (seed, epoch, frame),
    worker RNGs, initialization)."""
    c = cfg(data, "steps=3", "num_workers=1", "augment.photometric=true", "augment.geometric=true")
    a = train(c, tmp_path / "a", progress=False)
    b = train(c, tmp_path / "b", progress=False)
    assert states_equal(a.state_dict(), b.state_dict()) == []


def test_an_existing_run_is_never_replaced_without_overwrite(data, tmp_path):
    c = cfg(data, "steps=2")
    train(c, tmp_path / "run", progress=False)
    before = load_checkpoint(tmp_path / "run")
    with pytest.raises(FileExistsError, match=r"already holds a run.*--resume.*--overwrite"):
        train(cfg(data, "steps=1"), tmp_path / "run", progress=False)
    after = load_checkpoint(tmp_path / "run")
    assert after["step"] == 2 and states_equal(after["model"], before["model"]) == []  # untouched
    train(cfg(data, "steps=1"), tmp_path / "run", progress=False, overwrite=True)
    assert load_checkpoint(tmp_path / "run")["step"] == 1


def test_resume_applies_and_records_safe_overrides_and_refuses_the_rest(data, tmp_path, capsys):
    from hydranet.cli import main

    run = tmp_path / "run"
    train(cfg(data, "steps=2"), run, progress=False)
    assert main(["train", "--resume", str(run), "--set", "optim.lr=1e-4", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "'optim.lr'" in err and "start a new run" in err and err.count("\n") == 1
    assert main(["train", "--resume", str(run), "--quiet"]) == 2  # already at steps=2
    assert "already at step 2" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--set", "steps=3", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "steps: 2 -> 3" in out and "trained steps 3..3" in out
    assert load_checkpoint(run)["step"] == 3
    assert json.loads((run / "config.json").read_text())["steps"] == 3  # what took effect is what is recorded


def test_checkpoint_with_non_finite_weights_is_refused_naming_the_tensor(data, tmp_path):
    from hydranet.checkpoint import save_checkpoint

    train(cfg(data, "steps=1"), tmp_path / "run", progress=False)
    ckpt = load_checkpoint(tmp_path / "run")
    name = next(k for k, v in ckpt["model"].items() if v.is_floating_point() and v.numel() > 1)
    ckpt["model"][name].view(-1)[0] = float("nan")
    save_checkpoint(tmp_path / "bad.pt", ckpt)
    with pytest.raises(ValueError, match=rf"weight '{re.escape(name)}' has 1 non-finite"):
        load_checkpoint(tmp_path / "bad.pt")


def test_a_full_disk_while_checkpointing_leaves_the_old_checkpoint_and_no_temp(tmp_path, monkeypatch):
    import errno

    from hydranet.checkpoint import save_checkpoint

    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"step": 1})

    def full(obj, f, *a, **k):
        Path(f).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError, match="disk is full.*previous checkpoint"):
        save_checkpoint(path, {"step": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_norm_eval_needs_a_trained_start_and_then_keeps_batchnorm_statistics(data, tmp_path):
    """norm_eval from scratch is refused before anything is written; from a trained run, its BatchNorm statistics
    stay exactly the start's while the weights train."""
    with pytest.raises(ConfigError, match="config key 'norm_eval'.*--init"):
        train(cfg(data, "norm_eval=true"), tmp_path / "fresh", progress=False)
    assert not (tmp_path / "fresh").exists()
    start = train(cfg(data, "steps=2"), tmp_path / "start", progress=False).state_dict()
    got = train(cfg(data, "steps=2", "norm_eval=true"), tmp_path / "tuned", progress=False,
                init_from=tmp_path / "start").state_dict()
    stats = [k for k in start if k.endswith(("running_mean", "running_var"))]
    assert stats and all(torch.equal(got[k], start[k]) for k in stats)
    assert states_equal(got, start)  # the weights trained
