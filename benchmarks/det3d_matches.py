"""Where a det3d model's AP is lost, class by class: too few detections near the true boxes, or too many elsewhere.

    python benchmarks/det3d_matches.py --checkpoint RUN --data VAL [--class pedestrian]

Runs the checkpoint over the held-out frames of its own dataset format (`hydranet.evaluate.evaluation_frames`, as
`hydranet eval` reads them) and prints per class with true boxes: their count, the detections the decoder kept
(score_threshold, max_detections per frame) and their median score, then at each of nuScenes' centre distances (0.5,
1, 2, 4 m; greedy matching by score: `hydranet.tasks.det3d.centre_matches`) the true boxes matched by all detections
(the recall the list can reach), by the top-ranked detections as many as the true boxes, and the interpolated
precision at the first recall point nuScenes' AP counts (`first_counted_precision`, recall 0.11): the class's AP at
that distance is above 0 exactly when this is above 0.10 (`average_precision`'s min_precision), however many of its
boxes are found. With --class, each true box of that class: its range, the distance to the nearest detection of the
class and that detection's score.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from hydranet.tasks.det3d import CenterDistanceAP, centre_matches, first_counted_precision

THRESHOLDS = CenterDistanceAP.THRESHOLDS  # m, nuScenes' centre distances


def class_row(frames: list, k: int) -> dict:
    """One class: true boxes, detections, and per threshold (matched by all, by the top-ranked, first counted precision)."""
    num_gt = sum(int((gl == k).sum()) for *_, gl in frames)
    scores = np.concatenate([ps[pl == k] for _, ps, pl, _, _ in frames]) if frames else np.zeros(0)
    row = {"gt": num_gt, "detections": len(scores), "median_score": float(np.median(scores)) if len(scores) else float("nan")}
    for th in THRESHOLDS:
        scores, hits, _ = centre_matches(frames, k, th)
        ranked = hits[np.argsort(-scores, kind="stable")]
        row[th] = (int(hits.sum()), int(ranked[:num_gt].sum()), first_counted_precision(scores, hits, num_gt))
    return row


def nearest(frames: list, k: int) -> list[tuple[float, float, float]]:
    """Per true box of class k: (range m, distance to the nearest detection of k m, its score)."""
    out = []
    for pb, ps, pl, gb, gl in frames:
        p, s = pb[pl == k], ps[pl == k]
        for g in gb[gl == k]:
            d = np.linalg.norm(p[:, :2] - g[:2], axis=1) if len(p) else np.zeros(0)
            j = int(np.argmin(d)) if len(d) else -1
            out.append((float(np.linalg.norm(g[:2])), float(d[j]) if j >= 0 else float("inf"),
                        float(s[j]) if j >= 0 else float("nan")))
    return out


def collect(checkpoint: str, data: str, cls: str | None = None) -> tuple[list, list[str]]:
    """The det3d head's (boxes, scores, labels, true boxes, true labels) per evaluated frame, and its classes;
    `cls`, when given, must be one of them (checked before the pass over the frames)."""
    import json

    import torch

    from hydranet.checkpoint import load_model
    from hydranet.evaluate import evaluation_frames
    from hydranet.models.partial import supervised_update
    from hydranet.stream import predict_stream

    model, cfg, ckpt = load_model(checkpoint)
    if "det3d" not in model.heads:
        raise SystemExit(f"{checkpoint}: the model has no det3d head (heads: {', '.join(model.heads)})")
    classes = model.heads["det3d"].classes
    if cls is not None and cls not in classes:
        raise SystemExit(f"--class {cls}: not a det3d class of this model ({', '.join(classes)})")
    meta = json.loads(ckpt["meta"])
    frames = evaluation_frames(model, cfg, data, model_classes=meta.get("classes"), meta=meta)
    metric = CenterDistanceAP(classes)
    with torch.no_grad():
        for batch, decoded in predict_stream(model.eval(), frames, cfg.batch_size):
            supervised_update(metric, decoded["det3d"], batch["targets"]["det3d"])
    return metric.frames, metric.classes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, help="a run folder or checkpoint.pt with a det3d head")
    ap.add_argument("--data", required=True, help="the held-out dataset folder (e.g. out/demo/sim_val)")
    ap.add_argument("--class", dest="cls", default=None, help="also list each true box of this class")
    a = ap.parse_args(argv)
    if not Path(a.data).is_dir():
        raise SystemExit(f"--data {a.data}: no such folder")
    frames, classes = collect(a.checkpoint, a.data, a.cls)
    print(f"{len(frames)} frames; per distance: matched by all detections / by the top-ranked as many as the true "
          "boxes / precision at the first recall point AP counts (0.11)")
    print(f"{'class':<22}{'true':>6}{'dets':>7}{'median score':>14}" + "".join(f"{f'{th:g} m':>20}" for th in THRESHOLDS))
    for k, name in enumerate(classes):
        r = class_row(frames, k)
        if r["gt"] == 0:
            continue
        cells = "".join(f"{f'{r[th][0]} / {r[th][1]} / {r[th][2]:.2f}':>20}" for th in THRESHOLDS)
        print(f"{name:<22}{r['gt']:>6}{r['detections']:>7}{r['median_score']:>14.3f}{cells}")
    if a.cls is not None:
        rows = nearest(frames, classes.index(a.cls))
        print(f"\n{a.cls}: range m, nearest detection m, its score")
        for rng, d, s in sorted(rows):
            print(f"{rng:8.1f} {d:8.2f} {s:8.3f}")


if __name__ == "__main__":
    main()
