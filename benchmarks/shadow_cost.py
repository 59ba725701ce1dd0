"""Shadow-mode cost: frames/s of `run_shadow` (runtime + every signal + predictions + catalog writes,
one clip per transaction) against plain `HydraRuntime.step` inference over the same frames in the same
order (JPEG reading included in both). Run by hand, not in CI:

    .venv/bin/python benchmarks/shadow_cost.py [--clips 8] [--frames 4] [--steps 30] [--repeats 3] [--profile]
                                               [--width 1600 --height 900]

A fleet (configs/fleet.yaml, --clips clips of --frames frames) and configs/engine_tiny.yaml trained
--steps steps on it and exported are built in a temp folder under /tmp (deleted at the end). Both
paths run in one process on one ONNX Runtime session (the same cached session, 1 worker), plain and
shadow alternating --repeats times; the table gives each repeat and the median, and the ratio
plain frames/s / shadow frames/s (target: shadow costs at most 1.25x). --profile adds a cProfile of
one shadow run (the 15 functions with the most cumulative time).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def run(args) -> None:
    from data_engine.fleet import Fleet, read_frame
    from data_engine.shadow import load_runtime, run_shadow
    from deploy.export import export_checkpoint
    from data_engine.fleet import FleetConfig, generate_fleet
    from hydranet.config import load_config
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    tmp = Path(tempfile.mkdtemp(prefix="shadow_cost_", dir="/tmp"))
    try:
        fleet = tmp / "fleet"
        size = [f"sim.image_width={args.width}", f"sim.image_height={args.height}"] if args.width else []
        generate_fleet(fleet, load_config(FleetConfig, "fleet", [f"sim.frames_per_scene={args.frames}", *size]), args.clips,
                       0, progress=False)
        cfg = load_experiment("configs/engine_tiny.yaml", [f"data.root={fleet}", f"steps={args.steps}",
                                                            f"checkpoint_every={args.steps}", "device=cpu", "num_workers=0"])
        train(cfg, tmp / "run", progress=False)
        model = (tmp / "model.onnx").resolve()
        export_checkpoint(tmp / "run", model, fleet, frames=2, verbose=False)

        fl = Fleet(fleet)
        clips = [fl.clip(name) for name in fl.clip_names]
        n = sum(len(c.frames) for c in clips)
        rt = load_runtime(str(model))  # the session run_shadow uses too (cached per process)
        cams = rt.camera_names

        def plain() -> None:
            for c in clips:
                rt.reset()
                for f in c.frames:
                    rt.step(read_frame(fl.root, c.name, f["dir"], cams), ego2world=f["ego2world"])

        def shadow(k: int) -> None:
            st = run_shadow(model, fleet, tmp / f"catalog_{k}.db", workers=1, progress=False)
            assert st["frames"] == n and st["done_before"] == 0

        plain()  # warm-up: caches, allocator, session
        rows = []
        for k in range(args.repeats):
            t0 = time.perf_counter()
            plain()
            t_plain = time.perf_counter() - t0
            t0 = time.perf_counter()
            shadow(k)
            t_shadow = time.perf_counter() - t0
            rows.append((n / t_plain, n / t_shadow))
        prof_text = ""
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            shadow(args.repeats)
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(15)
            prof_text = buf.getvalue()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    H, W = rt.image_size
    src = f"{args.width}x{args.height}" if args.width else "the fleet config's size"
    print(f"# shadow-mode cost: {args.clips} clips x {args.frames} frames = {n} frames, {len(cams)} cameras at {src}, "
          f"model engine_tiny {W}x{H} ({args.steps} steps), 1 process\n")
    print("| repeat | plain runtime frames/s | shadow frames/s | shadow cost (plain / shadow) |\n|---|---:|---:|---:|")
    for k, (p, s) in enumerate(rows):
        print(f"| {k} | {p:.1f} | {s:.1f} | {p / s:.2f}x |")
    p_med, s_med = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    ratio = statistics.median(p / s for p, s in rows)
    print(f"| median | {p_med:.1f} | {s_med:.1f} | {ratio:.2f}x |")
    print(f"\nshadow cost {ratio:.2f}x plain inference (target <= 1.25x: {'met' if ratio <= 1.25 else 'MISSED'})")
    if prof_text:
        print("\n" + prof_text)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30, help="training steps of the model (its outputs drive the signals)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--width", type=int, default=0, help="camera image width of the fleet (e.g. 1600; 0: configs/fleet.yaml)")
    ap.add_argument("--height", type=int, default=0, help="camera image height of the fleet (e.g. 900)")
    run(ap.parse_args())
