"""Triggers: small, versioned rules over the catalog's per-frame signals, as one table.

A trigger has a name, a version (bump it when its rule changes: hits are stored per name and version),
a description, the catalog column it reads, parameters (`threshold`, `quota`: at most that many frames
per round, the highest scores first) and `scores(table)`: per frame the score where it fires, NaN where
it does not. Most triggers read a signal column as it is (one row of TABLE: each head's own rows come from
its spec, `HeadSpec.trigger_rows`, the cross-head ones are ENGINE_ROWS below); the few that compute their
value name a function of the table (`values`, e.g. novelty over the embeddings).
`table` is `Catalog.table(run)`: {"frame_id", "clip", "idx", <signal>: float array} (+ "embedding").
`build_triggers` applies a config's parameters (configs/engine.yaml `triggers:`) and raises on an
unknown name, listing the known ones.
A trigger that fires on more than half of a run's frames (`degenerate`) selects nothing in particular;
the trigger tables flag it DEGENERATE with the reason read from the signals (a head that never detects,
a dense head at chance, a constant value, else the run's median against the threshold).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from data_engine.signals import ENGINE_SIGNALS
from hydranet.heads import HEADS


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
# (name, version, signal, threshold, quota, description[, compute]); bump a version when its rule changes.
# A head's own triggers are rows of its spec (`HeadSpec.trigger_rows`, hydranet/heads/<name>.py); these read
# the cross-head signals (data_engine.signals.ENGINE_SIGNALS) and the embedding.
ENGINE_ROWS: tuple[tuple, ...] = (
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


def table_rows() -> tuple[tuple, ...]:
    """Every trigger row: each registered head's `trigger_rows` (heads by `trigger_rank`, then registration
    order), then ENGINE_ROWS."""
    heads = sorted(HEADS.values(), key=lambda spec: spec.trigger_rank)
    return (*(row for spec in heads for row in spec.trigger_rows), *ENGINE_ROWS)


TABLE = table_rows()


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
    """Every registered trigger, in the table's order, with its overrides from `params` ({name: {threshold,
    quota, enabled}}, configs/engine.yaml's `triggers:`): a registered trigger runs with the table's
    threshold and quota unless an override changes them or says `enabled: false`; an override naming an
    unknown trigger or parameter is an error."""
    known = registry()
    params = dict(params or {})
    unknown = [n for n in params if n not in known]
    if unknown:
        raise ValueError(f"unknown trigger '{unknown[0]}'; known triggers: {sorted(known)}")
    out = []
    for name, trigger in known.items():
        p = dict(params.get(name) or {})
        if not p.pop("enabled", True):
            continue
        bad = sorted(set(p) - {"threshold", "quota"})
        if bad:
            raise ValueError(f"trigger '{name}': unknown parameter '{bad[0]}'; allowed: threshold, quota, enabled")
        t = dataclasses.replace(trigger, **p)
        if isinstance(t.threshold, bool) or not isinstance(t.threshold, (int, float)) or not math.isfinite(t.threshold):
            raise ValueError(f"trigger '{name}': threshold must be a finite number, got {t.threshold!r} (a NaN threshold "
                             "never fires)")
        if isinstance(t.quota, bool) or not isinstance(t.quota, int):
            raise ValueError(f"trigger '{name}': quota must be a whole number, got {t.quota!r}")
        if t.quota < 1:
            raise ValueError(f"trigger '{name}': quota must be at least 1, got {t.quota}")
        out.append(t)
    return out


def overrides_only(params: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """`params` without the values that equal the table's own (a config written when configs/engine.yaml listed
    every trigger with its defaults means the same as an empty one): {name: {key: value}} of real overrides."""
    known, out = registry(), {}
    for name, p in params.items():
        t = known.get(name)
        kept = {k: v for k, v in (p or {}).items() if v is not None and not (
            t is not None and ((k == "enabled" and v is True) or (k in ("threshold", "quota") and v == getattr(t, k))))}
        if kept or t is None:
            out[name] = kept
    return out


# -- degenerate triggers --------------------------------------------------------------------------------
DEGENERATE_SHARE = 0.5  # a trigger that fires on more than this share of a run's frames selects nothing in particular
MAX_ENTROPY = math.log(2)  # nats: a sigmoid at p = 0.5


def firing_share(trigger: Trigger, table: Mapping[str, Any]) -> tuple[int, int]:
    """(frames the trigger fires on, ignoring its quota; frames of the run)."""
    return int(np.count_nonzero(~np.isnan(trigger.scores(table)))), len(table["frame_id"])


def degenerate(trigger: Trigger, table: Mapping[str, Any]) -> str | None:
    """Why a trigger that fires on more than DEGENERATE_SHARE of the run's frames does (None when it does
    not): a head its signal is built from never detects, a dense head at chance, its value constant over
    the run, or else the share and the run's median value against the threshold."""
    fires, n = firing_share(trigger, table)
    if n == 0 or fires <= DEGENERATE_SHARE * n:
        return None
    head = f"{trigger.name} fires on {100 * fires / n:.0f}% of frames ({fires} of {n})"
    silent = [h for h in ENGINE_SIGNALS.get(trigger.signal, ()) if f"num_{h}" in table
              and np.isfinite(table[f"num_{h}"]).all() and not np.asarray(table[f"num_{h}"]).any()]
    if silent:
        return f"{head}: the model's {' and '.join(silent)} never detects (num_{silent[0]} = 0 on every frame)"
    what = trigger.signal if trigger.compute is None else trigger.name  # novelty: computed from the embeddings
    v = np.asarray(trigger.values(table), np.float64)
    v = v[np.isfinite(v)]
    med = float(np.median(v))  # fires > 0, so some value is finite
    if "entropy" in trigger.signal and med >= 0.95 * MAX_ENTROPY:
        return (f"{head}: the model is at chance there ({trigger.signal} median {med:.3f} of at most {MAX_ENTROPY:.3f} "
                "nats: p ~ 0.5 everywhere)")
    if v.max() - v.min() <= 1e-9 * max(1.0, abs(med)):
        return f"{head}: its value {what} is {med:.4g} on every frame with a value (constant)"
    return f"{head}: the run's median {what} {med:.4g} is above the threshold {trigger.threshold:g}"


def run_table(cat, run_id: int) -> dict[str, Any]:
    """`cat.table(run_id)` with the frames' embeddings (novelty's input) where every frame has one."""
    table = cat.table(run_id)
    ids, emb = cat.embeddings(run_id, table["frame_id"])
    if len(ids) == len(table["frame_id"]):
        table["embedding"] = emb
    return table


def fire_all(catalog, triggers: list[Trigger], run: int | None = None) -> tuple[int, dict[str, list[tuple[int, float]]]]:
    """Run `triggers` over a shadow run's frames and store their hits (replacing earlier hits of the
    same trigger version: idempotent). Returns (run id, {trigger: [(frame id, score)]})."""
    from data_engine.catalog import Catalog

    with Catalog(catalog) as cat:
        run_id = cat.latest_run(run)
        table = run_table(cat, run_id)
        out = {}
        for t in triggers:
            out[t.name] = t.fire(table)
            cat.write_hits(t.name, t.version, run_id, out[t.name])
    return run_id, out
