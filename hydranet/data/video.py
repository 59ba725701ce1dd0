"""Camera videos as frames: an index of a video's frames and their container timestamps, and
frame-accurate, deterministic reads by frame index. torch-free (the car side and the fleet use it).

Decoder: PyAV (FFmpeg's libraries). Chosen over OpenCV's FFmpeg backend because it gives every
decoded frame's presentation timestamp in the stream's time base (the recording's own clock, exact
on variable frame rate), and decoding forward from the start is frame-accurate by construction,
where `cv2.CAP_PROP_POS_FRAMES` seeks are approximate for inter-coded streams. A frame index is
the frame's position in presentation order (the order the decoder returns frames); the same index
gives the same pixels on every run (software decoding is deterministic).

A video that cannot be opened, holds no video stream, ends in the middle of a frame (truncated) or
makes the decoder fail is a `VideoError` naming the file, never a shorter clip.
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv")


class VideoError(ValueError):
    """A video file that is not a whole, decodable video; one line naming it."""


def _av():
    try:
        import av
    except ImportError:
        raise VideoError("reading videos needs PyAV: pip install av (it is in the engine extra)") from None
    return av


def _open(path: Path):
    av = _av()
    try:
        container = av.open(str(path))
    except FileNotFoundError:
        raise VideoError(f"{path}: video is missing") from None
    except (av.error.FFmpegError, OSError, ValueError) as e:
        raise VideoError(f"{path}: not a readable video: truncated, damaged or not a video ({e}); re-export or "
                         "re-record it") from None
    if not container.streams.video:
        container.close()
        raise VideoError(f"{path}: holds no video stream")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"  # frame threads: the same pixels, decoded faster
    return container, stream


def _decoded(container, stream, path: Path):
    """Frames in presentation order; VideoError if the decoder fails or the stream is cut short."""
    av = _av()
    try:
        for packet in container.demux(stream):
            if packet.size and packet.is_corrupt:
                raise VideoError(f"{path}: corrupt packet at {packet.pts}; the file is damaged: re-export it")
            for frame in packet.decode():
                yield frame
    except av.error.FFmpegError as e:
        raise VideoError(f"{path}: the decoder failed ({e}); the file is truncated or damaged: re-export it") from None


def index_video(path: str | Path) -> tuple[list[float], tuple[int, int]]:
    """([presentation time in seconds of every frame, in order], (H, W)), decoding the whole video once
    (so a damaged file is found at ingest, not mid-shadow). VideoError when no frame decodes."""
    path = Path(path)
    container, stream = _open(path)
    try:
        times, size = [], None
        for frame in _decoded(container, stream, path):
            if frame.pts is None:
                raise VideoError(f"{path}: frame {len(times)} has no timestamp; remux the video (ffmpeg -i IN -c copy OUT)")
            times.append(float(frame.pts * stream.time_base))
            size = (frame.height, frame.width)
    finally:
        container.close()
    if not times:
        raise VideoError(f"{path}: no frame decodes (empty or truncated video); re-export it")
    if any(b <= a for a, b in zip(times, times[1:])):
        raise VideoError(f"{path}: frame timestamps are not increasing; remux the video (ffmpeg -i IN -c copy OUT)")
    return times, size


class VideoFrames:
    """Sequential reader of one video: `frame(i)` decodes forward to frame i (reopening the file only
    when i is behind the last frame read), so reading a clip in order decodes each frame once."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._container = self._frames = None
        self._next = 0  # index of the frame the generator yields next

    def _restart(self) -> None:
        self.close()
        self._container, stream = _open(self.path)
        self._frames = _decoded(self._container, stream, self.path)
        self._next = 0

    def frame(self, i: int) -> np.ndarray:
        """(H, W, 3) uint8 RGB of frame i (presentation order)."""
        if self._frames is None or i < self._next:
            self._restart()
        while True:
            f = next(self._frames, None)
            if f is None:
                n = self._next
                self.close()
                raise VideoError(f"{self.path}: has {n} frames, frame {i} was asked for; the video changed since it "
                                 "was ingested (or is truncated): ingest it again")
            self._next += 1
            if self._next - 1 == i:
                return f.to_ndarray(format="rgb24")

    def close(self) -> None:
        if self._container is not None:
            self._container.close()
        self._container = self._frames = None


_OPEN: OrderedDict[str, VideoFrames] = OrderedDict()  # per process: the videos read most recently
_MAX_OPEN = 16


def read_video_frame(path: str | Path, index: int) -> np.ndarray:
    """Frame `index` of the video at `path` (RGB), through a per-process cache of sequential readers."""
    key = str(path)
    reader = _OPEN.pop(key, None) or VideoFrames(path)
    _OPEN[key] = reader
    while len(_OPEN) > _MAX_OPEN:
        _OPEN.popitem(last=False)[1].close()
    try:
        return reader.frame(index)
    except VideoError:
        _OPEN.pop(key, None)
        raise
