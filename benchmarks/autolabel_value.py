"""The training value of auto-labels (issue 35, item 4): one loop round retrained on oracle labels of N mined frames,
on auto-labels of the same N frames, and on auto-labels of 2N frames at no human cost; the candidates' metrics on
the same frozen suites.

    python benchmarks/autolabel_value.py --production RUN --out OUT [--seeds 3] [--budget 8] [--retrain-steps 20]
        [--fleet-clips 6] [--suite-clips 2] [--suite-frames 2] [--image 320x192] [--resamples 2000]
        [--overwrite | --resume]

Per seed s (the round's fleet is `loop.fleet_seed` 1000 + s: the same fleet, shadow run and selection for the
oracle and auto arms of that seed), three one-round loops (`data_engine.loop.Loop`, the demo's round: hybrid
mining, export, gate) from the production RUN (a training run folder, e.g. the demo's `out/demo/run`):

- **oracle N**: `loop.labeller oracle`, `loop.budget N`: the sim's exact labels of the N mined frames;
- **auto N**: `loop.labeller auto` with every frame accepted (`autolabel.accept` 0 for det2d and det3d, and
  `accept_empty`: the auto-labeller's labels train as they are, nobody looks), the same N frames;
- **auto 2N**: the same at `loop.budget 2N` (the mining picks 2N frames of the same fleet).

Each retrains `--retrain-steps` steps on the production's data plus the round's labels (`retrain`), and the gate
evaluates it on one suites folder made once (the first loop's, 8 slices of --suite-clips clips x --suite-frames
frames; `loop.unit_tests` off so no arm grows it). Reported per arm and head: the candidate's aggregate metric over
the suites (the gate's aggregate row), its change from the production, and the paired differences auto N - oracle N
and auto 2N - oracle N over seeds with a percentile bootstrap over seeds (`data_engine.intervals.interval`; with 3
seeds an interval says little: it is printed so that nobody reads a point as a result). Writes OUT/results.json
and OUT/results.md (a head no suite could score, e.g. no sign matched, is "not scored", never a NaN); each loop's
folder stays under OUT/<arm>/s<seed> (gate.json, labels, the summary line). --resume continues a killed run: the
loops are resumable, a finished one is read back, not rerun.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ARMS = ("oracle N", "auto N", "auto 2N")
ACCEPT_ALL = "autolabel.accept={det2d: 0.0, det3d: 0.0}"


def arm_sets(arm: str, seed: int, args) -> list[str]:
    """The engine config overrides of one arm and seed."""
    w, h = args.image.split("x")
    budget = args.budget * (2 if arm == "auto 2N" else 1)
    sets = [f"loop.fleet_clips={args.fleet_clips}", f"loop.fleet_seed={1000 + seed}", f"loop.budget={budget}",
            "loop.unit_tests=false", f"loop.fleet_set=[sim.image_width={w},sim.image_height={h}]",
            f"retrain.steps={args.retrain_steps}", f"suites.clips={args.suite_clips}", f"suites.frames={args.suite_frames}"]
    if arm == "oracle N":
        return sets + ["loop.labeller=oracle"]
    return sets + ["loop.labeller=auto", ACCEPT_ALL, "autolabel.accept_empty=true"]


def num(v) -> float:
    """A gate value (None where the metric is undefined, e.g. no sign matched) as a float, NaN for None."""
    return float("nan") if v is None else float(v)


def run_arm(out: Path, arm: str, seed: int, args, suites: Path | None) -> dict:
    """One round of `arm` at `seed` into `out`; {head: (candidate, production, higher_is_better)} and its summary."""
    from data_engine.config import EngineConfig
    from data_engine.loop import Loop
    from hydranet.config import load_config

    cfg = load_config(EngineConfig, "engine", arm_sets(arm, seed, args))
    t0 = time.perf_counter()
    [summary] = Loop(out, cfg, args.production, progress=False, log=lambda line: None, suites=suites).run(1)
    gate = json.loads((out / "rounds" / "r000" / "gate" / "gate.json").read_text())
    heads = {r["head"]: (num(r["candidate"]), num(r["production"]), bool(r["higher_is_better"]), r["metric"])
             for r in gate["rows"] if r["slice"] == "aggregate"}
    return {"heads": heads, "line": summary["line"], "seconds": time.perf_counter() - t0}


def paired(values: dict[str, list[float]], a: str, b: str, resamples: int) -> dict:
    """Mean of (a - b) over seeds and its percentile bootstrap interval over seeds."""
    from data_engine.intervals import interval

    d = np.asarray(values[a]) - np.asarray(values[b])
    d = d[np.isfinite(d)]  # seeds where either metric is undefined drop out
    if not len(d):
        return {"mean": float("nan"), "ci": None, "per_seed": []}
    draws = np.random.default_rng([0, 35]).integers(0, len(d), (resamples, len(d)))
    ci = interval(d[draws].mean(1)) if len(d) > 1 else None
    return {"mean": float(d.mean()), "ci": None if ci is None else [float(ci[0]), float(ci[1])], "per_seed": d.tolist()}


def finite(obj):
    """`obj` with every non-finite float (an undefined per-seed value) as None, for JSON."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return None if isinstance(obj, float) and not np.isfinite(obj) else obj


def nanmean(values) -> float:
    """The mean of the finite values (NaN when none is)."""
    v = np.asarray(values, np.float64)
    return float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--production", type=Path, required=True, help="the production training run folder")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=8, help="N: frames mined and labelled by the oracle and auto N arms")
    ap.add_argument("--retrain-steps", type=int, default=20)
    ap.add_argument("--fleet-clips", type=int, default=6)
    ap.add_argument("--suite-clips", type=int, default=2)
    ap.add_argument("--suite-frames", type=int, default=2)
    ap.add_argument("--image", default="320x192", help="the fleet's and suites' render size, WxH (the demo's)")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--resume", action="store_true", help="continue OUT (finished loops are read back)")
    args = ap.parse_args()
    if not (args.production / "checkpoint.pt").is_file():
        sys.exit(f"error: --production {args.production} is not a training run folder; train one (make demo writes "
                 "out/demo/run)")
    w, _, h = args.image.partition("x")
    if not (w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0):
        sys.exit(f"error: --image {args.image!r}: give the render size as WIDTHxHEIGHT, e.g. 320x192")
    if args.out.exists() and not args.resume:
        if not args.overwrite:
            sys.exit(f"error: --out {args.out} exists; give a new folder, --overwrite or --resume")
        if any(p.name not in {*(a.replace(" ", "_") for a in ARMS), "results.json", "results.md"} for p in args.out.iterdir()):
            sys.exit(f"error: --out {args.out} holds files this benchmark did not write; --overwrite replaces only its own "
                     "output: give a new folder")
        shutil.rmtree(args.out)
    results, suites = {}, None
    for seed in range(args.seeds):
        for arm in ARMS:
            folder = args.out / arm.replace(" ", "_") / f"s{seed}"
            got = run_arm(folder, arm, seed, args, suites)
            suites = suites or folder / "suites"  # every later arm gates on the first loop's suites
            results.setdefault(arm, []).append(got)
            print(f"[{time.strftime('%H:%M:%S')}] seed {seed} {arm}: {got['seconds']:.0f} s; {got['line']}", file=sys.stderr,
                  flush=True)
    heads = list(results[ARMS[0]][0]["heads"])
    table = {}
    for head in heads:
        metric, better = results[ARMS[0]][0]["heads"][head][3], results[ARMS[0]][0]["heads"][head][2]
        values = {arm: [r["heads"][head][0] for r in results[arm]] for arm in ARMS}
        if not np.isfinite([v for vs in values.values() for v in vs]).any():
            table[head] = {"metric": metric, "scored": False}  # e.g. no sign matched on any suite
            continue
        table[head] = {"metric": metric, "higher_is_better": better,
                       "production": nanmean([r["heads"][head][1] for r in results[ARMS[0]]]),
                       "arms": {arm: nanmean(v) for arm, v in values.items()}, "per_seed": values,
                       "auto N - oracle N": paired(values, "auto N", "oracle N", args.resamples),
                       "auto 2N - oracle N": paired(values, "auto 2N", "oracle N", args.resamples)}
    lines = [f"# Training value of auto-labels: {args.seeds} seeds, N = {args.budget} frames, {args.retrain_steps} retrain "
             f"steps, production {args.production}\n",
             "| head | metric | production | oracle N | auto N | auto 2N | auto N - oracle N [95% CI] | "
             "auto 2N - oracle N [95% CI] |", "|---|---|---:|---:|---:|---:|---|---|"]

    def diff(d: dict) -> str:
        if not np.isfinite(d["mean"]):
            return "not scored"
        return f"{d['mean']:+.4f} " + (f"[{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}]" if d["ci"] else "[no interval]")

    def cell(v: float) -> str:
        return f"{v:.4f}" if np.isfinite(v) else "not scored"

    for head, t in table.items():
        if not t.get("scored", True):
            lines.append(f"| {head} | {t['metric']} | not scored on the suites (nothing matched) |||||||")
            continue
        lines.append(f"| {head} | {t['metric']} | {cell(t['production'])} | " + " | ".join(cell(t['arms'][a]) for a in ARMS)
                     + f" | {diff(t['auto N - oracle N'])} | {diff(t['auto 2N - oracle N'])} |")
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(text)
    (args.out / "results.json").write_text(json.dumps(finite({"args": {k: str(v) for k, v in vars(args).items()}, "table": table,
                                                       "runs": {a: [{k: v for k, v in r.items() if k != "heads"} for r in rs]
                                                                for a, rs in results.items()}}), indent=1, allow_nan=False)
                                          + "\n")
    print(text)


if __name__ == "__main__":
    main()
