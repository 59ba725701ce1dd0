"""Server-side uncertainty over the mined pool: a small ensemble's disagreement and test-time augmentation.

Shadow mode on the car runs one model and its own signals (data_engine/signals.py); a weak model's own
uncertainty is nearly flat (docs/data_engine.md, issue 25). Here, offline and on the server, every frame
of the pool is run through

- an **ensemble** of K exported checkpoints (different seeds, snapshots or training sets: Lakshminarayanan,
  Pritzel, Blundell, "Simple and Scalable Predictive Uncertainty Estimation using Deep Ensembles",
  NeurIPS 2017): the members' disagreement, per camera head, is the signal;
- **test-time augmentation** (a horizontal flip, the prediction flipped back: Ayhan & Berens, "Test-time
  Data Augmentation for Estimation of Heteroscedastic Aleatoric Uncertainty in Deep Neural Networks",
  MIDL 2018) of the first (production) model: the disagreement between the two views is the signal.

Monte Carlo dropout (Gal & Ghahramani, ICML 2016) is not offered: the HydraNet has no dropout layer.

Per frame (the mean over its cameras), columns:

| column | what |
|---|---|
| `ens_drivable` | per-pixel variance over members of the drivable probability, mean over pixels |
| `ens_depth` | per-pixel std over members of log depth (a relative depth spread), mean over pixels |
| `ens_det2d` | per-pixel variance over members of the strongest class's heatmap probability, mean over pixels |
| `tta_drivable`, `tta_depth`, `tta_det2d` | the same differences between the plain and the flipped-back view (absolute) |
| `entropy_drivable` | the production model's own mean binary entropy of the drivable probability (a one-model baseline) |
| `ensemble`, `tta` | the mean percentile rank of the three heads' columns of each kind |

`offline_signals` reads the frames with hydranet's evaluation reader and scores the production model's
per-frame metric states on the way (`hydranet.evaluate(keep_states=True)`), so a pool with labels (a sim
fleet) gets its per-frame errors from the same pass: drivable 1 - IoU and depth AbsRel, dense-head errors
that stay informative when a weak model's detection error is saturated. `select_uncertain` is the
mining strategy: the top of one column under a budget. benchmarks/uncertainty_signals.py measures which
columns rank frames by error (Spearman, with a bootstrap interval over clips).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HEADS = ("drivable", "depth", "det2d")  # the camera heads the signals read (any of them the models have)
SIGNALS = ("ens_drivable", "ens_depth", "ens_det2d", "tta_drivable", "tta_depth", "tta_det2d", "entropy_drivable",
           "ensemble", "tta")


class UncertaintyError(ValueError):
    """Models that cannot form an ensemble, or a pool that cannot be read; one line."""


def _dense(raw: Mapping[str, Any], head: str):
    """(B*N, H, W) per-pixel values of a head's raw outputs: drivable probability, log depth, the strongest
    class's det2d heatmap probability."""
    import torch

    out = raw[head]
    if head == "drivable":
        return torch.sigmoid(out["logits"].float())[:, 0]
    if head == "depth":
        return next(iter(out.values())).float()[:, 0]
    return torch.sigmoid(out["heatmap"].float()).amax(1)


def _flipped_raw(model, batch: Mapping[str, Any], heads: Sequence[str]) -> dict[str, Any]:
    """The model's raw camera-head outputs on horizontally flipped images, flipped back."""
    import torch

    flipped = {k: v for k, v in batch.items() if k not in ("targets", "prev_bev", "ego_motion")}
    flipped["images"] = torch.flip(batch["images"], dims=[-1])
    with torch.no_grad():
        raw = model(flipped, "tensor")
    return {h: {k: torch.flip(v, dims=[-1]) for k, v in raw[h].items() if torch.is_tensor(v) and v.dim() == 4}
            for h in heads}


def offline_signals(checkpoints: Sequence[str | Path], data: str | Path, tta: bool = True,
                    progress: bool = False) -> dict[str, Any]:
    """Run an ensemble (`checkpoints`, the first is the production model) and the production model's flip TTA
    over every frame of dataset `data` (a fleet). Returns {"frame_ids": [[clip, frame dir]], "clips",
    "signals": {column: (F,) array}, "errors": {"drivable", "depth": (F,) per-frame error of the first model,
    NaN where undefined}, "members": K}."""
    import torch

    from hydranet.checkpoint import load_model
    from hydranet.evaluate import evaluate, evaluation_frames

    if len(checkpoints) < 2:
        raise UncertaintyError(f"an ensemble needs at least 2 checkpoints, got {len(checkpoints)}")
    per_member: list[dict[str, list]] = []
    first = None
    for k, ckpt in enumerate(checkpoints):
        model, cfg, _ = load_model(ckpt)
        heads = [h for h in HEADS if h in model.heads]
        if not heads:
            raise UncertaintyError(f"{ckpt}: the model has none of the heads {HEADS}; the signals need one")
        if first is None:
            first = {"heads": heads, "size": tuple(cfg.data.image_size)}
        elif heads != first["heads"] or tuple(cfg.data.image_size) != first["size"]:
            raise UncertaintyError(f"{ckpt}: heads {heads} at {cfg.data.image_size}, the first model's are "
                                   f"{first['heads']} at {list(first['size'])}; an ensemble needs the same heads and size")
        frames = evaluation_frames(model, cfg, data)
        got: dict[str, list] = {h: [] for h in heads} | {f"tta_{h}": [] for h in heads}

        def keep(raw, batch, model=model, heads=heads, got=got, member=k):
            B = len(batch["images"])
            flip = _flipped_raw(model, batch, heads) if tta and member == 0 else None
            for h in heads:
                v = _dense(raw, h).cpu()  # (B*N, H, W)
                got[h].append(v.reshape(B, -1, *v.shape[1:]))
                if flip is not None:
                    f = _dense(flip, h).cpu()
                    got[f"tta_{h}"].append((v - f).abs().reshape(B, -1, *v.shape[1:]).flatten(1).mean(1))

        with torch.no_grad():
            r = evaluate(model, frames, cfg.batch_size, "cpu", progress, on_outputs=keep, keep_states=(k == 0))
        per_member.append({h: torch.cat(v) for h, v in got.items() if v})
        if k == 0:
            result = r
    heads = first["heads"]
    sig: dict[str, np.ndarray] = {}
    for h in heads:
        stack = torch.stack([m[h] for m in per_member])  # (K, F, N, H, W)
        spread = stack.std(0) if h == "depth" else stack.var(0)
        sig[f"ens_{h}"] = spread.flatten(1).mean(1).numpy()
        if tta:
            sig[f"tta_{h}"] = per_member[0][f"tta_{h}"].numpy()
    if "drivable" in heads:
        p = per_member[0]["drivable"].clamp(1e-6, 1 - 1e-6)
        sig["entropy_drivable"] = (-(p * p.log() + (1 - p) * (1 - p).log())).flatten(1).mean(1).numpy()
    for kind in ("ens", "tta"):
        cols = [sig[f"{kind}_{h}"] for h in heads if f"{kind}_{h}" in sig]
        if cols:
            sig["ensemble" if kind == "ens" else "tta"] = np.mean([_rank(c) for c in cols], axis=0)
    return {"frame_ids": result["frame_ids"], "clips": [c for c, _ in result["frame_ids"]], "signals": sig,
            "errors": frame_errors(result["states"]), "members": len(checkpoints)}


def frame_errors(states: Mapping[str, Sequence | None]) -> dict[str, np.ndarray]:
    """Per-frame errors from `evaluate(keep_states=True)["states"]`: drivable 1 - IoU over the frame's
    cameras, depth AbsRel over its valid pixels (NaN where the frame has nothing to score)."""
    out = {}
    if states.get("drivable") is not None:
        out["drivable"] = np.array([math.nan if not f or not sum(s["union"] for s in f) else
                                    1 - sum(s["inter"] for s in f) / sum(s["union"] for s in f)
                                    for f in states["drivable"]])
    if states.get("depth") is not None:
        out["depth"] = np.array([math.nan if not f or not sum(s["n"] for s in f) else
                                 sum(s["abs_rel"] for s in f) / sum(s["n"] for s in f) for f in states["depth"]])
    return out


def _rank(v: np.ndarray) -> np.ndarray:
    """Percentile ranks in [0, 1] (ties share their mean rank)."""
    v = np.asarray(v, float)
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v))
    for u in np.unique(v):  # ties: mean rank
        same = v == u
        if same.sum() > 1:
            ranks[same] = ranks[same].mean()
    return ranks / max(len(v) - 1, 1)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of the finite pairs (NaN with fewer than 3)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return math.nan
    ra, rb = _rank(a[ok]), _rank(b[ok])
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(np.corrcoef(ra, rb)[0, 1])


def spearman_interval(a: np.ndarray, b: np.ndarray, clips: Sequence[str], resamples: int = 1000, seed: int = 0,
                      confidence: float = 0.95) -> tuple[float, float, float]:
    """(Spearman rho, low, high): the interval from a bootstrap over clips (frames of a clip move together)."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(clips):
        groups.setdefault(c, []).append(i)
    idx = list(groups.values())
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(resamples):
        pick = np.concatenate([idx[k] for k in rng.integers(0, len(idx), len(idx))])
        vals.append(spearman(np.asarray(a)[pick], np.asarray(b)[pick]))
    vals = np.asarray(vals)
    vals = vals[np.isfinite(vals)]
    q = (1 - confidence) / 2
    lo, hi = (np.quantile(vals, [q, 1 - q]) if len(vals) else (math.nan, math.nan))
    return spearman(a, b), float(lo), float(hi)


def select_uncertain(frame_ids: Sequence[Any], signals: Mapping[str, np.ndarray], budget: int,
                     signal: str = "ensemble") -> list[tuple[Any, dict[str, Any]]]:
    """The mining strategy: the `budget` frames highest on column `signal`, each with its reason
    ({"strategy": "offline_uncertainty", "signal", "value", "rank"}), highest first."""
    if signal not in signals:
        raise UncertaintyError(f"unknown signal {signal!r}; computed: {sorted(signals)}")
    if budget < 1:
        raise UncertaintyError(f"budget must be at least 1, got {budget}")
    v = np.asarray(signals[signal], float)
    order = np.argsort(-np.nan_to_num(v, nan=-np.inf), kind="stable")[:budget]
    return [(frame_ids[i], {"strategy": "offline_uncertainty", "signal": signal, "value": float(v[i]), "rank": r + 1})
            for r, i in enumerate(order)]


def pool_frames(catalog: str | Path, run_id: int | None = None) -> tuple[Path, dict[tuple[str, str], int]]:
    """(fleet folder, {(clip, frame dir): catalog frame id}) of a shadow run's ok frames (the latest run by
    default): what `offline_signals` runs over, and how its rows map back onto the catalog."""
    from data_engine.catalog import Catalog

    with Catalog(catalog) as cat:
        run = cat.latest_run(run_id)
        fleet = Path(cat.run_info(run)["fleet"])
        table = cat.table(run)
        dirs = dict(cat.db.execute("SELECT f.id, f.dir FROM frames f JOIN clips c ON f.clip_id = c.id JOIN shadow_runs r "
                                   "ON c.fleet_id = r.fleet_id WHERE r.id = ?", (run,)).fetchall())
    return fleet, {(str(c), str(dirs[int(f)])): int(f) for f, c in zip(table["frame_id"], table["clip"])}
