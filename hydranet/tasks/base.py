"""The task contract: one task = one file holding its head, targets, loss, decoding and metric.

A `Task` is an `nn.Module` whose `head` reads the neck's feature pyramid
[(B*N, C, H/s, W/s), (B*N, C, H/2s, W/2s), ...] (s = its `in_stride`, the neck's finest: 8, or 4 with
`model.finest_stride: 4`) and returns a dict of raw tensors (logits: no
activation in a head; activations belong to `loss` and `decode`). Around the head:

- `build_targets(sample)`: numpy targets of one frame (all N cameras) from a sample in the
  `docs/dataset_format.md` form; runs in data-loader workers.
- `collate(list of build_targets outputs)`: torch targets of a batch, cameras flattened so index
  b * N + n lines up with the head outputs (arrays are concatenated, per-camera lists flattened).
- `loss(outputs, targets) -> {component: scalar}`: weights and switches are constructor args.
- `decode(outputs) -> list` of B*N per-image results (default: the numpy decoder of `spec`).
- `metric() -> Metric`: a fresh accumulator with `update(decoded, targets)` and `compute()`.

Multi-level merging of dense heads follows the semantic branch of Panoptic FPN (Kirillov et al.,
CVPR 2019): every pyramid level is upsampled to the finest one and summed.

What the evaluator reads (it names no task): `primary_metric` (the metric a head is judged by and
its direction), `baseline(targets)` (the metric of the trivial predictor it must beat, over the
evaluated targets) and `draw(...)` (the head's panel in the prediction picture).
"""
from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hydranet.heads import HeadSpec
from hydranet.models.layers import MergeLevels, conv_bn_relu


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
        x = self.out(self.body(self.merge(feats)))  # (B, K, H/s, W/s), s = in_stride
        x = F.interpolate(x, scale_factor=self.in_stride, mode="bilinear", align_corners=False)
        return {"logits": x}  # (B, K, H, W)


def weighted_bce_prior_logit(positive: torch.Tensor, pos_weight: torch.Tensor | float = 1.0) -> torch.Tensor:
    """The constant logit b minimizing BCE-with-logits with `pos_weight` w over targets whose
    positive rate is `positive` p: sigmoid(b) = w p / (w p + 1 - p), clamped to [1e-4, 1 - 1e-4]."""
    p = torch.as_tensor(positive, dtype=torch.float64)
    q = (pos_weight * p / (pos_weight * p + 1 - p)).clamp(1e-4, 1 - 1e-4)
    return torch.log(q / (1 - q)).float()


class Metric(abc.ABC):
    """Accumulates over batches; `compute()` gives {name: float} over everything seen."""

    @abc.abstractmethod
    def update(self, decoded: list, targets: Mapping[str, Any]) -> None:
        """Add one batch: `decoded` from Task.decode (B*N items), `targets` from Task.collate."""

    @abc.abstractmethod
    def compute(self) -> dict[str, float]:
        """The metric values over every update so far."""

    def write_predictions(self, folder: str | Path) -> list[Path]:
        """Write what was evaluated in the task's exchange format (COCO JSON, a nuScenes
        submission, ...) into `folder`; returns the files written (none by default)."""
        return []

    def states(self) -> list | None:
        """Per item seen, in update order (a camera image for a camera head, a frame for a BEV head):
        the sufficient statistics of the metric, plain JSON values (matched scores and flags for AP,
        intersections and unions for IoU, error sums and counts), so `compute_states` gives the metric
        of any subset of items, repeats allowed (a bootstrap resample), without the model. None: this
        metric keeps no states (the default; the data engine's gate then falls back to the point
        estimate, and says so)."""
        return None

    def compute_states(self, states: Sequence) -> dict[str, float]:
        """The metric over `states` (items of `states()`, any subset, repeats allowed; None items are
        frames without the head's labels, skipped). Its keys include the primary metric; over every
        item it equals `compute()` (tests/test_metric_states.py)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no per-item states")

    def merge_states(self, states: Sequence) -> Any:
        """Optional: `states` as one state that `compute_states` takes in their place (the gate merges each
        clip once before it resamples clips). The default keeps the list (no merging)."""
        return list(states)


@dataclass(frozen=True)
class PrimaryMetric:
    """The metric a head is judged by: its key in `metric().compute()`, its direction, and the
    margin by which the model must beat the baseline (absolute, in the metric's unit) to count."""

    name: str
    higher_is_better: bool = True
    margin: float = 0.01

    def beats(self, model: float, baseline: float) -> bool:
        """True when `model` is better than `baseline` by more than the margin (NaN never beats;
        a NaN baseline, e.g. mAP of no detections, counts as the worst value)."""
        if math.isnan(model):
            return False
        if math.isnan(baseline):
            return True
        gain = model - baseline if self.higher_is_better else baseline - model
        return gain > self.margin


class Task(nn.Module, abc.ABC):
    """Base of every task. Subclasses set `self.head` and implement the abstract methods.

    Attributes: `name` (the registry key), `spec` (its numpy side, a `hydranet.heads.HeadSpec`: what
    the runtime, the readers and the data engine know of the head without torch), `in_channels` (channels it expects on every pyramid
    level), `in_stride` (stride of the finest level it expects), `space` ("image": reads the
    per-camera pyramid; "bev": reads the fused bird's-eye-view features), `primary_metric` (what
    the evaluator judges it by) and `baseline_name` (what `baseline` predicts, for the table).
    """

    name: str = ""
    space: str = "image"
    primary_metric: PrimaryMetric | None = None
    baseline_name: str = ""
    spec: type[HeadSpec] | None = None  # the numpy side: decoder, label keys, calibration, blank labels, signals

    def __init__(self, in_channels: int, in_stride: int = 8):
        super().__init__()
        if not self.name:
            raise ValueError(f"{type(self).__name__} must set a class attribute `name`")
        if not isinstance(self.primary_metric, PrimaryMetric) or not self.baseline_name:
            raise ValueError(f"{type(self).__name__} must set class attributes `primary_metric` (a PrimaryMetric) and "
                             "`baseline_name` (see docs/adding_a_head.md)")
        if self.spec is not None and (self.spec.name, self.spec.space) != (self.name, self.space):
            raise ValueError(f"{type(self).__name__}: its spec {self.spec.__qualname__} is head '{self.spec.name}' "
                             f"({self.spec.space}), the task '{self.name}' ({self.space}); they must agree")
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
    def metric(self) -> Metric:
        """A fresh metric accumulator for this task."""

    @abc.abstractmethod
    def baseline(self, targets: Sequence[Mapping[str, Any]]) -> dict[str, float]:
        """The metric of the trivial predictor this head must beat (`baseline_name`), over the
        evaluated batches' targets (`collate` outputs). It may use statistics of these targets
        (an oracle constant), which favours the baseline."""

    def fit_prior(self, targets: Mapping[str, Any]) -> None:
        """Set the output bias so the head's first prediction is the label prior of `targets` (a
        `collate` output of training frames), as Karpathy's recipe says ("init well"): a head whose
        bias starts at 0 spends its first steps only reaching the class frequency. Default: nothing
        (heads whose constructor already initializes at a fixed prior, or regress)."""

    def draw(self, canvas: np.ndarray, result: Mapping[str, Any], truth: Mapping[str, Any]) -> list[tuple[str, np.ndarray]]:
        """Draw one decoded result on the prediction picture: camera heads get their camera's
        image, BEV heads the bird's-eye panel (`hydranet.viz.BevCanvas`). Overlays go onto `canvas`
        in place; returned (label, RGB image) pairs become extra panels next to it. `truth`: the
        sample's data for this camera ("image", "labels", "depth", "normals", "drivable") or frame
        ("labels", "bev"). Default: nothing drawn."""
        return []

    def decode(self, outputs: Mapping[str, torch.Tensor]) -> list:
        """Per-image results (B*N items) from raw head outputs; by default the numpy decoder of the
        head's `spec` (the one the runtime runs) with `decoder_params()`."""
        spec = self.decoding()
        if spec is None:
            raise NotImplementedError(f"task '{self.name}' has no numpy decoder (`spec.decoder`); define `decode`")
        with torch.no_grad():
            return decode_numpy(spec, outputs, self.spec.decode)

    def decoder_params(self) -> dict[str, Any]:
        """Keyword arguments of the spec's numpy decoder (thresholds from the constructor)."""
        return {}

    def decoding(self) -> dict[str, Any] | None:
        """{"kind": a `hydranet.decoding.DECODERS` key, "params": its keyword arguments}: how the
        torch-free runtime decodes this head (deploy writes it into the ONNX metadata); by default
        the spec's `decoder` kind with `decoder_params()`. None: no numpy decoder, the runtime hands
        out the raw outputs."""
        if self.spec is None or self.spec.decoder is None:
            return None
        return {"kind": self.spec.decoder, "params": self.decoder_params()}


class BinaryMaskTask(Task):
    """A per-camera binary mask head (drivable area, lane lines): `DenseHead` logits (B*N, 1, H, W) trained with
    BCE-with-logits at `pos_weight` against targets["mask"] (N, 1, H, W) float, its bias started at the labels'
    prior under that weight; subclasses build the mask and decode it."""

    def __init__(self, in_channels: int, in_stride: int = 8, width: int = 32, pos_weight: float = 1.0,
                 threshold: float = 0.5):
        super().__init__(in_channels, in_stride)
        self.head = DenseHead(in_channels, 1, width, in_stride=in_stride)
        self.pos_weight, self.threshold = pos_weight, threshold

    def loss(self, outputs: Mapping[str, torch.Tensor], targets: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        logits = outputs["logits"].float()  # (B*N, 1, H, W)
        pw = torch.tensor(self.pos_weight, device=logits.device)
        return {"bce": F.binary_cross_entropy_with_logits(logits, targets["mask"], pos_weight=pw)}

    @torch.no_grad()
    def fit_prior(self, targets: Mapping[str, Any]) -> None:
        """The output bias at the positive rate of `targets` under this head's pos_weight."""
        self.head.out.bias.fill_(float(weighted_bce_prior_logit(targets["mask"].float().mean(), self.pos_weight)))


def decode_numpy(spec: Mapping[str, Any], outputs: Mapping[str, torch.Tensor],
                 decoder: Callable[..., list] | None = None) -> list[dict[str, torch.Tensor]]:
    """A task's `decode` through the one numpy implementation the deployed runtime uses too (the
    `decoder` of the head's spec, else `hydranet.decoding.DECODERS[spec["kind"]]`): outputs -> numpy
    -> decoder -> tensors on the outputs' device."""
    from hydranet import decoding

    device = next(iter(outputs.values())).device
    arrays = {k: v.detach().float().cpu().numpy() for k, v in outputs.items()}
    results = (decoding.decode(spec["kind"], arrays, spec["params"]) if decoder is None else
               decoding.run_decoder(spec["kind"], decoder, arrays, spec["params"]))
    return [{k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in r.items()} for r in results]


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` where `mask` is true; 0 (with a gradient path) when the mask is empty."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def score_constant(task: Task, targets: Sequence[Mapping[str, Any]], predict) -> dict[str, float]:
    """`task.metric()` over `targets` of the predictor `predict(batch targets) -> decoded list`:
    how a baseline is scored by the head's own metric."""
    m = task.metric()
    for t in targets:
        m.update(predict(t), t)
    return m.compute()


def no_detections(count: int, box_dim: int) -> list[dict[str, torch.Tensor]]:
    """`count` empty detection results (the trivial detection baseline)."""
    empty = {"boxes": torch.zeros(0, box_dim), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.long)}
    return [empty] * count
