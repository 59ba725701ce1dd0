"""`model.finest_stride: 4`: the backbone's stride-4 level P2 joins the pyramid (FPN's P2, CenterNet's stride-4
output read from a stride-4 feature rather than upsampled from stride 8), every camera head reads it, and the default
(8) builds the same model, key for key, as before."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from fake_samples import FAKE_META, make_batch, make_sample
from hydranet.config import ConfigError, from_dict
from hydranet.models import BiFPN, ModelConfig, build_backbone, build_model

TINY = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1)


@pytest.mark.parametrize("name", ["tiny", "regnet_x_400mf"])
def test_backbone_gives_the_stride_4_level_with_the_same_weights(name):
    torch.manual_seed(0)
    coarse, fine = build_backbone(name), build_backbone(name, finest_stride=4)
    assert fine.strides == [4, 8, 16, 32] and fine.out_channels[1:] == coarse.out_channels
    assert fine.state_dict().keys() == coarse.state_dict().keys()  # one checkpoint serves both
    fine.load_state_dict(coarse.state_dict())
    x = torch.randn(1, 3, 64, 96)
    a, b = coarse.eval()(x), fine.eval()(x)
    assert [f.shape[-2:] for f in b] == [(64 // s, 96 // s) for s in (4, 8, 16, 32)]
    assert all(torch.equal(p, q) for p, q in zip(a, b[1:], strict=True))  # P3-P5 unchanged, P2 added below them


def test_other_strides_are_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"model.finest_stride 16: expected one of \[4, 8\]"):
        build_backbone("tiny", finest_stride=16)
    with pytest.raises(ValueError, match="strides 8, 16, 32 \\(or 4, 8, 16, 32\\)"):
        BiFPN([8, 8, 8, 8], width=8)  # four levels without their strides


def test_a_backbone_that_ignores_the_stride_is_refused(monkeypatch):
    from hydranet.models import backbones

    monkeypatch.setitem(backbones.BACKBONES, "stride8_only", lambda weights_path=None, **_: backbones.TinyRegNet())
    with pytest.raises(ValueError, match=r"'stride8_only' gives levels at strides \[8, 16, 32\].*must honour"):
        build_backbone("stride8_only", finest_stride=4)


@pytest.mark.parametrize("levels", [3, 5])
def test_bifpn_over_p2(levels):
    neck = BiFPN([4, 8, 12, 16], width=8, repeats=2, num_levels=levels, in_strides=[4, 8, 16, 32])
    out = neck([torch.randn(2, c, 128 // s, 256 // s) for c, s in zip([4, 8, 12, 16], [4, 8, 16, 32])])
    assert neck.strides == [4, 8, 16, 32, 64, 128][:levels + 1]
    assert [o.shape for o in out] == [(2, 8, 128 // s, 256 // s) for s in neck.strides]


def test_every_camera_head_reads_stride_4_and_trains():
    torch.manual_seed(0)
    cfg = from_dict(ModelConfig, {"backbone": "tiny", "neck_width": 16, "neck_repeats": 1, "finest_stride": 4})
    model = build_model(cfg, FAKE_META)
    assert model.neck.strides[0] == 4 and {t.in_stride for t in model.heads.values()} == {4}
    assert model.heads["det2d"].head.scale == 1  # its stride-4 heatmap is read from P2, not upsampled from P3
    batch = make_batch(model.heads, [make_sample(num_cameras=2, seed=s) for s in range(2)])  # (2, 2, 3, 64, 96)
    raw = model(batch, "tensor")
    assert raw["det2d"]["heatmap"].shape == (4, len(FAKE_META["classes"]), 16, 24)
    assert raw["depth"]["logits"].shape == (4, 1, 64, 96)
    losses = model(batch, "loss")
    assert all(torch.isfinite(v) for v in losses.values())
    model.backward(losses)
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []  # the P2 lateral and its BiFPN nodes are trained
    default = build_model(TINY, FAKE_META)
    assert set(model.state_dict()) > set(default.state_dict())  # P2 adds parameters; the default model is unchanged
    assert dataclasses.replace(TINY).finest_stride == 8


def test_the_config_key_is_refused_when_wrong():
    with pytest.raises((ConfigError, ValueError), match="model.finest_stride 2"):
        build_model(dataclasses.replace(TINY, finest_stride=2), FAKE_META)



class _Flat(torch.nn.Module):
    """The model's raw outputs as a flat tuple (what torch.onnx.export takes)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images):
        out = self.model({"images": images}, "tensor")
        return tuple(v for head in self.model.heads for v in out[head].values())


def test_fused_model_over_p2_exports_to_onnx_equal_to_eager(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from fake_samples import BEV_H, BEV_META, BEV_W, TINY_BEV
    from hydranet.models import TaskConfig
    from hydranet.rig import load_rig

    torch.manual_seed(0)
    rig = load_rig("nuscenes6")
    cfg = dataclasses.replace(TINY_BEV, finest_stride=4, tasks=(TaskConfig("det2d"), *TINY_BEV.tasks))
    model = build_model(cfg, {**BEV_META, "rig": rig.resized(BEV_W, BEV_H).to_dict()}).eval()
    assert model.fusion.view.stride == 4  # the view transform lifts the stride-4 level
    images = torch.rand(1, len(rig), 3, BEV_H, BEV_W)
    path = tmp_path / "p2.onnx"
    torch.onnx.export(_Flat(model).eval(), (images,), str(path), dynamo=False, opset_version=17, input_names=["images"])
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"images": images.numpy()})
    with torch.no_grad():
        ref = _Flat(model)(images)
    assert len(got) == len(ref) >= 2 + 2 + 1  # det2d heatmap and box, det3d maps, bevmap logits
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r.numpy(), atol=1e-4, rtol=1e-4)


def test_init_from_a_model_of_the_other_stride_is_refused_naming_the_key(tmp_path):
    from dataset_fixtures import make_sim
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    data = make_sim(tmp_path / "sim", scenes=1)
    base = [f"data.root={data}", "data.cameras=[CAM_FRONT]", "num_workers=0", "batch_size=1", "steps=1",
            "optim.warmup_steps=1", "model.tasks=[{name: drivable}]", "label_priors=false"]
    config = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"
    train(load_experiment(config, base), tmp_path / "p3", progress=False)
    with pytest.raises(ValueError, match=r"model.finest_stride 8, this model's is 4.*--set model.finest_stride=8"):
        train(load_experiment(config, [*base, "model.finest_stride=4"]), tmp_path / "p2", progress=False,
              init_from=tmp_path / "p3")
    assert not (tmp_path / "p2").exists()  # refused before the run folder is written
