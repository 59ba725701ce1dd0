"""The gate's discrimination: a candidate trained without night clips is rejected, a better one is promoted.

    python benchmarks/gate_discrimination.py --out out/bench_gate [--suites DIR] [--clips 16] [--steps 300]
        [--seed 0] [--night 0.4] [--production-cache DIR] [--engine-set retrain.lr=1e-4 ...]

A controlled ablation on one set of worlds. Two fleets share --clips clips of the same seed, so the
same scenes, traffic, weather, rare scenarios and labels: "mixed" draws the time of day with night at
--night (dusk 0.1, day the rest), "day" draws every clip by day. Both leave out the one rare scenario
that forces night (night_pedestrian_crossing; its rate is 0, which keeps every other draw the same).
Three models of configs/engine_tiny.yaml:

- production: --steps steps on the mixed fleet;
- no_night (the damaged candidate): the same run (same seed, same batches, same labels) on the day
  fleet, so the only difference from production is that it never saw a night image;
- longer (the better candidate): production fine-tuned --steps more steps on the mixed fleet.

Each candidate goes through `data_engine.gate.gate` against production on the frozen suites
(configs/engine.yaml's suites and rule; --suites reuses a folder from benchmarks/label_efficiency.py run the
same way: its 96x64 suites, or its 160x96 ones with --production-cache). Expected: no_night rejected with the
night slices among the failing ones, longer promoted.

With --production-cache DIR the production is the 60-CPU-minute recipe's model (benchmarks/production_cache.py:
configs/full.yaml, six cameras, trained once and cached under its recipe's hash) and both candidates are fine-tuned
from it for --steps steps on their fleet alone (no base set mixed in, unlike the loop's retrain: retrain.steps and
retrain.mix are not read) with configs/engine.yaml's retrain.lr and retrain.norm_eval (--engine-set overrides
engine.yaml's keys): no_night on the day fleet (it forgets the night it was trained on), longer on the mixed fleet.
Fleets and suites are then rendered at fleet.yaml's 160x96, the model's input size (its BEV view transform is bound
to that calibration). Fleets and trained candidates found in --out are reused as they are: change the arguments,
change --out. The gate decides each row on its paired-bootstrap interval over the suite's clips
(data_engine/gate.py, issue 25). Prints both gate tables and a summary; writes results.json (verdicts,
failing rows with their delta intervals, each head's aggregate gain and interval) and each gate's
gate.json/gate.md under --out. Trained models and suite metrics are reused when present, so a rerun
after a change to the rule only gates again.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SIZE = ["sim.image_width=96", "sim.image_height=64"]  # the fleet render size of benchmarks/label_efficiency.py
NIGHT_SLICES = ("night", "night_pedestrian_crossing")


def fleet(out: Path, clips: int, seed: int, night: float, size: list[str]) -> Path:
    """A fleet whose clips are drawn with night at `night` (0: every clip by day), rendered at `size`."""
    from data_engine.fleet import FleetConfig, generate_fleet
    from hydranet.config import load_config

    if not (out / "dataset.json").exists():
        weights = [1.0, 0.0, 0.0] if night == 0 else [round(0.9 - night, 6), 0.1, night]
        cfg = load_config(FleetConfig, "fleet", size + [f"time_of_day_weights=[{','.join(map(str, weights))}]",
                                                         "rare.night_pedestrian_crossing=0"])
        generate_fleet(out, cfg, clips, seed, progress=False)
    return out


def night_clips(root: Path) -> int:
    truth = json.loads((root / "truth" / "scenarios.json").read_text())["clips"]
    return sum(c["time_of_day"] == "night" for c in truth.values())


def train_model(out: Path, data: Path, steps: int, seed: int, init_from: Path | None = None) -> Path:
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    if not (out / "checkpoint.pt").exists():
        sets = [f"data.root={data}", f"steps={steps}", f"checkpoint_every={steps}", "device=cpu", f"seed={seed}"]
        train(load_experiment("configs/engine_tiny.yaml", sets), out, progress=False, overwrite=out.exists(),
              init_from=init_from)
    return out


def fine_tune(out: Path, production: Path, data: Path, steps: int, seed: int, rc) -> Path:
    """`production` (a run folder) trained `steps` more steps on `data` alone with RetrainConfig `rc`'s peak rate
    (None: its own) and norm_eval, its own config otherwise (optimizer and schedule fresh, as data_engine/retrain.py)."""
    from hydranet.checkpoint import config_from_checkpoint, load_checkpoint
    from hydranet.train import train

    if not (out / "checkpoint.pt").exists():
        cfg = config_from_checkpoint(load_checkpoint(production), [
            f"data.root={data}", "data.val_root=null", f"steps={steps}", f"checkpoint_every={steps}", "device=cpu",
            f"seed={seed}", "num_workers=0", f"init_from={production}", f"norm_eval={str(rc.norm_eval).lower()}"]
            + ([f"optim.lr={rc.lr}"] if rc.lr is not None else []))
        train(cfg, out, progress=False, overwrite=out.exists())
    return out


def run(args) -> dict:
    from data_engine.config import EngineConfig
    from data_engine.gate import format_gate, gate, write_gate
    from data_engine.loop import fleet_config
    from data_engine.suites import generate_suites
    from hydranet.config import load_config

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size = [] if args.production else SIZE
    cfg = load_config(EngineConfig, "engine", [f"loop.fleet_set=[{','.join(size)}]", f"suites.clips={args.suite_clips}",
                                               *args.engine_set])
    suites = Path(args.suites) if args.suites else out / "suites"
    if not (suites / "suites.json").exists():
        generate_suites(suites, cfg.suites, fleet_config(cfg.loop), progress=False)
    t0 = time.time()
    mixed = fleet(out / "fleet_mixed", args.clips, args.fleet_seed, args.night, size)
    day = fleet(out / "fleet_day", args.clips, args.fleet_seed, 0.0, size)
    if night_clips(day):
        raise SystemExit(f"{day} has {night_clips(day)} night clips; the ablation needs none: remove the folder and rerun")
    seconds = {}
    runs = {}
    if args.production:
        runs["production"] = Path(args.production) / "run"
        for name, data in (("no_night", day), ("longer", mixed)):
            t = time.time()
            runs[name] = fine_tune(out / name, runs["production"], data, args.steps, args.seed, cfg.retrain)
            seconds[name] = round(time.time() - t, 1)
    for name, data, init in (("production", mixed, None), ("no_night", day, None), ("longer", mixed, "production")):
        if name in runs:
            continue
        t = time.time()
        runs[name] = train_model(out / name, data, args.steps, args.seed, runs.get(init))
        seconds[name] = round(time.time() - t, 1)
    results = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
               "night_clips": {"mixed": night_clips(mixed), "day": night_clips(day)}, "train_seconds": seconds, "gates": {}}
    for name, expect in (("no_night", "reject"), ("longer", "promote")):
        report = gate(runs[name], runs["production"], suites, cfg.gate)
        write_gate(report, out / f"gate_{name}")
        verdict = "promote" if report["promote"] else "reject"
        results["gates"][name] = {"verdict": verdict, "expected": expect, "failing": report["failing"],
                                  "night_failed": [s for s in NIGHT_SLICES if s in report["failing"]],
                                  "failing_rows": [{k: r.get(k) for k in ("slice", "head", "delta", "delta_ci", "reason")}
                                                   for r in report["rows"] if r["verdict"] == "fail"],
                                  "aggregate": {r["head"]: {"gain": r["gain"], "gain_ci": r.get("gain_ci")}
                                                for r in report["rows"] if r["slice"] == "aggregate"},
                                  "rows_with_interval": sum(r.get("delta_ci") is not None for r in report["rows"])}
        print(f"## {name} vs production (expected: {expect})\n\n{format_gate(report)}\n", flush=True)
    results["total_seconds"] = round(time.time() - t0, 1)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    for name, g in results["gates"].items():
        ok = "as expected" if g["verdict"] == g["expected"] else "NOT as expected"
        print(f"{name}: {g['verdict']} ({ok}); failing: {', '.join(g['failing']) or 'none'}")
    print(f"night clips: mixed {results['night_clips']['mixed']}/{args.clips}, day {results['night_clips']['day']}/{args.clips}; "
          f"wrote {out / 'results.json'} in {results['total_seconds']:.0f} s")
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--suites", type=Path, default=None, help="an existing suites folder (default: generate under --out)")
    p.add_argument("--suite-clips", type=int, default=2)
    p.add_argument("--clips", type=int, default=16)
    p.add_argument("--fleet-seed", type=int, default=300)
    p.add_argument("--night", type=float, default=0.4, help="share of night clips in the mixed fleet, in (0, 0.9]")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--production-cache", type=Path, default=None,
                   help="the production is the 60-CPU-minute model cached here (benchmarks/production_cache.py; trained "
                        "first if absent), both candidates fine-tuned from it")
    p.add_argument("--engine-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="configs/engine.yaml overrides, e.g. retrain.lr=1e-4 retrain.norm_eval=false (the fine-tunes' of "
                        "--production-cache; the gate's rule)")
    args = p.parse_args()
    if not 0 < args.night <= 0.9:
        p.error(f"--night must be in (0, 0.9], got {args.night}")
    args.production = None
    if args.production_cache is not None:
        from production_cache import RECIPE_60MIN, production, recipe  # benchmarks/, this script's folder

        args.production = str(production(args.production_cache, recipe(**RECIPE_60MIN)).resolve())
    run(args)


if __name__ == "__main__":
    main()
