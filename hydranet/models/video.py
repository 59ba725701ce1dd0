"""Video module: a queue of past BEV features aligned to the current ego pose, and `BevFusion`,
the `fusion` part of HydraNet (view transform + video queue).

BEVDet4D (Huang & Huang, 2022) and the video module of Tesla's AI Day 2021: the BEV features of
the last T-1 frames are kept, each warped into the current ego frame by the ego motion (a static
object stays put in the world), concatenated with the current frame's features and fused by a
conv. The warp is `grid_sample` on a sampling grid computed in-graph from the 4x4 ego motion, so
it exports to ONNX (GridSample, opset 16+).

The state is explicit, so a deployed network is stateless:
    in:  prev_bev (B, T-1, C, X, Y): the single-frame BEV features of the previous T-1 frames,
         already aligned to the previous frame (the `bev_queue` output of the last call);
         ego_motion (B, 4, 4): previous ego frame -> current ego frame = inv(E_t) @ E_{t-1}
         with E the ego2world poses.
    out: bev_queue (B, T-1, C, X, Y) for the next call.
Training samples short clips (batch["images"] (B, T, N, 3, H, W), batch["ego2world"] (B, T, 4, 4));
the queue starts at zeros (or at batch["prev_bev"]) and is rolled through the clip.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hydranet.bevgrid import BevGrid
from hydranet.models.view_transform import ViewTransform, batch_calibration
from hydranet.models.layers import conv_bn_relu
from hydranet.stream import relative_motion


class VideoQueue(nn.Module):
    """Fuse the current BEV features with the T-1 previous ones warped by the ego motion."""

    def __init__(self, channels: int, grid: BevGrid, frames: int, fuse_depth: int = 1):
        super().__init__()
        if frames < 2:
            raise ValueError(f"the video module needs frames >= 2 (current + past), got {frames}")
        if fuse_depth < 1:
            raise ValueError(f"model.bev.video_fuse_depth must be >= 1, got {fuse_depth}")
        self.frames, self.channels, self.grid = frames, channels, grid
        # (B, T*C, X, Y) -> (B, C, X, Y); each 3x3 layer widens the reach by one cell each side, and a
        # moving object is displaced by speed * frame interval between the maps
        self.fuse = conv_bn_relu(channels * frames, channels, fuse_depth)
        xy = torch.from_numpy(grid.cell_centers()).float()  # (X, Y, 2)
        self.register_buffer("centers", torch.cat([xy, torch.zeros_like(xy[..., :1])], -1), persistent=False)  # (X, Y, 3)

    def sampling_grid(self, ego_motion: torch.Tensor) -> torch.Tensor:
        """(B, 4, 4) prev->cur motion -> grid_sample grid (B, X, Y, 2): for every current cell the
        normalized position of the same world point in the previous BEV map."""
        R, t = ego_motion[:, :3, :3].float(), ego_motion[:, :3, 3].float()  # (B, 3, 3), (B, 3)
        p = self.centers.flatten(0, 1)[None] - t[:, None]  # (B, X*Y, 3)
        q = p @ R  # (B, X*Y, 3) = R^T (p - t): the point in the previous ego frame
        (x0, x1), (y0, y1) = self.grid.x_range, self.grid.y_range
        gx = 2 * (y1 - q[..., 1]) / (y1 - y0) - 1  # width axis = columns = -y
        gy = 2 * (x1 - q[..., 0]) / (x1 - x0) - 1  # height axis = rows = -x
        X, Y = self.grid.shape
        return torch.stack([gx, gy], -1).view(-1, X, Y, 2)

    def warp(self, queue: torch.Tensor, ego_motion: torch.Tensor) -> torch.Tensor:
        """queue (B, K, C, X, Y) in the previous ego frame -> the same in the current one (zeros
        where the previous map did not reach)."""
        B, K, C, X, Y = queue.shape
        g = self.sampling_grid(ego_motion)[:, None].expand(B, K, X, Y, 2).reshape(B * K, X, Y, 2)
        out = F.grid_sample(queue.reshape(B * K, C, X, Y), g.to(queue.dtype), mode="bilinear",
                            padding_mode="zeros", align_corners=False)
        return out.view(B, K, C, X, Y)

    def forward(self, bev: torch.Tensor, queue: torch.Tensor, ego_motion: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """bev (B, C, X, Y) of this frame, queue (B, T-1, C, X, Y) (zeros = no history),
        ego_motion (B, 4, 4) ->
        (fused (B, C, X, Y), new queue (B, T-1, C, X, Y) aligned to this frame)."""
        # an all-zero slot holds no history (a stream start): it takes the current map, so the
        # first frames of a stream look like a standing scene rather than an empty one
        empty = queue.flatten(2).abs().amax(-1) == 0  # (B, T-1)
        past = torch.where(empty[..., None, None, None], bev[:, None].expand_as(queue), self.warp(queue, ego_motion))
        fused = self.fuse(torch.cat([bev[:, None], past], 1).flatten(1, 2))  # (B, C, X, Y)
        return fused, torch.cat([bev[:, None], past[:, :-1]], 1)

    def empty_queue(self, bev: torch.Tensor) -> torch.Tensor:
        return bev.new_zeros(bev.shape[0], self.frames - 1, *bev.shape[1:])


class BevFusion(nn.Module):
    """HydraNet's `fusion`: view transform, then (optionally) the video queue.

    `forward(feats, batch)` -> (bev (B, C, X, Y), state, aux): state is {} without video, else
    {"bev_queue": (B, T-1, C, X, Y)}; aux the auxiliary objectives' inputs of each clip's last
    frame {name: (B, ...)} (empty without any). See docs/bev.md for the batch keys."""

    def __init__(self, view: ViewTransform, video: VideoQueue | None = None):
        super().__init__()
        if video is not None and video.channels != view.out_channels:
            raise ValueError(f"video module has {video.channels} channels, the view transform gives {view.out_channels}")
        self.view, self.video = view, video
        self.out_channels, self.grid = view.out_channels, view.grid

    @property
    def auxiliary(self) -> dict:
        """The view transform's auxiliary objectives (LSS depth supervision), {name: objective}."""
        return self.view.auxiliary

    def forward(self, feats: Sequence[torch.Tensor], batch: Mapping[str, Any]) -> tuple[torch.Tensor, dict, dict]:
        images = batch["images"]
        B, T = images.shape[0], (images.shape[1] if images.dim() == 6 else 1)
        K, E, D = batch_calibration(batch, B * T)
        bev, aux = self.view(feats, B * T, tuple(images.shape[-2:]), K, E, D)  # (B*T, C, X, Y), {name: (B*T, ...)}
        bev = bev.view(B, T, *bev.shape[1:])
        aux = {k: v.reshape(B, T, *v.shape[1:])[:, -1] for k, v in aux.items()}  # the last frame's
        if self.video is None:
            return bev[:, -1], {}, aux
        queue, motion = batch.get("prev_bev"), batch.get("ego_motion")
        if (queue is None) != (motion is None):
            raise ValueError("the video module needs both batch['prev_bev'] and batch['ego_motion'] (or neither: "
                             "the queue then starts empty)")
        if queue is None:
            queue = self.video.empty_queue(bev[:, 0])
            motion = torch.eye(4, device=bev.device).expand(B, 4, 4)
        want = (B, self.video.frames - 1, *bev.shape[2:])
        if tuple(queue.shape) != want:
            raise ValueError(f"batch['prev_bev'] has shape {tuple(queue.shape)}, the video module expects {want}")
        if T > 1:
            if "ego2world" not in batch:
                raise ValueError("a clip batch (images (B, T, N, 3, H, W)) needs batch['ego2world'] (B, T, 4, 4)")
            poses = np.asarray(torch.as_tensor(batch["ego2world"]).detach().cpu(), np.float64)  # (B, T, 4, 4)
            steps = torch.from_numpy(relative_motion(poses[:, :-1], poses[:, 1:])).to(bev.device)  # (B, T-1, 4, 4)
        for t in range(T):
            m = motion if t == 0 else steps[:, t - 1]
            fused, queue = self.video(bev[:, t], queue, m.to(bev.dtype))
        return fused, {"bev_queue": queue}, aux
