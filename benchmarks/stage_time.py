"""Where a training stage's seconds go: the loader (its items and collation, timed in the training process with
num_workers 0) against the rest of each step (forward, backward, optimizer, logging), over the first and the
second half of the steps: in the first half the loader decodes most frames into the decoded-frame cache (the label
priors' fit decoded up to 32 of them before step 1), in the second it reads them there.

    python benchmarks/stage_time.py --data out/demo/sim --out /tmp/stage_time [--config full]
        [--init out/demo/run/trunk/checkpoint.pt | --trunk] [--steps 100] [--set KEY=VALUE ...] [--overwrite]

The demo's fused stage is `--config full --init <its trunk checkpoint>`, its trunk stage `--config full --trunk`
(`hydranet.curriculum.trunk_stage`: the camera heads on two cameras at twice the learning rate). Writes the run
under --out (refused when it exists, without --overwrite) and prints one line per half: seconds a step, of them
the loader's (and its share) and the rest.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import hydranet.loader as loader
from hydranet.curriculum import trunk_stage
from hydranet.experiment import load_experiment
from hydranet.train import train


def timed(cls, name: str, total: dict[str, float]) -> None:
    """Add the seconds spent in cls.name to total["loader"] (a benchmark's patch: this process only)."""
    inner = getattr(cls, name)

    def wrapper(self, *args):
        t = time.perf_counter()
        try:
            return inner(self, *args)
        finally:
            total["loader"] += time.perf_counter() - t

    setattr(cls, name, wrapper)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the training dataset (data.root)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", default="full")
    ap.add_argument("--init", default=None, help="checkpoint to start from (train --init)")
    ap.add_argument("--trunk", action="store_true", help="time the config's trunk stage (hydranet.curriculum.trunk_stage)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args(argv)
    if args.steps < 4:
        sys.exit("--steps must be at least 4 (two halves of two steps)")
    if args.trunk and args.init:
        sys.exit("--trunk trains the trunk stage from scratch; --init starts a run from a checkpoint: give one")
    if args.out.exists():
        if not args.overwrite:
            sys.exit(f"{args.out} exists; pass --overwrite to replace it")
        shutil.rmtree(args.out)
    sets = [f"data.root={args.data}", f"steps={args.steps}", "num_workers=0", *args.set]
    cfg = load_experiment(args.config, sets + ([f"init_from={args.init}"] if args.init else []))
    cfg = trunk_stage(cfg, args.steps) if args.trunk else cfg
    total = {"loader": 0.0}
    timed(loader.LabelledFrames, "__getitem__", total)
    timed(loader.Collate, "__call__", total)
    marks: dict[int, tuple[float, float]] = {}
    train(cfg, args.out / "run", progress=False,
          on_step=lambda step, losses: marks.__setitem__(step, (time.perf_counter(), total["loader"])))
    half = args.steps // 2
    for a, b in ((1, half), (half, args.steps)):
        (ta, la), (tb, lb) = marks[a], marks[b]
        n = b - a
        print(f"steps {a + 1}-{b}: {(tb - ta) / n:.3f} s a step: loader {(lb - la) / n:.3f} s "
              f"({(lb - la) / (tb - ta):.0%}), the rest {(tb - ta - lb + la) / n:.3f} s")


if __name__ == "__main__":
    main()
