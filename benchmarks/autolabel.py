"""What hindsight buys the auto-labeller: det2d AP50 of its labels against the sim's truth, hindsight vs frame by frame.

    python benchmarks/autolabel.py --models A.onnx [B.onnx ...] --out out/bench_autolabel [--fleet FLEET]
        [--clips 8] [--fleet-seed 900] [--resamples 1000] [--set autolabel.min_score=0.05 ...]

The fleet is a sim fleet with its labels (--fleet, else --clips clips of configs/fleet.yaml at 96x64 drawn with
--fleet-seed, a seed none of the models trained on). Every frame of every clip is labelled three ways, from the
same model runs (data_engine/autolabel/):

- **hindsight**: the ensemble with flip TTA, fused per frame, tracked over the whole clip in both directions and
  RTS-smoothed (what `hydranet engine autolabel` records);
- **frame by frame**: the same fused detections, each frame labelled alone (no tracking, no smoothing: causal);
- **one model**: the first model alone, no TTA, frame by frame (the production model in shadow mode).

Printed: each variant's det2d AP50 over every camera image (COCO 101-point, IoU 0.5; `data_engine.intervals.ap50`
over `hydranet.tasks.det2d.CocoMetric` image states) with its 95% bootstrap interval over clips, the paired
difference hindsight - frame by frame with its interval, and the boxes each variant keeps. Then, per variant:

- **human effort** (issue 35 item 4): the box edits a person makes to turn each frame's pre-fill (the labels as a
  tool shows them, `labeling.base.as_shown`) into the sim's truth, as the edit record counts them
  (`labeling.base.edit_record`: added + deleted + moved + class changed), against drawing every true box from
  nothing; as a ratio edits / boxes drawn with its interval over clips, at the record's 0.5 px tolerance and at
  2 px (a box within 2 px of the truth left as it is): the issue's target is 0.5 or less;
- **the accept policy** (`autolabel.accept`, `data_engine/autolabel/policy.py`): the share of frames it accepts
  without a person, and on those frames the accepted 2D boxes' precision and recall against the truth (greedy by
  confidence, IoU >= 0.5, same class: COCO's matching, `coco_image_state`).

Writes results.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SIZE = ["sim.image_width=96", "sim.image_height=64"]
VARIANTS = ("hindsight", "frame_by_frame", "one_model")
EFFORT_TOL_PX = (0.5, 2.0)  # a moved corner beyond this counts as an edit
EDITS = ("added", "deleted", "moved", "class_changed")  # the box edits of `labeling.base.edit_record`


def pool(out: Path, clips: int, seed: int) -> Path:
    from data_engine.fleet import FleetConfig, generate_fleet
    from hydranet.config import load_config

    if not (out / "dataset.json").exists():
        generate_fleet(out, load_config(FleetConfig, "fleet", [*SIZE, "sim.frames_per_scene=6"]), clips, seed, progress=False)
    return out


def clip_labels(ens, fleet, clip, cfg) -> dict[str, list[dict]]:
    """{variant: [payload per frame]} of one clip (every frame)."""
    import dataclasses

    from data_engine.autolabel.clip import fuse_frames, label_clip
    from data_engine.autolabel.ensemble import run_member
    from data_engine.autolabel.run import read_frames

    sizes = {c: tuple(fleet.cameras[c]) for c in ens.cameras}
    frames = read_frames(fleet, clip, ens.cameras)
    posed = all(f["ego2world"] is not None for f in frames)
    times = np.array([f["timestamp_us"] for f in frames], np.float64) / 1e6
    poses = [f["ego2world"] for f in frames]
    runs = [run_member(m, ens, frames, sizes, cfg.tta, posed) for m in ens.members]
    fused = fuse_frames(runs, ens.cameras, sizes, cfg)
    args = (ens.cameras, sizes, ens.classes, cfg)
    out = {"hindsight": [label_clip(fused, times, poses, *args)["frames"][t] for t in range(len(frames))]}
    out["frame_by_frame"] = [label_clip(fused[t:t + 1], times[t:t + 1], poses[t:t + 1], *args)["frames"][0]
                             for t in range(len(frames))]
    single = [run_member(ens.members[0], ens, frames, sizes, False, posed)]
    one = fuse_frames(single, ens.cameras, sizes, dataclasses.replace(cfg, tta=False))
    out["one_model"] = [label_clip(one[t:t + 1], times[t:t + 1], poses[t:t + 1], *args)["frames"][0]
                        for t in range(len(frames))]
    return out


def image_states(payload: dict, truth: dict, cameras, classes: list[str]) -> list[dict]:
    """One `coco_image_state` per camera image: the payload's boxes (confidence as score) against the truth's."""
    from hydranet.tasks.det2d import coco_image_state

    index = {c: k for k, c in enumerate(classes)}
    out = []
    for cam in cameras:
        gt = [b for b in truth["cameras"].get(cam, {}).get("boxes2d") or [] if b["class"] in index]
        pr = payload["cameras"].get(cam, {}).get("boxes2d") or []
        g = (np.array([b["bbox"] for b in gt], np.float64).reshape(-1, 4), np.array([index[b["class"]] for b in gt], np.int64),
             np.zeros((0, 4)), np.zeros(0, np.int64))
        p = (np.array([b["bbox"] for b in pr], np.float64).reshape(-1, 4), np.array([b["confidence"] for b in pr], np.float64),
             np.array([index[b["class"]] for b in pr], np.int64))
        out.append(coco_image_state(g, p, len(classes)))
    return out


def frame_counts(payload: dict, truth: dict, cfg, states: list[dict]) -> dict[str, int]:
    """One frame's human-effort and accept-policy counts (summed over frames and clips, then divided). `states`: the
    frame's `image_states` (COCO's matching: per camera and class, greedy by score; bit 0 of "tp" is IoU 0.5)."""
    from data_engine.autolabel.policy import decide
    from data_engine.labeling.base import as_shown, edit_record

    shown = as_shown(payload)
    out = {"truth_boxes": sum(len(c.get("boxes2d") or []) for c in truth["cameras"].values())}
    for tol in EFFORT_TOL_PX:
        e = edit_record(shown, truth, tol)
        out[f"edits@{tol:g}"] = sum(e[k] for k in EDITS)
    out.update({k: e[k] for k in EDITS})  # the parts, at the last tolerance
    accepted, _ = decide(payload, cfg)
    tp = sum(int(t) & 1 for s in states for t in s["tp"]) if accepted else 0
    return {**out, "frames": 1, "accepted_frames": int(accepted), "accepted_true": tp,
            "accepted_boxes": sum(len(s["label"]) for s in states) if accepted else 0,
            "accepted_frames_truth": sum(sum(s["npig"]) for s in states) if accepted else 0}


def ratio_table(counts: dict[str, list[dict[str, int]]], resamples: int, seed: int = 0) -> dict[str, dict]:
    """Per variant each ratio of summed counts (point, interval over clips): effort edits / boxes drawn at every
    tolerance, accepted-frame share, accepted boxes' precision and recall."""
    from data_engine.intervals import interval

    ratios = {f"effort@{t:g}": (f"edits@{t:g}", "truth_boxes") for t in EFFORT_TOL_PX}
    ratios.update({"accepted_share": ("accepted_frames", "frames"), "accepted_precision": ("accepted_true", "accepted_boxes"),
                   "accepted_recall": ("accepted_true", "accepted_frames_truth")})
    n = len(next(iter(counts.values())))
    draws = np.random.default_rng([seed, 351]).integers(0, n, (resamples, n))
    out = {}
    for v, per_clip in counts.items():
        a = {k: np.array([c[k] for c in per_clip], np.float64) for k in per_clip[0]}  # key -> (clips,)
        out[v] = {name: {"value": float(_ratio(a[num], a[den])), "interval": interval(_ratio(a[num][draws], a[den][draws])),
                         "of": int(a[den].sum())} for name, (num, den) in ratios.items()}
    return out


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """sum(num) / sum(den) over the last axis (clips), NaN where den sums to 0."""
    d = den.sum(-1)
    return np.where(d > 0, num.sum(-1) / np.maximum(d, 1), np.nan)


def bootstrap(per_clip: dict[str, list[list[dict]]], resamples: int, seed: int = 0) -> dict[str, dict]:
    """Per variant AP50 (point, interval over clips) and the paired hindsight - frame_by_frame difference."""
    from data_engine.intervals import ap50, interval

    n = len(per_clip[VARIANTS[0]])
    draws = np.random.default_rng([seed, 35]).integers(0, n, (resamples, n))
    res, boot = {}, {}
    for v in VARIANTS:
        clips = per_clip[v]
        boot[v] = np.array([ap50([s for c in d for s in clips[c]]) for d in draws])
        res[v] = {"ap50": ap50([s for c in clips for s in c]), "interval": interval(boot[v])}
    delta = boot["hindsight"] - boot["frame_by_frame"]
    res["hindsight_minus_frame_by_frame"] = {"ap50": res["hindsight"]["ap50"] - res["frame_by_frame"]["ap50"],
                                             "interval": interval(delta)}
    return res


def main() -> None:
    from data_engine.autolabel.ensemble import load_ensemble
    from data_engine.config import EngineConfig
    from data_engine.fleet import Fleet
    from data_engine.intervals import fmt
    from hydranet.config import load_config
    from hydranet.io import read_json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fleet", type=Path, default=None)
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--fleet-seed", type=int, default=900)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--set", action="append", default=[], help="engine config override, e.g. autolabel.min_score=0.05")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(EngineConfig, "engine", args.set).autolabel
    fleet = Fleet(args.fleet or pool(args.out / "fleet", args.clips, args.fleet_seed))
    ens, warnings = load_ensemble(args.models, fleet)
    classes = ens.classes["det2d"]
    per_clip: dict[str, list[list[dict]]] = {v: [] for v in VARIANTS}
    counts: dict[str, list[dict[str, int]]] = {v: [] for v in VARIANTS}  # per clip: `frame_counts` summed
    boxes = {v: 0 for v in VARIANTS}
    t0 = time.time()
    for name in fleet.clip_names:
        clip = fleet.clip(name)
        labels = clip_labels(ens, fleet, clip, cfg)
        truth = [read_json(fleet.root / "scenes" / name / f["dir"] / "labels.json") for f in clip.frames]
        for v in VARIANTS:
            states = [image_states(p, tr, ens.cameras, classes) for p, tr in zip(labels[v], truth)]  # per frame, per camera
            per_clip[v].append([s for frame in states for s in frame])
            boxes[v] += sum(len(c["boxes2d"]) for p in labels[v] for c in p["cameras"].values())
            frames = [frame_counts(p, tr, cfg, st) for p, tr, st in zip(labels[v], truth, states)]
            counts[v].append({k: sum(f[k] for f in frames) for k in frames[0]})
    res = bootstrap(per_clip, args.resamples)
    effort = ratio_table(counts, args.resamples)
    frames = sum(len(fleet.clip(n).frames) for n in fleet.clip_names)
    print(f"autolabel on {len(fleet.clip_names)} clips, {frames} frames, cameras {', '.join(ens.cameras)}; "
          f"{len(ens.members)} models; {time.time() - t0:.0f} s" + "".join(f"\nwarning: {w}" for w in warnings))
    print("| variant | det2d AP50 [95% interval over clips] | boxes |\n|---|---|---:|")
    for v in VARIANTS:
        print(f"| {v} | {fmt(res[v]['ap50'], res[v]['interval'])} | {boxes[v]} |")
    d = res["hindsight_minus_frame_by_frame"]
    print(f"| hindsight - frame by frame | {fmt(d['ap50'], d['interval'], sign=True)} | |")
    names = list(effort[VARIANTS[0]])
    print("\n| variant | " + " | ".join(names) + " |\n|---|" + "---|" * len(names))
    for v in VARIANTS:
        print(f"| {v} | " + " | ".join(f"{fmt(r['value'], r['interval'])} (of {r['of']})" for r in effort[v].values()) + " |")
    for v in VARIANTS:
        parts = {k: sum(c[k] for c in counts[v]) for k in EDITS}
        print(f"{v}: edits at {EFFORT_TOL_PX[-1]:g} px " + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in parts.items()))
    out = {"models": [str(m) for m in args.models], "fleet": str(fleet.root), "clips": len(fleet.clip_names), "frames": frames,
           "params": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "boxes": boxes,
           "results": {k: {"ap50": v["ap50"], "interval": v["interval"]} for k, v in res.items()},
           "effort_and_policy": effort}
    (args.out / "results.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
