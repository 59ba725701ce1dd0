"""The training recipe's checks (Karpathy, "A Recipe for Training Neural Networks", 2019; DESIGN.md
convention 11) on the one HydraNet of configs/full.yaml at tiny size: every head's loss at
initialization is its expected value (heatmaps at the 0.01 prior, BCE heads at their label prior after
`fit_priors`), a single batch overfits for the BEV heads (det3d, bevmap; the camera heads:
tests/test_overfit_batch.py), a clip's past frames pass the trunk without gradient, and the trunk stage
of `hydranet.curriculum` is the camera-head model of the same trunk."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import numpy as np
import torch
import torch.nn.functional as F

from hydranet.checkpoint import model_meta
from hydranet.curriculum import trunk_stage, train_two_stage
from hydranet.data.sources import open_sources, run_dataset
from hydranet.experiment import load_experiment
from hydranet.loader import Collate
from hydranet.models import build_model
from hydranet.tasks.base import weighted_bce_prior_logit
from hydranet.tasks.det2d import HEATMAP_PRIOR
from hydranet.train import build_training_data, fit_priors, train
from sim.config import SimConfig
from sim.generate import generate_dataset

REPO = Path(__file__).resolve().parents[1]
SIM = SimConfig(image_width=96, image_height=64, frames_per_scene=4, bev_range=32.0)
TINY = ["num_workers=0", "batch_size=2", "device=cpu", "augment.photometric=false", "data.image_size=[64,96]",
        "data.cameras=[CAM_FRONT,CAM_BACK]", "model.neck_width=16", "model.bev.downsample=8", "model.bev.channels=16",
        "model.bev.heights=[0.0,1.0]", "model.bev.video_frames=2", "model.bev.video_fuse_depth=1"]
BCE_HEADS = ("lanes", "drivable", "bevmap")


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("recipe") / "sim", SIM, scenes=2, seed=0, progress=False)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def config(root, *sets):
    return load_experiment(REPO / "configs" / "full.yaml", [f"data.root={root}", *TINY, *sets])


def model_and_batch(root, *sets):
    torch.manual_seed(0)
    cfg = config(root, *sets)
    data = run_dataset(open_sources(cfg.data))
    model = build_model(cfg.model, model_meta(cfg, data))
    frames = build_training_data(cfg, model, data=data, augment=False)
    return model, frames, Collate(model.target_builders())([frames[0], frames[len(frames) - 1]])


def bce_at(p: torch.Tensor, target: torch.Tensor, pos_weight: float = 1.0) -> float:
    """Mean weighted BCE of the constant prediction p against `target`."""
    logit = torch.log(p / (1 - p)).expand_as(target)
    return float(F.binary_cross_entropy_with_logits(logit, target, pos_weight=torch.tensor(pos_weight)))


def test_prior_logit_minimizes_weighted_bce():
    """The closed form against a grid search over constant predictions."""
    target = (torch.rand(4000, generator=torch.Generator().manual_seed(1)) < 0.13).float()
    for w in (1.0, 4.0):
        best = min(torch.linspace(0.01, 0.99, 981), key=lambda p: bce_at(p, target, w))
        got = torch.sigmoid(weighted_bce_prior_logit(target.mean(), w))
        assert abs(float(got) - float(best)) < 2e-3, (w, float(got), float(best))


def test_loss_at_init_is_the_prior(sim):
    model, frames, batch = model_and_batch(sim)
    model.train()
    with torch.no_grad():
        before = {k: float(v) for k, v in model(batch, "loss").items()}
    fit_priors(model, frames)
    with torch.no_grad():
        losses = {k: float(v) for k, v in model(batch, "loss").items()}
    # heatmaps at prior p: a peak costs -log(p) (1-p)^2, the negatives p^2 -log(1-p) per cell: small
    peak = -math.log(HEATMAP_PRIOR) * (1 - HEATMAP_PRIOR) ** 2
    for head in ("det2d", "signs_lights", "det3d"):
        assert 0.5 * peak < losses[f"{head}.heatmap"] < 1.6 * peak, (head, losses[f"{head}.heatmap"], peak)
    # no head dominates at step 1 (the sign head was 10-15x the others with CenterNet's 0.1 prior)
    assert losses["signs_lights"] < 3 * losses["det2d"], losses
    # BCE heads: at most the loss of the best constant (the label prior), up to the random features' spread
    targets = batch["targets"]
    for head in ("lanes", "drivable"):
        t = targets[head]["mask"]
        const = bce_at(t.mean().clamp(1e-4, 1 - 1e-4), t, model.heads[head].pos_weight)
        assert losses[f"{head}.bce"] < const + 0.1, (head, losses[f"{head}.bce"], const)
        assert losses[f"{head}.bce"] < before[f"{head}.bce"], (head, before[f"{head}.bce"], losses[f"{head}.bce"])
    valid = targets["bevmap"]["valid"][:, None].expand_as(targets["bevmap"]["mask"])
    m = targets["bevmap"]["mask"][valid]
    const = bce_at(m.mean().clamp(1e-4, 1 - 1e-4), m)  # one rate for every cell: the per-cell prior beats it
    assert losses["bevmap.bce"] < const, (losses["bevmap.bce"], const)
    assert losses["bevmap.bce"] < 0.8 * before["bevmap.bce"], (before["bevmap.bce"], losses["bevmap.bce"])
    # depth regresses log metres from log(10 m): the loss starts at the scale of the targets' spread
    assert math.isfinite(losses["depth"]) and losses["depth"] < 5.0, losses["depth"]


def test_bev_heads_overfit_one_batch(sim, tmp_path):
    """det3d and bevmap overfit the first batch: loss down by 90% (bevmap: to under a third, its per-cell
    prior starts it low) and the batch's own map almost exactly right."""
    history: list[dict[str, float]] = []
    steps = 120
    cfg = config(sim, f"steps={steps}", f"checkpoint_every={steps}", "overfit_batch=true", "optim.lr=0.01",
                 "optim.schedule=constant", "optim.warmup_steps=5", "augment.bev_rotation_deg=0",
                 "model.tasks=[{name: det3d, options: {width: 16}}, {name: bevmap, options: {width: 16}}]")
    model = train(cfg, tmp_path / "run", progress=False, on_step=lambda s, losses: history.append(losses))
    first, last = history[0], history[-1]
    assert last["det3d"] < 0.1 * first["det3d"], (first["det3d"], last["det3d"])
    assert last["bevmap"] < 0.34 * first["bevmap"], (first["bevmap"], last["bevmap"])
    frames = build_training_data(cfg, model, augment=False)
    batch = Collate(model.target_builders())([frames[i] for i in range(2)])
    model.eval()
    with torch.no_grad():
        pred = model(batch, "predict")["bevmap"]
    truth, valid = batch["targets"]["bevmap"]["mask"].bool(), batch["targets"]["bevmap"]["valid"].bool()
    inter = sum(((p["mask"] & g) & v).sum() for p, g, v in zip(pred, truth, valid[:, None]))
    union = sum(((p["mask"] | g) & v).sum() for p, g, v in zip(pred, truth, valid[:, None]))
    assert float(inter) / float(union) > 0.8


def test_past_frames_pass_the_trunk_without_gradient(sim):
    model, _, batch = model_and_batch(sim)
    calls: list[bool] = []
    model.backbone.register_forward_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    model.eval()  # BatchNorm on running statistics: the two ways must give the same outputs
    outs = {}
    for history_grad in (True, False):
        calls.clear()
        model.history_grad = history_grad
        outs[history_grad] = model(batch, "tensor")
        assert calls == ([True] if history_grad else [False, True]), (history_grad, calls)
    for head in ("det3d", "bevmap", "det2d"):
        for k, v in outs[True][head].items():
            torch.testing.assert_close(outs[False][head][k], v, rtol=1e-5, atol=1e-5)
    losses = model(batch, "loss")  # history_grad False: the trunk still learns from the current frame
    losses["loss"].backward()
    assert all(p.grad is not None for p in model.backbone.parameters())


def test_trunk_stage_is_the_camera_model_of_the_same_trunk(sim, tmp_path):
    cfg = config(sim, "steps=2", "checkpoint_every=2")
    stage = trunk_stage(cfg, 3)
    assert [t.name for t in stage.model.tasks] == ["det2d", "signs_lights", "lanes", "drivable", "depth", "normals"]
    assert stage.data.cameras == ("CAM_FRONT", "CAM_BACK") and stage.steps == 3
    assert stage.batch_size == cfg.batch_size and stage.optim.lr == pytest.approx(2 * cfg.optim.lr)  # TRUNK_LR_SCALE
    assert stage.model.neck_width == cfg.model.neck_width and stage.model.backbone == cfg.model.backbone
    model = train_two_stage(cfg, tmp_path / "run", trunk_steps=3, progress=False)
    trunk = torch.load(tmp_path / "run" / "trunk" / "checkpoint.pt", weights_only=True)["model"]
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert ckpt["init_from"]["missing"] > 0 and ckpt["init_from"]["unexpected"] == 0
    assert set(trunk) < set(model.state_dict()), "the trunk stage is a part of the full model"
    with pytest.raises(ValueError, match="init_from"):
        train_two_stage(load_experiment(REPO / "configs" / "full.yaml",
                                        [f"data.root={sim}", *TINY, f"init_from={tmp_path / 'run' / 'trunk'}"]),
                        tmp_path / "again", trunk_steps=3, progress=False)


def test_bevmap_cell_prior_keeps_one_cell_wide_lines():
    """Each cell's prior is its own label rate (one pseudo-count of the channel's rate), not its
    neighbours': a lane line one cell wide, present in every frame, stays a line in the prior."""
    from hydranet.bevgrid import BevGrid
    from hydranet.tasks.bevmap import BevMapTask

    grid = BevGrid((-8.0, 8.0), (-8.0, 8.0), 2.0)  # 8 x 8 cells
    task = BevMapTask(4, grid, None, channels=("lanes",), cell_prior=True)
    mask = torch.zeros(10, 1, 8, 8)
    mask[:, 0, :, 3] = 1.0  # a line along x in column 3 of every frame
    task.fit_prior({"mask": mask, "valid": torch.ones(10, 8, 8, dtype=torch.bool)})
    p = torch.sigmoid(task.head.cell_prior[0])  # (X, Y)
    rate = 1 / 8  # the channel's rate: one column of eight
    assert torch.allclose(p[:, 3], torch.full((8,), (10 + rate) / 11), atol=1e-5)
    assert torch.allclose(p[:, [2, 4]], torch.full((8, 2), rate / 11), atol=1e-5)  # neighbours: none of the line
    assert float(task.head.out.bias.abs().max()) == 0.0


def test_det3d_heading_prior_is_where_the_labels_face():
    """The heading prior is the training labels' mean heading near each cell: cars left of the ego facing it
    (yaw pi, the oncoming side), cars right of it facing away (yaw 0) -> cos -1 and +1 there, shrunk by the
    pseudo-count, 0 where no object stood. It is added to the rot output, so a head whose own rot output is 0
    decodes those headings; without the option the head has no such buffer (older checkpoints load)."""
    from hydranet.bevgrid import BevGrid
    from hydranet.tasks.det3d import Det3dTask, encode_boxes3d

    grid = BevGrid((-20.0, 20.0), (-20.0, 20.0), 1.0)  # 40 x 40 cells
    task = Det3dTask(["car"], 8, grid, width=8, heading_prior=True)
    boxes = np.array([[x, y, 0.8, 4.5, 1.9, 1.6, np.pi if y > 0 else 0.0, 0.0, 0.0]
                      for x in range(-15, 16, 3) for y in (6.5, -6.5)], np.float32)
    heat, reg, weight = encode_boxes3d(boxes, np.zeros(len(boxes), np.int64), 1, grid)
    task.fit_prior({"box_weight": torch.from_numpy(weight)[None],
                    **{k: torch.from_numpy(v)[None] for k, v in reg.items()}})
    prior = task.head.heading_prior  # (2, X, Y): sin, cos
    (rl, cl), (rr, cr), (rf, cf) = (np.floor(grid.to_cell(np.array([[0.0, y]]))[0] + 0.5).astype(int)
                                    for y in (6.5, -6.5, 17.0))
    assert float(prior[1, rl, cl]) < -0.5 and float(prior[1, rr, cr]) > 0.5
    assert float(prior[:, rf, cf].abs().max()) == 0.0 and float(prior[0].abs().max()) < 1e-5
    head = task.head.branches["rot"][-1]
    torch.nn.init.zeros_(head.weight), torch.nn.init.zeros_(head.bias)
    out = task.head(torch.randn(1, 8, *grid.shape))
    assert torch.equal(out["rot"][0], prior)
    assert "head.heading_prior" in task.state_dict()
    assert "head.heading_prior" not in Det3dTask(["car"], 8, grid, width=8).state_dict()
