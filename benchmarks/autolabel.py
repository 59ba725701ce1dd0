"""What hindsight buys the auto-labeller: its labels against the sim's truth, head by head, hindsight vs frame by frame.

    python benchmarks/autolabel.py --models A.onnx [B.onnx ...] --out out/bench_autolabel [--fleet FLEET]
        [--clips 8] [--fleet-seed 900] [--resamples 1000] [--set autolabel.min_score=0.05 ...] [--detector noisy-truth]

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
  confidence, IoU >= 0.5, same class: COCO's matching, `coco_image_state`);
- **3D labels** (an ensemble with det3d on a fleet with poses): NDS, mAP, mATE, mAVE, mAOE, mASE of each variant's
  3D boxes against the truth's (the project's official-equal nuScenes metric: `det3d_state`), intervals over clips;
- **BEV map labels** (an ensemble with bevmap): IoU per channel and mIoU of the ensemble's mean map decoded at the
  head's threshold against the frame's bev.png on the model's grid (dense labels are fused frame by frame: one
  figure for hindsight and frame by frame), beside the first model's alone;
- **tracking** (hindsight's tracks): TrackEval's HOTA, DetA, AssA, MOTA, ID switches and IDF1 of the 2D tracks
  (every camera a sequence; similarity IoU, 0 between classes) and the world-frame 3D tracks (similarity 1 - BEV
  centre distance / 2 m) against the sim's track ids, intervals over clips.

Writes results.json.
"""
from __future__ import annotations

import argparse
import functools
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


NOISY_TRUTH = {  # --detector noisy-truth: a simulated detector that finds the objects (what hindsight works on)
    "recall": 0.8,  # each true box found with this probability, frame by frame
    "px": 2.0,  # 2D corners: Gaussian noise sigma, pixels
    "m": 0.5,  # 3D centre x, y: sigma, metres
    "size": 0.1,  # 3D size: log-normal sigma (10%)
    "yaw": 0.2,  # 3D heading: sigma, radians
    "mps": 1.5,  # 3D velocity x, y: sigma, m/s (one frame's estimate)
    "false": 1.0,  # false boxes per frame (3D, within 30 m) and per camera image (2D): Poisson mean
}


def noisy_truth_run(truths: list[dict], ens, sizes: dict, rng: np.random.Generator, noise: dict = NOISY_TRUTH) -> list[dict]:
    """`run_member`'s items of a simulated detector over a clip's frames (`truths`: their labels.json): every true
    box of the ensemble's classes found with probability `recall`, with Gaussian noise on its corners (2D) or
    centre, size, heading and velocity (3D), a score uniform in [0.3, 0.9]; plus Poisson(`false`) false boxes per
    camera image and per frame, scored in [0.1, 0.4]. No dense maps."""
    c2, c3 = ens.classes["det2d"], ens.classes.get("det3d", [])
    out = []
    for tr in truths:
        item: dict = {"det2d": [], "dense": []}
        for cam in ens.cameras:
            h, w = sizes[cam]
            found = [b for b in tr["cameras"].get(cam, {}).get("boxes2d") or [] if b["class"] in c2 and rng.random() < noise["recall"]]
            k = rng.poisson(noise["false"])
            xy, wh = rng.uniform(0, 1, (k, 2)) * [w, h], rng.uniform(8, 40, (k, 2))
            boxes = np.concatenate([np.array([b["bbox"] for b in found], np.float64).reshape(-1, 4)
                                    + rng.normal(0, noise["px"], (len(found), 4)), np.concatenate([xy, xy + wh], 1)])
            scores = np.concatenate([rng.uniform(0.3, 0.9, len(found)), rng.uniform(0.1, 0.4, k)])
            labels = np.concatenate([[c2.index(b["class"]) for b in found], rng.integers(0, len(c2), k)]).astype(np.int64)
            item["det2d"].append([(boxes, scores, labels)])
        if c3:
            found = [b for b in tr.get("boxes3d") or [] if b["class"] in c3 and b.get("num_pixels", 0) > 0
                     and rng.random() < noise["recall"]]
            arr = np.array([[*b["center"], *b["size"], b["yaw"], *b["velocity"][:2]] for b in found], np.float64).reshape(-1, 9)
            n = len(found)
            arr[:, :2] += rng.normal(0, noise["m"], (n, 2))
            arr[:, 3:6] *= np.exp(rng.normal(0, noise["size"], (n, 3)))
            arr[:, 6] += rng.normal(0, noise["yaw"], n)
            arr[:, 7:9] += rng.normal(0, noise["mps"], (n, 2))
            k = rng.poisson(noise["false"])
            false = np.zeros((k, 9))
            false[:, :2], false[:, 2] = rng.uniform(-30, 30, (k, 2)), 0.8
            false[:, 3:6], false[:, 6] = [4.5, 1.9, 1.5], rng.uniform(-np.pi, np.pi, k)
            false[:, 7:9] = rng.normal(0, noise["mps"], (k, 2))
            item["det3d"] = (np.concatenate([arr, false]), np.concatenate([rng.uniform(0.3, 0.9, n), rng.uniform(0.1, 0.4, k)]),
                             np.concatenate([[c3.index(b["class"]) for b in found], np.zeros(k)]).astype(np.int64))
        out.append(item)
    return out


def noisy_truth_detector(truths: list[dict], ens, rng: np.random.Generator, frames: list[dict], sizes: dict) -> list[dict]:
    """`clip_labels`'s detector of `--detector noisy-truth` (functools.partial over the clip's truths)."""
    return noisy_truth_run(truths, ens, sizes, rng)


def clip_labels(ens, fleet, clip, cfg, detector=None) -> tuple[dict[str, list[dict]], dict[str, list[dict | None]]]:
    """({variant: [payload per frame]}, {variant: [dense arrays per frame, or None]}) of one clip (every frame).
    `detector(frames, sizes)` -> one run's items replaces the models (then "one model" is that run, frame by frame)."""
    import dataclasses

    from data_engine.autolabel.clip import fuse_frames, label_clip
    from data_engine.autolabel.ensemble import run_member
    from data_engine.autolabel.run import read_frames

    sizes = {c: tuple(fleet.cameras[c]) for c in ens.cameras}
    frames = read_frames(fleet, clip, ens.cameras)
    posed = all(f["ego2world"] is not None for f in frames)
    times = np.array([f["timestamp_us"] for f in frames], np.float64) / 1e6
    poses = [f["ego2world"] for f in frames]
    runs = [detector(frames, sizes)] if detector else [run_member(m, ens, frames, sizes, cfg.tta, posed) for m in ens.members]
    fused = fuse_frames(runs, ens.cameras, sizes, cfg)
    args = (ens.cameras, sizes, ens.classes, ens.params(cfg))
    whole = label_clip(fused, times, poses, *args)
    out = {"hindsight": [whole["frames"][t] for t in range(len(frames))]}
    out["frame_by_frame"] = [label_clip(fused[t:t + 1], times[t:t + 1], poses[t:t + 1], *args)["frames"][0]
                             for t in range(len(frames))]
    single = runs if detector else [run_member(ens.members[0], ens, frames, sizes, False, posed)]
    one = fuse_frames(single, ens.cameras, sizes, dataclasses.replace(cfg, tta=False))
    alone = [label_clip(one[t:t + 1], times[t:t + 1], poses[t:t + 1], *args) for t in range(len(frames))]
    out["one_model"] = [a["frames"][0] for a in alone]
    dense = {"hindsight": [whole["dense"].get(t) for t in range(len(frames))], "one_model": [a["dense"].get(0) for a in alone]}
    dense["frame_by_frame"] = dense["hindsight"]  # dense labels are fused frame by frame: one map for both
    return out, dense


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


def det3d_state(payload: dict, truth: dict, ego2world: np.ndarray, classes: list[str], token: str) -> dict:
    """One frame's nuScenes detection state (`sample_state`: hydranet's official-equal NDS machinery) of the label's
    3D boxes (ego frame, confidence as score) against the truth's."""
    from hydranet.metrics.nuscenes_detection import DetectionConfig, sample_state
    from hydranet.nuscenes_results import frame_eval_boxes, frame_results, result_eval_boxes

    cfg = DetectionConfig()
    boxes = payload.get("boxes3d") or []
    arr = np.array([[*b["center"], *b["size"], b["yaw"], *b["velocity"][:2]] for b in boxes], np.float64).reshape(-1, 9)
    entries = frame_results(arr, np.array([b["confidence"] for b in boxes]), np.array([classes.index(b["class"]) for b in boxes],
                            np.int64), classes, ego2world, token)
    return sample_state(token, frame_eval_boxes(truth, ego2world, token, cfg), result_eval_boxes(entries, ego2world, cfg), cfg)


DET3D_KEYS = {"NDS": "nd_score", "mAP": "mean_ap", "mATE": "trans_err", "mAVE": "vel_err", "mAOE": "orient_err",
              "mASE": "scale_err"}


def det3d_values(states: list[dict]) -> dict[str, float]:
    """NDS, mAP and the TP errors of frames' `det3d_state`s (nuScenes' definitions; an error is 1 where no class
    matched, as the devkit)."""
    from hydranet.metrics.nuscenes_detection import DetectionConfig, state_metrics

    m = state_metrics(states, DetectionConfig())
    errs = m.tp_errors
    return {k: float(m.nd_score if a == "nd_score" else m.mean_ap if a == "mean_ap" else errs[a]) for k, a in DET3D_KEYS.items()}


def bevmap_state(dense: dict | None, raster: np.ndarray, task, threshold: float) -> dict[str, list[int]] | None:
    """One frame's BEV map IoU pieces ({"inter", "union"} per channel: the head's own `ChannelIoU` state) of the
    label's mean map decoded as the head decodes (p > threshold) against the truth raster (bev.png, resampled to the
    model's grid by the head's own `build_targets`); None without a BEV map label."""
    if dense is None or "bevmap" not in dense:
        return None
    import torch

    from hydranet.tasks.bevmap import ChannelIoU

    t = task.build_targets({"bev": raster})  # mask (1, K, X, Y), valid (1, X, Y)
    pred = torch.from_numpy(np.asarray(dense["bevmap"], np.float32)[0] > threshold)  # (K, X, Y)
    metric = ChannelIoU(task.channels)
    metric.update([{"mask": pred}], {"mask": torch.from_numpy(t["mask"]), "valid": torch.from_numpy(t["valid"])})
    return metric.states()[0]


def _ids(items: list) -> dict:
    return {k: n for n, k in enumerate(dict.fromkeys(items))}


def track_sequence(frames: list[tuple[list, list]], similarity) -> dict:
    """TrackEval's per-sequence data ({"num_timesteps", "gt_ids", "tracker_ids", "similarity_scores", ...}, ids
    renumbered from 0) of frames [(truth objects, label objects)], each object {"track_id", ...}; `similarity(gt,
    pr)` -> (G, P) in [0, 1]. A label box without a track is an object of its own."""
    gid = _ids([g["track_id"] for gts, _ in frames for g in gts])
    own = iter(range(10**9, 2 * 10**9))
    keys = [[p["track_id"] if p.get("track_id") is not None else next(own) for p in prs] for _, prs in frames]
    pid = _ids([k for ks in keys for k in ks])
    return {"num_timesteps": len(frames), "num_gt_ids": len(gid), "num_tracker_ids": len(pid),
            "num_gt_dets": sum(len(g) for g, _ in frames), "num_tracker_dets": sum(len(p) for _, p in frames),
            "gt_ids": [np.array([gid[g["track_id"]] for g in gts], np.int64) for gts, _ in frames],
            "tracker_ids": [np.array([pid[k] for k in ks], np.int64) for ks in keys],
            "similarity_scores": [similarity(gts, prs) for gts, prs in frames]}


def iou_same_class(gts: list, prs: list) -> np.ndarray:
    """(G, P) box IoU of 2D objects, 0 between two classes."""
    from data_engine.autolabel.track import box_iou

    iou = box_iou(np.array([g["bbox"] for g in gts]).reshape(-1, 4), np.array([p["bbox"] for p in prs]).reshape(-1, 4))
    same = np.array([[g["class"] == p["class"] for p in prs] for g in gts], bool).reshape(iou.shape)
    return np.where(same, iou, 0.0)


TRACK_DIST_M = 2.0  # 3D tracking similarity: 1 - centre distance / this (0 beyond): a match (>= 0.5) is within 1 m


def closeness_same_class(gts: list, prs: list) -> np.ndarray:
    """(G, P) 3D similarity: 1 - BEV centre distance / TRACK_DIST_M, clipped at 0, and 0 between two classes."""
    g = np.array([o["center"][:2] for o in gts], np.float64).reshape(-1, 2)
    p = np.array([o["center"][:2] for o in prs], np.float64).reshape(-1, 2)
    sim = np.clip(1 - np.linalg.norm(g[:, None] - p[None], axis=-1) / TRACK_DIST_M, 0, None)
    same = np.array([[a["class"] == b["class"] for b in prs] for a in gts], bool).reshape(sim.shape)
    return np.where(same, sim, 0.0)


TRACK_KEYS = {"HOTA": ("HOTA", "HOTA"), "DetA": ("HOTA", "DetA"), "AssA": ("HOTA", "AssA"), "MOTA": ("CLEAR", "MOTA"),
              "IDSW": ("CLEAR", "IDSW"), "IDF1": ("Identity", "IDF1")}


def tracking_metrics():
    """TrackEval's HOTA (Luiten et al., IJCV 2021), CLEAR MOT (MOTA, ID switches) and Identity (IDF1) metrics; its
    import says how to install it when it is missing (it is installed --no-deps: pyproject.toml)."""
    try:
        from trackeval.metrics import CLEAR, HOTA, Identity
    except ImportError:
        raise SystemExit("the tracking metrics need TrackEval: pip install --no-deps 'trackeval>=1.3' tabulate "
                         "(make test installs it)") from None
    quiet = {"PRINT_CONFIG": False}
    return {"HOTA": HOTA(quiet), "CLEAR": CLEAR(quiet), "Identity": Identity(quiet)}


def sequence_results(data: dict, metrics) -> dict[str, dict]:
    """{metric name: TrackEval's result} of one sequence (`track_sequence` data)."""
    return {name: m.eval_sequence(data) for name, m in metrics.items()}


def track_values(results: list[dict[str, dict]], metrics) -> dict[str, float]:
    """HOTA, DetA, AssA (mean over TrackEval's alpha thresholds), MOTA, ID switches, IDF1 of sequences'
    `sequence_results`, combined as TrackEval combines a benchmark's sequences."""
    combined = {name: m.combine_sequences({str(i): r[name] for i, r in enumerate(results)}) for name, m in metrics.items()}
    return {k: float(np.mean(combined[m][f])) for k, (m, f) in TRACK_KEYS.items()}


def clip_bootstrap(per_clip: list, value, resamples: int, seed: int) -> dict:
    """{"value", "interval"} of `value(items of every clip)` and its 95% interval over clips resampled; `per_clip`:
    a list per clip of the items `value` takes (frames' states, sequences). The values are dicts of floats."""
    from data_engine.intervals import interval

    point = value([x for c in per_clip for x in c])
    draws = np.random.default_rng([seed, 353]).integers(0, len(per_clip), (resamples, len(per_clip)))
    boot = [value([x for c in d for x in per_clip[c]]) for d in draws]
    return {k: {"value": point[k], "interval": interval([b[k] for b in boot])} for k in point}


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


def bevmap_truth(ens, fleet):
    """(the BEV map head's targets builder on the model's grid from the fleet's raster grid, its decoding threshold),
    or None when the ensemble labels no BEV map."""
    if "bevmap" not in ens.heads:
        return None
    from hydranet.bevgrid import BevGrid
    from hydranet.io import read_json
    from hydranet.tasks.bevmap import BevMapTask

    md = ens.members[0].rt.meta
    g = md["bev"]["grid"]
    grid = BevGrid(tuple(g["x_range"]), tuple(g["y_range"]), float(g["resolution"]))
    task = BevMapTask(1, grid, BevGrid.from_meta(read_json(fleet.root / "dataset.json")))
    return task, float(md["heads"]["bevmap"]["decoding"]["params"]["threshold"])


def read_bev(path: Path) -> np.ndarray:
    """A frame's bev.png as the (3, X, Y) uint8 raster (RGB: drivable, lanes, objects) the BEV map head reads."""
    import cv2

    from hydranet.data.image import read_image_file

    return np.ascontiguousarray(read_image_file(path, cv2.IMREAD_COLOR_RGB).transpose(2, 0, 1))


def truth_tracks(truth: dict, labels: dict, classes2d: list[str], classes3d: list[str], cameras) -> dict[str, tuple]:
    """{sequence key: (truth objects, label objects)} of one frame: per camera its 2D boxes of the det2d classes, and
    "3d" its visible 3D boxes (num_pixels > 0, as nuScenes' GT filter) of the det3d classes."""
    out = {cam: ([b for b in truth["cameras"].get(cam, {}).get("boxes2d") or [] if b["class"] in classes2d],
                 labels["cameras"].get(cam, {}).get("boxes2d") or []) for cam in cameras}
    if classes3d:
        out["3d"] = ([b for b in truth.get("boxes3d") or [] if b["class"] in classes3d and b.get("num_pixels", 0) > 0],
                     labels.get("boxes3d") or [])
    return out


def main() -> None:
    from data_engine.autolabel.ensemble import load_ensemble
    from data_engine.config import EngineConfig
    from data_engine.fleet import Fleet
    from data_engine.intervals import fmt
    from hydranet.config import load_config
    from hydranet.io import read_json
    from hydranet.tasks.bevmap import ChannelIoU

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fleet", type=Path, default=None)
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--fleet-seed", type=int, default=900)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--set", action="append", default=[], help="engine config override, e.g. autolabel.min_score=0.05")
    ap.add_argument("--detector", choices=("models", "noisy-truth"), default="models",
                    help="noisy-truth: a simulated detector (the truth with NOISY_TRUTH's noise) instead of the models, "
                         "which then give the rig and classes only: what hindsight does with boxes that are objects")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = load_config(EngineConfig, "engine", args.set).autolabel
    fleet = Fleet(args.fleet or pool(args.out / "fleet", args.clips, args.fleet_seed))
    ens, warnings = load_ensemble(args.models, fleet)
    classes, classes3d = ens.classes["det2d"], ens.classes.get("det3d", [])
    bev = bevmap_truth(ens, fleet) if args.detector == "models" else None
    metrics = tracking_metrics()
    per_clip: dict[str, list[list[dict]]] = {v: [] for v in VARIANTS}
    counts: dict[str, list[dict[str, int]]] = {v: [] for v in VARIANTS}  # per clip: `frame_counts` summed
    det3d: dict[str, list[list[dict]]] = {v: [] for v in VARIANTS}  # per clip: frames' det3d_state
    bevmap: dict[str, list[list[dict]]] = {v: [] for v in VARIANTS}  # per clip: frames' bevmap_state
    tracks: dict[str, list[list[dict]]] = {"2d": [], "3d": []}  # per clip: sequences' results (hindsight's tracks)
    boxes = {v: 0 for v in VARIANTS}
    t0 = time.time()
    for name in fleet.clip_names:
        clip = fleet.clip(name)
        folders = [fleet.root / "scenes" / name / f["dir"] for f in clip.frames]
        truth = [read_json(d / "labels.json") for d in folders]
        detector = None
        if args.detector == "noisy-truth":
            rng = np.random.default_rng([args.fleet_seed, fleet.clip_names.index(name)])
            detector = functools.partial(noisy_truth_detector, truth, ens, rng)
        labels, dense = clip_labels(ens, fleet, clip, cfg, detector)
        posed = classes3d and all(f["ego2world"] is not None for f in clip.frames)
        rasters = [read_bev(d / "bev.png") for d in folders] if bev else []
        for v in VARIANTS:
            states = [image_states(p, tr, ens.cameras, classes) for p, tr in zip(labels[v], truth)]  # per frame, per camera
            per_clip[v].append([s for frame in states for s in frame])
            boxes[v] += sum(len(c["boxes2d"]) for p in labels[v] for c in p["cameras"].values())
            frames = [frame_counts(p, tr, cfg, st) for p, tr, st in zip(labels[v], truth, states)]
            counts[v].append({k: sum(f[k] for f in frames) for k in frames[0]})
            if posed:
                det3d[v].append([det3d_state(p, tr, np.asarray(f["ego2world"], np.float64), classes3d, f"{name}/{f['dir']}")
                                 for p, tr, f in zip(labels[v], truth, clip.frames)])
            if bev:
                got = [bevmap_state(d, r, *bev) for d, r in zip(dense[v], rasters)]
                bevmap[v].append([g for g in got if g is not None])
        seqs: dict[str, list] = {}
        for tr, lab in zip(truth, labels["hindsight"]):
            for key, pair in truth_tracks(tr, lab, classes, classes3d if posed else [], ens.cameras).items():
                seqs.setdefault(key, []).append(pair)
        tracks["2d"].append([sequence_results(track_sequence(seqs[c], iou_same_class), metrics) for c in ens.cameras])
        if "3d" in seqs:
            tracks["3d"].append([sequence_results(track_sequence(seqs["3d"], closeness_same_class), metrics)])
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
    noise = {"noise": NOISY_TRUTH} if args.detector == "noisy-truth" else {}
    out = {"models": [str(m) for m in args.models], "detector": args.detector, **noise, "fleet": str(fleet.root),
           "clips": len(fleet.clip_names), "frames": frames,
           "params": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "boxes": boxes,
           "results": {k: {"ap50": v["ap50"], "interval": v["interval"]} for k, v in res.items()},
           "effort_and_policy": effort}
    if det3d["hindsight"]:
        out["det3d"] = {v: clip_bootstrap(det3d[v], det3d_values, args.resamples, 1) for v in VARIANTS}
        print("\n| variant | " + " | ".join(DET3D_KEYS) + " |\n|---|" + "---|" * len(DET3D_KEYS))
        for v in VARIANTS:
            print(f"| {v} | " + " | ".join(fmt(r["value"], r["interval"]) for r in out["det3d"][v].values()) + " |")
    if bev:
        iou = ChannelIoU(bev[0].channels).compute_states
        out["bevmap"] = {v: clip_bootstrap(bevmap[v], iou, args.resamples, 2) for v in ("hindsight", "one_model")}
        keys = list(out["bevmap"]["hindsight"])
        print("\n| BEV map label | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
        for v, r in out["bevmap"].items():
            cells = " | ".join(fmt(x["value"], x["interval"]) for x in r.values())
            print(f"| {'ensemble mean' if v == 'hindsight' else v} | {cells} |")
    values = functools.partial(track_values, metrics=metrics)
    out["tracking"] = {k: clip_bootstrap(seqs, values, args.resamples, 3) for k, seqs in tracks.items() if seqs}
    print("\n| hindsight tracks | " + " | ".join(TRACK_KEYS) + " |\n|---|" + "---|" * len(TRACK_KEYS))
    for k, r in out["tracking"].items():
        print(f"| {k} | " + " | ".join(fmt(x["value"], x["interval"], digits=0 if n == "IDSW" else 3) for n, x in r.items()) + " |")
    (args.out / "results.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
