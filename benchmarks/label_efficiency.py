"""Label efficiency of the closed loop: metric against labels spent, per mining strategy, over seeds, with intervals.

    python benchmarks/label_efficiency.py --out out/bench_le [--seeds 5] [--jobs 2] [--rounds 3] [--budget 16]
        [--strategies random uncertainty hybrid triggers ensemble tta] [--base-clips 8] [--fleet-clips 24] [--prod-steps 300]
        [--retrain-steps 80] [--suite-clips auto] [--max-suite-clips 16] [--resamples 500] [--production-cache DIR]
        [--engine-set KEY=VALUE ...]

Per seed (seeds 0..N-1, each a separate process with OMP_NUM_THREADS=1, --jobs at a time): a small labelled
seed set (a fleet of --base-clips clips) trains configs/engine_tiny.yaml for --prod-steps steps: the first
production model. Then, for each strategy, `data_engine.loop.Loop` runs --rounds rounds (a new fleet of
--fleet-clips clips per round, shared by the strategies of a seed; shadow, triggers, mine --budget frames,
oracle labels, retrain --retrain-steps steps on seed set + all labels so far, export, gate, promote on a
pass). Every candidate is evaluated on the same frozen suites (8 slices, generated once); its suite metrics
are the curve's point at the labels spent so far, whether or not the gate promoted it. The offline strategies
(ensemble, tta) get a second member per seed: a production of seed 1000 + S on the same base set, exported,
as `loop.ensemble` (each round's mine stage runs `hydranet engine uncertainty` over that round's pool).

With --production-cache DIR no production is trained: every seed's first production is the 60-CPU-minute recipe's
model (benchmarks/production_cache.py: trained once, cached under its recipe's hash; configs/full.yaml, six cameras),
each round's retrain fine-tunes it on its own training set plus the labels so far (data_engine/retrain.py), the
offline strategies' second member is its snapshot at 60% of the steps, and fleets and suites are rendered at
fleet.yaml's 160x96 (the model's input size: its BEV view transform is bound to that calibration). --base-clips and
--prod-steps are unused.

Suite size (--suite-clips auto): a power calculation on a pilot. Seed 0's first production is evaluated on
--pilot-clips-clip suites; the standard deviation over clips of its per-clip det2d mAP50 gives the clips a
0.01 delta needs (data_engine/intervals.py `required_clips`: n = ((z_0.975 + z_0.8) * sd_delta / 0.01)^2
with sd_delta = sqrt(2) * sd_clip), spread over the slices, capped at --max-suite-clips a slice (a cap
that binds is printed). After the run the same is computed from the measured paired per-clip differences.

Every figure comes with its 95% interval from a two-level bootstrap (--resamples, seeded): the seeds with
replacement, and in each resample the clips of every suite with replacement, the same draw for every
strategy and round (paired); each candidate's metric is recomputed from its per-frame states (the gate's
cache). Reported (markdown on stdout, results.json and label_efficiency.png in --out):
- det2d mAP50 (frame-weighted aggregate over the suites) per strategy and labels spent: mean over seeds;
- labels-to-match: the fewest labels with which a strategy's mean reaches random's final mean (and its
  bootstrap interval), and the decision: a strategy's value at <= 50% of random's labels minus random's
  final value, met only when the interval lies above 0;
- rare slices and rare classes: gain over the first production at the final budget on the four rare slices
  and the AP50 of construction_vehicle, traffic_cone, debris (over every suite) and pedestrian on the night
  suites; target gain >= 2x random's: decided on gain - 2 x random's gain, met only when above 0 and the
  strategy's own gain is above 0 too (twice a loss is no target).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from data_engine.intervals import (ap50, class_states, clip_groups, detectable_delta, fmt, hierarchical_draws,
                                   interval, merge, ratio_interval, required_clips, run_seeds, verdict)
from data_engine.mining import OFFLINE

RARE = ("cones_on_road", "debris_on_road", "night_pedestrian_crossing", "unusual_vehicle")
RARE_CLASSES = (("construction_vehicle", None), ("traffic_cone", None), ("debris", None), ("pedestrian", "night"))
SIZE = ["sim.image_width=96", "sim.image_height=64"]
HEAD = "det2d"


def size(args) -> list[str]:
    """The fleets' and suites' render size: 96x64 for the tiny productions, fleet.yaml's own for a cached one."""
    return [] if args.production else SIZE


def fleet(out: Path, clips: int, seed: int, args) -> Path:
    from data_engine.fleet import FleetConfig, generate_fleet
    from hydranet.config import load_config

    if not (out / "dataset.json").exists():
        cfg = load_config(FleetConfig, "fleet", size(args) + [f"rare.{n}={args.rare}" for n in RARE])
        generate_fleet(out, cfg, clips, seed, progress=False)
    return out


def production(out: Path, base: Path, steps: int, seed: int) -> Path:
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    if not (out / "checkpoint.pt").exists():
        cfg = load_experiment("configs/engine_tiny.yaml", [f"data.root={base}", f"steps={steps}", f"checkpoint_every={steps}",
                                                            "device=cpu", f"seed={seed}", "num_workers=0"])
        train(cfg, out, progress=False, overwrite=out.exists())
    return out


def engine_sets(args, suite_clips: int) -> list[str]:
    return [f"loop.budget={args.budget}", f"loop.fleet_set=[{','.join(size(args))}]", f"retrain.steps={args.retrain_steps}",
            "loop.unit_tests=false", f"suites.clips={suite_clips}", f"gate.summary_head={HEAD}", *args.engine_set]


def make_suites(path: Path, args, clips: int) -> Path:
    from data_engine.config import EngineConfig
    from data_engine.loop import fleet_config
    from data_engine.suites import generate_suites
    from hydranet.config import load_config

    if not (path / "suites.json").exists():
        cfg = load_config(EngineConfig, "engine", engine_sets(args, clips))
        generate_suites(path, cfg.suites, fleet_config(cfg.loop), progress=False)
    return path


def points(loop_dir: Path, rounds: int) -> list[dict]:
    """Per round: labels spent so far, the candidate's checkpoint, whether it was promoted; first the first
    production (0 labels)."""
    journal = json.loads((loop_dir / "loop.json").read_text())
    rs = journal["rounds"]
    out = [{"round": -1, "labels": 0, "checkpoint": rs[0]["done"]["shadow"]["production"], "promoted": True}]
    labels = 0
    for r in range(rounds):
        labels += rs[r]["done"]["label"]["accepted"]
        out.append({"round": r, "labels": labels, "checkpoint": rs[r]["done"]["retrain"]["run"],
                    "promoted": bool(rs[r]["done"]["gate"]["promote"])})
    return out


def loop_seconds(loop_dir: Path) -> float:
    journal = json.loads((loop_dir / "loop.json").read_text())
    return round(sum(st.get("seconds", 0.0) for r in journal["rounds"] for st in r["done"].values()), 1)


def first_production(args, sdir: Path, seed: int) -> tuple[Path, Path]:
    """(the seed's first production, a dataset of its kind for exports): the cached 60-CPU-minute model and its own
    training set, or configs/engine_tiny.yaml trained on a base fleet of --base-clips clips."""
    if args.production:
        prod = Path(args.production) / "run"
        return prod, Path(json.loads((prod / "config.json").read_text())["data"]["root"])
    base = fleet(sdir / "base", args.base_clips, 100 + seed, args)
    return production(sdir / "production", base, args.prod_steps, seed), base


def worker(args) -> None:
    """One seed: its fleets, first production and every strategy's loop; writes seedS/points.json."""
    from data_engine.config import EngineConfig
    from data_engine.loop import Loop
    from hydranet.config import load_config

    seed, out, suites = args.worker_seed, Path(args.out), Path(args.suites_dir)
    clips = int(args.suite_clips)
    sdir = out / f"seed{seed}"
    t0 = time.time()
    prod, base = first_production(args, sdir, seed)
    for r in range(args.rounds):
        fleet(sdir / "fleets" / f"r{r:03d}", args.fleet_clips, 10_000 * (seed + 1) + r, args)
    ensemble = []  # the offline strategies' second member, exported: a production of another seed on the same base,
    if set(args.strategies) & set(OFFLINE):  # or the cached production's snapshot
        from deploy.export import export_checkpoint

        member = Path(args.production) / "snapshot.pt" if args.production else \
            production(sdir / "member", base, args.prod_steps, 1000 + seed)
        if not (sdir / "member.onnx").exists():
            export_checkpoint(member, sdir / "member.onnx", base, frames=2, verbose=False)
        ensemble = [f"loop.ensemble=[{sdir / 'member.onnx'}]"]
    res = {"points": {}, "loop_seconds": {}}
    for strategy in args.strategies:
        cfg = load_config(EngineConfig, "engine", engine_sets(args, clips) + [f"loop.strategy={strategy}", f"mining.seed={seed}"]
                          + (ensemble if strategy in OFFLINE else []))
        Loop(sdir / strategy, cfg, prod, progress=False, suites=suites, fleets=sdir / "fleets",
             log=lambda line, s=strategy: print(f"[seed {seed} {s}] {line}", flush=True)).run(args.rounds)
        res["points"][strategy] = points(sdir / strategy, args.rounds)
        res["loop_seconds"][strategy] = loop_seconds(sdir / strategy)
    res["seconds"] = round(time.time() - t0, 1)
    (sdir / "points.json").write_text(json.dumps(res, indent=1))


def spawn(args, seeds: list[int], suites: Path, clips: int) -> dict[int, float]:
    """Run the seeds as processes (OMP_NUM_THREADS=1 each), --jobs at a time; wall seconds per seed."""
    base = [sys.executable, __file__, "--out", str(args.out), "--rounds", str(args.rounds), "--budget", str(args.budget),
            "--strategies", *args.strategies, "--base-clips", str(args.base_clips), "--fleet-clips", str(args.fleet_clips),
            "--rare", str(args.rare), "--prod-steps", str(args.prod_steps), "--retrain-steps", str(args.retrain_steps),
            *(["--engine-set", *args.engine_set] if args.engine_set else []),
            "--suites-dir", str(suites), "--suite-clips", str(clips)] + (["--production", args.production] if args.production else [])
    return run_seeds(base, seeds, args.jobs, Path(args.out))


# -- measurement ---------------------------------------------------------------------------------------------
def per_clip(table: dict, n_classes: int) -> dict[str, list[dict]]:
    """{suite: per clip its merged det2d state} of one checkpoint's suite table."""
    out = {}
    for suite, t in table.items():
        states = t["heads"][HEAD]["states"]
        out[suite] = [merge([s for i in g if states[i] for s in states[i]], n_classes) for g in clip_groups(t["clips"])]
    return out


class Measure:
    """Every figure of one checkpoint, on the original clips and on each bootstrap draw of the suites' clips."""

    def __init__(self, suites: list[str], frames: dict[str, int], class_ids: dict[str, int], draws: list[np.ndarray]):
        self.suites, self.frames, self.class_ids, self.draws = suites, frames, class_ids, draws

    def keys(self) -> list[str]:
        return ["aggregate", *self.suites, *[f"AP50 {c}" + (f" ({w} suites)" if w else "") for c, w in RARE_CLASSES]]

    def values(self, clips: dict[str, list[dict]], pick: list[np.ndarray] | None) -> dict[str, float]:
        sel = {s: [clips[s][k] for k in (pick[j] if pick is not None else range(len(clips[s])))]
               for j, s in enumerate(self.suites)}
        v = {s: ap50(sel[s]) for s in self.suites}
        ok = [s for s in self.suites if math.isfinite(v[s])]
        v["aggregate"] = sum(self.frames[s] * v[s] for s in ok) / max(sum(self.frames[s] for s in ok), 1) if ok else math.nan
        for c, where in RARE_CLASSES:
            k = self.class_ids[c]
            v[f"AP50 {c}" + (f" ({where} suites)" if where else "")] = ap50(
                [class_states(st, k) for s in self.suites if where is None or where in s for st in sel[s]])
        return v

    def all(self, clips: dict[str, list[dict]]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        point = self.values(clips, None)
        boot = [self.values(clips, [d[b] for d in self.draws]) for b in range(len(self.draws[0]))]
        return point, {k: np.array([b[k] for b in boot]) for k in point}


def _measure_one(job: tuple) -> tuple:
    """(checkpoint, its per-clip states per suite, Measure.all of them): one pool task."""
    from data_engine.gate import suite_table

    ckpt, catalog, suites_dir, n_classes, m = job
    table = per_clip(suite_table(ckpt, suites_dir, catalog), n_classes)
    return ckpt, table, m.all(table)


def measure(args, seeds: list[int], suites_dir: Path) -> dict:
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)  # a key with nothing to score (NaN) on some draws: left out
    from data_engine.gate import state_metrics, suite_table
    from data_engine.suites import load_suites

    per_seed = {s: json.loads((Path(args.out) / f"seed{s}" / "points.json").read_text()) for s in seeds}
    idx = load_suites(suites_dir)["suites"]
    first_ckpt = per_seed[seeds[0]]["points"]["random"][0]["checkpoint"]
    classes = state_metrics(first_ckpt)[HEAD].classes
    class_ids = {c: classes.index(c) for c, _ in RARE_CLASSES}
    suites = [s for s in idx if s != "unit_tests"]
    jobs = {}  # checkpoint -> the loop catalog that caches its suite metrics (a round's first production is shared)
    for s in seeds:
        for st in args.strategies:
            for p in per_seed[s]["points"][st]:
                jobs.setdefault(p["checkpoint"], str(Path(args.out) / f"seed{s}" / st / "catalog.sqlite"))
    first = per_clip(suite_table(first_ckpt, suites_dir, jobs[first_ckpt]), len(classes))
    n_clips = {s: len(first[s]) for s in suites}
    seed_draw, clip_draws = hierarchical_draws(len(seeds), [n_clips[s] for s in suites], args.resamples, args.boot_seed)
    m = Measure(suites, {s: idx[s]["frames"] for s in suites}, class_ids, clip_draws)
    import multiprocessing as mp

    with mp.get_context("fork").Pool(min(args.jobs + 1, len(jobs))) as pool:  # the recomputation is the slow part
        done = pool.map(_measure_one, [(ck, cat, str(suites_dir), len(classes), m) for ck, cat in jobs.items()])
    tables = {ck: t for ck, t, _ in done}
    cache = {ck: r for ck, _, r in done}
    strategies = args.strategies
    n_pts = len(per_seed[seeds[0]]["points"]["random"])
    point = {st: [[None] * n_pts for _ in seeds] for st in strategies}
    boot = {st: [[None] * n_pts for _ in seeds] for st in strategies}
    for i, s in enumerate(seeds):
        for st in strategies:
            for j, p in enumerate(per_seed[s]["points"][st]):
                point[st][i][j], boot[st][i][j] = cache[p["checkpoint"]]
    labels = [p["labels"] for p in per_seed[seeds[0]]["points"]["random"]]

    def stat(fn):
        """(value on the data, (resamples,) over draws of seeds and clips) of fn(values[strategy][seed][point][key])."""
        v = np.nanmean([fn(point, i) for i in range(len(seeds))])
        per = np.stack([fn(boot, i) for i in range(len(seeds))])  # (seeds, resamples)
        with np.errstate(invalid="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                b = np.nanmean(np.take_along_axis(per, seed_draw.T, 0), 0)
        return float(v), b

    # power: the pilot's per-clip spread (first productions) and the measured paired differences
    per_clip_ap = [ap50([c]) for ck in {per_seed[s]["points"]["random"][0]["checkpoint"] for s in seeds}
                   for sname in suites for c in tables[ck][sname]]
    sd_clip = float(np.nanstd(per_clip_ap, ddof=1))
    diffs = []
    for s in seeds:
        pts = per_seed[s]["points"]["random"]
        a, b = tables[pts[-1]["checkpoint"]], tables[pts[0]["checkpoint"]]
        diffs += [ap50([x]) - ap50([y]) for sname in suites for x, y in zip(a[sname], b[sname])]
    sd_delta = float(np.nanstd(diffs, ddof=1))
    return {"seeds": seeds, "labels": labels, "keys": m.keys(), "stat": stat, "n_clips": n_clips, "suites": suites,
            "sd_clip": sd_clip, "sd_delta": sd_delta, "per_seed": per_seed, "point": point}


def summarize(res: dict, args) -> tuple[str, dict]:
    stat, labels, strategies = res["stat"], res["labels"], args.strategies
    out: dict = {"curve": {}, "targets": {}}
    lines = ["det2d mAP50, frame-weighted over the suites: mean over seeds [95% over seeds and suite clips]", "",
             "| strategy | " + " | ".join(f"{n} labels" for n in labels) + " | labels to reach random's final [95%] |",
             "|---|" + "---:|" * (len(labels) + 1)]
    rand_final = stat(lambda v, i: np.asarray(v["random"][i][-1]["aggregate"]))
    for st in strategies:
        cells, curve = [], []
        for j in range(len(labels)):
            val, b = stat(lambda v, i, j=j, st=st: np.asarray(v[st][i][j]["aggregate"]))
            curve.append((val, interval(b)))
            cells.append(fmt(val, interval(b)))
        share_b = []
        for r in range(args.resamples):
            hit = [j for j in range(len(labels)) if stat_draw(res, st, j, r) >= stat_draw(res, "random", -1, r) - 1e-12]
            share_b.append(labels[hit[0]] / labels[-1] if hit else math.nan)
        hit = [j for j, (val, _) in enumerate(curve) if val >= rand_final[0] - 1e-12]
        share = labels[hit[0]] / labels[-1] if hit else math.nan
        iv = interval(np.nan_to_num(np.asarray(share_b), nan=NEVER))
        lines.append(f"| {st} | " + " | ".join(cells) + " | " + ("not reached" if not hit else f"{labels[hit[0]]} ({share:.0%})")
                     + (f" [{share_text(iv[0])}, {share_text(iv[1])}]" if iv else "") + " |")
        out["curve"][st] = {"values": curve, "labels_share": share, "labels_share_ci": iv}
    half = max(j for j in range(len(labels)) if labels[j] <= 0.5 * labels[-1])
    lines += ["", f"Target 1 (random's final metric with at most 50% of its labels): value at {labels[half]} labels minus "
              f"random's final at {labels[-1]}; met when the interval lies above 0", "",
              "| strategy | at 50% minus random's final [95%] | verdict | final minus random's final [95%] |", "|---|---:|---|---:|"]
    for st in strategies:
        d, b = stat(lambda v, i, st=st: np.asarray(v[st][i][half]["aggregate"]) - np.asarray(v["random"][i][-1]["aggregate"]))
        f, fb = stat(lambda v, i, st=st: np.asarray(v[st][i][-1]["aggregate"]) - np.asarray(v["random"][i][-1]["aggregate"]))
        iv = interval(b)
        ver = verdict(*(iv or (math.nan, math.nan)))
        lines.append(f"| {st} | {fmt(d, iv, sign=True)} | {ver} | {fmt(f, interval(fb), sign=True)} |")
        out["targets"][f"labels {st}"] = {"delta": d, "ci": iv, "verdict": ver}
    rare_keys = [*RARE, *[k for k in res["keys"] if k.startswith("AP50 ")]]
    lines += ["", "Target 2 (rare slices and classes: gain >= 2x random's): gain = final minus first production; "
              "decided on gain - 2 x random's gain (met when its interval lies above 0)", "",
              "| strategy | key | gain [95%] | ratio to random's [95%] | gain - 2 x random's [95%] | verdict |",
              "|---|---|---:|---:|---:|---|"]
    for st in strategies:
        for key in rare_keys:
            def gain(v, i, st=st, key=key):
                return np.asarray(v[st][i][-1][key]) - np.asarray(v[st][i][0][key])
            g, gb = stat(gain)
            gr, grb = stat(lambda v, i, key=key: gain(v, i, "random", key))
            d, db = stat(lambda v, i, st=st, key=key: gain(v, i, st, key) - 2 * gain(v, i, "random", key))
            ratio = g / gr if gr > 1e-9 else math.nan
            iv = interval(db)
            ver = verdict(*(iv or (math.nan, math.nan))) if st != "random" else "-"
            if ver == "met" and not (interval(gb) or (0.0, 0.0))[0] > 0:  # 2x a loss is no target: the strategy must gain
                ver = "undecided (its own gain's interval holds 0)"
            lines.append(f"| {st} | {key} | {fmt(g, interval(gb), sign=True)} | "
                         f"{fmt(ratio, ratio_interval(gb, grb), 2) if math.isfinite(ratio) else 'n/a (random gained <= 0)'} | "
                         f"{fmt(d, iv, sign=True)} | {ver} |")
            out["targets"][f"rare {st} {key}"] = {"gain": g, "gain_ci": interval(gb), "delta": d, "ci": iv, "verdict": ver}
    return "\n".join(lines), out


NEVER = 1e9  # a bootstrap draw in which the strategy never reaches random's final


def share_text(v: float) -> str:
    return "not reached" if v >= NEVER else f"{v:.0%}"


def stat_draw(res: dict, st: str, j: int, r: int) -> float:
    """The bootstrap draw r of strategy st's mean aggregate at point j (seeds drawn, clips drawn)."""
    b = res.setdefault("_agg", {})
    if (st, j) not in b:
        b[(st, j)] = res["stat"](lambda v, i: np.asarray(v[st][i][j]["aggregate"]))[1]
    return b[(st, j)][r]


def power_text(res: dict, args, used: int) -> tuple[str, dict]:
    n_suites = len(res["suites"])
    need_pilot = required_clips(math.sqrt(2) * res["sd_clip"], args.delta)
    need_paired = required_clips(res["sd_delta"], args.delta)
    total = used * n_suites
    p = {"sd_clip": res["sd_clip"], "sd_delta": res["sd_delta"], "needed_clips_pilot": need_pilot,
         "needed_clips_paired": need_paired, "used_clips": total,
         "detectable_delta": detectable_delta(res["sd_delta"], total)}
    text = (f"Power (95% two-sided, power 0.8, delta {args.delta}): per-clip det2d mAP50 sd of the first productions "
            f"{res['sd_clip']:.3f} -> {need_pilot} clips (sd_delta = sqrt(2) sd); measured paired per-clip sd of "
            f"(random's final - first production) {res['sd_delta']:.3f} -> {need_paired} clips. Used: {used} clips x "
            f"{n_suites} slices = {total}, which detects a delta of {p['detectable_delta']:.3f} with that power"
            + ("" if total >= need_paired else f" (UNDERPOWERED for {args.delta}: {need_paired} clips needed)") + ".")
    return text, p


def pilot_size(args, out: Path) -> int:
    """--suite-clips auto: seed 0's first production on --pilot-clips suites -> clips per slice (capped)."""
    from data_engine.gate import state_metrics, suite_table

    pilot = make_suites(out / "pilot_suites", args, args.pilot_clips)
    prod, _ = first_production(args, out / "seed0", 0)
    n_cls = len(state_metrics(prod)[HEAD].classes)
    table = per_clip(suite_table(prod, pilot), n_cls)
    sd = float(np.nanstd([ap50([c]) for s in table for c in table[s]], ddof=1))
    need = required_clips(math.sqrt(2) * sd, args.delta)
    per = max(args.pilot_clips, math.ceil(need / len(table)))
    used = min(per, args.max_suite_clips)
    print(f"pilot: per-clip det2d mAP50 sd {sd:.3f} over {sum(len(v) for v in table.values())} clips -> n = "
          f"ceil(((z_0.975 + z_0.8) * sqrt(2) * {sd:.3f} / {args.delta})^2) = {need} clips = {per} a slice; using {used}"
          + (f" (capped by --max-suite-clips {args.max_suite_clips})" if used < per else ""), flush=True)
    return used


def run(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    seeds = list(range(args.seeds))
    clips = pilot_size(args, out) if args.suite_clips == "auto" else int(args.suite_clips)
    suites = out / "pilot_suites" if args.suite_clips == "auto" and clips == args.pilot_clips else out / f"suites{clips}"
    make_suites(suites, args, clips)
    took = spawn(args, seeds, suites, clips)
    res = measure(args, seeds, suites)
    table, figures = summarize(res, args)
    ptext, power = power_text(res, args, clips)
    sec = {s: res["per_seed"][s]["seconds"] for s in seeds}
    head = (f"label efficiency: {args.seeds} seeds, {len(res['suites'])} slices x {clips} clips, {args.rounds} rounds of "
            f"{args.budget} labels, {args.resamples} resamples\nseconds per seed (wall, worker): "
            + ", ".join(f"seed {s}: {took.get(s, float('nan')):.0f} / {sec[s]:.0f}" for s in seeds))
    text = "\n\n".join([head, ptext, table])
    print(text)
    (out / "label_efficiency.md").write_text(text + "\n")
    plot(res, args.strategies, out / "label_efficiency.png")
    plain = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    (out / "results.json").write_text(json.dumps({"args": plain, "suite_clips": clips, "power": power, "figures": figures,
                                                  "seconds_wall": took, "seconds_worker": sec,
                                                  "total_seconds": round(time.time() - t0, 1)}, indent=1, default=str))
    print(f"wrote {out / 'label_efficiency.md'}, label_efficiency.png, results.json in {time.time() - t0:.0f} s")


def plot(res: dict, strategies: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["aggregate", *RARE]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.4))
    for ax, key in zip(axes, keys):
        for st in strategies:
            vals = np.array([[p[key] for p in res["point"][st][i]] for i in range(len(res["seeds"]))])
            ax.plot(res["labels"], np.nanmean(vals, 0), marker="o", label=st)
            ax.fill_between(res["labels"], np.nanmin(vals, 0), np.nanmax(vals, 0), alpha=0.15)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("labels spent")
    axes[0].set_ylabel("det2d mAP50 (candidate), mean and range over seeds")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1, each a process")
    p.add_argument("--jobs", type=int, default=min(5, os.cpu_count() or 1), help="seed processes at a time")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget", type=int, default=16)
    p.add_argument("--strategies", nargs="+", default=["random", "uncertainty", "hybrid", "triggers"])
    p.add_argument("--base-clips", type=int, default=8)
    p.add_argument("--fleet-clips", type=int, default=24)
    p.add_argument("--suite-clips", default="auto", help="clips per slice, or auto: from the power calculation on a pilot")
    p.add_argument("--pilot-clips", type=int, default=2)
    p.add_argument("--max-suite-clips", type=int, default=16)
    p.add_argument("--delta", type=float, default=0.01, help="the delta the power calculation must detect")
    p.add_argument("--rare", type=float, default=0.04, help="probability per fleet clip of each rare scenario")
    p.add_argument("--prod-steps", type=int, default=300)
    p.add_argument("--retrain-steps", type=int, default=80)
    p.add_argument("--engine-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="configs/engine.yaml overrides after the script's own, e.g. retrain.lr=1e-4 retrain.norm_eval=false")
    p.add_argument("--resamples", type=int, default=500)
    p.add_argument("--boot-seed", type=int, default=0)
    p.add_argument("--production-cache", type=Path, default=None,
                   help="start every seed from the 60-CPU-minute production cached here (benchmarks/production_cache.py; "
                        "trained first if absent): --base-clips and --prod-steps unused")
    p.add_argument("--production", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-seed", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--suites-dir", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if "random" not in args.strategies:
        p.error("--strategies must include random (the baseline)")
    if args.production_cache is not None and args.production is None:  # resolved once, in the parent
        from production_cache import RECIPE_60MIN, production, recipe  # benchmarks/, this script's folder

        args.production = str(production(args.production_cache, recipe(**RECIPE_60MIN)).resolve())
    if args.worker_seed is not None:
        worker(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
