"""Sim throughput: camera images per second rendered with every label channel (RGB, normals,
z-depth, semantic, instance) for the 6-camera rig, side by side with the time OpenCV needs to
decode the same images from JPEG (quality 95), for the old look (every `look` switch off,
antialias 1: box bodies, flat colours) and the default look (detailed meshes, procedural
textures, 4x MSAA colour, HDR sky/specular/glare/tone mapping, sun shadows, realistic sensor) in
one run. Run by hand, not in CI:

    .venv/bin/python benchmarks/sim_throughput.py [--frames 40] [--lens] [--split] [--generate [--workers 1 2]]

Prints one table; the last lines are the ratio render rate / JPEG decode rate and the cost of
the new look (old-look images/s / new-look images/s, with all labels). `--lens` measures instead
the cost of lens distortion (`sim/lens.py`): the tesla8 rig with its fisheye and barrel lenses
against the same rig with every lens removed (each camera its own pinhole), default look.
`--split` prints where a frame's time goes (default look, 6 cameras, 192x320 and 448x800): GL draw
(until `ctx.finish()`), read-back of every channel, label extraction (`sim.labels.frame_labels`)
and encoding + writing the frame's files (`sim.writer.DatasetWriter.write_frame`).
`--generate` times the real path, `sim.generate.generate_dataset` (simulate, render, labels, encode,
write to disk, process start-up included) at both sizes for each `--workers`, and decodes the JPEGs it
wrote for the ratio to JPEG decoding.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from sim.config import LookConfig, SimConfig
from sim.generate import dataset_meta, generate_dataset, sim_rig
from sim.labels import frame_labels
from sim.meshes import DynamicMesh, scene_lights, static_mesh
from sim.render import Renderer
from sim.scene import FRAME_DT, ego_pose, scene_lighting
from sim.world import World
from sim.writer import DatasetWriter
from hydranet.rig import Rig


OLD_LOOK = LookConfig(detailed_meshes=False, textures=False, antialias=1, hdr=False, shadows="off", glare="off",
                      sensor="gaussian")


def warm_renderer(cfg: SimConfig, rig: Rig, seed: int) -> tuple:
    """(world, renderer, dynamic mesh, lighting, exposures) of world `seed`, the renderer warmed up (shader JIT)."""
    world = World(cfg, seed)
    renderer = Renderer(rig, cfg.look)
    renderer.set_static(static_mesh(world))
    dynamic, lighting = DynamicMesh(world), scene_lighting(world, cfg)
    exposures = np.ones(len(rig))
    renderer.render(dynamic.build(), ego_pose(world), lighting, exposures, 0)
    return world, renderer, dynamic, lighting, exposures


def measure(width: int, height: int, frames: int, seed: int = 1, look: LookConfig | None = None,
            rig_name: str = "nuscenes6", lenses: bool = True) -> dict:
    cfg = SimConfig(rig=rig_name, image_width=width, image_height=height, look=look or LookConfig())
    rig = sim_rig(cfg)
    if not lenses:
        rig = Rig(rig.name, tuple(dataclasses.replace(c, distortion=None) for c in rig.cameras))
    world, renderer, dynamic, lighting, exposures = warm_renderer(cfg, rig, seed)
    render_s, label_s, jpegs = [], [], []
    for f in range(frames):
        world.step(FRAME_DT)
        t0 = time.perf_counter()
        lighting.lights = scene_lights(world)
        images = renderer.render(dynamic.build(), ego_pose(world), lighting, exposures, f)
        t1 = time.perf_counter()
        frame_labels(world, list(rig.cameras), images, ego_pose(world), cfg.label_range, cfg.bev_range, cfg.bev_resolution)
        t2 = time.perf_counter()
        render_s.append(t1 - t0)
        label_s.append(t2 - t1)
        jpegs += [cv2.imencode(".jpg", im.rgb, [cv2.IMWRITE_JPEG_QUALITY, 95])[1] for im in images]
    decode_s = []
    for buf in jpegs:
        t0 = time.perf_counter()
        cv2.imdecode(buf, cv2.IMREAD_COLOR)
        decode_s.append(time.perf_counter() - t0)
    n = len(rig)
    return {
        "size": f"{height}x{width}",
        "look": ("old" if look == OLD_LOOK else "new") + ("" if lenses else " pinholes"),
        "render": n / float(np.median(render_s)),
        "render_labels": n / float(np.median(np.add(render_s, label_s))),
        "decode": 1.0 / float(np.median(decode_s)),
    }


def split(width: int, height: int, frames: int, seed: int = 1) -> dict:
    """Median seconds per frame (6 cameras, default look) of draw, read-back, labels, encode + write."""
    cfg = SimConfig(image_width=width, image_height=height)
    rig = sim_rig(cfg)
    world, renderer, dynamic, lighting, exposures = warm_renderer(cfg, rig, seed)
    parts: dict[str, list[float]] = {"draw": [], "read": [], "labels": [], "write": []}
    with tempfile.TemporaryDirectory() as tmp, DatasetWriter(Path(tmp) / "ds", dataset_meta(cfg, rig, seed)) as writer:
        writer.write_scene({"name": "s", "seed": seed, "conditions": {}, "frames": [{"dir": f"{f:06d}"} for f in range(frames)]})
        for f in range(frames):
            world.step(FRAME_DT)
            t0 = time.perf_counter()
            lighting.lights = scene_lights(world)
            renderer.draw(dynamic.build(), ego_pose(world), lighting, exposures, f)
            renderer.ctx.finish()
            t1 = time.perf_counter()
            images = renderer.read()
            t2 = time.perf_counter()
            labels, bev = frame_labels(world, list(rig.cameras), images, ego_pose(world), cfg.label_range, cfg.bev_range,
                                       cfg.bev_resolution)
            t3 = time.perf_counter()
            writer.write_frame("s", {"dir": f"{f:06d}", "bev": bev, "labels": labels, "cameras": {
                c.name: {k: getattr(im, k) for k in ("rgb", "depth", "normal", "semantic", "instance")}
                for c, im in zip(rig.cameras, images)}})
            t4 = time.perf_counter()
            for k, a, b in (("draw", t0, t1), ("read", t1, t2), ("labels", t2, t3), ("write", t3, t4)):
                parts[k].append(b - a)
    renderer.ctx.release()
    return {"size": f"{height}x{width}", **{k: float(np.median(v)) for k, v in parts.items()}}


def generate_rate(width: int, height: int, scenes: int, frames: int, workers: int, seed: int = 1) -> dict:
    """Camera images/s of `generate_dataset` with every label written to disk, and the JPEG decode rate
    of the images it wrote (one image at a time, as a data loader worker decodes)."""
    cfg = SimConfig(image_width=width, image_height=height, frames_per_scene=frames)
    kw = {"workers": workers} if "workers" in inspect.signature(generate_dataset).parameters else {}
    if workers != 1 and not kw:
        raise SystemExit("this generate_dataset has no `workers` parameter")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        out = generate_dataset(Path(tmp) / "ds", cfg, scenes, seed, progress=False, **kw)
        seconds = time.perf_counter() - t0
        jpegs = [p.read_bytes() for p in sorted(out.rglob("*.jpg"))]
    decode_s = []
    for data in jpegs:
        buf = np.frombuffer(data, np.uint8)
        t0 = time.perf_counter()
        cv2.imdecode(buf, cv2.IMREAD_COLOR)
        decode_s.append(time.perf_counter() - t0)
    n = scenes * frames * len(sim_rig(cfg))
    assert n == len(jpegs), (n, len(jpegs))
    return {"size": f"{height}x{width}", "workers": workers, "seconds": seconds, "images": n, "rate": n / seconds,
            "decode": 1.0 / float(np.median(decode_s))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--lens", action="store_true", help="tesla8 with its lenses against the same rig of pinholes")
    ap.add_argument("--split", action="store_true", help="where a frame's time goes: draw, read-back, labels, write")
    ap.add_argument("--generate", action="store_true", help="images/s of generate_dataset, written to disk")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="with --generate: worker counts to time")
    ap.add_argument("--scenes", type=int, default=4, help="with --generate: scenes per run (frames: --frames)")
    args = ap.parse_args()
    if args.split:
        print(f"{'resolution':>10} | {'draw ms':>8} | {'read-back ms':>12} | {'labels ms':>9} | {'encode+write ms':>15} | "
              f"{'total ms':>8} | img/s")
        for w, h, n in ((320, 192, args.frames), (800, 448, max(args.frames // 2, 5))):
            r = split(w, h, n)
            total = r["draw"] + r["read"] + r["labels"] + r["write"]
            print(f"{r['size']:>10} | {r['draw'] * 1e3:>8.1f} | {r['read'] * 1e3:>12.1f} | {r['labels'] * 1e3:>9.1f} | "
                  f"{r['write'] * 1e3:>15.1f} | {total * 1e3:>8.1f} | {6 / total:.0f}")
        return
    if args.generate:
        print(f"cpus {os.cpu_count()}, LP_NUM_THREADS={os.environ.get('LP_NUM_THREADS', 'unset')}")
        print(f"{'resolution':>10} | workers | {'images':>6} | {'seconds':>7} | {'img/s (all labels, written)':>27} | "
              f"{'JPEG decode img/s':>17} | ratio")
        for w, h, frames in ((320, 192, args.frames), (800, 448, max(args.frames // 2, 2))):
            for workers in args.workers:
                r = generate_rate(w, h, args.scenes, frames, workers)
                print(f"{r['size']:>10} | {workers:>7} | {r['images']:>6} | {r['seconds']:>7.1f} | {r['rate']:>27.1f} | "
                      f"{r['decode']:>17.0f} | {r['rate'] / r['decode']:.4f}")
        return
    if args.lens:
        rows = [measure(320, 192, args.frames, rig_name="tesla8", lenses=False),
                measure(320, 192, args.frames, rig_name="tesla8")]
        for r in rows:
            print(f"tesla8 {r['size']} {r['look']:>12}: render+channels {r['render']:.0f} img/s, + all labels "
                  f"{r['render_labels']:.0f} img/s")
        print(f"lens cost (pinholes / lenses, with all labels): {rows[0]['render_labels'] / rows[1]['render_labels']:.2f}x")
        return
    rows = [measure(320, 192, args.frames, look=OLD_LOOK), measure(320, 192, args.frames),
            measure(800, 448, max(args.frames // 2, 5), look=OLD_LOOK), measure(800, 448, max(args.frames // 2, 5))]
    print(f"{'resolution':>10} | look | {'render+channels img/s':>21} | {'+ all labels img/s':>18} | {'JPEG decode img/s':>17} | ratio")
    for r in rows:
        print(f"{r['size']:>10} | {r['look']:>4} | {r['render']:>21.0f} | {r['render_labels']:>18.0f} | {r['decode']:>17.0f} | "
              f"{r['render'] / r['decode']:.2f}")
    print(f"ratio render/decode at 192x320 (new look): {rows[1]['render'] / rows[1]['decode']:.2f}")
    for a, b in ((rows[0], rows[1]), (rows[2], rows[3])):
        print(f"cost of the new look at {a['size']}: {a['render_labels'] / b['render_labels']:.2f}x (all labels)")


if __name__ == "__main__":
    main()
