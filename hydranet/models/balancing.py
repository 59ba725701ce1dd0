"""Multi-task loss balancing, chosen by name (`BALANCERS`).

- "fixed": total = sum_i w_i L_i.
- "uncertainty": homoscedastic uncertainty weighting, Kendall, Gal, Cipolla, "Multi-Task Learning
  Using Uncertainty to Weigh Losses for Scene Geometry and Semantics", CVPR 2018: one learned
  s_i = log sigma_i^2 per task, total = sum_i exp(-s_i) w_i L_i + s_i.
- "pcgrad": gradient surgery, Yu et al., "Gradient Surgery for Multi-Task Learning", NeurIPS 2020:
  on the shared parameters each task gradient is projected off the normal plane of every other
  task gradient it conflicts with (negative dot product), in random order, and the projected
  gradients are summed; task-specific parameters get their plain gradients.

Every balancer has `combine(losses) -> total` (what `forward(batch, "loss")` reports) and
`backward(losses, shared_params, other_params)`; the training loop calls `model.backward(losses)`, which is a
plain `combine(...).backward()` except for gradient methods.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch
from torch import nn


class FixedWeights(nn.Module):
    """total = sum_i w_i L_i with constant weights."""

    def __init__(self, task_names: Sequence[str], weights: Mapping[str, float] | None = None):
        super().__init__()
        weights = dict(weights or {})
        unknown = sorted(set(weights) - set(task_names))
        if unknown:
            raise ValueError(f"loss weight for unknown task '{unknown[0]}'; tasks: {list(task_names)}")
        self.task_names = list(task_names)
        self.weights = {n: float(weights.get(n, 1.0)) for n in task_names}

    def _check(self, losses: Mapping[str, torch.Tensor]) -> list[str]:
        """The tasks present in `losses` (a batch may lack some heads' labels: partial labels,
        hydranet/models/partial.py); an unknown name or no loss at all raises."""
        unknown = sorted(set(losses) - set(self.task_names))
        if unknown or not losses:
            raise ValueError(f"balancer got losses {sorted(losses)}; its tasks are {self.task_names}")
        return [n for n in self.task_names if n in losses]

    def weighted(self, losses: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The weighted losses of the tasks present (a task absent from the batch is left out)."""
        return {n: self.weights[n] * losses[n] for n in self._check(losses)}

    def combine(self, losses: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return sum(self.weighted(losses).values())

    def backward(self, losses: Mapping[str, torch.Tensor], shared_params: Iterable[nn.Parameter],
                 other_params: Iterable[nn.Parameter]) -> None:
        """Gradients of the combined loss; `shared_params` (backbone, neck) and `other_params`
        (heads, balancer) matter only to gradient methods."""
        self.combine(losses).backward()


class UncertaintyWeighting(FixedWeights):
    """Kendall et al. 2018: total = sum_i exp(-s_i) w_i L_i + s_i, with learned s_i (init 0)."""

    def __init__(self, task_names: Sequence[str], weights: Mapping[str, float] | None = None):
        super().__init__(task_names, weights)
        self.log_vars = nn.ParameterDict({n: nn.Parameter(torch.zeros(())) for n in self.task_names})

    def combine(self, losses: Mapping[str, torch.Tensor]) -> torch.Tensor:
        w = self.weighted(losses)
        return sum(torch.exp(-self.log_vars[n]) * w[n] + self.log_vars[n] for n in w)


class PCGrad(FixedWeights):
    """Yu et al. 2020 gradient surgery on the shared parameters; `combine` is the fixed weighted sum."""

    def __init__(self, task_names: Sequence[str], weights: Mapping[str, float] | None = None, seed: int = 0):
        super().__init__(task_names, weights)
        self.generator = torch.Generator().manual_seed(seed)

    def backward(self, losses: Mapping[str, torch.Tensor], shared_params: Iterable[nn.Parameter],
                 other_params: Iterable[nn.Parameter]) -> None:
        shared = [p for p in shared_params if p.requires_grad]
        shared_ids = {id(p) for p in shared}
        w = self.weighted(losses)
        grads = []
        for n in w:  # flat gradient of each task present on the shared parameters
            g = torch.autograd.grad(w[n], shared, retain_graph=True, allow_unused=True)
            grads.append(torch.cat([(gi if gi is not None else torch.zeros_like(p)).reshape(-1)
                                    for gi, p in zip(g, shared)]))
        projected = []
        for i, g in enumerate(grads):
            g = g.clone()
            for j in torch.randperm(len(grads), generator=self.generator).tolist():
                if j == i:
                    continue
                dot = torch.dot(g, grads[j])
                if dot < 0:
                    g -= dot / grads[j].pow(2).sum().clamp(min=1e-20) * grads[j]
            projected.append(g)
        total = torch.stack(projected).sum(0)
        offset = 0
        for p in shared:
            n = p.numel()
            g = total[offset:offset + n].view_as(p)
            p.grad = g.clone() if p.grad is None else p.grad + g
            offset += n
        # task-specific parameters (heads): plain gradients of the weighted sum
        others = [p for p in other_params if p.requires_grad and id(p) not in shared_ids]
        if others:
            torch.autograd.backward(sum(w.values()), inputs=others)


BALANCERS = {"fixed": FixedWeights, "uncertainty": UncertaintyWeighting, "pcgrad": PCGrad}


def build_balancer(name: str, task_names: Sequence[str], weights: Mapping[str, float] | None = None) -> FixedWeights:
    """The balancer registered as `name`; unknown names raise ValueError listing the known ones."""
    if name not in BALANCERS:
        raise ValueError(f"unknown balancer '{name}'; known balancers: {sorted(BALANCERS)}")
    return BALANCERS[name](task_names, weights)
