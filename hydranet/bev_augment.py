"""BEV data augmentation (BEVDet's "BDA"): turn the whole ego frame about its z axis.

The camera pixels stay as they are; what turns is the frame the network reasons in. For a yaw
theta, R = rot_z(theta) maps the old ego frame to the new one, so

    cam2ego  -> R cam2ego          (the view transform's tables follow: the lifted BEV turns)
    ego2world -> ego2world R^-1     (the video module's ego motion stays consistent)
    3D boxes: centre R c, yaw + theta, velocity R v;  3D lane points R p;  ego velocity R v
    bev raster: resampled (nearest) so that cell (x', y') holds the old value at R^-1 (x', y');
                "bev_valid" (X, Y) marks the cells that came from inside the old raster

Every frame of a clip must get the same theta (the loader seeds all frames of a clip alike).
Cells that come from outside the old raster are 0 and not valid: the bevmap targets ignore them
rather than learn them as "no road, no object".
"""
from __future__ import annotations

from collections.abc import Mapping

import cv2
import numpy as np

from hydranet.bevgrid import BevGrid
from hydranet.geometry import invert_rigid, make_transform, rot_z


def rotate_raster(raster: np.ndarray, grid: BevGrid, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """raster (C, X, Y) on `grid` turned by yaw theta about the ego origin (nearest neighbour).
    Returns the turned raster and inside (X, Y) bool: the cells whose source lies in the old raster
    (the others are 0 and unknown, not empty)."""
    X, Y = grid.shape
    new_xy = grid.cell_centers().reshape(-1, 2)  # (X*Y, 2) ego x, y of every destination cell
    old_xy = new_xy @ rot_z(theta)[:2, :2]  # R^-1 p as row vectors: p R
    rc = grid.to_cell(old_xy).reshape(X, Y, 2).astype(np.float32)  # source (row, col)
    out = [cv2.remap(np.ascontiguousarray(ch), rc[..., 1], rc[..., 0], cv2.INTER_NEAREST,
                     borderMode=cv2.BORDER_CONSTANT, borderValue=0) for ch in raster]
    near = np.floor(rc + 0.5)
    inside = (near[..., 0] >= 0) & (near[..., 0] < X) & (near[..., 1] >= 0) & (near[..., 1] < Y)
    return np.stack(out).astype(raster.dtype), inside


def rotate_sample(sample: Mapping, theta: float, raster_grid: BevGrid | None = None) -> dict:
    """A new sample in the ego frame turned by yaw theta (radians); see the module docstring.
    `raster_grid`: the grid of sample["bev"] (dataset meta["bev"]); needed when the sample has one."""
    R3 = rot_z(theta)
    T = make_transform(R3, np.zeros(3))
    out = dict(sample)
    out["cam2ego"] = (T @ np.asarray(sample["cam2ego"], np.float64)).astype(np.float32)  # (N, 4, 4)
    if "ego2world" in sample:
        out["ego2world"] = np.asarray(sample["ego2world"], np.float64) @ invert_rigid(T)
    if "bev" in sample:
        if raster_grid is None:
            raise ValueError("rotate_sample: the sample has a bev raster but no raster_grid was given")
        out["bev"], inside = rotate_raster(np.asarray(sample["bev"]), raster_grid, theta)
        if "bev_valid" in sample:  # already turned once: what was unknown stays unknown
            inside &= rotate_raster(np.asarray(sample["bev_valid"])[None].astype(np.uint8), raster_grid, theta)[0][0] > 0
        out["bev_valid"] = inside  # (X, Y) bool: raster cells that are known (bevmap ignores the rest)
    labels = dict(sample["labels"])
    labels["boxes3d"] = [{**b, "center": (R3 @ np.asarray(b["center"], np.float64)).tolist(),
                          "yaw": float(np.arctan2(np.sin(b["yaw"] + theta), np.cos(b["yaw"] + theta))),
                          **({"velocity": (R3 @ np.asarray(b["velocity"], np.float64)).tolist()} if "velocity" in b else {})}
                         for b in labels.get("boxes3d", [])]
    labels["lanes3d"] = [{**lane, "points": (np.asarray(lane["points"], np.float64).reshape(-1, 3) @ R3.T).tolist()}
                         for lane in labels.get("lanes3d", [])]
    if "ego_velocity" in labels:
        labels["ego_velocity"] = (R3 @ np.asarray(labels["ego_velocity"], np.float64)).tolist()
    out["labels"] = labels
    return out
