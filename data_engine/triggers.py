"""Triggers: small, versioned rules over the catalog's per-frame signals, as one table.

A trigger has a name, a version (bump it when its rule changes: hits are stored per name and version),
a description, the catalog column it reads, parameters (`threshold`, `quota`: at most that many frames
per round, the highest scores first) and `scores(table)`: per frame the score where it fires, NaN where
it does not. Most triggers read a signal column as it is (one row of TABLE below); the few that compute
their value name a function of the table (`values`, e.g. novelty over the embeddings).
`table` is `Catalog.table(run)`: {"frame_id", "clip", "idx", <signal>: float array} (+ "embedding").
`build_triggers` applies a config's parameters (configs/engine.yaml `triggers:`) and raises on an
unknown name, listing the known ones.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
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
    compute: Callable[[Mapping[str, Any]], np.ndarray] | None = None  # the value per frame; None: the signal column

    def values(self, table: Mapping[str, Any]) -> np.ndarray:
        if self.compute is not None:
            return self.compute(table)
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


# -- the triggers that compute their value -------------------------------------------------------------
def novelty(table: Mapping[str, Any]) -> np.ndarray:
    """1 - cosine similarity to the nearest other frame of another clip (NaN without embeddings)."""
    emb = table.get("embedding")
    if emb is None or len(emb) < 2:
        return np.full(len(table["frame_id"]), np.nan)
    sim = emb @ emb.T
    clip = np.asarray(table["clip"])
    sim[clip[:, None] == clip[None, :]] = -np.inf  # a clip's own frames are not "seen before"
    best = sim.max(1)
    return np.where(np.isfinite(best), 1.0 - best, np.nan)


# -- the table -----------------------------------------------------------------------------------------
# (name, version, signal, threshold, quota, description[, compute]); bump a version when its rule changes
TABLE: tuple[tuple, ...] = (
    ("det2d_uncertain", 1, "det2d_uncertain", 3, 50,
     "2D detections in the uncertain score band: more than threshold heatmap peaks with 0.3 <= p < 0.6"),
    ("det3d_uncertain", 1, "det3d_uncertain", 2, 50,
     "3D detections in the uncertain score band: more than threshold BEV heatmap peaks with 0.3 <= p < 0.6"),
    ("signs_uncertain", 1, "signs_lights_entropy", 0.45, 50,
     "signs and lights the model hesitates on: mean peak entropy above threshold (nats)"),
    ("dense_entropy", 1, "drivable_entropy_p95", 0.6, 50,
     "drivable-area tail entropy: the 95th percentile pixel entropy above threshold (nats)"),
    ("flicker", 1, "flicker", 1, 50,
     "flickering 2D detections: more than threshold one-frame blinks or gaps across consecutive frames"),
    ("jitter", 1, "jitter", 0.08, 50,
     "box jitter: the second difference of tracked 2D boxes, relative to their size, above threshold"),
    ("cross_camera", 1, "cross_camera", 0.5, 50,
     "cameras disagree in their overlap: share of 3D boxes seen by one camera's 2D detector but not the other's"),
    ("box2d_vs_3d", 1, "box2d_vs_3d", 0.8, 50,
     "2D detections and projected 3D boxes disagree: 1 - mean best IoU above threshold"),
    ("depth_vs_3d", 1, "depth_vs_3d", 0.5, 50,
     "the depth head contradicts the 3D boxes: mean relative depth error at box centres above threshold"),
    ("speed", 1, "speed_excess", 1.0, 50,
     "physically implausible speed: a 3D box faster than its class allows (|v| / vmax above threshold)"),
    ("accel", 1, "accel", 15.0, 50,
     "physically implausible acceleration of a tracked 3D box (m/s^2 above threshold)"),
    ("model_disagreement", 1, "disagree_det2d", 0.5, 50,
     "the candidate model disagrees with production on the 2D detections (1 - F1 above threshold)"),
    ("novelty", 1, "embedding", 0.05, 50,
     "novel scenes: embedding distance (1 - cosine) to the nearest frame of any other clip above threshold", novelty),
)


def _build(rows: tuple[tuple, ...]) -> dict[str, Trigger]:
    out: dict[str, Trigger] = {}
    for name, version, signal, threshold, quota, description, *compute in rows:
        if name in out:
            raise ValueError(f"two triggers named '{name}'")
        out[name] = Trigger(name, version, description, signal, threshold, quota, *compute)
    return out


TRIGGERS: dict[str, Trigger] = _build(TABLE)


def registry() -> dict[str, Trigger]:
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
