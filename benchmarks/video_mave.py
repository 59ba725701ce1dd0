"""Does the video queue measure velocity? det3d's velocity error of the demo's video model against the same recipe
with one frame (issue 31 item 3: the video model's mAVE below the single-frame model's, its interval excluding 1).

    python benchmarks/demo_seeds.py --seeds 3 --jobs 2 --out out/seeds_final                    # the demo's recipe
    python benchmarks/demo_seeds.py --seeds 3 --jobs 2 --out out/seeds_vf1 --set model.bev.video_frames=1
    python benchmarks/video_mave.py --video out/seeds_final --single out/seeds_vf1 --out out/bench_video_mave

Every seed's run (`<dir>/seed<S>/run`) is evaluated on its held-out scenes (`<dir>/data/sim_val`; both arms render
them from data seed 0, so the frames are the same) with `hydranet.evaluate.evaluate(keep_states=True)`: per frame the
nuScenes detection pieces, from which any set of frames' metrics are recomputed. Two figures per arm: the nuScenes
mAVE (the mean over classes of the velocity error at the 2 m match distance; a class whose recall stays under 10%
counts 1.0, as the devkit does) and the car class's AVE alone (the one class with matches at this strength).
Intervals: a two-level bootstrap (`--resamples`, seeded): each arm's seeds with replacement, and the held-out frames
with replacement, the same frame draw for both arms (paired); the ratio video / single is taken per draw. "video
below single-frame" is decided when the ratio's whole interval lies below 1. Writes video_mave.md and
video_mave.json under --out only; an existing --out is refused without --overwrite.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import numpy as np

CAR = "car"


def frame_states(run: Path, val: Path) -> dict[str, dict]:
    """{frame id: its det3d nuScenes state} of `run` evaluated on `val`."""
    import torch

    from hydranet.checkpoint import load_model
    from hydranet.evaluate import evaluate, evaluation_frames

    model, cfg, ckpt = load_model(run)
    torch.manual_seed(cfg.seed)
    frames = evaluation_frames(model, cfg, val, meta=json.loads(ckpt["meta"]))
    res = evaluate(model, frames, cfg.batch_size, "cpu", False, keep_states=True)
    merge = model.heads["det3d"].metric().merge_states  # a frame's items (one: the BEV frame) as one state
    return {"/".join(map(str, fid)): merge(s) for fid, s in zip(res["frame_ids"], res["states"]["det3d"]) if s}


def velocity_errors(states: list) -> tuple[float, float]:
    """(nuScenes mAVE, car AVE) of the frames' merged states."""
    from hydranet.metrics.nuscenes_detection import DetectionConfig, state_metrics

    m = state_metrics(states, DetectionConfig())
    car = m.label_tp_errors.get(CAR, {}).get("vel_err", math.nan)
    return float(m.tp_errors["vel_err"]), float(car)


def arm(folder: Path) -> list[dict[str, dict]]:
    seeds = sorted(p for p in folder.glob("seed*") if (p / "run" / "checkpoint.pt").is_file())
    if not seeds:
        raise SystemExit(f"error: {folder} has no seed*/run/checkpoint.pt; run benchmarks/demo_seeds.py --out {folder}")
    return [frame_states(s / "run", folder / "data" / "sim_val") for s in seeds]


def measure(video: list[dict], single: list[dict], resamples: int, seed: int) -> dict:
    frames = sorted(set.intersection(*(set(s) for s in video + single)))
    rng = np.random.default_rng([seed, 31])
    stats: dict[str, dict] = {}
    for name, runs in (("video", video), ("single", single)):
        per_seed = [velocity_errors([r[f] for f in frames]) for r in runs]
        stats[name] = {"seeds": per_seed, "pooled": velocity_errors([r[f] for r in runs for f in frames])}
    draws = {"video": [], "single": []}
    for _ in range(resamples):
        pick = rng.integers(0, len(frames), len(frames))  # paired: the same frames for both arms
        for name, runs in (("video", video), ("single", single)):
            chosen = rng.integers(0, len(runs), len(runs))
            draws[name].append(velocity_errors([runs[s][frames[i]] for s in chosen for i in pick]))
    return {"frames": len(frames), "stats": stats, "draws": {k: np.asarray(v) for k, v in draws.items()}}


def report(res: dict, confidence: float) -> tuple[str, dict]:
    from data_engine.intervals import fmt, interval, ratio_interval

    out, lines = {}, ["| figure | video (3-frame queue) | single frame | video / single | video below single-frame |",
                      "|---|---:|---:|---:|---|"]
    for j, name in enumerate(("mAVE (nuScenes, m/s)", "car AVE (m/s)")):
        v, s = res["stats"]["video"]["pooled"][j], res["stats"]["single"]["pooled"][j]
        dv, ds = res["draws"]["video"][:, j], res["draws"]["single"][:, j]
        r = ratio_interval(dv, ds, confidence)
        ratio = v / s if s > 0 else math.nan
        decided = "undecided (no interval)" if r is None else "met" if r[1] < 1 else "missed" if r[0] > 1 else \
            "undecided (the interval holds 1)"
        out[name] = {"video": v, "video_ci": interval(dv, confidence), "single": s, "single_ci": interval(ds, confidence),
                     "ratio": ratio, "ratio_ci": r, "verdict": decided,
                     "seeds": {k: [x[j] for x in res["stats"][k]["seeds"]] for k in ("video", "single")}}
        lines.append(f"| {name} | {fmt(v, out[name]['video_ci'])} | {fmt(s, out[name]['single_ci'])} | "
                     f"{fmt(ratio, r, 2)} | {decided} |")
    seeds = "; ".join(f"{name}: video {', '.join(f'{x:.3f}' for x in o['seeds']['video'])}, single "
                      f"{', '.join(f'{x:.3f}' for x in o['seeds']['single'])}" for name, o in out.items())
    return "\n".join(lines) + f"\n\nper seed ({seeds})\n", out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--video", type=Path, required=True, help="demo_seeds.py output of the video recipe")
    ap.add_argument("--single", type=Path, required=True, help="demo_seeds.py output with model.bev.video_frames=1")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--overwrite", action="store_true")
    a = ap.parse_args(argv)
    if a.out.exists() and not a.overwrite:
        raise SystemExit(f"error: --out {a.out} exists; pass --overwrite to replace it")
    res = measure(arm(a.video), arm(a.single), a.resamples, a.seed)
    text, figures = report(res, a.confidence)
    head = (f"det3d velocity error on {res['frames']} held-out frames, {a.resamples} draws (seeds per arm and paired "
            f"frames), {a.confidence:.0%} intervals; video {a.video}, single frame {a.single}\n\n")
    if a.out.exists():
        shutil.rmtree(a.out)
    a.out.mkdir(parents=True)
    (a.out / "video_mave.md").write_text(head + text)
    (a.out / "video_mave.json").write_text(json.dumps({"frames": res["frames"], "figures": figures}, indent=1, default=str))
    print(head + text)
    return figures


if __name__ == "__main__":
    main()
