"""Where a det3d model's AP is lost, class by class: too few detections near the true boxes, or too many elsewhere.

    python benchmarks/det3d_matches.py --checkpoint RUN --data VAL [--class pedestrian]

Runs the checkpoint over the held-out frames (as `hydranet eval`) and prints per class with true boxes: their count,
the detections the decoder kept (score_threshold, max_detections per frame) and their median score, then at each
of nuScenes' centre distances (0.5, 1, 2, 4 m; greedy matching by score: `hydranet.tasks.det3d.centre_matches`)
the true boxes matched by all detections (the recall the list can reach) and by the top-ranked detections as many
as the true boxes, and the precision where recall first reaches 10%. nuScenes' AP counts only the precision above
10% at recall above 10% (`average_precision`), so a class whose precision at 10% recall is under 0.10 scores AP 0
however many of its boxes are found. With --class, each true box of that class: its range, the distance to the
nearest detection of the class and that detection's score.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from hydranet.tasks.det3d import CenterDistanceAP, centre_matches

THRESHOLDS = CenterDistanceAP.THRESHOLDS  # m, nuScenes' centre distances


def class_row(frames: list, k: int) -> dict:
    """One class: true boxes, detections, and per threshold: matched by all, by the top-ranked, precision at 10% recall."""
    num_gt = sum(int((gl == k).sum()) for *_, gl in frames)
    row = {"gt": num_gt}
    for th in THRESHOLDS:
        scores, hits, _ = centre_matches(frames, k, th)
        row["detections"], row["median_score"] = len(scores), float(np.median(scores)) if len(scores) else float("nan")
        hits = hits[np.argsort(-scores, kind="stable")]
        reach = np.flatnonzero(np.cumsum(hits) >= 0.1 * num_gt) if num_gt else ()
        row[th] = (int(hits.sum()), int(hits[:num_gt].sum()),
                   float(np.cumsum(hits)[reach[0]] / (reach[0] + 1)) if len(reach) else float("nan"))
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


def collect(checkpoint: str, data: str) -> tuple[list, list[str]]:
    """The det3d head's (boxes, scores, labels, true boxes, true labels) per evaluated frame, and its classes."""
    import torch

    from hydranet.checkpoint import load_model
    from hydranet.evaluate import evaluation_frames
    from hydranet.models.partial import supervised_update
    from hydranet.stream import predict_stream

    model, cfg, ckpt = load_model(checkpoint)
    if "det3d" not in model.heads:
        raise SystemExit(f"{checkpoint}: the model has no det3d head (heads: {', '.join(model.heads)})")
    frames = evaluation_frames(model, cfg, data)
    metric = CenterDistanceAP(model.heads["det3d"].classes)
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
    frames, classes = collect(a.checkpoint, a.data)
    if a.cls is not None and a.cls not in classes:
        raise SystemExit(f"--class {a.cls}: not a det3d class of this model ({', '.join(classes)})")
    print(f"{len(frames)} frames; per distance: matched by all detections / by the top-ranked as many as the true "
          "boxes / precision at 10% recall")
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
