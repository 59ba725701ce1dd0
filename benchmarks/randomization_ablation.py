"""Domain randomization, one knob at a time, measured on the realism-gap table (issue 32 item 2).

    python benchmarks/demo_seeds.py --seeds 3 --jobs 2 --out out/seeds_final                        # the recipe
    python benchmarks/demo_seeds.py --seeds 3 --jobs 2 --out out/seeds_shadows --sim-set look.shadows=on
    python benchmarks/randomization_ablation.py --arm recipe=out/seeds_final --arm shadows=out/seeds_shadows \
        --kitti /work/genuine/kitti --cityscapes /work/genuine/cityscapes [--culane /work/genuine/culane] \
        --out out/bench_randomization

Each arm is a `demo_seeds.py` folder: the demo's recipe trained on scenes of one sim look (`--sim-set` changes the
training scenes only; the held-out scenes are the demo's, `<first arm>/data/sim_val`). Every seed's run is scored
by benchmarks/realism_gap.py (the same heads and bootstrap; written under OUT/<arm>/seed<S>/, reused when there)
on the sim's held-out scenes and the genuine sources given. The table: per arm and cell the median [min, max] over
training seeds, and each arm's median minus the first arm's. With few genuine labelled frames a cell's own interval
(in each seed's realism_gap.md) is wide: a knob is said to close the gap only where every seed of its arm is above
every seed of the first arm. Writes OUT/randomization_ablation.md and .json; nothing outside OUT.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from hydranet.experiment import FITS

CELLS = (("sim CAM_FRONT", "det2d/car AP50"), ("sim CAM_FRONT", "drivable/iou"), ("kitti", "det2d/car AP50"),
         ("kitti", "det2d/mAP50"), ("kitti", "det2d/KITTI car AP|R40 moderate @0.7"),
         *(("kitti", f"det2d/KITTI car AP|R40 {d} @0.5") for d in ("easy", "moderate", "hard")),
         ("cityscapes", "det2d/car AP50"), ("cityscapes", "drivable/iou"),
         ("sim CAM_FRONT", "lanes/pixel_iou"), ("culane", "lanes/pixel_iou"), ("culane", "lanes/f1"))


def seed_tables(arm: Path, out: Path, val: Path, genuine: dict[str, Path], fit: str | None = None) -> list[dict]:
    """realism_gap.json of every seed run of `arm` (computed into `out` when absent; `fit`: realism_gap --fit)."""
    import realism_gap  # benchmarks/, this script's folder (sys.path[0] when run as a script)

    runs = sorted(p for p in arm.glob("seed*") if (p / "run" / "checkpoint.pt").is_file())
    if not runs:
        raise SystemExit(f"error: {arm} has no seed*/run/checkpoint.pt; run benchmarks/demo_seeds.py --out {arm}")
    tables = []
    for run in runs:
        folder = out / run.name
        if not (folder / "realism_gap.json").is_file():
            realism_gap.check_out(folder, overwrite=True)
            realism_gap.run(run / "run", folder, {"sim": val, **genuine}, progress=False, fit=fit)
        tables.append(json.loads((folder / "realism_gap.json").read_text()))
    return tables


def cell(tables: list[dict], source: str, key: str) -> list[float]:
    return [v for t in tables if (v := (t["cells"].get(source, {}).get(key) or {}).get("value")) is not None]


def table(arms: dict[str, list[dict]]) -> tuple[str, dict]:
    first = next(iter(arms))
    columns = list(arms) + [f"{a} - {first}" for a in list(arms)[1:]]
    lines = ["| source | metric | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    out: dict = {}
    for source, key in CELLS:
        vals = {a: cell(t, source, key) for a, t in arms.items()}
        if not any(vals.values()):
            continue
        med = {a: statistics.median(v) if v else None for a, v in vals.items()}
        text = [f"{med[a]:.3f} [{min(v):.3f}, {max(v):.3f}]" if v else "n/a" for a, v in vals.items()]
        diff = []
        for a in list(arms)[1:]:
            if med[a] is None or med[first] is None:
                diff.append("n/a")
                continue
            apart = min(vals[a]) > max(vals[first]) or max(vals[a]) < min(vals[first])
            diff.append(f"{med[a] - med[first]:+.3f}" + (" (every seed apart)" if apart else ""))
        lines.append(f"| {source} | {key} | " + " | ".join(text + diff) + " |")
        out[f"{source}: {key}"] = vals
    return "\n".join(lines), out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arm", action="append", required=True, metavar="NAME=DIR", help="a demo_seeds.py folder; first: the reference")
    ap.add_argument("--kitti", type=Path, default=None)
    ap.add_argument("--cityscapes", type=Path, default=None)
    ap.add_argument("--culane", type=Path, default=None)
    ap.add_argument("--fit", choices=FITS, default=None,
                    help="how the genuine frames reach the models' input size (realism_gap.py --fit)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    arms = dict(item.split("=", 1) for item in a.arm)
    genuine = {k: v for k, v in (("kitti", a.kitti), ("cityscapes", a.cityscapes), ("culane", a.culane)) if v is not None}
    val = Path(next(iter(arms.values()))) / "data" / "sim_val"
    tables = {name: seed_tables(Path(d), a.out / name, val, genuine, a.fit) for name, d in arms.items()}
    text, figures = table(tables)
    head = f"median [min, max] over training seeds ({', '.join(f'{n}: {len(t)}' for n, t in tables.items())})\n\n"
    (a.out / "randomization_ablation.md").write_text(head + text + "\n")
    (a.out / "randomization_ablation.json").write_text(json.dumps({"arms": arms, "cells": figures}, indent=1))
    print(head + text)
    return figures


if __name__ == "__main__":
    main()
