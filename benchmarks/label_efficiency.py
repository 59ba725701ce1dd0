"""Label efficiency of the closed loop: metric against labels spent, per mining strategy, over seeds.

    python benchmarks/label_efficiency.py --out out/bench_le [--seeds 0 1 2] [--rounds 3] [--budget 16]
        [--strategies random uncertainty hybrid triggers] [--base-clips 8] [--fleet-clips 24] [--prod-steps 300]
        [--retrain-steps 80]

Per seed: a small labelled seed set (a fleet of --base-clips clips) trains configs/engine_tiny.yaml for
--prod-steps steps: the first production model. Then, for each strategy, `data_engine.loop.Loop` runs
--rounds rounds (a new fleet of --fleet-clips clips per round, shared by the strategies of a seed; shadow,
triggers, mine --budget frames, oracle labels, retrain --retrain-steps steps on seed set + all labels so
far, export, gate, promote on a pass). Every candidate is evaluated on the same frozen suites (8 slices,
generated once); its suite metrics are the curve's point at the labels spent so far, whether or not the
gate promoted it. Unit-test growth is off so every strategy is measured on identical suites.

Reported (markdown on stdout, results.json and label_efficiency.png in --out):
- the --head's primary metric (default det2d mAP50), frame-weighted aggregate over the suites and each rare slice, per strategy
  and round: median and range over seeds;
- labels-to-match: the fewest labels with which a strategy's median aggregate reaches random's final
  median aggregate, as a share of random's labels (target <= 50%);
- rare-slice gain: a strategy's improvement on each rare slice over the first production at the final
  budget, against random's improvement (target >= 2x).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

RARE = ("cones_on_road", "debris_on_road", "night_pedestrian_crossing", "unusual_vehicle")
SIZE = ["sim.image_width=96", "sim.image_height=64"]


def fleet(out: Path, clips: int, seed: int, rare: float) -> Path:
    from data_engine.fleet import FleetConfig, generate_fleet
    from hydranet.config import load_config

    if not (out / "dataset.json").exists():
        cfg = load_config(FleetConfig, "fleet", SIZE + [f"rare.{n}={rare}" for n in RARE])
        generate_fleet(out, cfg, clips, seed, progress=False)
    return out


def production(out: Path, base: Path, steps: int, seed: int) -> Path:
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    if not (out / "checkpoint.pt").exists():
        cfg = load_experiment("configs/engine_tiny.yaml", [f"data.root={base}", f"steps={steps}", f"checkpoint_every={steps}",
                                                            "device=cpu", f"seed={seed}"])
        train(cfg, out, progress=False, overwrite=out.exists())
    return out


def curve(loop_dir: Path, rounds: int) -> list[dict]:
    """Per round: labels spent so far, the candidate's summary-head value on every suite and the aggregate
    (negated for a lower-is-better metric), whether it was promoted; round -1 is the first production (0 labels)."""
    points = []
    labels = 0
    for r in range(rounds):
        gate = json.loads((loop_dir / "rounds" / f"r{r:03d}" / "gate" / "gate.json").read_text())
        head = gate["summary_head"]
        rows = {row["slice"]: row for row in gate["rows"] if row["head"] == head and row["delta"] is not None}  # both scored
        sign = 1.0 if rows["aggregate"]["higher_is_better"] else -1.0  # values are stored as "higher is better"
        if r == 0:
            points.append({"round": -1, "labels": 0, "promoted": True,
                           "value": {s: sign * row["production"] for s, row in rows.items()}})
        journal = json.loads((loop_dir / "loop.json").read_text())
        labels += journal["rounds"][r]["done"]["label"]["accepted"]
        points.append({"round": r, "labels": labels, "promoted": gate["promote"],
                       "value": {s: sign * row["candidate"] for s, row in rows.items()}})
    return points


def loop_seconds(loop_dir: Path) -> float:
    """Seconds the loop's stages took, from its journal (so a resumed run reports the work, not the resume)."""
    journal = json.loads((loop_dir / "loop.json").read_text())
    return round(sum(st.get("seconds", 0.0) for r in journal["rounds"] for st in r["done"].values()), 1)


def median_curve(curves: list[list[dict]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(labels, median, min, max) over seeds of one suite's values along the rounds."""
    labels = np.array([p["labels"] for p in curves[0]], np.float64)
    vals = np.array([[p["value"].get(key, np.nan) for p in c] for c in curves], np.float64)  # (seeds, rounds + 1)
    return labels, np.nanmedian(vals, 0), np.nanmin(vals, 0), np.nanmax(vals, 0)


def labels_to_match(labels: np.ndarray, values: np.ndarray, target: float) -> float | None:
    """The fewest labels at which `values` reaches `target` (None: never)."""
    hit = np.flatnonzero(values >= target - 1e-12)
    return float(labels[hit[0]]) if len(hit) else None


def summarize(results: dict, strategies: list[str]) -> str:
    lines = []
    agg = {s: median_curve(results[s], "aggregate") for s in strategies}
    labels, rand, _, _ = agg["random"]
    target = rand[-1]
    lines += ["| strategy | " + " | ".join(f"{int(n)} labels" for n in labels) + " | labels to reach random's final |",
              "|---|" + "---:|" * (len(labels) + 1)]
    for s in strategies:
        _, med, lo, hi = agg[s]
        need = labels_to_match(labels, med, target)
        share = "not reached" if need is None else f"{int(need)} ({need / labels[-1]:.0%} of random's {int(labels[-1])})"
        lines.append(f"| {s} | " + " | ".join(f"{m:.3f} [{a:.3f}, {b:.3f}]" for m, a, b in zip(med, lo, hi)) + f" | {share} |")
    lines += ["", "Final aggregate minus random's, paired by seed (the seeds share fleets and first production)", "",
              "| strategy | per seed | median |", "|---|---|---:|"]
    final = {s: np.array([c[-1]["value"]["aggregate"] for c in results[s]]) for s in strategies}  # (seeds,)
    for s in strategies:
        diff = final[s] - final["random"]
        lines.append(f"| {s} | " + ", ".join(f"{d:+.3f}" for d in diff) + f" | {np.median(diff):+.3f} |")
    lines += ["", "Rare slices: gain over the first production at the final budget (median over seeds), and ratio to random's gain",
              "", "| strategy | " + " | ".join(RARE) + " |", "|---|" + "---:|" * len(RARE)]
    gains = {}
    for s in strategies:
        gains[s] = {}
        for slice_name in RARE:
            vals = np.array([[c[0]["value"][slice_name], c[-1]["value"][slice_name]] for c in results[s]])
            gains[s][slice_name] = float(np.median(vals[:, 1] - vals[:, 0]))
    for s in strategies:
        cells = []
        for slice_name in RARE:
            g, gr = gains[s][slice_name], gains["random"][slice_name]
            ratio = f"{g / gr:.2f}x" if gr > 1e-9 else ("n/a (random gained nothing)" if s != "random" else "1x")
            cells.append(f"{g:+.3f} ({ratio})")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict, strategies: list[str], path: Path, head: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["aggregate", *RARE]
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.4))
    for ax, key in zip(axes, keys):
        for s in strategies:
            labels, med, lo, hi = median_curve(results[s], key)
            ax.plot(labels, med, marker="o", label=s)
            ax.fill_between(labels, lo, hi, alpha=0.15)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("labels spent")
    axes[0].set_ylabel(f"{head} primary metric (candidate)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def run(args) -> None:
    from data_engine.config import EngineConfig
    from data_engine.loop import Loop, fleet_config
    from data_engine.suites import generate_suites
    from hydranet.config import load_config

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sets = [f"loop.budget={args.budget}", f"loop.fleet_set=[{','.join(SIZE)}]", f"retrain.steps={args.retrain_steps}",
            "loop.unit_tests=false", f"suites.clips={args.suite_clips}", f"gate.summary_head={args.head}"]
    t0 = time.time()
    suites = out / "suites"
    if not (suites / "suites.json").exists():
        base_cfg = load_config(EngineConfig, "engine", sets)
        generate_suites(suites, base_cfg.suites, fleet_config(base_cfg.loop), progress=False)
    results: dict[str, list] = {s: [] for s in args.strategies}
    timings = {}
    for seed in args.seeds:
        sdir = out / f"seed{seed}"
        base = fleet(sdir / "base", args.base_clips, 100 + seed, args.rare)
        prod = production(sdir / "production", base, args.prod_steps, seed)
        for r in range(args.rounds):
            fleet(sdir / "fleets" / f"r{r:03d}", args.fleet_clips, 10_000 * (seed + 1) + r, args.rare)
        for strategy in args.strategies:
            cfg = load_config(EngineConfig, "engine", sets + [f"loop.strategy={strategy}", f"mining.seed={seed}"])
            Loop(sdir / strategy, cfg, prod, progress=False, suites=suites, fleets=sdir / "fleets",
                 log=lambda line, s=strategy, sd=seed: print(f"[seed {sd} {s}] {line}", flush=True)).run(args.rounds)
            results[strategy].append(curve(sdir / strategy, args.rounds))
            timings[f"seed{seed}/{strategy}"] = loop_seconds(sdir / strategy)
    table = summarize(results, args.strategies)
    print(table)
    plot(results, args.strategies, out / "label_efficiency.png", args.head)
    plain_args = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    (out / "results.json").write_text(json.dumps({"args": plain_args, "curves": results, "seconds": timings,
                                                  "total_seconds": round(time.time() - t0, 1)}, indent=1))
    print(f"wrote {out / 'label_efficiency.png'} and {out / 'results.json'} in {time.time() - t0:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget", type=int, default=16)
    p.add_argument("--strategies", nargs="+", default=["random", "uncertainty", "hybrid", "triggers"])
    p.add_argument("--base-clips", type=int, default=8)
    p.add_argument("--fleet-clips", type=int, default=24)
    p.add_argument("--suite-clips", type=int, default=2)
    p.add_argument("--rare", type=float, default=0.04, help="probability per fleet clip of each rare scenario")
    p.add_argument("--prod-steps", type=int, default=300)
    p.add_argument("--retrain-steps", type=int, default=80)
    p.add_argument("--head", default="det2d", help="the head whose primary metric is the curve (gate.summary_head)")
    args = p.parse_args()
    if "random" not in args.strategies:
        p.error("--strategies must include random (the baseline)")
    run(args)


if __name__ == "__main__":
    main()
