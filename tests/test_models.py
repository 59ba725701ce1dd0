"""Backbones, BiFPN, HydraNet assembly, weights loading and loss balancing."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torchvision.models as tvm

from fake_samples import FAKE_META, make_batch, make_sample
from hydranet.config import from_dict
from hydranet.models import BACKBONES, BALANCERS, BiFPN, HydraNet, ModelConfig, TaskConfig, build_backbone, build_model
from hydranet.models.balancing import PCGrad, UncertaintyWeighting
from hydranet.tasks import build_task

TINY = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1)


def _no_grad_params(module: torch.nn.Module) -> list[str]:
    return [n for n, p in module.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_backbone_forward_backward(name):
    torch.manual_seed(0)
    bb = build_backbone(name)
    x = torch.randn(2, 3, 64, 64)  # (B, 3, H, W)
    feats = bb(x)
    assert bb.strides == [8, 16, 32]
    assert [f.shape for f in feats] == [(2, c, 64 // s, 64 // s) for c, s in zip(bb.out_channels, bb.strides)]
    assert all(torch.isfinite(f).all() for f in feats)
    sum(f.mean() for f in feats).backward()
    assert _no_grad_params(bb) == []


def test_tiny_backbone_is_small():
    n = sum(p.numel() for p in build_backbone("tiny").parameters())
    assert 5_000 <= n <= 100_000


def test_unknown_backbone_lists_known():
    with pytest.raises(ValueError, match="unknown backbone 'resnet9000'.*regnet_y_400mf.*tiny"):
        build_backbone("resnet9000")


def test_weights_file_loads_and_foreign_file_is_an_error(tmp_path):
    src = tvm.regnet_x_400mf(weights=None)  # a torchvision checkpoint, classifier included
    torch.save(src.state_dict(), tmp_path / "x400.pt")
    bb = build_backbone("regnet_x_400mf", weights_path=str(tmp_path / "x400.pt"))
    assert torch.equal(bb.body.state_dict()["stem.0.weight"], src.state_dict()["stem.0.weight"])

    torch.save(tvm.regnet_y_400mf(weights=None).state_dict(), tmp_path / "y400.pt")
    with pytest.raises(ValueError, match=r"y400.pt does not fit.*(missing|unexpected|shape mismatch) .*trunk_output"):
        build_backbone("regnet_x_400mf", weights_path=str(tmp_path / "y400.pt"))
    torch.save(build_backbone("tiny").state_dict(), tmp_path / "tiny.pt")
    with pytest.raises(ValueError, match="missing keys.*unexpected keys.*stages"):
        build_backbone("regnet_x_400mf", weights_path=str(tmp_path / "tiny.pt"))
    with pytest.raises(ValueError, match="does not exist"):
        build_backbone("tiny", weights_path=str(tmp_path / "nope.pt"))


@pytest.mark.parametrize("levels", [3, 5])
def test_bifpn_shapes_and_gradients(levels):
    torch.manual_seed(0)
    neck = BiFPN([8, 12, 16], width=8, repeats=2, num_levels=levels)
    feats = [torch.randn(2, c, 128 // s, 256 // s) for c, s in zip([8, 12, 16], [8, 16, 32])]
    out = neck(feats)
    assert neck.strides == [8 * 2**i for i in range(levels)]
    assert [o.shape for o in out] == [(2, 8, 128 // s, 256 // s) for s in neck.strides]
    sum(o.square().mean() for o in out).backward()
    assert _no_grad_params(neck) == []


def test_model_config_from_yaml_dict():
    cfg = from_dict(ModelConfig, {"backbone": "tiny", "neck_width": 16, "balancer": "uncertainty",
                                  "tasks": [{"name": "det2d", "weight": 2.0, "options": {"out_stride": 8}},
                                            {"name": "depth"}]})
    assert cfg.tasks == (TaskConfig("det2d", 2.0, {"out_stride": 8}), TaskConfig("depth"))
    model = build_model(cfg, FAKE_META)
    assert isinstance(model.balancer, UncertaintyWeighting) and model.heads["det2d"].out_stride == 8


@pytest.mark.parametrize("balancer", sorted(BALANCERS))
def test_hydranet_modes_and_every_parameter_gets_a_gradient(balancer):
    torch.manual_seed(0)
    model = build_model(dataclasses.replace(TINY, balancer=balancer), FAKE_META)
    batch = make_batch(model.heads, [make_sample(num_cameras=2, seed=s) for s in range(2)])  # (2, 2, 3, 64, 96)
    raw = model(batch, "tensor")
    assert set(raw) == set(model.heads) | {"embedding"}
    assert raw["embedding"].shape == (4, model.neck.out_channels[-1])  # (B*N, C) pooled trunk feature
    assert raw["depth"]["logits"].shape == (4, 1, 64, 96)
    assert raw["det2d"]["heatmap"].shape == (4, len(FAKE_META["classes"]), 16, 24)
    losses = model(batch, "loss")
    assert all(torch.isfinite(v) for v in losses.values())
    assert {"loss", "det2d", "det2d.heatmap", "depth.silog"} <= set(losses)
    model.backward(losses)
    assert _no_grad_params(model) == []
    preds = model(batch, "predict")
    assert all(len(v) == 4 for v in preds.values())


def test_all_cameras_go_through_the_backbone_as_one_batch():
    model = build_model(dataclasses.replace(TINY, tasks=(TaskConfig("drivable"),)), FAKE_META)
    seen = []
    model.backbone.register_forward_hook(lambda m, inp, out: seen.append(inp[0].shape))
    model({"images": torch.rand(2, 3, 3, 64, 96)}, "tensor")
    assert seen == [(6, 3, 64, 96)]


def test_mode_is_an_argument_not_training_state():
    model = build_model(dataclasses.replace(TINY, tasks=(TaskConfig("depth"),)), FAKE_META).eval()
    batch = make_batch(model.heads, [make_sample(num_cameras=1)])
    assert torch.isfinite(model(batch, "loss")["loss"])
    with pytest.raises(ValueError, match="unknown mode 'train'"):
        model(batch, "train")


def test_parts_that_do_not_fit_raise():
    bb = build_backbone("tiny")
    neck = BiFPN(bb.out_channels, width=16, repeats=1)
    with pytest.raises(ValueError, match="task 'depth' expects 32 channels.*in_channels=16"):
        HydraNet(bb, neck, {"depth": build_task("depth", FAKE_META, 32)})
    with pytest.raises(ValueError, match="neck expects input channels"):
        HydraNet(bb, BiFPN([8, 8, 8], width=16), {"depth": build_task("depth", FAKE_META, 16)})
    with pytest.raises(ValueError, match="keys must be task names"):
        HydraNet(bb, neck, {"d": build_task("depth", FAKE_META, 16)})
    model = HydraNet(bb, neck, {"depth": build_task("depth", FAKE_META, 16)})
    with pytest.raises(ValueError, match="60x96 is not divisible by 32"):
        model({"images": torch.rand(1, 1, 3, 60, 96)}, "tensor")
    with pytest.raises(ValueError, match="no targets for 'depth'.*model.target_builders"):
        model({"images": torch.rand(1, 1, 3, 64, 96), "targets": {}}, "loss")


def test_build_model_errors_list_the_known_names():
    with pytest.raises(ValueError, match="unknown task 'sky'.*det2d"):
        build_model(dataclasses.replace(TINY, tasks=(TaskConfig("sky"),)), FAKE_META)
    with pytest.raises(ValueError, match="unknown option 'strde'.*out_stride"):
        build_model(dataclasses.replace(TINY, tasks=(TaskConfig("det2d", options={"strde": 4}),)), FAKE_META)
    with pytest.raises(ValueError, match="unknown balancer 'gradnorm'.*pcgrad"):
        build_model(dataclasses.replace(TINY, balancer="gradnorm"), FAKE_META)
    with pytest.raises(ValueError, match="'depth' appears twice"):
        build_model(dataclasses.replace(TINY, tasks=(TaskConfig("depth"), TaskConfig("depth"))), FAKE_META)
    with pytest.raises(ValueError, match="meta key 'classes'"):
        build_model(TINY, {})


def test_checkpoint_from_another_architecture_lists_keys():
    a = build_model(dataclasses.replace(TINY, tasks=(TaskConfig("det2d"), TaskConfig("depth"))), FAKE_META)
    b = build_model(dataclasses.replace(TINY, neck_width=8, tasks=(TaskConfig("det2d"), TaskConfig("lanes"))),
                    FAKE_META)
    with pytest.raises(ValueError, match=r"missing keys \[heads\.lanes.*unexpected keys \[heads\.depth.*shape mismatch"):
        b.load_weights(a.state_dict())
    report = b.load_weights(a.state_dict(), partial=True)
    assert report["missing"] and report["unexpected"] and report["mismatched"]
    same = build_model(dataclasses.replace(TINY, tasks=(TaskConfig("det2d"), TaskConfig("depth"))), FAKE_META)
    assert same.load_weights(a.state_dict()) == {"missing": [], "unexpected": [], "mismatched": []}


def test_pcgrad_projects_conflicting_gradients():
    p = torch.nn.Parameter(torch.zeros(2))
    head = torch.nn.Parameter(torch.ones(1))
    losses = {"a": (p * torch.tensor([1.0, 0.0])).sum() * head.sum(), "b": (p * torch.tensor([-1.0, 1.0])).sum()}
    PCGrad(["a", "b"]).backward(losses, [p], [head])
    # g_a=(1,0), g_b=(-1,1) conflict: g_a'=(0.5,0.5), g_b'=(0,1) (Yu et al. 2020, Alg. 1)
    assert torch.allclose(p.grad, torch.tensor([0.5, 1.5]))
    assert head.grad is not None


def test_uncertainty_weighting_formula():
    bal = UncertaintyWeighting(["a", "b"], {"a": 2.0})
    with torch.no_grad():
        bal.log_vars["a"].fill_(1.0)
    total = bal.combine({"a": torch.tensor(3.0), "b": torch.tensor(1.0)})
    assert torch.isclose(total, torch.exp(torch.tensor(-1.0)) * 6.0 + 1.0 + 1.0)
    total.backward()
    assert bal.log_vars["a"].grad is not None and bal.log_vars["b"].grad is not None


def test_short_training_lowers_every_head_loss():
    torch.manual_seed(0)
    model = build_model(TINY, FAKE_META)
    batch = make_batch(model.heads, [make_sample(num_cameras=1, seed=s) for s in range(2)])
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    first = None
    for _ in range(25):
        losses = model(batch, "loss")
        first = first or {k: losses[k].item() for k in model.heads}
        opt.zero_grad()
        model.backward(losses)
        opt.step()
    last = {k: v.item() for k, v in model(batch, "loss").items() if k in model.heads}
    assert all(last[k] < first[k] for k in model.heads), (first, last)
