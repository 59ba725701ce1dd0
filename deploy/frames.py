"""Sim frames for the deploy side (calibration, benchmarks): numpy + OpenCV, no torch.

`dataset_frames(root, cameras, count)` reads the first `count` frames of a generated dataset
(docs/dataset_format.md) for the given cameras, at the cameras' own resolution (the runtime
resizes them to the model size)."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np


def dataset_frames(root: str | Path, cameras: Sequence[str], count: int) -> Iterator[dict]:
    """Yields {"images" (N, H, W, 3) uint8 RGB, "ego2world" (4, 4) float64, "scene", "first_of_scene"}."""
    from hydranet.data.formats import open_dataset

    ds = open_dataset(root, cameras=list(cameras), channels=("images",))  # any format, detected (docs/datasets.md)
    if len(ds) == 0:
        raise ValueError(f"dataset {root} has no frames")
    prev_scene = None
    for i in range(min(count, len(ds))):
        s = ds[i]
        yield {"images": s["images"], "ego2world": np.asarray(s["ego2world"], np.float64), "scene": s["scene"],
               "first_of_scene": s["scene"] != prev_scene}
        prev_scene = s["scene"]
