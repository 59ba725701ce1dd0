"""The task contract: one task = one file holding its head, targets, loss, decoding and metric.

A `Task` is an `nn.Module` whose `head` reads the neck's feature pyramid
[(B*N, C, H/8, W/8), (B*N, C, H/16, W/16), ...] and returns a dict of raw tensors (logits: no
activation in a head; activations belong to `loss` and `decode`). Around the head:

- `build_targets(sample)`: numpy targets of one frame (all N cameras) from a sample in the
  `docs/dataset_format.md` form; runs in data-loader workers.
- `collate(list of build_targets outputs)`: torch targets of a batch, cameras flattened so index
  b * N + n lines up with the head outputs (arrays are concatenated, per-camera lists flattened).
- `loss(outputs, targets) -> {component: scalar}`: weights and switches are constructor args.
- `decode(outputs) -> list` of B*N per-image results.
- `metric() -> Metric`: a fresh accumulator with `update(decoded, targets)` and `compute()`.

Multi-level merging of dense heads follows the semantic branch of Panoptic FPN (Kirillov et al.,
CVPR 2019): every pyramid level is upsampled to the finest one and summed.
"""
from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def image_hw(sample: Mapping) -> tuple[int, int]:
    """(H, W) of a sample's images: uint8 (N, H, W, 3) or, after transforms, float (N, 3, H, W)."""
    images = require(sample, "images", "any task")
    shape = tuple(images.shape)
    if len(shape) != 4:
        raise ValueError(f"sample 'images' must be (N, H, W, 3) or (N, 3, H, W), got shape {shape}")
    return (shape[1], shape[2]) if shape[-1] == 3 else (shape[2], shape[3])


def require(sample: Mapping, key: str, task: str) -> Any:
    """sample[key], or a ValueError naming the key and the task that needs it."""
    if key not in sample:
        raise ValueError(f"task '{task}' needs sample key '{key}', the sample has {sorted(sample)}; "
                         f"read the dataset with that channel enabled")
    return sample[key]


def camera_labels(sample: Mapping, task: str) -> list[dict]:
    """Per camera (in sample order) the labels.json camera entry (boxes2d, lanes2d)."""
    labels = require(sample, "labels", task)
    names = require(sample, "camera_names", task)
    cams = labels.get("cameras", {})
    missing = [n for n in names if n not in cams]
    if missing:
        raise ValueError(f"task '{task}': labels have no entry for camera '{missing[0]}' (labels cameras: {sorted(cams)})")
    return [cams[n] for n in names]


class MergeLevels(nn.Module):
    """Sum of all pyramid levels upsampled (bilinear) to the finest one: (B, C, H/8, W/8)."""

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


class DenseHead(nn.Module):
    """Per-pixel head: merged pyramid -> 3x3 conv-BN-ReLU (x depth) -> 1x1 conv to `out_channels`,
    bilinearly upsampled by `in_stride` to the input resolution. Returns {"logits": (B, K, H, W)}."""

    def __init__(self, in_channels: int, out_channels: int, width: int = 32, depth: int = 1, in_stride: int = 8,
                 bias_init: float | None = None):
        super().__init__()
        self.merge = MergeLevels()
        self.body = conv_bn_relu(in_channels, width, depth)
        self.out = nn.Conv2d(width if depth else in_channels, out_channels, 1)
        if bias_init is not None:
            nn.init.constant_(self.out.bias, bias_init)
        self.in_stride = in_stride

    def forward(self, feats: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        x = self.out(self.body(self.merge(feats)))  # (B, K, H/8, W/8)
        x = F.interpolate(x, scale_factor=self.in_stride, mode="bilinear", align_corners=False)
        return {"logits": x}  # (B, K, H, W)


class Metric(abc.ABC):
    """Accumulates over batches; `compute()` gives {name: float} over everything seen."""

    @abc.abstractmethod
    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        """Add one batch: `decoded` from Task.decode (B*N items), `targets` from Task.collate."""

    @abc.abstractmethod
    def compute(self) -> dict[str, float]:
        """The metric values over every update so far."""


class Task(nn.Module, abc.ABC):
    """Base of every task. Subclasses set `self.head` and implement the abstract methods.

    Attributes: `name` (the registry key), `in_channels` (channels it expects on every pyramid
    level), `in_stride` (stride of the finest level it expects), `space` ("image": reads the
    per-camera pyramid; "bev": reads the fused bird's-eye-view features).
    """

    name: str = ""
    space: str = "image"

    def __init__(self, in_channels: int, in_stride: int = 8):
        super().__init__()
        if not self.name:
            raise ValueError(f"{type(self).__name__} must set a class attribute `name`")
        self.in_channels = in_channels
        self.in_stride = in_stride

    def forward(self, feats: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.head(feats)

    @abc.abstractmethod
    def build_targets(self, sample: Mapping) -> dict[str, Any]:
        """Numpy targets of one frame; arrays have a leading camera axis N, lists have N items."""

    def collate(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Batch per-frame targets: arrays concatenated over frames -> tensors (B*N, ...);
        per-camera lists flattened -> lists of B*N items (numpy arrays become tensors)."""
        if not targets:
            raise ValueError(f"task '{self.name}': cannot collate an empty batch")
        out: dict[str, Any] = {}
        for key in targets[0]:
            values = [t[key] for t in targets]
            if isinstance(values[0], np.ndarray):
                out[key] = torch.from_numpy(np.concatenate(values, axis=0))
            elif isinstance(values[0], list):
                out[key] = [torch.from_numpy(v) if isinstance(v, np.ndarray) else v for frame in values for v in frame]
            else:
                raise ValueError(f"task '{self.name}': target '{key}' is {type(values[0]).__name__}, "
                                 f"expected a numpy array or a per-camera list")
        return out

    @abc.abstractmethod
    def loss(self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Named scalar loss components (already weighted by the task's constructor weights)."""

    @abc.abstractmethod
    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list:
        """Per-image results (B*N items) from raw head outputs."""

    @abc.abstractmethod
    def metric(self) -> Metric:
        """A fresh metric accumulator for this task."""

    def decoding(self) -> dict[str, Any] | None:
        """{"kind": a `hydranet.decoding.DECODERS` key, "params": its keyword arguments}: how the
        torch-free runtime decodes this head (deploy writes it into the ONNX metadata). None: no
        numpy decoder, the runtime hands out the raw outputs."""
        return None


def decode_numpy(spec: Mapping[str, Any], outputs: Mapping[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """A task's `decode` through the one numpy implementation (`hydranet.decoding`) the deployed
    runtime uses too: outputs -> numpy -> decoder -> tensors on the outputs' device."""
    from hydranet import decoding

    device = next(iter(outputs.values())).device
    arrays = {k: v.detach().float().cpu().numpy() for k, v in outputs.items()}
    results = decoding.decode(spec["kind"], arrays, spec["params"])
    return [{k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in r.items()} for r in results]


def to_device(obj: Any, device: torch.device | str) -> Any:
    """Move tensors inside nested dicts/lists/tuples to `device` (other values unchanged)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `mask` is true; 0 (with a gradient path) when the mask is empty."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
