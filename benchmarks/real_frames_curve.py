"""What each extra genuine labelled frame buys a sim-trained model (issue 32 item 4): the curve, not a point.

    python benchmarks/real_frames_curve.py --checkpoint out/seeds_p2/seed0/run --sim out/seeds_p2/data/sim \
        --sim-val out/seeds_p2/data/sim_val --pool /work/genuine/kitti_tracking5 --eval /work/genuine/kitti20 \
        --counts 0 2 3 4 5 --seeds 3 --steps 100 --out out/bench_real_frames

From a trained checkpoint (the demo's HydraNet), its camera heads on the front camera
(`hydranet.checkpoint.model_for_cameras`'s config) are fine-tuned for `--steps` steps (`hydranet train --init`: the
checkpoint's weights, a fresh optimizer) on a mix of the sim's training scenes (front camera) and k genuine labelled
frames of `--pool` (a KITTI folder; batches drawn from it with probability `--real-weight`), for each k of `--counts`.
k = 0 is the control: the same steps on the sim alone. The k frames of seed s are the first k of a permutation of the
pool drawn from `numpy.random.default_rng([s, 33])`, so a seed's frames for k include those for every smaller k.
Every fine-tuned model is scored on the genuine frames of `--eval` (disjoint from the pool; a frame id in both is
refused) and on the sim's held-out front camera, with benchmarks/realism_gap.py's cells (car AP50, mAP50, a
bootstrap over frames); genuine frames reach the input size by `--fit` (default crop, as configs/full.yaml).

Writes OUT/curve.md, OUT/curve.json, OUT/curve.png (car AP50 on the genuine frames against k, each seed and the
median) and per run OUT/k<K>_seed<S>/{pool (the k frames, copied), run, eval}; nothing outside OUT. An existing
OUT is refused without --overwrite; --resume keeps its finished runs. k counts from the batch size (2): a genuine
source's batches are drawn from it alone.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.experiment import FITS

import realism_gap  # benchmarks/, this script's folder

KITTI_DIRS = ("image_2", "label_2", "calib")
RECIPE = ("checkpoint", "sim", "sim_val", "pool", "eval", "steps", "real_weight", "fit")  # what a kept run must share
ROWS = (("kitti", "det2d/car AP50"), ("kitti", "det2d/mAP50"), ("sim CAM_FRONT", "det2d/car AP50"),
        ("sim CAM_FRONT", "drivable/iou"))


def kitti_ids(root: Path) -> list[str]:
    """The frame ids of a KITTI object folder (training/image_2/*.png)."""
    ids = sorted(p.stem for p in (root / "training" / "image_2").glob("*.png"))
    if not ids:
        raise SystemExit(f"error: {root} has no training/image_2/*.png; give a KITTI object folder")
    return ids


def pool_order(ids: list[str], seed: int) -> list[str]:
    """The pool's frames in the order seed `seed` adds them."""
    return [ids[i] for i in np.random.default_rng([seed, 33]).permutation(len(ids))]


def write_pool(pool: Path, ids: list[str], out: Path) -> Path:
    """A KITTI folder at `out` with frames `ids` of `pool` copied (the readers refuse links leaving a folder)."""
    for sub in KITTI_DIRS:
        (out / "training" / sub).mkdir(parents=True)
        for fid in ids:
            src = next((pool / "training" / sub).glob(f"{fid}.*"))
            shutil.copy2(src, out / "training" / sub / src.name)
    return out


def fine_tune_config(checkpoint: Path, sim: Path, pool: Path | None, steps: int, real_weight: float, fit: str,
                     seed: int):
    """The checkpoint's camera heads on its front camera, on the sim (+ the pool), `steps` steps from its weights."""
    import dataclasses

    from hydranet.checkpoint import config_from_checkpoint, load_checkpoint
    from hydranet.experiment import SourceConfig

    ckpt = load_checkpoint(checkpoint)
    _, cfg = realism_gap.front_model(ckpt, config_from_checkpoint(ckpt), f"checkpoint {checkpoint}")
    sources = [SourceConfig(root=str(sim), format="sim", cameras=cfg.data.cameras, name="sim")]
    if pool is not None:  # KITTI's Tram has no sim counterpart: dropped, so the taxonomy stays the checkpoint's
        sources.append(SourceConfig(root=str(pool), format="kitti", weight=real_weight / (1 - real_weight),
                                    class_map={"train": None}, name="kitti"))
    data = dataclasses.replace(cfg.data, root=str(sim), val_root=None, sources=tuple(sources), fit=fit, cameras=None,
                               format="auto", split=None, version=None)  # each source has its own
    return dataclasses.replace(cfg, data=data, steps=steps, seed=seed, label_priors=False, init_from=str(checkpoint),
                               checkpoint_every=steps, num_workers=0,
                               optim=dataclasses.replace(cfg.optim, warmup_steps=min(cfg.optim.warmup_steps, steps // 5)))


def scored(run: Path, sim_val: Path, eval_root: Path, fit: str, resamples: int) -> dict[str, Any]:
    """realism_gap's cells of the fine-tuned model: the genuine eval frames and the sim's held-out front camera."""
    return realism_gap.run(run, run.parent / "eval", {"sim": sim_val, "kitti": eval_root}, resamples=resamples,
                           progress=False, fit=fit)


def curve_table(cells: dict[int, list[dict]]) -> tuple[str, dict]:
    """Per k: the median [min, max] over seeds of each row."""
    lines = ["| real frames | " + " | ".join(f"{s}: {m}" for s, m in ROWS) + " |", "|---|" + "---|" * len(ROWS)]
    figures: dict = {}
    for k, tables in sorted(cells.items()):
        row = []
        for source, metric in ROWS:
            vals = [v for t in tables if (v := (t["cells"].get(source, {}).get(metric) or {}).get("value")) is not None]
            figures.setdefault(f"{source}: {metric}", {})[k] = vals
            row.append(f"{statistics.median(vals):.3f} [{min(vals):.3f}, {max(vals):.3f}]" if vals else "n/a")
        lines.append(f"| {k} | " + " | ".join(row) + " |")
    return "\n".join(lines), figures


def draw(figures: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4), dpi=120)
    per_k = figures["kitti: det2d/car AP50"]
    ks = sorted(per_k)
    for s in range(max(len(v) for v in per_k.values())):
        pts = [(k, per_k[k][s]) for k in ks if len(per_k[k]) > s]
        ax.plot(*zip(*pts), "o-", color="0.75", lw=1, ms=3, label="a training seed" if s == 0 else None)
    ax.plot(ks, [statistics.median(per_k[k]) for k in ks], "o-", color="C0", lw=2, label="median")
    ax.set_xlabel("genuine labelled frames mixed into fine-tuning")
    ax.set_ylabel("car AP50 on held-out genuine frames")
    ax.set_xticks(ks)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, required=True, help="the trained HydraNet (run folder or checkpoint.pt)")
    ap.add_argument("--sim", type=Path, required=True, help="the sim's training scenes (a sim dataset folder)")
    ap.add_argument("--sim-val", type=Path, required=True, help="the sim's held-out scenes")
    ap.add_argument("--pool", type=Path, required=True, help="a KITTI folder: genuine labelled frames to mix in")
    ap.add_argument("--eval", type=Path, required=True, help="a KITTI folder: held-out genuine frames to score on")
    ap.add_argument("--counts", type=int, nargs="+", default=[0, 2, 3, 4, 5])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--real-weight", type=float, default=0.5, help="the share of batches drawn from the genuine frames")
    ap.add_argument("--fit", choices=FITS, default="crop")
    ap.add_argument("--resamples", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--resume", action="store_true", help="keep OUT's finished runs (k, seed) and run the others")
    a = ap.parse_args(argv)
    import torch

    from hydranet.train import train

    pool_ids, eval_ids = kitti_ids(a.pool), kitti_ids(a.eval)
    if set(pool_ids) & set(eval_ids):
        ap.error(f"--pool and --eval share frame {sorted(set(pool_ids) & set(eval_ids))[0]}: the curve needs "
                 "held-out genuine frames")
    if max(a.counts) > len(pool_ids) or min(a.counts) < 0:
        ap.error(f"--counts: give 0 to {len(pool_ids)} frames (the pool has {len(pool_ids)})")
    batch = fine_tune_config(a.checkpoint, a.sim, None, 1, a.real_weight, a.fit, 0).batch_size
    if any(0 < k < batch for k in a.counts):
        ap.error(f"--counts: a genuine source of k frames needs k >= the batch size {batch} (its batches are drawn "
                 "from it alone); give 0 or at least that many")
    if not 0 < a.real_weight < 1 or a.steps < 1 or a.seeds < 1:
        ap.error("--real-weight lies in (0, 1); --steps and --seeds are at least 1")
    if not (a.resume and a.out.is_dir()):
        realism_gap.check_out(a.out, a.overwrite)
        a.out.mkdir(parents=True)
    torch.set_num_threads(a.threads)
    cells: dict[int, list[dict]] = {}
    for k in sorted(set(a.counts)):
        for seed in range(a.seeds):
            folder = a.out / f"k{k}_seed{seed}"
            ids = pool_order(pool_ids, seed)[:k]
            done, recipe = folder / "eval" / "realism_gap.json", folder / "recipe.json"
            wanted = {key: str(getattr(a, key)) for key in RECIPE}
            if a.resume and done.is_file():
                kept = json.loads(recipe.read_text()) if recipe.is_file() else {}
                if kept != wanted:
                    ap.error(f"--resume: {folder} was run with {kept or 'an unknown recipe'}, not {wanted}; run it "
                             "into another --out or pass --overwrite")
                cells.setdefault(k, []).append({**json.loads(done.read_text()), "pool_frames": ids})
                continue
            shutil.rmtree(folder, ignore_errors=True)  # a run cut short: from the start
            pool = write_pool(a.pool, ids, folder / "pool") if k else None
            folder.mkdir(exist_ok=True)
            recipe.write_text(json.dumps(wanted) + "\n")
            print(f"[real_frames_curve] k={k} seed={seed}: {', '.join(ids) or 'sim only'}", file=sys.stderr, flush=True)
            cfg = fine_tune_config(a.checkpoint, a.sim, pool, a.steps, a.real_weight, a.fit, seed)
            train(cfg, folder / "run", progress=False)
            table = scored(folder / "run", a.sim_val, a.eval, a.fit, a.resamples)
            table["pool_frames"] = ids
            cells.setdefault(k, []).append(table)
    text, figures = curve_table(cells)
    head = (f"{a.checkpoint} fine-tuned {a.steps} steps per run (front camera, {a.real_weight:.0%} of batches genuine), "
            f"{a.seeds} seeds; eval: {len(eval_ids)} genuine frames of {a.eval} (fit {a.fit}); median [min, max]\n\n")
    (a.out / "curve.md").write_text(head + text + "\n")
    (a.out / "curve.json").write_text(json.dumps({"figures": {r: {str(k): v for k, v in f.items()}
                                                              for r, f in figures.items()},
                                                  "pool": {str(s): pool_order(pool_ids, s) for s in range(a.seeds)},
                                                  "args": {k: str(v) for k, v in vars(a).items()}}, indent=1) + "\n")
    draw(figures, a.out / "curve.png")
    print(head + text)
    return figures


if __name__ == "__main__":
    main()
