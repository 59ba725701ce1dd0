"""`optim.lr_mult` (mmengine's paramwise `lr_mult`): a learning-rate multiplier per parameter-name prefix,
the longest matching prefix winning at a module boundary; 0 freezes (no gradient computed, left out of the
optimizer). The second stage of the demo's recipe fine-tunes the trunk its first stage trained with it.

Tiny: a small module tree and one 1-step run of the tiny config on one camera."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from dataset_fixtures import make_sim
from torch import nn

from hydranet.config import ConfigError
from hydranet.curriculum import trunk_stage
from hydranet.experiment import OptimConfig, load_experiment
from hydranet.train import lr_multipliers, make_optimizer, make_scheduler, train

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Tree(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
        self.heads = nn.ModuleDict({"det2d": nn.Conv2d(4, 2, 1), "det2d_extra": nn.Conv2d(4, 2, 1)})


def test_the_longest_prefix_wins_at_a_module_boundary():
    mult = lr_multipliers(OptimConfig(lr_mult={"heads": 0.5, "heads.det2d": 0.1, "backbone.1": 2.0}), Tree())
    assert mult == {"backbone.0.weight": 1.0, "backbone.0.bias": 1.0, "backbone.1.weight": 2.0, "backbone.1.bias": 2.0,
                    "heads.det2d.weight": 0.1, "heads.det2d.bias": 0.1,  # not heads.det2d_extra: a boundary
                    "heads.det2d_extra.weight": 0.5, "heads.det2d_extra.bias": 0.5}


def test_groups_carry_the_multiplied_rate_and_decay_and_the_schedule_scales_them_alike():
    cfg = OptimConfig(lr=0.01, weight_decay=0.1, warmup_steps=2, lr_mult={"heads": 0.5})
    opt = make_optimizer(cfg, Tree())
    groups = [(g["lr"], g["weight_decay"], len(g["params"])) for g in opt.param_groups]
    assert groups == [(0.01, 0.1, 1), (0.01, 0.0, 3), (0.005, 0.1, 2), (0.005, 0.0, 2)]  # conv weights decay, 1-D not
    sched = make_scheduler(cfg, opt, 10)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.005, 0.005, 0.0025, 0.0025])  # warmup 1/2
    sched.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.01, 0.01, 0.005, 0.005])
    # no multiplier: the two groups (decay, no decay) of every parameter, as before lr_mult existed
    plain = make_optimizer(OptimConfig(lr=0.01), Tree())
    assert [(g["lr"], len(g["params"])) for g in plain.param_groups] == [(0.01, 3), (0.01, 5)]
    one = make_optimizer(dataclasses.replace(cfg, schedule="onecycle"), Tree())
    make_scheduler(dataclasses.replace(cfg, schedule="onecycle"), one, 10)
    assert [g["max_lr"] for g in one.param_groups] == [0.01, 0.01, 0.005, 0.005]


def test_a_prefix_naming_no_parameter_and_a_bad_multiplier_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"optim\.lr_mult\.backbon' names no parameter.*backbone, heads\.det2d"):
        lr_multipliers(OptimConfig(lr_mult={"backbon": 0.1}), Tree())
    for bad in (-1.0, float("inf"), "fast", True):
        with pytest.raises(ConfigError, match=r"optim\.lr_mult\.backbone' must be a finite number >= 0"):
            OptimConfig(lr_mult={"backbone": bad})


def test_a_zero_multiplier_freezes_the_trunk_in_a_real_run_and_the_trunk_stage_drops_the_multipliers(tmp_path):
    sim = make_sim(tmp_path / "sim")
    cfg = load_experiment("tiny", [f"data.root={sim}", "data.cameras=[CAM_FRONT]", "steps=2", "checkpoint_every=2",
                                   "num_workers=0", "device=cpu", "optim.lr_mult={backbone: 0, neck: 0.5}"])
    start = train(dataclasses.replace(cfg, steps=1), tmp_path / "start", stop_at=0, progress=False).state_dict()
    model = train(cfg, tmp_path / "run", progress=False)
    state = model.state_dict()
    frozen = [k for k, p in model.named_parameters() if k.startswith("backbone.")]
    assert frozen and all(not p.requires_grad for k, p in model.named_parameters() if k in frozen)
    assert all(torch.equal(state[k], start[k]) for k in frozen)  # untouched by two steps
    moved = [k for k, _ in model.named_parameters() if not k.startswith("backbone.") and not torch.equal(state[k], start[k])]
    assert any(k.startswith("neck.") for k in moved) and any(k.startswith("heads.") for k in moved)
    assert trunk_stage(cfg, 5).optim.lr_mult == {}  # stage 1 trains its trunk from scratch at the full rate
