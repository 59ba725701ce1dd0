"""Strict state-dict loading that reports every key that does not fit.

`torch.nn.Module.load_state_dict` stops at the first shape mismatch and, with `strict=False`,
silently leaves unmatched parameters at their random initialization. Here a file that does not
fit is one `ValueError` listing the missing, unexpected and shape-mismatched keys; partial
loading happens only when asked for.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from torch import nn


def _preview(keys: list[str], limit: int = 8) -> str:
    more = f" ... (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def load_state_dict_checked(module: nn.Module, state: Mapping[str, torch.Tensor], *, where: str = "state dict",
                            ignore_prefixes: Iterable[str] = (), partial: bool = False,
                            refuse_mismatch: bool = False) -> dict[str, list[str]]:
    """Load `state` into `module`, raising `ValueError` listing the keys that do not fit.

    Keys starting with one of `ignore_prefixes` are skipped on both sides (e.g. a classifier
    `fc.` that a feature extractor drops). With `partial=True` the fitting keys are loaded and
    the report is returned instead of raised. Returns {"missing", "unexpected", "mismatched"}.
    `refuse_mismatch=True` (with `partial`, as mmengine's `load_from`): a key present on both sides
    with another shape is still a one-line ValueError naming it and both shapes, raised before
    anything is loaded (missing and unexpected keys stay allowed).
    """
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{where}: expected a mapping of parameter names to tensors")
    ignore = tuple(ignore_prefixes)
    own = {k: v for k, v in module.state_dict().items() if not k.startswith(ignore)}
    given = {k: v for k, v in state.items() if not k.startswith(ignore)}
    missing = sorted(set(own) - set(given))
    unexpected = sorted(set(given) - set(own))
    mismatched = sorted(k for k in set(own) & set(given) if own[k].shape != given[k].shape)
    report = {"missing": missing, "unexpected": unexpected, "mismatched": mismatched}
    if mismatched and partial and refuse_mismatch:
        k = next(k for k in own if k in given and own[k].shape != given[k].shape)  # the first in the model's order
        more = f" (and {len(mismatched) - 1} more key(s) of another shape)" if len(mismatched) > 1 else ""
        raise ValueError(f"{where} does not fit this model: key '{k}' has shape {tuple(given[k].shape)} in the weights "
                         f"but {tuple(own[k].shape)} in the model{more}; a partial load takes only keys whose name and "
                         "shape match: build the model with the same widths as the weights' model, or start without them")
    if (missing or unexpected or mismatched) and not partial:
        parts = []
        if missing:
            parts.append(f"missing keys [{_preview(missing)}]")
        if unexpected:
            parts.append(f"unexpected keys [{_preview(unexpected)}]")
        if mismatched:
            shapes = [f"{k} {tuple(given[k].shape)} vs {tuple(own[k].shape)}" for k in mismatched]
            parts.append(f"shape mismatch [{_preview(shapes)}]")
        raise ValueError(f"{where} does not fit this model: " + "; ".join(parts)
                         + ". Use weights saved from the same architecture (or load partially on purpose).")
    fitting = {k: v for k, v in given.items() if k in own and k not in mismatched}
    module.load_state_dict(fitting, strict=False)
    return report


def load_weights_file(module: nn.Module, path: str | Path, *, ignore_prefixes: Iterable[str] = (),
                      partial: bool = False) -> dict[str, list[str]]:
    """Read a local state-dict file with `weights_only=True` and load it checked (no downloads)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"weights file {path} does not exist; give the path of a saved state dict")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a corrupt or pickled-object file: say which file and why
        raise ValueError(f"weights file {path} could not be read as a state dict ({type(e).__name__}: {e})") from None
    return load_state_dict_checked(module, state, where=f"weights file {path}", ignore_prefixes=ignore_prefixes,
                                   partial=partial)
