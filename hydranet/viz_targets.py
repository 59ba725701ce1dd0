"""What the network sees: one training item drawn as the model receives it (`hydranet viz --targets`).

Karpathy's recipe ("visualize just before the net"): the images after resizing and augmentation, and
every head's targets as its loss reads them, so a wrong resize, a flipped mask or a heatmap on the wrong
cell shows before a run is trusted. The picture names no task: every dense target array of a head
((rows, C, h, w) floats: heatmaps, masks, depth, normals) becomes a panel, its channels' maximum scaled
to [0, 1] (depth on the log colour scale, 3-channel normals as RGB); camera heads' panels sit in their
camera's row at the image size, BEV heads' panels (one row per frame) in a last row; a head's 2D boxes
("gt_boxes", xyxy input pixels) are drawn on the image. A clip item shows its past frames' images too.
"""
from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch

from hydranet.viz import depth_rgb, mosaic, normals_rgb, write_png


def target_panel(key: str, array: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """One target array (C, h, w) as an RGB panel of size hw."""
    if key == "normals" and array.shape[0] == 3:
        rgb = normals_rgb(array.transpose(1, 2, 0))
    elif key == "depth":
        rgb = depth_rgb(array.max(0))
    else:
        a = np.nan_to_num(array.astype(np.float32)).max(0)
        a = a / a.max() if a.max() > 0 else a
        rgb = cv2.applyColorMap((a * 255).astype(np.uint8), cv2.COLORMAP_INFERNO)[..., ::-1]
    return cv2.resize(np.ascontiguousarray(rgb), (hw[1], hw[0]), interpolation=cv2.INTER_NEAREST)


def dense_targets(targets: dict) -> dict[str, np.ndarray]:
    """A head's collated-frame targets that are dense maps: {key: (rows, C, h, w)}."""
    return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in targets.items()
            if isinstance(v, (np.ndarray, torch.Tensor)) and v.ndim == 4 and v.dtype != np.bool_}


def targets_picture(model, item: dict, camera_names: list[str]) -> np.ndarray:
    """RGB mosaic of one `LabelledFrames` item: per camera its input image(s) and every camera head's
    target panels; then every BEV head's panels."""
    images = item["images"].numpy()  # ([T,] N, 3, H, W) uint8
    clip = images[None] if images.ndim == 4 else images  # (T, N, 3, H, W)
    T, N, _, H, W = clip.shape
    rows: list[list[tuple[str, np.ndarray]]] = []
    for n, cam in enumerate(camera_names):
        row = [(f"{cam} t-{T - 1 - t}" if t < T - 1 else f"{cam} input", clip[t, n].transpose(1, 2, 0).copy())
               for t in range(T)]
        for name, task in model.heads.items():
            if task.space != "image":
                continue
            targets = item["targets"][name]
            for box in targets.get("gt_boxes", [np.zeros((0, 4))] * N)[n]:
                x0, y0, x1, y1 = (int(round(float(v))) for v in box)
                cv2.rectangle(row[-1][1], (x0, y0), (x1, y1), (255, 255, 0), 1)
            row += [(f"{name}.{k}", target_panel(k, v[n], (H, W))) for k, v in dense_targets(targets).items()]
        rows.append(row)
    bev = [(f"{name}.{k}", target_panel(k, v[0], (H, H)))
           for name, task in model.heads.items() if task.space == "bev"
           for k, v in dense_targets(item["targets"][name]).items()]
    if bev:
        rows.append(bev)
    cols = max(len(r) for r in rows)
    tiles, names = [], []
    for r in rows:
        r = r + [("", np.zeros((H, W, 3), np.uint8))] * (cols - len(r))
        tiles += [cv2.resize(img, (W, H), interpolation=cv2.INTER_NEAREST) if img.shape[:2] != (H, W) else img
                  for _, img in r]
        names += [label for label, _ in r]
    return mosaic(tiles, names, cols=cols)


def viz_targets(cfg, out: str | Path, frame: int = 0, epoch: int = 0) -> Path:
    """Write the targets picture of training item `frame` of `cfg`'s data in epoch `epoch` (its
    augmentation) to PNG `out`; the model is built from `cfg` (weights are not needed)."""
    from hydranet.checkpoint import model_meta
    from hydranet.data.sources import open_sources, run_dataset
    from hydranet.models import build_model
    from hydranet.train import build_training_data

    out = Path(out)
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {out}: the picture is written as PNG; give a file name ending in .png")
    data = run_dataset(open_sources(cfg.data))
    model = build_model(cfg.model, model_meta(cfg, data))
    frames = build_training_data(cfg, model, data=data)
    if not 0 <= frame < len(frames):
        raise ValueError(f"--frame {frame} is outside the training set's {len(frames)} items")
    if epoch < 0:
        raise ValueError(f"--epoch {epoch}: give an epoch >= 0 (its augmentation is drawn)")
    item = frames[(epoch, frame)]
    sample = frames.prepare((epoch, frame))
    write_png(out, targets_picture(model, item, list(sample["camera_names"])))
    return out
