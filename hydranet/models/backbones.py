"""Backbones: the torchvision RegNet family and a tiny RegNet-style net for CPU.

RegNet: Radosavovic et al., "Designing Network Design Spaces", CVPR 2020 (the trunk Tesla's
HydraNet uses). Multi-scale features at strides 8, 16 and 32 (and 4 with `finest_stride=4`, the
P2 level that FPN and CenterNet's upsampling path read small objects from) are taken from the RegNet
trunk with `torchvision.models.feature_extraction.create_feature_extractor`, so the classifier head is
dropped and every remaining parameter takes part in the forward pass.

Every backbone maps images (B, 3, H, W) to a list of feature maps [(B, C_i, H/s_i, W/s_i)] and
exposes `out_channels` (list of C_i) and `strides` (list of s_i). Weights come only from a local
file (`weights_path`, a state dict in torchvision's parameter names for RegNets); a file that does
not fit raises `ValueError` listing the keys, never a silent random initialization.
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from hydranet.models.state_dict import load_weights_file

FINEST_STRIDES = (4, 8)  # the finest level a backbone gives: P2 (stride 4) or P3 (stride 8)


def pyramid_strides(finest_stride: int) -> list[int]:
    """The strides of a backbone's levels from `finest_stride` (4 or 8) up to 32: [4, 8, 16, 32] or [8, 16, 32]."""
    if finest_stride not in FINEST_STRIDES:
        raise ValueError(f"model.finest_stride {finest_stride}: expected one of {list(FINEST_STRIDES)} (4 adds the "
                         "backbone's stride-4 level P2 to the pyramid)")
    return [s for s in (4, 8, 16, 32) if s >= finest_stride]


class RegNetBackbone(nn.Module):
    """A torchvision RegNet trunk returning [C2,] C3, C4, C5 at strides [4,] 8, 16, 32 (stem /2, block1 /4,
    block2 /8, block3 /16, block4 /32)."""

    def __init__(self, arch: str, weights_path: str | None = None, finest_stride: int = 8):
        super().__init__()
        # torchvision is imported here, not at the top (as by det2d's GIoU): its ops import torch._dynamo, 7.7 s of a
        # process's start on this machine that the tiny backbone need not pay
        import torchvision.models as tvm
        from torchvision.models.feature_extraction import create_feature_extractor

        model = getattr(tvm, arch)(weights=None)  # never downloads: weights come from `weights_path`
        if weights_path is not None:
            # torchvision checkpoints carry the classifier; the feature extractor drops it.
            load_weights_file(model, weights_path, ignore_prefixes=("fc.",))
        self.arch = arch
        self.strides = pyramid_strides(finest_stride)
        blocks = [{4: 1, 8: 2, 16: 3, 32: 4}[s] for s in self.strides]
        self.nodes = [f"c{i}" for i in blocks]
        self.body = create_feature_extractor(model, return_nodes={f"trunk_output.block{i}": f"c{i}" for i in blocks})
        self.out_channels = [_last_width(getattr(model.trunk_output, f"block{i}")) for i in blocks]

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats = self.body(x)  # {"c2": (B, C2, H/4, W/4), ..., "c4": (B, C4, H/32, W/32)}
        return [feats[n] for n in self.nodes]  # finest first


def _last_width(stage: nn.Module) -> int:
    """Output channels of a RegNet stage: the last BatchNorm of its last block."""
    bns = [m for m in stage.modules() if isinstance(m, nn.BatchNorm2d)]
    return bns[-1].num_features


class _ConvBN(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True):
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                                   nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class _YBlock(nn.Module):
    """RegNetY block: 1x1 -> 3x3 group conv (stride) -> squeeze-excitation -> 1x1, residual."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 8, se_ratio: float = 0.25):
        super().__init__()
        groups = max(1, cout // group_width)
        self.a = _ConvBN(cin, cout, 1)
        self.b = _ConvBN(cout, cout, 3, stride, groups=groups)
        squeezed = max(4, int(round(cin * se_ratio)))
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cout, squeezed, 1), nn.ReLU(inplace=True),
                                nn.Conv2d(squeezed, cout, 1), nn.Sigmoid())
        self.c = _ConvBN(cout, cout, 1, act=False)
        self.proj = _ConvBN(cin, cout, 1, stride, act=False) if (stride != 1 or cin != cout) else nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(self.a(x))  # (B, cout, H/s, W/s)
        y = self.c(y * self.se(y))
        return self.act(y + self.proj(x))


class TinyRegNet(nn.Module):
    """A RegNetY-style net of a few ten thousand parameters for CPU training and tests.

    Stem (stride 2) and four stages of Y-blocks at strides 4, 8, 16, 32; returns the last three, or all four
    with `finest_stride=4`.
    """

    def __init__(self, widths: tuple[int, ...] = (16, 24, 48, 96), depths: tuple[int, ...] = (1, 1, 2, 1),
                 weights_path: str | None = None, finest_stride: int = 8):
        super().__init__()
        if len(widths) != 4 or len(depths) != 4:
            raise ValueError(f"TinyRegNet needs 4 widths and 4 depths, got {widths} and {depths}")
        self.stem = _ConvBN(3, widths[0], 3, stride=2)
        stages, cin = [], widths[0]
        for w, d in zip(widths, depths):
            blocks = [_YBlock(cin if i == 0 else w, w, stride=2 if i == 0 else 1) for i in range(d)]
            stages.append(nn.Sequential(*blocks))
            cin = w
        self.stages = nn.ModuleList(stages)
        self.strides = pyramid_strides(finest_stride)
        self.out_channels = list(widths[-len(self.strides):])
        if weights_path is not None:
            load_weights_file(self, weights_path)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)  # (B, w0, H/2, W/2)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs[-len(self.strides):]  # strides [4,] 8, 16, 32


BackboneBuilder = Callable[..., nn.Module]
BACKBONES: dict[str, BackboneBuilder] = {}


def register_backbone(name: str, builder: BackboneBuilder) -> None:
    """Add a backbone builder `builder(weights_path=None, finest_stride=8) -> module`; a duplicate name raises."""
    if name in BACKBONES:
        raise ValueError(f"backbone '{name}' is already registered")
    BACKBONES[name] = builder


register_backbone("tiny", TinyRegNet)
for _arch in ("regnet_x_400mf", "regnet_y_400mf", "regnet_x_800mf", "regnet_y_800mf", "regnet_y_1_6gf",
              "regnet_y_3_2gf"):
    register_backbone(_arch, partial(RegNetBackbone, _arch))


def build_backbone(name: str, weights_path: str | None = None, finest_stride: int = 8) -> nn.Module:
    """The backbone registered as `name`, its finest level at `finest_stride` (4 or 8), with weights from the local
    file `weights_path` if given."""
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone '{name}'; known backbones: {sorted(BACKBONES)}")
    pyramid_strides(finest_stride)  # refuses another stride before a builder sees it
    backbone = BACKBONES[name](weights_path=weights_path, **({"finest_stride": finest_stride} if finest_stride != 8 else {}))
    if list(backbone.strides) != pyramid_strides(finest_stride):
        raise ValueError(f"backbone '{name}' gives levels at strides {list(backbone.strides)}, model.finest_stride "
                         f"{finest_stride} needs {pyramid_strides(finest_stride)}: its builder must honour `finest_stride`")
    return backbone
