"""Generic layers shared by the model parts and the task heads.

`MergeLevels` follows the semantic branch of Panoptic FPN (Kirillov et al., CVPR 2019): every
pyramid level is upsampled to the finest one and summed.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class MergeLevels(nn.Module):
    """Sum of all pyramid levels upsampled (bilinear) to the finest one: (B, C, H/s, W/s)."""

    def forward(self, feats: Sequence[torch.Tensor]) -> torch.Tensor:
        out = feats[0]
        for f in feats[1:]:
            out = out + F.interpolate(f, size=out.shape[-2:], mode="bilinear", align_corners=False)
        return out


def conv_bn_relu(in_channels: int, width: int, depth: int) -> nn.Sequential:
    """`depth` x (3x3 conv, BatchNorm, ReLU), the first from `in_channels`, then `width` wide."""
    layers: list[nn.Module] = []
    c = in_channels
    for _ in range(depth):
        layers += [nn.Conv2d(c, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
        c = width
    return nn.Sequential(*layers)
