"""Partial labels: a head's loss and metric over only the frames that have its labels.

A mixed run (data.sources, docs/datasets.md) puts frames in one batch that supervise different
heads. Collate gives each head's targets a per-frame mask `targets["supervised"]` (B,) bool. A
head's loss is then its task's own `loss` over the supervised rows only (outputs and targets
selected along their leading axis: B*N camera rows or B frame rows), so an unsupervised frame
adds no loss and no gradient through that head's targets (masked, not a zero target); a batch in
which no frame supervises the head gives that head's losses times 0 (exact zero, exact zero
gradient) and the balancer leaves the head out (`present`).

BatchNorm: a head's BatchNorm layers would still see a batch without its labels in the forward
pass and fold that batch's statistics into their running mean and variance (the loss mask cannot
undo that). With `data.sources` every batch holds frames of one source (SourceBatchSampler), so a
head supervised only by nuScenes would have running statistics partly from BDD100K images it never
learned on, and evaluate with them. `frozen_norm` runs such a head with its BatchNorm layers in eval
mode for that batch: normalized with the running statistics, which stay untouched. A batch with some
of the head's labels keeps train-mode BatchNorm over all its frames: they come from one source, so
the unlabelled frames are of the same image distribution (docs/datasets.md).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

MASK = "supervised"


def select_rows(obj: Any, rows: Sequence[int] | torch.Tensor, total: int) -> Any:
    """The rows `rows` of every tensor (leading axis `total`) and list (length `total`) in obj."""
    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0 or obj.shape[0] != total:
            return obj
        return obj.index_select(0, torch.as_tensor(rows, dtype=torch.long, device=obj.device))
    if isinstance(obj, Mapping):
        return {k: select_rows(v, rows, total) for k, v in obj.items()}
    if isinstance(obj, list) and len(obj) == total:
        return [obj[int(i)] for i in rows]
    return obj


def leading_rows(outputs: Any) -> int:
    """The leading size of the first tensor in a head's outputs."""
    if isinstance(outputs, torch.Tensor):
        return int(outputs.shape[0])
    for v in (outputs.values() if isinstance(outputs, Mapping) else outputs):
        if isinstance(v, torch.Tensor):
            return int(v.shape[0])
    raise ValueError("head outputs hold no tensor")


def supervised_rows(mask: torch.Tensor, rows: int) -> torch.Tensor | None:
    """Row indices (of `rows` = B * per-frame rows) of the frames whose mask is true; None = all."""
    mask = mask.reshape(-1).bool().cpu()
    if bool(mask.all()):
        return None
    B = len(mask)
    if rows % B:
        raise ValueError(f"head outputs have {rows} rows, not a multiple of the batch's {B} frames")
    return torch.nonzero(mask.repeat_interleave(rows // B)).reshape(-1)


def split_mask(targets: Mapping[str, Any]) -> tuple[dict[str, Any], torch.Tensor | None]:
    targets = dict(targets)
    return targets, targets.pop(MASK, None)


def supervised_loss(objective, outputs: Any, targets: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], int]:
    """(objective.loss over the supervised frames, number of supervised frames)."""
    targets, mask = split_mask(targets)
    if mask is None:
        return objective.loss(outputs, targets), -1
    rows = leading_rows(outputs)
    idx = supervised_rows(mask, rows)
    if idx is None:
        return objective.loss(outputs, targets), int(mask.numel())
    if len(idx) == 0:  # nobody has labels: the stand-in targets' loss times 0 (zero value, zero gradient)
        return {k: v * 0.0 for k, v in objective.loss(outputs, targets).items()}, 0
    return objective.loss(select_rows(outputs, idx, rows), select_rows(targets, idx, rows)), int(mask.sum())


def supervised_update(metric, decoded: list, targets: Mapping[str, Any]) -> None:
    """metric.update over the frames that have the head's labels (all without a mask)."""
    targets, mask = split_mask(targets)
    if mask is None:
        return metric.update(decoded, targets)
    idx = supervised_rows(mask, len(decoded))
    if idx is None:
        return metric.update(decoded, targets)
    if len(idx):
        metric.update([decoded[int(i)] for i in idx], select_rows(targets, idx, len(decoded)))


def supervised_targets(targets: Mapping[str, Any], rows: int) -> dict[str, Any] | None:
    """The targets of the supervised frames (None when no frame has labels): for baselines."""
    targets, mask = split_mask(targets)
    if mask is None:
        return targets
    idx = supervised_rows(mask, rows)
    if idx is None:
        return targets
    return select_rows(targets, idx, rows) if len(idx) else None


SAMPLES = "samples"  # losses["<head>.samples"]: how many frames of the batch had the head's labels


def present_objectives(objectives: Sequence[str], losses: Mapping[str, torch.Tensor]) -> list[str]:
    """The objectives with labels in the batch (what the balancer combines); all when none has."""
    present = [n for n in objectives if f"{n}.{SAMPLES}" not in losses or float(losses[f"{n}.{SAMPLES}"]) > 0]
    return present or list(objectives)


def no_labels(targets: Mapping[str, Any] | None) -> bool:
    """Whether a head's collated targets say that no frame of the batch has its labels."""
    mask = None if targets is None else targets.get(MASK)
    return mask is not None and not bool(torch.as_tensor(mask).any())


@contextmanager
def frozen_norm(module: nn.Module, frozen: bool) -> Iterator[None]:
    """While `frozen`: the BatchNorm layers of `module` that are training run in eval mode (running
    statistics used, not updated); their mode is restored afterwards."""
    layers = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training] if frozen else []
    for m in layers:
        m.eval()
    try:
        yield
    finally:
        for m in layers:
            m.train()
