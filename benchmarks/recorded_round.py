"""One loop round on a recorded fleet: wall time per stage of `hydranet engine run --fleets` over camera videos.
Run by hand, not in CI:

    .venv/bin/python benchmarks/recorded_round.py [--clips 20] [--frames 4] [--width 320 --height 192]
                                                  [--steps 100] [--budget 16] [--keep DIR]

Built in a temp folder under /tmp (deleted at the end unless --keep): a production model (configs/engine_tiny.yaml,
--steps steps on a sim fleet), the frozen sim suites, and the fleet the cars "recorded": --clips sim clips written
as H.264 camera videos (`hydranet sim export-videos`) and ingested (`engine ingest --source video`), read in place
through PyAV. The round runs with `loop.labeller=files`: it sends the mined frames as COCO/CVAT and stops; a
simulated labelling team answers with the sim's truth of those frames (`team_labels`, what the tests do too) and
the same command resumes. The table gives each stage's seconds from the loop's journal, the ingest's wall time,
and the time the round waited for nobody (the team is instant here).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETS = ["loop.workers=1", "retrain.steps=20", "suites.clips=1", "suites.frames=2", "loop.labeller=files"]


def team_labels(run: Path, truth: Path, selection: str = "round000", round_dir: str = "r000") -> Path:
    """What a labelling team sends back for a files-labelled round: the COCO export's images labelled with the truth
    of the sim dataset `truth` the recordings were written from (its clip and frame folders match the fleet's)."""
    from data_engine.label_queue import load_jobs
    from data_engine.labeling.base import Vocabulary
    from data_engine.labeling.files import image_entries, write_coco
    from data_engine.labels import open_catalog

    with open_catalog(run / "catalog.sqlite") as cat:
        jobs = load_jobs(cat, selection, ("sent",))
    payloads = {j.id: json.loads((truth / "scenes" / j.clip / j.dir / "labels.json").read_text()) for j in jobs}
    inbox = run / "rounds" / round_dir / "labels" / "import"
    return write_coco(inbox / "team.coco.json", image_entries(jobs, payloads), Vocabulary.from_dataset(jobs[0].root), "team")


def cli(args: list[str]) -> int:
    """`hydranet ARGS` in its own process, as a user runs it (benchmarks never import the application)."""
    return subprocess.run([sys.executable, "-m", "hydranet.cli", *args]).returncode


def main(argv=None) -> None:
    from data_engine.config import EngineConfig
    from data_engine.loop import STAGES, fleet_config
    from data_engine.suites import generate_suites
    from hydranet.config import load_config
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=20)
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--height", type=int, default=192)
    ap.add_argument("--steps", type=int, default=100, help="production training steps")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--keep", type=Path, default=None, help="build here and keep it (a new folder)")
    args = ap.parse_args(argv)
    if args.keep is not None and args.keep.exists():
        raise SystemExit(f"error: --keep {args.keep} exists; choose a new folder")
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="recorded_round_", dir="/tmp"))
    size = [f"sim.image_width={args.width}", f"sim.image_height={args.height}"]
    sets = [*SETS, f"loop.budget={args.budget}",
            f"loop.fleet_set=[{','.join(size)},sim.frames_per_scene={args.frames}]"]
    try:
        t0 = time.perf_counter()
        fleet_args = ["--quiet", "--set", f"sim.frames_per_scene={args.frames}", *[a for s in size for a in ("--set", s)]]
        assert cli(["engine", "fleet", "--out", str(tmp / "base"), "--clips", "4", "--seed", "1", *fleet_args]) == 0
        train(load_experiment("configs/engine_tiny.yaml", [f"data.root={tmp / 'base'}", f"steps={args.steps}",
                                                           f"checkpoint_every={args.steps}", "device=cpu"]),
              tmp / "production", progress=False)
        cfg = load_config(EngineConfig, "engine", sets)
        generate_suites(tmp / "suites", cfg.suites, fleet_config(cfg.loop), progress=False)
        assert cli(["engine", "fleet", "--out", str(tmp / "drive"), "--clips", str(args.clips), "--seed", "77",
                    *fleet_args]) == 0
        assert cli(["sim", "export-videos", "--data", str(tmp / "drive"), "--out", str(tmp / "videos")]) == 0
        setup_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        assert cli(["engine", "ingest", "--quiet", "--out", str(tmp / "fleets" / "r000"), "--source", "video", "--videos",
                    str(tmp / "videos"), "--rig", str(tmp / "videos" / "rig.yaml")]) == 0
        ingest_s = time.perf_counter() - t0
        run = ["engine", "run", "--out", str(tmp / "run"), "--production", str(tmp / "production"), "--suites",
               str(tmp / "suites"), "--fleets", str(tmp / "fleets"), "--quiet", *[a for s in sets for a in ("--set", s)]]
        t0 = time.perf_counter()
        assert cli(run) == 3, "the round should stop and wait for the team's labels (`engine run` exits 3)"
        first_s = time.perf_counter() - t0
        team_labels(tmp / "run", tmp / "drive")
        t0 = time.perf_counter()
        assert cli(run) == 0
        second_s = time.perf_counter() - t0
        done = json.loads((tmp / "run" / "loop.json").read_text())["rounds"][0]["done"]
        frames = done["shadow"]["frames"]
        print(f"\nrecorded round: {args.clips} clips x {args.frames} frames = {frames} frames of 6 cameras at "
              f"{args.width}x{args.height} (H.264 videos read in place), budget {args.budget}, retrain "
              f"{cfg.retrain.steps} steps; set-up (production {args.steps} steps, suites, rendering, videos) "
              f"{setup_s:.0f} s\n")
        print("| stage | seconds |\n|---|---:|")
        print(f"| ingest (engine ingest --source video) | {ingest_s:.1f} |")
        for stage in STAGES:
            extra = f" ({frames / done[stage]['seconds']:.1f} frames/s)" if stage == "shadow" and done[stage]["seconds"] else ""
            print(f"| {stage}{extra} | {done[stage]['seconds']:.1f} |")
        total = ingest_s + sum(done[s]["seconds"] for s in STAGES)
        print(f"| **all stages + ingest** | **{total:.1f}** |")
        print(f"\ncommand wall time: {first_s:.1f} s up to the wait for labels, {second_s:.1f} s after the team's file "
              f"(process start-up, suites' digests and the journal included); "
              f"{done['label']['accepted']} labels accepted; gate: "
              f"{'promoted' if done['gate']['promote'] else 'rejected ' + ', '.join(done['gate']['failing'])}")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
