"""Scene-ordered streaming with the video state: one loop for eager models, ONNX sessions and the
torch-free runtime alike.

A model with the video module (hydranet/models/video.py) is stateless as a graph: every call takes
the previous call's BEV queue `prev_bev` (B, T-1, C, X, Y) and the ego motion `ego_motion` (B, 4, 4)
from the previous ego frame to the current one, and returns the new queue. `VideoState` remembers
both for one stream and starts over at a new scene; `stream()` drives any model through frames in
order with it. Everything here is numpy (no torch import), so the car-side runtime uses it too:

    for frame, result in stream(frames, step, video=True):   # frames: {"scene", "ego2world", ...}
        ...                                                   # step(frame, prev_bev, ego_motion) -> (result, queue)
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

F = TypeVar("F", bound=Mapping)
R = TypeVar("R")
Step = Callable[[F, "np.ndarray | None", "np.ndarray | None"], "tuple[R, np.ndarray | None]"]


def relative_motion(ego2world_prev: np.ndarray, ego2world_cur: np.ndarray) -> np.ndarray:
    """(..., 4, 4) poses -> previous ego -> current ego = inv(E_cur) @ E_prev, computed in float64
    (world coordinates can be large), returned float32."""
    a, b = np.asarray(ego2world_prev, np.float64), np.asarray(ego2world_cur, np.float64)
    R_, t = b[..., :3, :3], b[..., :3, 3:]
    Rt = np.swapaxes(R_, -1, -2)
    inv = np.concatenate([np.concatenate([Rt, -Rt @ t], -1), b[..., 3:, :]], -2)
    return (inv @ a).astype(np.float32)


class VideoState:
    """The video memory of one stream: the last BEV queue, the pose and the scene it belongs to."""

    def __init__(self) -> None:
        self.queue: np.ndarray | None = None  # (B, T-1, C, X, Y)
        self.pose: np.ndarray | None = None  # (B, 4, 4) or (4, 4) ego2world of the frame that made it
        self.scene: Hashable | None = None

    def reset(self) -> None:
        """Forget everything: the next frame starts from an empty queue (a new drive, a jump in time)."""
        self.queue, self.pose, self.scene = None, None, None

    def inputs(self, ego2world: np.ndarray | None, scene: Hashable | None = None,
               ego_motion: np.ndarray | None = None) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(prev_bev, ego_motion) for the next frame, or (None, None) at a stream start: no queue
        yet, another scene, or no way to align the queue (no pose and no motion given)."""
        if self.queue is None or (scene is not None and scene != self.scene):
            self.reset()
            return None, None
        if ego_motion is None:
            if ego2world is None or self.pose is None:
                raise ValueError("this model has a video module: pass ego2world (4x4 ego pose) with every frame (or "
                                 "ego_motion prev->current), or call reset() before a frame without one")
            ego_motion = relative_motion(self.pose, ego2world)
        return self.queue, np.asarray(ego_motion, np.float32)

    def update(self, queue: np.ndarray | None, ego2world: np.ndarray | None, scene: Hashable | None = None) -> None:
        """Remember the queue a frame produced and where the car was."""
        self.queue = None if queue is None else np.asarray(queue, np.float32)
        self.pose = None if ego2world is None else np.asarray(ego2world, np.float64)
        self.scene = scene


def stream(frames: Iterable[F], step: Step, video: bool) -> Iterator[tuple[F, Any]]:
    """Run `step` over `frames` in order, carrying the video state within each scene.

    `frames`: mappings with "scene" (any hashable; a new value starts a new stream) and
    "ego2world" ((4, 4) or (B, 4, 4)). `step(frame, prev_bev, ego_motion)` runs the model (None,
    None at a stream start: the model starts from an empty queue) and returns (result, new queue or
    None). Yields (frame, result). `video` False: no state is carried at all."""
    state = VideoState()
    for frame in frames:
        prev, motion = state.inputs(frame["ego2world"], frame["scene"]) if video else (None, None)
        result, queue = step(frame, prev, motion)
        if video:
            state.update(queue, frame["ego2world"], frame["scene"])
        yield frame, result


def predict_stream(model, frames, batch_size: int = 2, device="cpu", indices: Iterable[int] | None = None,
                   on_outputs: Callable[[dict, dict], None] | None = None) -> Iterator[tuple[dict, dict]]:
    """(batch, decoded predictions) of a HydraNet, or of a stand-in with `heads`, `video_frames`
    and `forward(batch, "predict")` (deploy.onnx_eval.OnnxPredictor), over the items `indices`
    (default all) of `frames` (a `hydranet.loader.LabelledFrames` of single frames) in order.

    A video model runs one frame at a time, its queue carried within each scene by `stream`; other
    models take `batch_size` frames at once. `on_outputs(raw, batch)`: called with every batch's
    raw head outputs (mode "tensor") before decoding (torch models only)."""
    import torch

    from hydranet.loader import Collate, to_device

    if frames.clip_length != 1:
        raise ValueError("predict_stream takes single frames (clip_length 1); the video queue is fed frame by frame")
    video = model.video_frames > 1
    order = list(range(len(frames)) if indices is None else indices)
    size = 1 if video else max(int(batch_size), 1)
    collate = Collate(model.heads)
    is_bad = getattr(frames.data, "is_bad", None)

    def items():
        for k in range(0, len(order), size):
            got = [(i, frames[i]) for i in order[k:k + size]]
            # on_bad_frame="skip": a bad frame's item is the next good frame read in its place; it is
            # counted in `skipped` and not predicted (scored) a second time
            got = [(i, item) for i, item in got if is_bad is None or not is_bad(frames.frame_index(i))]
            if not got:
                continue
            batch = collate([item for _, item in got])
            scene = frames.data.frame_ids[frames.frame_index(got[0][0])][0]
            yield {"batch": batch, "scene": scene, "ego2world": batch["ego2world"].numpy()}

    @torch.no_grad()
    def step(item, prev_bev, ego_motion):
        batch = item["batch"]
        if prev_bev is not None:
            batch["prev_bev"], batch["ego_motion"] = torch.from_numpy(prev_bev), torch.from_numpy(ego_motion)
        if on_outputs is None:
            decoded = model(to_device(batch, device), "predict")
        else:
            raw = model(to_device(batch, device), "tensor")
            state = raw.pop("bev_state", None)
            on_outputs(raw, batch)
            decoded = {**model.decode(raw), **({"bev_state": state} if state is not None else {})}
        queue = decoded["bev_state"]["bev_queue"].float().cpu().numpy() if video else None
        return decoded, queue

    for item, decoded in stream(items(), step, video):
        yield item["batch"], decoded


def predict_frame(model, frames, index: int) -> tuple[dict, dict]:
    """(sample at the model size, decoded predictions) of dataset frame `index` of `frames`; a video
    model first runs the up to T-1 earlier frames of the same scene, as in the car."""
    device = next(model.parameters()).device
    scene = frames.data.frame_ids[index][0]
    first = index
    while first > 0 and index - first < model.video_frames - 1 and frames.data.frame_ids[first - 1][0] == scene:
        first -= 1
    model.eval()
    results = list(predict_stream(model, frames, 1, device, indices=range(first, index + 1)))
    if getattr(frames.data, "is_bad", lambda i: False)(index):
        raise ValueError(f"frame {index} is bad (a corrupt or missing file, skipped with data.on_bad_frame=skip: "
                         f"{', '.join(frames.data.skipped[-3:])}); pick another frame")
    return frames.prepare(index), results[-1][1]
