"""Triggers: small, versioned rules over the catalog's per-frame signals, each in its own module.

A trigger has a name, a version (bump it when its rule changes: hits are stored per version), a
description, parameters (`threshold`, `quota`: at most that many frames per round, the highest
scores first) and `scores(table)`: per frame the score where it fires, NaN where it does not.
`table` is `Catalog.table(run)`: {"frame_id", "clip", "idx", <signal>: float array} (+ "embedding").
The registry is a plain dict built from the modules below; `build_triggers` applies a config's
parameters and raises on an unknown name, listing the known ones.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Trigger:
    name: str
    version: int
    description: str
    signal: str  # the catalog column it reads (or "embedding")
    threshold: float
    quota: int = 50

    def values(self, table: Mapping[str, Any]) -> np.ndarray:
        return np.asarray(table[self.signal], np.float64)

    def scores(self, table: Mapping[str, Any]) -> np.ndarray:
        """Per frame: the value where value > threshold, else NaN (a NaN signal never fires)."""
        v = self.values(table)
        with np.errstate(invalid="ignore"):
            return np.where(v > self.threshold, v, np.nan)

    def fire(self, table: Mapping[str, Any]) -> list[tuple[int, float]]:
        """(frame id, score) of the frames it fires on, best first, at most `quota`."""
        s = self.scores(table)
        idx = np.flatnonzero(~np.isnan(s))
        idx = idx[np.lexsort((np.asarray(table["frame_id"])[idx], -s[idx]))][: self.quota]
        return [(int(table["frame_id"][i]), float(s[i])) for i in idx]


def _registry() -> dict[str, Trigger]:
    from data_engine.triggers import (accel, box2d_vs_3d, cross_camera, dense_entropy, depth_vs_3d, det2d_uncertain,
                                      det3d_uncertain, flicker, jitter, model_disagreement, novelty, signs_uncertain,
                                      speed)

    out: dict[str, Trigger] = {}
    for mod in (det2d_uncertain, det3d_uncertain, signs_uncertain, dense_entropy, flicker, jitter, cross_camera,
                box2d_vs_3d, depth_vs_3d, speed, accel, model_disagreement, novelty):
        t = mod.TRIGGER
        if t.name in out:
            raise ValueError(f"two triggers named '{t.name}'")
        out[t.name] = t
    return out


TRIGGERS: dict[str, Trigger] = {}


def registry() -> dict[str, Trigger]:
    if not TRIGGERS:
        TRIGGERS.update(_registry())
    return TRIGGERS


def build_triggers(params: Mapping[str, Mapping[str, Any]] | None = None) -> list[Trigger]:
    """The triggers named in `params` ({name: {threshold, quota, enabled}}), or all registered ones."""
    known = registry()
    if not params:
        return list(known.values())
    out = []
    for name, p in params.items():
        if name not in known:
            raise ValueError(f"unknown trigger '{name}'; known triggers: {sorted(known)}")
        p = dict(p or {})
        if not p.pop("enabled", True):
            continue
        bad = sorted(set(p) - {"threshold", "quota"})
        if bad:
            raise ValueError(f"trigger '{name}': unknown parameter '{bad[0]}'; allowed: threshold, quota, enabled")
        t = dataclasses.replace(known[name], **p)
        if isinstance(t.threshold, bool) or not isinstance(t.threshold, (int, float)) or not math.isfinite(t.threshold):
            raise ValueError(f"trigger '{name}': threshold must be a finite number, got {t.threshold!r} (a NaN threshold "
                             "never fires)")
        if isinstance(t.quota, bool) or not isinstance(t.quota, int):
            raise ValueError(f"trigger '{name}': quota must be a whole number, got {t.quota!r}")
        if t.quota < 1:
            raise ValueError(f"trigger '{name}': quota must be at least 1, got {t.quota}")
        out.append(t)
    return out


def fire_all(catalog, triggers: list[Trigger], run: int | None = None) -> tuple[int, dict[str, list[tuple[int, float]]]]:
    """Run `triggers` over a shadow run's frames and store their hits (replacing earlier hits of the
    same trigger version: idempotent). Returns (run id, {trigger: [(frame id, score)]})."""
    from data_engine.catalog import Catalog

    with Catalog(catalog) as cat:
        run_id = cat.latest_run(run)
        table = cat.table(run_id)
        ids, emb = cat.embeddings(run_id, table["frame_id"])
        if len(ids) == len(table["frame_id"]):
            table["embedding"] = emb
        out = {}
        for t in triggers:
            out[t.name] = t.fire(table)
            cat.write_hits(t.name, t.version, run_id, out[t.name])
    return run_id, out
