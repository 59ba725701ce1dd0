"""docs/sim_gallery.png: one row per condition (day, dusk, night, rain, fog, a rare scenario,
the tesla8 rig by day with its fisheye and barrel lenses and at night in rain), each the rig's
cameras side by side at frame 3.

    .venv/bin/python -m sim.gallery --out docs/sim_gallery.png [--width 176 --height 104 --seed 4]
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import cv2
import numpy as np

from sim.config import ConditionsConfig, RareConfig, SimConfig
from sim.generate import render_frames

ROWS = (  # (label, rig, time of day, weather, rare scenario or "")
    ("day", "nuscenes6", "day", "clear", ""),
    ("dusk", "nuscenes6", "dusk", "clear", ""),
    ("night", "nuscenes6", "night", "clear", ""),
    ("rain", "nuscenes6", "day", "rain", ""),
    ("fog", "nuscenes6", "dusk", "fog", ""),
    ("rare: cones on road", "nuscenes6", "day", "clear", "cones_on_road"),
    ("tesla8: fisheye wide + rear, barrel pillars + repeaters", "tesla8", "day", "clear", ""),
    ("tesla8, night rain", "tesla8", "night", "rain", ""),
)


def row_image(rig_name: str, tod: str, weather: str, rare: str, width: int, height: int, seed: int, frame: int = 3) -> np.ndarray:
    rare_cfg = RareConfig(**{k: (1.0 if k == rare else 0.0) for k in ("cones_on_road", "debris_on_road",
                                                                     "night_pedestrian_crossing", "unusual_vehicle")})
    cfg = SimConfig(rig=rig_name, image_width=width, image_height=height, frames_per_scene=frame + 1, rare=rare_cfg,
                    conditions=replace(ConditionsConfig(), time_of_day=(tod,), time_of_day_weights=(1.0,),
                                       weather=(weather,), weather_weights=(1.0,)))
    frames = render_frames(cfg, seed)
    return np.concatenate([im.rgb for im in frames[-1]["images"]], 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="docs/sim_gallery.png")
    ap.add_argument("--width", type=int, default=176)
    ap.add_argument("--height", type=int, default=104)
    ap.add_argument("--seed", type=int, default=4)
    args = ap.parse_args()
    rows = []
    for i, (label, rig, tod, weather, rare) in enumerate(ROWS):
        img = row_image(rig, tod, weather, rare, args.width, args.height, args.seed + i)
        cv2.putText(img, label, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (255, 255, 255), 1, cv2.LINE_AA)
        rows.append(img)
    W = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 2), (0, W - r.shape[1]), (0, 0))) for r in rows]
    cv2.imwrite(args.out, cv2.cvtColor(np.concatenate(rows, 0), cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
