"""HydraNet model parts: backbones, BiFPN neck, the multi-task network and loss balancing.

Names load on first use (PEP 562), so importing a submodule (`hydranet.models.layers`, which the
task heads build on) does not build the whole network module and its task registry first."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "BACKBONES": "backbones", "build_backbone": "backbones", "register_backbone": "backbones",
    "BALANCERS": "balancing", "build_balancer": "balancing",
    "BiFPN": "bifpn",
    "ModelConfig": "config", "TaskConfig": "config",
    "HydraNet": "hydranet", "build_model": "hydranet",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'hydranet.models' has no attribute '{name}'")
    return getattr(importlib.import_module(f"hydranet.models.{_WHERE[name]}"), name)
