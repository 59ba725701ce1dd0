"""Where a det2d model's mAP50 is lost: recognition or localization.

    python benchmarks/det2d_localization.py PREDICTIONS [PREDICTIONS ...] [--class car]

PREDICTIONS: a folder that `hydranet eval --out ... ` / `benchmarks/demo_seeds.py` wrote (det2d_gt.json and
det2d_predictions.json, COCO format). Prints, per folder, the mean AP over the classes with scored boxes at IoU
0.1 / 0.3 / 0.5 / 0.7 (pycocotools, iouThrs set; ignore regions as in the eval) with each class's AP, then for one
class the errors of its best-matching detection (IoU >= 0.1, score >= 0.2) per true box: IoU, log width and height
ratios, centre offsets in box widths/heights (10th, 25th, 50th, 75th, 90th percentiles). A class whose AP stays
high at IoU 0.1 and falls by 0.5 is found but badly boxed; one near 0 at 0.1 is not found at all.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

IOUS = (0.1, 0.3, 0.5, 0.7)


def ap_by_iou(folder: Path) -> dict[float, dict[str, float]]:
    """{IoU threshold: {class: AP}} over the classes with scored boxes (area 'all', 100 detections)."""
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(folder / "det2d_gt.json"))
        ev = COCOeval(gt, gt.loadRes(str(folder / "det2d_predictions.json")), "bbox")
        ev.params.iouThrs = np.array(IOUS)
        ev.evaluate()
        ev.accumulate()
    precision = ev.eval["precision"]  # (T, R, K, A, M)
    out = {}
    for t, thr in enumerate(IOUS):
        per = {}
        for k, cat in enumerate(ev.params.catIds):
            p = precision[t, :, k, 0, -1]
            if (p > -1).any():
                per[gt.cats[cat]["name"]] = float(p[p > -1].mean())
        out[thr] = per
    return out


def box_errors(folder: Path, name: str, min_score: float = 0.2) -> np.ndarray:
    """(M, 5) IoU, log w ratio, log h ratio, dx / w, dy / h of each true `name` box's best detection (IoU >= 0.1)."""
    gt = json.loads((folder / "det2d_gt.json").read_text())
    cat = next(c["id"] for c in gt["categories"] if c["name"] == name)
    dets = defaultdict(list)
    for d in json.loads((folder / "det2d_predictions.json").read_text()):
        if d["category_id"] == cat and d["score"] >= min_score:
            dets[d["image_id"]].append(d["bbox"])
    rows = []
    for a in gt["annotations"]:
        if a["category_id"] != cat or a.get("iscrowd", 0) or not dets[a["image_id"]]:
            continue
        g, p = np.asarray(a["bbox"], float), np.asarray(dets[a["image_id"]], float)  # xywh (4,), (D, 4)
        lo, hi = np.maximum(g[:2], p[:, :2]), np.minimum(g[:2] + g[2:], p[:, :2] + p[:, 2:])
        inter = np.prod(np.clip(hi - lo, 0, None), axis=1)
        iou = inter / (g[2] * g[3] + p[:, 2] * p[:, 3] - inter)
        k = int(iou.argmax())
        if iou[k] >= 0.1:
            b = p[k]
            rows.append([iou[k], np.log(b[2] / g[2]), np.log(b[3] / g[3]),
                         (b[0] + b[2] / 2 - g[0] - g[2] / 2) / g[2], (b[1] + b[3] / 2 - g[1] - g[3] / 2) / g[3]])
    return np.asarray(rows).reshape(-1, 5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--class", dest="name", default="car", help="the class whose box errors are printed")
    args = ap.parse_args()
    for folder in args.folders:
        for name in ("det2d_gt.json", "det2d_predictions.json"):
            if not (folder / name).is_file():
                raise SystemExit(f"error: {folder / name} is missing; give the predictions folder of `hydranet eval`")
        print(f"== {folder}")
        for thr, per in ap_by_iou(folder).items():
            print(f"IoU {thr:.1f}: mAP {np.mean(list(per.values())):.3f}  " +
                  " ".join(f"{c} {v:.2f}" for c, v in per.items()))
        err = box_errors(folder, args.name)
        print(f"{args.name}: {len(err)} true boxes with a detection at IoU >= 0.1 (percentiles 10/25/50/75/90)")
        for j, what in enumerate(("IoU", "log w ratio", "log h ratio", "dx / w", "dy / h")):
            print(f"  {what:12s} " + " ".join(f"{v:7.3f}" for v in np.percentile(err[:, j], [10, 25, 50, 75, 90]))
                  if len(err) else f"  {what}: none")


if __name__ == "__main__":
    main()
