"""bevmap's numpy side: multi-class BEV mask decoding and its raster label (turned with lanes3d)."""
from __future__ import annotations

import numpy as np

from hydranet import decoding
from hydranet.heads.base import HeadSpec


class BevMap(HeadSpec):
    name, space, decoder = "bevmap", "bev", "multi_mask"
    frame_labels = ("lanes3d",)  # turned with the raster by the BEV augmentation
    channels = ("bev",)
    needs_calibration = True
    decode = staticmethod(decoding.decode_multi_mask)

    @classmethod
    def blank(cls, sample, task):
        grid = getattr(task, "source_grid", None) or getattr(task, "grid", None)  # any BEV task's raster size
        return {} if grid is None else {"bev": np.zeros((3, *grid.shape), np.uint8)}
