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

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.heads import HEADS as SPECS
from hydranet.heads import heads_where

# the camera heads the signals read (any of them the models have): those with an `ensemble_spread` (det2d, drivable, depth)
HEADS = heads_where("ensemble_spread")
SIGNALS = (*(f"ens_{h}" for h in HEADS), *(f"tta_{h}" for h in HEADS), "entropy_drivable", "ensemble", "tta")


class UncertaintyError(ValueError):
    """Models that cannot form an ensemble, or a pool that cannot be read; one line."""


def dense_maps(outputs: Mapping[str, Mapping[str, Any]], heads: Sequence[str]) -> dict[str, np.ndarray]:
    """{head: (B*N, H, W) float32} per-pixel values of the camera heads' raw outputs ({head: {key: (B*N, C, H, W)}}, numpy
    or torch): each head's `dense_map` (drivable probability, log depth, the strongest class's det2d heatmap probability)."""
    out = {}
    for h in heads:
        arrays = {k: np.asarray(v.float().cpu().numpy() if hasattr(v, "cpu") else v, np.float32) for k, v in outputs[h].items()}
        out[h] = SPECS[h].dense_map(arrays)
    return out


def frame_columns(maps: Sequence[Mapping[str, np.ndarray]], flipped: Mapping[str, np.ndarray] | None) -> dict[str, float]:
    """One frame's columns (the module's table, less the pool-ranked `ensemble` and `tta`) from each member's
    `dense_maps` of the frame ({head: (N, H, W)}; member 0 is the production model) and the production model's
    maps on the horizontally flipped images, flipped back (None: no TTA)."""
    out = {}
    for h in maps[0]:
        stack = np.stack([np.asarray(m[h], np.float64) for m in maps])  # (K, N, H, W)
        spread = stack.std(0, ddof=1) if SPECS[h].ensemble_spread == "std" else stack.var(0, ddof=1)  # unbiased, K members
        out[f"ens_{h}"] = float(spread.mean())
        if flipped is not None:
            out[f"tta_{h}"] = float(np.abs(stack[0] - flipped[h]).mean())
    if "drivable" in maps[0]:
        p = np.clip(np.asarray(maps[0]["drivable"], np.float64), 1e-6, 1 - 1e-6)
        out["entropy_drivable"] = float((-(p * np.log(p) + (1 - p) * np.log(1 - p))).mean())
    return out


def pool_columns(rows: Sequence[Mapping[str, float]]) -> dict[str, np.ndarray]:
    """Per-frame `frame_columns` rows -> {column: (F,) array}, with `ensemble` and `tta`: the mean percentile rank
    over the pool of each kind's per-head columns."""
    sig = {c: np.asarray([r[c] for r in rows], np.float64) for c in (rows[0] if rows else {})}
    for kind, name in (("ens", "ensemble"), ("tta", "tta")):
        cols = [sig[f"{kind}_{h}"] for h in HEADS if f"{kind}_{h}" in sig]
        if cols:
            sig[name] = np.mean([_rank(c) for c in cols], axis=0)
    return sig


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
    over every frame of dataset `data` (a labelled fleet) in eager PyTorch. Returns {"frame_ids": [[clip, frame
    dir]], "clips", "signals": {column: (F,) array}, "errors": {"drivable", "depth": (F,) per-frame error of the
    first model, NaN where undefined}, "members": K}. The columns equal `pool_signals`' on the exported models."""
    import torch

    from hydranet.checkpoint import load_model
    from hydranet.evaluate import evaluate, evaluation_frames

    if len(checkpoints) < 2:
        raise UncertaintyError(f"an ensemble needs at least 2 checkpoints, got {len(checkpoints)}")
    per_member: list[dict[str, list]] = []
    first = None
    for k, ckpt in enumerate(checkpoints):
        model, cfg, loaded = load_model(ckpt)
        heads = [h for h in HEADS if h in model.heads]
        if not heads:
            raise UncertaintyError(f"{ckpt}: the model has none of the heads {HEADS}; the signals need one")
        if first is None:
            first = {"heads": heads, "size": tuple(cfg.data.image_size), "fit": cfg.data.fit}
        elif heads != first["heads"] or tuple(cfg.data.image_size) != first["size"] or cfg.data.fit != first["fit"]:
            raise UncertaintyError(f"{ckpt}: heads {heads} at {cfg.data.image_size} (data.fit {cfg.data.fit}), the first "
                                   f"model's are {first['heads']} at {list(first['size'])} (data.fit {first['fit']}); an "
                                   "ensemble needs the same heads, size and fit (its members' maps are averaged pixel by pixel)")
        frames = evaluation_frames(model, cfg, data, meta=json.loads(loaded["meta"]))
        got: dict[str, list] = {"maps": [], "flipped": []}  # per frame: {head: (N, H, W)}

        def keep(raw, batch, model=model, heads=heads, got=got, member=k):
            B = len(batch["images"])
            maps = dense_maps(raw, heads)
            flip = dense_maps(_flipped_raw(model, batch, heads), heads) if tta and member == 0 else None
            for b in range(B):
                got["maps"].append({h: v.reshape(B, -1, *v.shape[1:])[b] for h, v in maps.items()})
                if flip is not None:
                    got["flipped"].append({h: v.reshape(B, -1, *v.shape[1:])[b] for h, v in flip.items()})

        with torch.no_grad():
            r = evaluate(model, frames, cfg.batch_size, "cpu", progress, on_outputs=keep, keep_states=(k == 0))
        per_member.append(got)
        if k == 0:
            result = r
    rows = [frame_columns([m["maps"][f] for m in per_member], per_member[0]["flipped"][f] if tta else None)
            for f in range(len(per_member[0]["maps"]))]
    return {"frame_ids": result["frame_ids"], "clips": [c for c, _ in result["frame_ids"]], "signals": pool_columns(rows),
            "errors": frame_errors(result["states"]), "members": len(checkpoints)}


def pool_signals(models: Sequence[str | Path], fleet: str | Path, frames: Sequence[tuple[str, str]], tta: bool = True,
                 progress: bool = False) -> dict[str, np.ndarray]:
    """The columns over `frames` ([(clip, frame dir)]) of any fleet (sim or recorded, read as shadow mode reads it)
    from exported models (`models`: ONNX files, the first is the production model), run with the torch-free
    runtime, one frame at a time through every member: {column: (F,) array}. A frame that cannot be read or a
    model whose outputs are non-finite is an UncertaintyError naming it."""
    from tqdm import tqdm

    from data_engine.fleet import Fleet, FleetError, read_frame
    from data_engine.shadow import runtime_for_fleet
    from deploy.runtime import DeployError

    if len(models) < 2:
        raise UncertaintyError(f"an ensemble needs at least 2 models, got {len(models)}")
    fl = Fleet(fleet)
    runtimes = []
    for m in models:
        try:  # a fleet with some of the model's cameras: the camera heads there, said so
            rt, _ = runtime_for_fleet(str(m), fl)
            if rt.subset_line():
                print(f"note: {rt.subset_line()}", file=sys.stderr)
        except (OSError, DeployError) as e:
            raise UncertaintyError(f"model {m} cannot be loaded ({e}); give an ONNX file written by `hydranet export`") from None
        except FleetError as e:
            raise UncertaintyError(str(e)) from None
        heads = [h for h in HEADS if h in rt.heads]
        if not heads:
            raise UncertaintyError(f"model {m} has none of the heads {HEADS}; the signals need one")
        if runtimes and (heads != runtimes[0][1] or rt.camera_names != runtimes[0][0].camera_names
                         or rt.image_size != runtimes[0][0].image_size):
            first = runtimes[0][0]
            raise UncertaintyError(f"model {m}: heads {heads}, cameras {rt.camera_names} at {list(rt.image_size)}; the first "
                                   f"model's are {runtimes[0][1]}, {first.camera_names} at {list(first.image_size)}: an "
                                   "ensemble needs the same heads, cameras and size")
        runtimes.append((rt, heads))
    cams, heads = runtimes[0][0].camera_names, runtimes[0][1]

    def maps_of(rt, images) -> dict[str, np.ndarray]:  # {head: (N, H, W)} of one frame
        try:
            raw = rt.run(rt.feeds(rt.preprocess(images)))
        except DeployError as e:
            raise UncertaintyError(str(e)) from None
        return dense_maps({h: {o.split(".", 1)[1]: raw[o] for o in rt.heads[h]["outputs"]} for h in heads}, heads)

    rows = []
    for clip, frame_dir in tqdm(frames, desc="engine uncertainty", unit="frame", disable=not progress):
        try:
            images = read_frame(fl.root, clip, frame_dir, cams)
        except ValueError as e:
            raise UncertaintyError(f"fleet {fl.root} clip {clip} frame {frame_dir}: {e}") from None
        maps = [maps_of(rt, images) for rt, _ in runtimes]
        flipped = None
        if tta:
            back = maps_of(runtimes[0][0], [np.ascontiguousarray(im[:, ::-1]) for im in images])
            flipped = {h: v[..., ::-1] for h, v in back.items()}
        rows.append(frame_columns(maps, flipped))
    return pool_columns(rows)


def run_uncertainty(catalog: str | Path, models: Sequence[str | Path], run: int | None = None, tta: bool = True,
                    overwrite: bool = False, progress: bool = False) -> dict[str, Any]:
    """`hydranet engine uncertainty`: `pool_signals` over the ok frames of a shadow run (the latest by default), stored
    in the catalog as offline columns (`Catalog.write_offline`, one transaction) for `engine mine --strategy ensemble
    | tta` and the loop. The first model must be the run's own (its flips are the TTA column). Returns {"run_id",
    "frames", "columns", "seconds"}."""
    import time

    from data_engine.catalog import Catalog
    from hydranet.io import file_sha256

    t0 = time.time()
    for m in models:
        if not Path(m).is_file():
            raise UncertaintyError(f"model {m} does not exist; give ONNX files written by `hydranet export`")
    with Catalog(catalog) as cat:
        run_id = cat.latest_run(run)
        (own_sha, own_path), = cat.db.execute("SELECT m.sha256, m.path FROM shadow_runs r JOIN models m ON r.model_id = m.id "
                                              "WHERE r.id = ?", (run_id,)).fetchall()
        shas = [file_sha256(m) for m in models]
        if shas[0] != own_sha:
            raise UncertaintyError(f"the first --models {models[0]} is not shadow run {run_id}'s model ({own_path}); give "
                                   "that model first: the TTA column measures it, the ensemble's disagreement is around it")
        if len(set(shas)) < len(shas):
            raise UncertaintyError("--models holds the same model twice (equal SHA-256); an ensemble needs different models")
        have = sorted(cat.offline_sources(run_id))
        if have and not overwrite:
            raise UncertaintyError(f"catalog {catalog}: shadow run {run_id} holds offline columns already ({', '.join(have)});"
                                   " pass --overwrite to compute them again")
        fleet = cat.run_info(run_id)["fleet"]
        got = cat.rows(run_id, ["frame_id", "clip"], status="ok")
        dirs = dict(cat.db.execute("SELECT f.id, f.dir FROM frames f JOIN clips c ON f.clip_id = c.id JOIN shadow_runs r "
                                   "ON c.fleet_id = r.fleet_id WHERE r.id = ?", (run_id,)))
        ok = [(int(f), str(c), dirs[int(f)]) for f, c in zip(got["frame_id"], got["clip"])]
    if not ok:
        raise UncertaintyError(f"shadow run {run_id} of {catalog} has no frame to score (none ok)")
    columns = pool_signals(models, fleet, [(c, d) for _, c, d in ok], tta, progress)
    sources = [{"path": str(Path(m).resolve()), "sha256": sha} for m, sha in zip(models, shas)]
    with Catalog(catalog) as cat:
        cat.write_offline(run_id, [f for f, _, _ in ok], columns, sources, overwrite)
    return {"run_id": run_id, "frames": len(ok), "columns": sorted(columns), "seconds": time.time() - t0}


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
