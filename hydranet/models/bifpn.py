"""BiFPN neck: Tan, Pang, Le, "EfficientDet: Scalable and Efficient Object Detection", CVPR 2020.

Each BiFPN layer runs a top-down then a bottom-up path over the pyramid levels; every node fuses
its inputs with *fast normalized fusion*, out = sum_i relu(w_i) x_i / (eps + sum_j relu(w_j)), then
applies swish and a depthwise-separable 3x3 conv with BatchNorm. Inputs are projected to `width`
channels by 1x1 convs; with `num_levels=5`, P6 and P7 are made by downsampling P5 (as in the
paper). Input: backbone features [(B, C_i, H/s_i, W/s_i)] at strides 8, 16, 32, or 4, 8, 16, 32 (P2, the
level small objects are found on: `model.finest_stride: 4`); output: one map of `width` channels per input level,
then `num_levels - 3` pooled ones at strides 64, 128.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SeparableConvBN(nn.Module):
    """Depthwise 3x3 + pointwise 1x1 conv, BatchNorm (MobileNet-style, as EfficientDet)."""

    def __init__(self, channels: int):
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.pointwise = nn.Conv2d(channels, channels, 1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.pointwise(self.depthwise(x)))


class FastFusion(nn.Module):
    """Fast normalized fusion of `n` same-shape inputs, then swish and a separable conv."""

    def __init__(self, n: int, channels: int, eps: float = 1e-4):
        super().__init__()
        self.weights = nn.Parameter(torch.ones(n))
        self.eps = eps
        self.conv = SeparableConvBN(channels)

    def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        w = F.relu(self.weights)
        w = w / (w.sum() + self.eps)
        fused = sum(wi * x for wi, x in zip(w, inputs))  # (B, C, H, W)
        return self.conv(F.silu(fused))


def _resize_to(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Nearest upsampling or 3x3/2 max-pool downsampling of `x` to the spatial size of `ref`."""
    size = ref.shape[-2:]
    if x.shape[-2:] == size:
        return x
    if x.shape[-1] > size[-1]:
        x = F.max_pool2d(x, 3, stride=2, padding=1)
        if x.shape[-2:] == size:
            return x
    return F.interpolate(x, size=size, mode="nearest")


class BiFPNLayer(nn.Module):
    """One bidirectional (top-down + bottom-up) pass over L levels of `channels` width."""

    def __init__(self, num_levels: int, channels: int):
        super().__init__()
        self.top_down = nn.ModuleList(FastFusion(2, channels) for _ in range(num_levels - 1))
        # bottom-up nodes: middle levels fuse three inputs (input, top-down, lower output), the top two
        self.bottom_up = nn.ModuleList(FastFusion(3 if i < num_levels - 1 else 2, channels)
                                       for i in range(1, num_levels))

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        n = len(feats)
        td = [None] * n
        td[-1] = feats[-1]
        for i in range(n - 2, -1, -1):  # top-down: P_{L-1} ... P_0
            td[i] = self.top_down[i]([feats[i], _resize_to(td[i + 1], feats[i])])
        out = [td[0]]
        for i in range(1, n):  # bottom-up
            down = _resize_to(out[i - 1], feats[i])
            inputs = [feats[i], td[i], down] if i < n - 1 else [feats[i], down]
            out.append(self.bottom_up[i - 1](inputs))
        return out


class BiFPN(nn.Module):
    """BiFPN neck over backbone features at strides 8, 16, 32 (P3-P5) or 4, 8, 16, 32 (P2-P5), optionally P6/P7.

    Args:
        in_channels: channels of the backbone's [C2,] C3, C4, C5.
        width: channels of every output level.
        repeats: number of stacked BiFPN layers.
        num_levels: 3 (up to P5) to 5 (up to P7, P6/P7 by downsampling P5 as EfficientDet).
        in_strides: the backbone levels' strides, [8, 16, 32] or [4, 8, 16, 32] (the backbone's `strides`).
    """

    def __init__(self, in_channels: list[int], width: int = 64, repeats: int = 2, num_levels: int = 3,
                 in_strides: list[int] | None = None):
        super().__init__()
        in_strides = list(in_strides or [8, 16, 32])
        if in_strides not in ([8, 16, 32], [4, 8, 16, 32]) or len(in_channels) != len(in_strides):
            raise ValueError(f"BiFPN expects backbone levels at strides 8, 16, 32 (or 4, 8, 16, 32), got channels "
                             f"{in_channels} at strides {in_strides}")
        if num_levels not in (3, 4, 5):
            raise ValueError(f"BiFPN num_levels must be 3, 4 or 5 (up to P5 .. P7), got {num_levels}")
        if width < 1 or repeats < 1:
            raise ValueError(f"BiFPN width and repeats must be positive, got {width} and {repeats}")
        self.in_channels = list(in_channels)
        self.strides = in_strides + [64, 128][:num_levels - 3]
        self.out_channels = [width] * len(self.strides)
        self.lateral = nn.ModuleList(nn.Sequential(nn.Conv2d(c, width, 1, bias=False), nn.BatchNorm2d(width))
                                     for c in in_channels)
        self.extra = nn.ModuleList(nn.MaxPool2d(3, stride=2, padding=1) for _ in range(num_levels - 3))
        self.layers = nn.Sequential(*(BiFPNLayer(len(self.strides), width) for _ in range(repeats)))

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        if len(feats) != len(self.lateral):
            raise ValueError(f"BiFPN got {len(feats)} feature maps, expects {len(self.lateral)}")
        levels = [proj(f) for proj, f in zip(self.lateral, feats)]  # [(B, width, H/s, W/s)]
        for pool in self.extra:
            levels.append(pool(levels[-1]))  # P6, P7: (B, width, H/64, W/64), (B, width, H/128, W/128)
        return self.layers(levels)
