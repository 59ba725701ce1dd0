"""Ingest and decode of recorded fleets: frames per second of reading one camera's frames in order from an MP4
(PyAV, `engine ingest --source video`) against the same frames as JPEG files (`--source images`, the one image
decoder), both through `data_engine.fleet`; plus the ingest itself (the video decoded once to index it).
Run by hand, not in CI:

    .venv/bin/python benchmarks/ingest_decode.py [--frames 40] [--width 1600] [--height 900] [--repeats 3]

The frames are sim renders (one camera of the nuscenes6 rig at --width x --height, --frames frames of one
scene) written as JPEG (OpenCV's default quality 95) and as MP4 (OpenCV's mp4v writer); a temp folder under
/tmp is deleted at the end. Each path is timed --repeats times alternately; the table gives the median and
the ratio JPEG frames/s / MP4 frames/s.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def run(args) -> None:
    import cv2
    import yaml

    from data_engine.fleet import Fleet
    from data_engine.ingest import ingest
    from hydranet.config import load_config
    from sim.config import SimConfig
    from sim.generate import generate_dataset

    tmp = Path(tempfile.mkdtemp(prefix="ingest_decode_", dir="/tmp"))
    try:
        sim = tmp / "sim"
        generate_dataset(sim, load_config(SimConfig, None, [f"frames_per_scene={args.frames}", f"image_width={args.width}",
                                                             f"image_height={args.height}", "rig=nuscenes6"]), 1, 0,
                         progress=False)
        import json

        meta = json.loads((sim / "dataset.json").read_text())
        cam = meta["rig"]["cameras"][0]
        rig = dict(meta["rig"], cameras=[cam])
        (tmp / "rig.yaml").write_text(yaml.safe_dump(rig, sort_keys=False))
        scene = meta["scenes"][0]["name"]
        frames = json.loads((sim / "scenes" / scene / "scene.json").read_text())["frames"]
        (tmp / "videos" / "drive").mkdir(parents=True)
        (tmp / "images" / "drive" / cam["name"]).mkdir(parents=True)
        writer = cv2.VideoWriter(str(tmp / "videos" / "drive" / f"{cam['name']}.mp4"), cv2.VideoWriter_fourcc(*"mp4v"),
                                 10.0, (args.width, args.height))
        for k, f in enumerate(frames):
            src = sim / "scenes" / scene / f["dir"] / f"{cam['name']}.jpg"
            writer.write(cv2.imread(str(src)))
            shutil.copyfile(src, tmp / "images" / "drive" / cam["name"] / f"{100_000 * k}.jpg")
        writer.release()
        mp4_mb = (tmp / "videos" / "drive" / f"{cam['name']}.mp4").stat().st_size / 1e6
        jpg_mb = sum(p.stat().st_size for p in (tmp / "images").rglob("*.jpg")) / 1e6

        t_ingest = {"video": [], "images": []}
        t_read = {"video": [], "images": []}
        for r in range(args.repeats):
            for kind in ("video", "images"):
                out = tmp / f"fleet_{kind}_{r}"
                t0 = time.perf_counter()
                if kind == "video":
                    ingest(out, "video", videos=tmp / "videos", rig=tmp / "rig.yaml")
                else:
                    ingest(out, "images", root=tmp / "images", rig=tmp / "rig.yaml")
                t_ingest[kind].append(time.perf_counter() - t0)
                fl = Fleet(out)
                clip = fl.clip("drive")
                t0 = time.perf_counter()
                for f in clip.frames:
                    fl.read("drive", f["dir"], [cam["name"]])
                t_read[kind].append(len(clip.frames) / (time.perf_counter() - t0))
        med = {k: statistics.median(v) for k, v in t_read.items()}
        ing = {k: statistics.median(v) for k, v in t_ingest.items()}
        print(f"{args.frames} frames of {cam['name']} at {args.width}x{args.height}; MP4 (mp4v) {mp4_mb:.1f} MB, "
              f"JPEG {jpg_mb:.1f} MB; {args.repeats} repeats (medians)")
        print("| source | ingest s | ingest frames/s | read frames/s | each repeat (frames/s) |")
        print("|---|---:|---:|---:|---|")
        for k in ("video", "images"):
            print(f"| {'MP4 (PyAV)' if k == 'video' else 'JPEG files'} | {ing[k]:.2f} | {args.frames / ing[k]:.0f} | "
                  f"{med[k]:.1f} | {', '.join(f'{v:.1f}' for v in t_read[k])} |")
        print(f"read: JPEG / MP4 = {med['images'] / med['video']:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--width", type=int, default=1600)
    p.add_argument("--height", type=int, default=900)
    p.add_argument("--repeats", type=int, default=3)
    run(p.parse_args())
