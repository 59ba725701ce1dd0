"""An exponential moving average of a model's weights (Polyak averaging), as YOLOv5's ModelEMA, timm's ModelEmaV2
and mmengine's ExponentialMovingAverage keep one: after every optimizer step each floating-point entry of the state
dict (parameters and BatchNorm statistics alike) moves toward the model's,

    ema = d_t * ema + (1 - d_t) * weight,   d_t = min(decay, (1 + t) / (10 + t))   (t: updates so far)

with TensorFlow's `num_updates` warm-up, so a short run's average is not dominated by its first, random weights.
Integer entries (BatchNorm's step counters) are copied. `optim.ema_decay` turns it on (0: off); the run's
checkpoint then holds the average as "model" (what evaluation, export and `--init` read) and the trained weights
under "ema" to resume from.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch


class WeightEma:
    """The average of `model`'s state dict (copied at construction), updated by `update(model)`."""

    def __init__(self, model: torch.nn.Module, decay: float, updates: int = 0):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"optim.ema_decay {decay}: give a decay in (0, 1), e.g. 0.99, or 0 for no average")
        self.decay, self.updates = decay, updates
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def current_decay(self) -> float:
        return min(self.decay, (1 + self.updates) / (10 + self.updates))

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        d = self.current_decay()
        self.updates += 1
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.state[k].lerp_(v.detach(), 1.0 - d)  # avg += (1 - d) * (new - avg)
            else:
                self.state[k].copy_(v)

    def load(self, state: Mapping[str, torch.Tensor], updates: int) -> None:
        """Restore the average (a checkpoint's "model") and its update count (a resumed run)."""
        if set(state) != set(self.state):
            raise ValueError("the checkpoint's averaged weights do not fit the model; resume the run it came from")
        for k, v in state.items():
            self.state[k].copy_(v)
        self.updates = updates
