"""Mining under a budget, and similarity search, over a shadow run's catalog rows.

    hydranet engine mine --catalog CAT --budget N --strategy S --out selection.json [--unit frame|clip]
    hydranet engine similar --catalog CAT --frame ID --k 50

Strategies (the miner reads signals and embeddings only, never the fleet's scenario tags):
- random: a seeded uniform sample (the baseline every other strategy is measured against);
- uncertainty: the highest uncertainty score u = mean over the available uncertainty signals of
  their percentile rank in the pool (scale-free: entropies, counts and disagreements combine);
- diversity: k-center greedy (Sener & Savarese, ICLR 2018) on the cosine embeddings: each pick is
  the frame farthest from everything picked so far; exact (the reference), or on a lake pool of at least
  ANN_MIN_POOL frames through the run's ANN index (`k_center_ann`: each pick updates only its neighbourhood);
- hybrid: the top `pool_factor * budget` frames by uncertainty, then k-center greedy inside that
  pool (uncertain *and* diverse, as PPAL, CVPR 2024);
- triggers: the frames the triggers fired on, round-robin over the triggers (each trigger's hits
  best first, within its quota), then filled by uncertainty if they run short;
- ensemble, tta: the highest server-side offline column (data_engine/uncertainty.py: an ensemble of
  exported models' disagreement, the production model's flip TTA), ties by frame id; the run must hold
  it (`hydranet engine uncertainty` stores it in the catalog; a benchmark may add it with `add_offline`).
Ranked strategies (uncertainty, triggers) drop near-duplicates (cosine distance to a selected item
below `dedup` x the pool's median nearest-neighbour distance) and are class-aware: no dominant
predicted class may take more than `class_cap` of the budget while items of other classes remain.
Every strategy that ranks frames (uncertainty, diversity, hybrid, triggers, ensemble, tta; not random) keeps
two picks of one clip at least `min_gap_s` seconds apart (the frames' catalog timestamps; 0: no gap): a frame
0.1 s from a pick of its clip is the same scene again. Like the rules above it relaxes only to fill the budget
(a pool of one short clip); with `--unit clip` every item is a whole clip and the gap does not apply.
Every item carries why it was chosen, whatever the strategy: {"strategy", "score" (the strategy's own),
"rank" (in the selection), "triggers" (every trigger that fires on the item, by name) and "trigger_scores"
({trigger: score})}; the triggers strategy adds "trigger", the one that chose it. The triggers are fired
in memory over the pool with the engine config (the hits `hydranet engine triggers` stores for the run).
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from data_engine.config import UNITS, EngineConfig, MiningConfig
from data_engine.signals import UNCERTAINTY_COLUMNS
from data_engine.triggers import build_triggers

UNCERTAINTY_SIGNALS = UNCERTAINTY_COLUMNS  # each head's (its spec's) and the cross-head ones: data_engine.signals
SEARCHES = ("auto", "exact", "ann")  # diversity's k-center: auto = ann on a lake pool of >= ANN_MIN_POOL frames, else exact
ANN_MIN_POOL = 100_000  # below it exact k-center (O(pool x budget)) takes seconds; above, minutes per thousand picks


class MiningError(ValueError):
    """A selection that cannot be made as asked; one line saying what to do."""


# -- scores ----------------------------------------------------------------------------------------
def percentile_rank(v: np.ndarray) -> np.ndarray:
    """Rank of each finite value in [0, 1] (ties share their mean rank); NaN stays NaN."""
    out = np.full(len(v), np.nan)
    ok = np.flatnonzero(np.isfinite(v))
    if len(ok) == 0:
        return out
    order = np.argsort(v[ok], kind="stable")
    ranks = np.empty(len(ok))
    ranks[order] = np.arange(len(ok))
    vals = v[ok]
    for u in np.unique(vals):  # ties: the mean rank
        m = vals == u
        if m.sum() > 1:
            ranks[m] = ranks[m].mean()
    out[ok] = ranks / max(len(ok) - 1, 1)
    return out


def uncertainty_score(table: Mapping[str, np.ndarray]) -> np.ndarray:
    ranks = [percentile_rank(np.asarray(table[s], np.float64)) for s in UNCERTAINTY_SIGNALS if s in table]
    ranks = [r for r in ranks if np.isfinite(r).any() and np.nanmax(r) > 0]
    if not ranks:
        return np.zeros(len(table["frame_id"]))
    with np.errstate(invalid="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            s = np.nanmean(np.stack(ranks), axis=0)
    return np.nan_to_num(s, nan=0.0)


def k_center_greedy(emb: np.ndarray, k: int, candidates: np.ndarray | None = None,
                    near: Callable[[int], np.ndarray] | None = None) -> tuple[list[int], list[float]]:
    """Indices of k rows of `emb` (unit rows) chosen by k-center greedy among `candidates` (default all);
    the first is the row farthest from the candidates' mean; returns (indices, distance at pick).
    `near(row)`: (M,) bool, the rows too close in time to a pick of `row` (`gap_rule`): taken only once
    every other candidate is."""
    cand = np.arange(len(emb)) if candidates is None else np.asarray(candidates)
    X = emb[cand].astype(np.float64)
    mean = X.mean(0)
    first = int(np.argmax(((X - mean) ** 2).sum(1)))
    picked, dist_at = [first], [float(np.sqrt(((X[first] - mean) ** 2).sum()))]
    late = np.zeros(len(cand))  # 10 (> any distance, <= 2) for rows near a pick in time: they come after every free row
    d = np.sqrt(np.maximum(2 - 2 * X @ X[first], 0))
    d[first] = -np.inf  # never picked twice (rows identical to the first are at distance 0 too)
    while len(picked) < min(k, len(cand)):
        if near is not None:
            late[near(int(cand[picked[-1]]))[cand]] = 10.0
        i = int(np.argmax(d - late))
        picked.append(i)
        dist_at.append(float(d[i]))
        d = np.minimum(d, np.sqrt(np.maximum(2 - 2 * X @ X[i], 0)))
        d[picked] = -np.inf
    return [int(cand[i]) for i in picked], dist_at


def k_center_ann(emb: np.ndarray, k: int, ball: Callable[[int, float], tuple[np.ndarray, np.ndarray]],
                 near: Callable[[int], np.ndarray] | None = None) -> tuple[list[int], list[float]]:
    """`k_center_greedy` over every row of `emb` (unit rows), with each pick's update confined to its neighbourhood:
    `ball(row, r)` -> (rows, distances) of the rows closer than r to `row`, r the largest distance any row still has.
    A pick can lower only the distances of rows within r of it, so with an exact ball this is k_center_greedy (up to
    float32 rounding); through an ANN index's range search (`data_engine.ann.ball`) a row it misses keeps a distance
    too large, which can only make it a pick sooner. Cost per pick: the ball and an argmax, not a pass over the pool."""
    X = np.asarray(emb, np.float32)
    mean = X.mean(0, dtype=np.float64)
    proj = X @ mean.astype(np.float32)  # |x - mean|^2 = 1 - 2 x.mean + |mean|^2 on unit rows: the farthest has the least x.mean
    first = int(np.argmin(proj))
    picked, dist_at = [first], [float(np.sqrt(max(1 - 2 * float(proj[first]) + float(mean @ mean), 0)))]
    late = np.zeros(len(X))  # as in k_center_greedy: rows near a pick in time come after every free row
    d = np.sqrt(np.maximum(2 - 2 * (X @ X[first]).astype(np.float64), 0))
    d[first] = -np.inf
    while len(picked) < min(k, len(X)):
        if near is not None:
            late[near(picked[-1])] = 10.0
        i = int(np.argmax(d - late))
        r = float(d.max())
        picked.append(i)
        dist_at.append(float(d[i]))
        rows, dist = ball(i, r + 1e-6)
        d[rows] = np.minimum(d[rows], dist)  # picked rows stay -inf
        d[i] = -np.inf
    return picked, dist_at


def index_ball(index, frame_ids: np.ndarray, emb: np.ndarray) -> Callable[[int, float], tuple[np.ndarray, np.ndarray]]:
    """`ball(row, r)` for `k_center_ann` over a pool (`frame_ids` (M,), unit `emb` (M, D)) through the run's FAISS
    index (keyed by frame id; ids outside the pool are dropped)."""
    from data_engine.ann import ball

    frame_ids = np.asarray(frame_ids, np.int64)
    order = np.argsort(frame_ids, kind="stable")
    known = frame_ids[order]

    def in_ball(row: int, r: float) -> tuple[np.ndarray, np.ndarray]:
        ids, dist = ball(index, emb[row], r)
        pos = np.minimum(np.searchsorted(known, ids), len(known) - 1)
        ok = known[pos] == ids
        return order[pos[ok]], dist[ok]
    return in_ball


def gap_rule(pool: Mapping[str, Any], min_gap_s: float) -> Callable[[int], np.ndarray] | None:
    """near(row) -> (M,) bool: the rows of row's clip less than `min_gap_s` seconds from it (by the pool's
    `t_s`, NaN: never near); None when there is no rule (min_gap_s 0, or a pool of whole clips without `t_s`)."""
    if min_gap_s <= 0 or "t_s" not in pool:
        return None
    clip = np.unique(np.asarray(pool["clip"], object).astype(str), return_inverse=True)[1]  # (M,) clip codes
    t = np.asarray(pool["t_s"], np.float64)
    return lambda i: (clip == clip[i]) & (np.abs(t - t[i]) < min_gap_s)


def nn_scale(emb: np.ndarray, rng: np.random.Generator, sample: int = 512) -> float:
    """The median distance of a sample of rows to their nearest other row."""
    if len(emb) < 2:
        return 0.0
    idx = rng.choice(len(emb), min(sample, len(emb)), replace=False)
    sim = emb[idx] @ emb.T
    sim[np.arange(len(idx)), idx] = -np.inf
    return float(np.median(np.sqrt(np.maximum(2 - 2 * sim.max(1), 0))))


# -- pool ------------------------------------------------------------------------------------------
def load_pool(cat: Catalog, run_id: int, unit: str) -> dict[str, Any]:
    """The run's ok frames as a pool: table columns, embeddings (row-aligned), dominant classes;
    with unit "clip" one item per clip (max score signals, mean embedding)."""
    table = cat.table(run_id)
    ids, emb = cat.embeddings(run_id, table["frame_id"])
    order = {int(f): i for i, f in enumerate(ids)}
    missing = [int(f) for f in table["frame_id"] if int(f) not in order]
    if missing:
        raise MiningError(f"frame {missing[0]} has signals but no embedding in {cat.path}; rerun shadow into a new catalog")
    table["embedding"] = emb[[order[int(f)] for f in table["frame_id"]]] if len(ids) else emb
    for name, values in cat.offline(run_id).items():  # server-side columns (`hydranet engine uncertainty`), NaN where absent
        table[name] = np.asarray([values.get(int(f), np.nan) for f in table["frame_id"]], np.float64)
    preds = cat.predictions(run_id, table["frame_id"])
    table["dominant"] = np.asarray([_dominant(preds.get(int(f), {})) for f in table["frame_id"]], object)
    table["frame_ids"] = np.asarray([[int(f)] for f in table["frame_id"]] + [[]], object)[:-1]
    times = dict(cat.db.execute("SELECT f.id, f.timestamp_us FROM frames f JOIN clips c ON f.clip_id = c.id JOIN shadow_runs r "
                                "ON c.fleet_id = r.fleet_id WHERE r.id = ?", (run_id,)).fetchall())
    table["t_s"] = np.asarray([np.nan if times.get(int(f)) is None else times[int(f)] / 1e6 for f in table["frame_id"]])
    if unit == "frame":
        return table
    clips = sorted(set(table["clip"]))
    rows = {c: np.flatnonzero(table["clip"] == c) for c in clips}
    out: dict[str, Any] = {"frame_id": np.asarray([table["frame_id"][rows[c][0]] for c in clips]),
                           "clip": np.asarray(clips, object), "idx": np.zeros(len(clips), np.int64)}
    for k, v in table.items():
        if k in out or k in ("embedding", "dominant", "frame_ids", "status", "t_s"):
            continue
        with np.errstate(invalid="ignore"):
            out[k] = np.asarray([np.nan if np.isnan(v[rows[c]]).all() else np.nanmax(v[rows[c]]) for c in clips])
    e = np.stack([table["embedding"][rows[c]].mean(0) for c in clips]) if len(clips) else table["embedding"]
    out["embedding"] = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    out["dominant"] = np.asarray([table["dominant"][rows[c][0]] for c in clips], object)
    out["frame_ids"] = np.asarray([[int(f) for f in table["frame_id"][rows[c]]] for c in clips] + [[]], object)[:-1]
    return out


def _dominant(pred: Mapping) -> str:
    labels = [lab for cam in pred.get("det2d", []) for lab, s in zip(cam["labels"], cam["scores"]) if s >= 0.3]
    return f"class{np.bincount(labels).argmax()}" if labels else "none"


# -- selection -------------------------------------------------------------------------------------
def mine(catalog: str | Path, budget: int, strategy: str, cfg: EngineConfig | None = None, unit: str = "frame",
         run: int | None = None, name: str | None = None, search: str = "auto") -> dict[str, Any]:
    """Select `budget` items of a shadow run; recorded in the catalog (selection `name`) and returned. `search`: how
    diversity finds its k-center picks (SEARCHES); a selection made through the ANN index says so (params.search)."""
    cfg = cfg or EngineConfig()
    strategy_fn(strategy)
    if search not in SEARCHES:
        raise MiningError(f"unknown search {search!r}; choose one of {list(SEARCHES)}")
    if unit not in UNITS:
        raise MiningError(f"unknown unit {unit!r}; choose one of {list(UNITS)}")
    if budget <= 0:
        raise MiningError(f"--budget must be at least 1, got {budget}")
    with Catalog(catalog) as cat:
        run_id = cat.latest_run(run)
        pool = load_pool(cat, run_id, unit)
        n = len(pool["frame_id"])
        if budget > n:
            raise MiningError(f"--budget {budget} is larger than the pool of {n} {unit}s of shadow run {run_id} in {cat.path}; "
                              "ask for fewer or shadow more clips")
        ball = _ann_ball(cat, run_id, pool, strategy, unit, search)
        picks = select(pool, budget, strategy, cfg, cat, run_id, ball)
        fired = trigger_hits(pool, cfg)
        items = [{"rank": r, "frame_id": int(pool["frame_id"][i]), "clip": str(pool["clip"][i]), "frame": int(pool["idx"][i]),
                  "frame_ids": list(pool["frame_ids"][i]), "reason": with_triggers(reason, r, fired.get(i, {}))}
                 for r, (i, reason) in enumerate(picks)]
        name = name or f"{strategy}-{unit}-{budget}"
        params = {"unit": unit, "mining": {"pool_factor": cfg.mining.pool_factor, "dedup": cfg.mining.dedup,
                                           "class_cap": cfg.mining.class_cap, "seed": cfg.mining.seed,
                                           "min_gap_s": cfg.mining.min_gap_s}}
        if ball is not None:  # only then: an exact selection's file stays what it always was
            from data_engine.ann import NPROBE

            params["search"] = {"method": "ann", "nprobe": NPROBE}
        cat.write_selection(name, run_id, strategy, budget, unit, params, items)
        info = cat.run_info(run_id)
    out = {"name": name, "strategy": strategy, "budget": budget, "unit": unit, "run": info, "pool": n, "items": items}
    return out if ball is None else {**out, "search": params["search"]}


def _ann_ball(cat: Catalog, run_id: int, pool: Mapping[str, Any], strategy: str, unit: str, search: str):
    """The pool's `ball` through the run's ANN index (built or brought up to date) when diversity is to use it: asked
    (search "ann"), or search "auto" on a lake catalog's pool of at least ANN_MIN_POOL frames with faiss installed;
    else None (exact k-center). Only diversity reads it (hybrid's k-center runs inside a pool of a few x budget)."""
    if strategy != "diversity" or search == "exact":
        return None
    if search == "auto":
        import importlib.util

        if cat.lake is None or unit != "frame" or len(pool["frame_id"]) < ANN_MIN_POOL or importlib.util.find_spec("faiss") is None:
            return None
    elif unit != "frame":
        raise MiningError("--search ann indexes frames, not whole clips; mine --unit frame, or search exactly")
    from data_engine.ann import open_index

    index, _ = open_index(cat, run_id)
    return index_ball(index, pool["frame_id"], pool["embedding"])


def trigger_hits(pool: Mapping[str, Any], cfg: EngineConfig) -> dict[int, dict[str, float]]:
    """{pool row: {trigger: score}} of every configured trigger fired over the pool (in memory, quotas applied:
    the hits `hydranet engine triggers` stores for the run)."""
    row = {int(f): i for i, f in enumerate(pool["frame_id"])}
    out: dict[int, dict[str, float]] = {}
    for t in build_triggers(cfg.trigger_params() or None):
        for f, s in t.fire(pool):
            out.setdefault(row[f], {})[t.name] = round(float(s), 6)
    return out


def with_triggers(reason: Mapping[str, Any], rank: int, hits: Mapping[str, float]) -> dict[str, Any]:
    """The strategy's reason with the item's rank and every trigger that fired on it (names sorted, and scores)."""
    return {**reason, "rank": rank, "triggers": sorted(hits), "trigger_scores": {k: hits[k] for k in sorted(hits)}}


def select(pool: Mapping[str, Any], budget: int, strategy: str, cfg: EngineConfig, cat: Catalog | None = None,
           run_id: int | None = None, ball: Callable[[int, float], tuple[np.ndarray, np.ndarray]] | None = None
           ) -> list[tuple[int, dict]]:
    """(row index, reason) of the picks, in order; diversity with a `ball` (`index_ball`) runs `k_center_ann`."""
    if strategy == "diversity" and ball is not None:
        return _diversity(pool, budget, cfg, ball)
    return strategy_fn(strategy)(pool, budget, cfg)


def strategy_fn(name: str) -> Callable[[Mapping[str, Any], int, EngineConfig], list[tuple[int, dict]]]:
    """The strategy function of `name`; MiningError listing the known ones for any other name."""
    if name not in STRATEGIES:
        raise MiningError(f"unknown strategy {name!r}; choose one of {list(STRATEGIES)}")
    return STRATEGIES[name]


def _random(pool: Mapping[str, Any], budget: int, cfg: EngineConfig) -> list[tuple[int, dict]]:
    idx = np.random.default_rng(cfg.mining.seed).choice(len(pool["frame_id"]), budget, replace=False)
    return [(int(i), {"strategy": "random", "score": None}) for i in idx]


def _diversity(pool: Mapping[str, Any], budget: int, cfg: EngineConfig, ball=None) -> list[tuple[int, dict]]:
    near = gap_rule(pool, cfg.mining.min_gap_s)
    picks, dist = k_center_greedy(pool["embedding"], budget, near=near) if ball is None else \
        k_center_ann(pool["embedding"], budget, ball, near)
    return [(i, {"strategy": "diversity", "score": round(d, 6)}) for i, d in zip(picks, dist)]


def _hybrid(pool: Mapping[str, Any], budget: int, cfg: EngineConfig) -> list[tuple[int, dict]]:
    u = uncertainty_score(pool)
    size = min(len(pool["frame_id"]), max(budget, int(math.ceil(cfg.mining.pool_factor * budget))))
    top = np.lexsort((np.asarray(pool["frame_id"]), -u))[:size]
    picks, dist = k_center_greedy(pool["embedding"], budget, top, gap_rule(pool, cfg.mining.min_gap_s))
    return [(i, {"strategy": "hybrid", "score": round(float(u[i]), 6), "distance": round(d, 6)}) for i, d in zip(picks, dist)]


def _uncertainty(pool: Mapping[str, Any], budget: int, cfg: EngineConfig) -> list[tuple[int, dict]]:
    return _ranked(pool, budget, cfg, [], "uncertainty")


def _triggers(pool: Mapping[str, Any], budget: int, cfg: EngineConfig) -> list[tuple[int, dict]]:
    """Round-robin over the triggers' hits (each best first), then filled by uncertainty."""
    ranked: list[tuple[int, dict]] = []
    fired: dict[int, list[str]] = {}
    queues = []
    row = {int(f): i for i, f in enumerate(pool["frame_id"])}
    for t in build_triggers(cfg.trigger_params() or None):
        hits = t.fire(pool)
        queues.append((t.name, [(row[f], s) for f, s in hits]))
        for f, _ in hits:
            fired.setdefault(row[f], []).append(t.name)
    seen = set()
    while any(q for _, q in queues):
        for name, q in queues:
            while q:
                i, s = q.pop(0)
                if i not in seen:
                    seen.add(i)
                    ranked.append((i, {"strategy": "triggers", "trigger": name, "score": round(float(s), 6),
                                       "triggers": sorted(fired[i])}))
                    break
    return _ranked(pool, budget, cfg, ranked, "uncertainty (fill)")


def _ranked(pool: Mapping[str, Any], budget: int, cfg: EngineConfig, ranked: list[tuple[int, dict]],
            fill: str) -> list[tuple[int, dict]]:
    """`ranked`, then every other item by uncertainty (reason strategy `fill`), de-duplicated, class-aware and apart
    in time."""
    u = uncertainty_score(pool)
    taken = {r for r, _ in ranked}
    rest = [int(i) for i in np.lexsort((np.asarray(pool["frame_id"]), -u)) if int(i) not in taken]
    ranked = ranked + [(i, {"strategy": fill, "score": round(float(u[i]), 6)}) for i in rest]
    return _dedup_class_aware(ranked, pool, budget, cfg.mining)


def add_offline(pool: dict[str, Any], frame_rows: Mapping[int, int], signals: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """`pool` with the offline columns `signals` (rows of `offline_signals`) aligned onto its frames:
    `frame_rows` maps a catalog frame id to its row there (`uncertainty.pool_frames`); NaN where absent."""
    for col, v in signals.items():
        v = np.asarray(v, np.float64)
        pool[col] = np.asarray([v[frame_rows[int(f)]] if int(f) in frame_rows else np.nan for f in pool["frame_id"]])
    return pool


def _offline(column: str) -> Callable[[Mapping[str, Any], int, EngineConfig], list[tuple[int, dict]]]:
    def pick(pool: Mapping[str, Any], budget: int, cfg: EngineConfig) -> list[tuple[int, dict]]:
        if column not in pool:
            raise MiningError(f"strategy {column!r} needs the offline column {column!r}, which this shadow run does not hold; "
                              "compute it first with `hydranet engine uncertainty --catalog C --models PRODUCTION.onnx "
                              "OTHER.onnx [...]` (an ensemble of exported models)")
        v = np.nan_to_num(np.asarray(pool[column], np.float64), nan=-np.inf)
        order = np.lexsort((np.asarray(pool["frame_id"]), -v))
        ranked = [(int(i), {"strategy": column, "score": round(float(v[i]), 6)}) for i in order]
        return _dedup_class_aware(ranked, pool, budget, dataclasses.replace(cfg.mining, dedup=0.0, class_cap=1.0))  # time gap only
    return pick


# the miner's strategies by name (configs/engine.yaml loop.strategy, `hydranet engine mine --strategy`)
STRATEGIES: dict[str, Callable[[Mapping[str, Any], int, EngineConfig], list[tuple[int, dict]]]] = {
    "random": _random, "uncertainty": _uncertainty, "diversity": _diversity, "hybrid": _hybrid, "triggers": _triggers,
    "ensemble": _offline("ensemble"), "tta": _offline("tta")}
OFFLINE = ("ensemble", "tta")  # strategies that need an offline column (`hydranet engine uncertainty`, or `add_offline`)


def _dedup_class_aware(ranked: list[tuple[int, dict]], pool: Mapping[str, Any], budget: int,
                       m: MiningConfig) -> list[tuple[int, dict]]:
    """The first `budget` of `ranked` (row, reason) that are no near-duplicate of a pick (embedding), within the
    class cap and `m.min_gap_s` from every pick of their clip; what is left is filled by a pass with the time gap
    alone (where there is one), then by one with every rule off."""
    emb, dominant, near = pool["embedding"], pool["dominant"], gap_rule(pool, m.min_gap_s)
    radius = m.dedup * nn_scale(emb, np.random.default_rng(0)) if len(emb) and m.dedup > 0 else 0.0
    cap = max(1, int(math.ceil(m.class_cap * budget)))
    picks: list[tuple[int, dict]] = []
    chosen: list[int] = []
    per_class: dict[str, int] = {}
    too_soon = np.zeros(len(pool["frame_id"]), bool)  # rows within min_gap_s of a pick of their clip
    passes = ("all", "gap", "none") if near is not None else ("all", "none")  # the rules kept in each pass
    for keep in passes:
        for i, reason in ranked:
            if len(picks) == budget:
                return picks
            if i in chosen or (keep != "none" and too_soon[i]):
                continue
            if keep == "all":
                if per_class.get(dominant[i], 0) >= cap:
                    continue
                if chosen and radius > 0 and np.sqrt(max(2 - 2 * float((emb[chosen] @ emb[i]).max()), 0)) < radius:
                    continue
            chosen.append(i)
            per_class[dominant[i]] = per_class.get(dominant[i], 0) + 1
            picks.append((i, reason))
            if near is not None:
                too_soon |= near(i)
    return picks


def similar(catalog: str | Path, frame_id: int, k: int = 50, run: int | None = None, ann: bool = False,
            notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The k frames whose embedding is most like frame `frame_id`'s (cosine), the query first; exact, or with `ann`
    through the run's FAISS index (data_engine/ann.py; what it added to the index is appended to `notes`)."""
    if k < 1:
        raise MiningError(f"--k must be at least 1, got {k}")
    with Catalog(catalog) as cat:
        run_id = cat.latest_run(run)
        table = cat.table(run_id)
        ids, emb = cat.embeddings(run_id)
        where = np.flatnonzero(ids == frame_id)
        if len(where) == 0:
            raise MiningError(f"frame {frame_id} is not in shadow run {run_id} of {cat.path} (frame ids "
                              f"{int(ids.min()) if len(ids) else '-'}..{int(ids.max()) if len(ids) else '-'})")
        q = emb[where[0]]
        if ann:
            from data_engine.ann import open_index, search

            index, info = open_index(cat, run_id)
            if notes is not None and (info["added"] or info["built"]):
                notes.append(f"ANN index of run {run_id}: {'built with' if info['built'] else 'added'} {info['added']} "
                             f"frames of {info['clips']} clip(s)")
            got, sims = search(index, q, k + 1)
            pairs = [(int(frame_id), float(q @ q))] + [(int(f), float(v)) for f, v in zip(got, sims) if int(f) != frame_id]
        else:
            sim = emb @ q
            order = np.lexsort((ids, -sim))
            pairs = [(int(ids[o]), float(sim[o])) for o in np.concatenate([[where[0]], [o for o in order if o != where[0]]])]
        names = {int(f): (str(c), int(i)) for f, c, i in zip(table["frame_id"], table["clip"], table["idx"])}
        return [{"frame_id": f, "clip": names.get(f, ("?", -1))[0], "frame": names.get(f, ("?", -1))[1],
                 "similarity": round(v, 6)} for f, v in pairs[:k]]


def write_selection(sel: Mapping[str, Any], out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(sel, indent=1) + "\n")
    tmp.replace(out)
    return out
