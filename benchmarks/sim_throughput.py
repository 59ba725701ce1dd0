"""Sim throughput: camera images per second rendered with every label channel (RGB, normals,
z-depth, semantic, instance) for the 6-camera rig, side by side with the time OpenCV needs to
decode the same images from JPEG (quality 95), for the old look (every `look` switch off,
antialias 1: box bodies, flat colours) and the default look (detailed meshes, procedural
textures, 4x MSAA colour, HDR sky/specular/glare/tone mapping, sun shadows, realistic sensor) in
one run. Run by hand, not in CI:

    .venv/bin/python benchmarks/sim_throughput.py [--frames 40] [--lens]

Prints one table; the last lines are the ratio render rate / JPEG decode rate and the cost of
the new look (old-look images/s / new-look images/s, with all labels). `--lens` measures instead
the cost of lens distortion (`sim/lens.py`): the tesla8 rig with its fisheye and barrel lenses
against the same rig with every lens removed (each camera its own pinhole), default look.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import cv2
import numpy as np

from sim.config import LookConfig, SimConfig
from sim.generate import sim_rig
from sim.labels import frame_labels
from sim.meshes import DynamicMesh, scene_lights, static_mesh
from sim.render import Renderer
from sim.scene import FRAME_DT, ego_pose, scene_lighting
from sim.world import World
from hydranet.rig import Rig


OLD_LOOK = LookConfig(detailed_meshes=False, textures=False, antialias=1, hdr=False, shadows="off", glare="off",
                      sensor="gaussian")


def measure(width: int, height: int, frames: int, seed: int = 1, look: LookConfig | None = None,
            rig_name: str = "nuscenes6", lenses: bool = True) -> dict:
    cfg = SimConfig(rig=rig_name, image_width=width, image_height=height, look=look or LookConfig())
    rig = sim_rig(cfg)
    if not lenses:
        rig = Rig(rig.name, tuple(dataclasses.replace(c, distortion=None) for c in rig.cameras))
    world = World(cfg, seed)
    renderer = Renderer(rig, cfg.look)
    renderer.set_static(static_mesh(world))
    dynamic, lighting = DynamicMesh(world), scene_lighting(world, cfg)
    exposures = np.ones(len(rig))
    renderer.render(dynamic.build(), ego_pose(world), lighting, exposures, 0)  # warm-up (shader JIT)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--lens", action="store_true", help="tesla8 with its lenses against the same rig of pinholes")
    args = ap.parse_args()
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
