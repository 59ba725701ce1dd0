"""preview.png of an auto-labelling run: what the labeller wrote, drawn on the frames it labelled.

Up to PREVIEW_FRAMES labelled frames (spread evenly over them, in clip and frame order), one under the other,
each camera as the engine report draws it (data_engine.report_pictures.camera_view): the auto-label's 2D boxes in their
class colour with their confidence, the ensemble's mean drivable and lane masks (p > 0.5) as translucent fills, and
where the fleet keeps its truth (a sim fleet) the true boxes in white; on the right the frame, the policy's decision
and why, the boxes and tracks, and the legend.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

PREVIEW_FRAMES = 6  # frames drawn at most
MASK_P = 0.5  # a dense label's mean probability drawn as its mask


def _spread(items: Sequence, k: int) -> list:
    """k items spread evenly over `items` (all of them when there are no more than k)."""
    if len(items) <= k:
        return list(items)
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)] if k > 1 else [items[0]]


def frame_views(fleet_root: Path, clip: str, fdir: str, cameras: Sequence[str], payload: Mapping, dense: Mapping | None,
                classes: Sequence[str], warnings: list[str] | None = None) -> tuple[list[np.ndarray], list[str]]:
    """(one view per camera, the legend labels drawn) of one labelled frame. A truth file that cannot be read is
    left out of the picture and said in `warnings` (the labels are recorded: the picture never fails a run)."""
    from data_engine.report import fleet_truth
    from data_engine.report_pictures import camera_view, read_views

    try:
        truth = (fleet_truth(fleet_root, clip, fdir) or {}).get("cameras") or {}
    except ValueError as e:
        truth = {}
        if warnings is not None:
            warnings.append(f"preview.png: frame {clip}/{fdir} drawn without its truth ({e})")
    images = read_views(fleet_root, clip, fdir, cameras)
    views, drawn = [], []
    for n, cam in enumerate(cameras):
        image, error = images[cam]
        boxes = [(b["bbox"], classes.index(b["class"]) if b["class"] in classes else -1, b["confidence"])
                 for b in payload["cameras"][cam]["boxes2d"]]
        masks = {h: np.asarray(dense[h][n], np.float32) > MASK_P for h in ("drivable", "lanes") if dense and h in dense}
        size = image.shape[:2] if image is not None else None  # the labels are in camera pixels
        view, labels = camera_view(image, error, cam, boxes, size, masks, truth.get(cam), None, classes)
        views.append(view)
        drawn += [lab for lab in labels if lab not in drawn]
    return views, drawn


def write_preview(path: Path, frames: Sequence[Mapping], cameras: Sequence[str], classes: Sequence[str], header: str,
                  warnings: list[str] | None = None) -> int:
    """Draw `frames` ({"fleet", "clip", "frame", "payload", "dense" or None, "decision", "why"}; up to PREVIEW_FRAMES
    of them, spread evenly) into `path`; returns how many frames it shows (0: nothing written)."""
    from data_engine.report_pictures import contact_sheet, frame_panel, frame_tile, legend_entries
    from hydranet.viz import write_png

    shown = _spread(list(frames), PREVIEW_FRAMES)
    tiles = []
    for f in shown:
        views, drawn = frame_views(Path(f["fleet"]), f["clip"], f["frame"], cameras, f["payload"], f["dense"], classes,
                                   warnings)
        boxes = [b for c in f["payload"]["cameras"].values() for b in c["boxes2d"]]
        facts = [f"decision: {f['decision']} ({f['why']})",
                 f"auto boxes: {len(boxes)}, {sum(b.get('track_id') is not None for b in boxes)} on a track, "
                 f"{sum(bool(b.get('attributes', {}).get('filled')) for b in boxes)} filled in a gap",
                 f"3D boxes: {len(f['payload'].get('boxes3d') or [])}"]
        legend = [(f"{lab.split(' ')[0]} (ensemble mean > {MASK_P})" if lab.endswith("(model)") else
                   lab if "(" in lab else f"{lab} (auto)", color) for lab, color in legend_entries(drawn, classes)]
        panel, _ = frame_panel(f"{f['clip']} / {f['frame']}", facts, legend, max(v.shape[0] for v in views))
        tiles.append(frame_tile(views, panel))
    if not tiles:
        return 0
    sheet, _ = contact_sheet(tiles, header)
    write_png(path, sheet)
    return len(tiles)
