"""depth's numpy side: metric-depth decoding and its label channel (needs calibration)."""
from __future__ import annotations

import numpy as np

from hydranet import decoding
from hydranet.heads.base import HeadSpec, pixels


class Depth(HeadSpec):
    name, decoder = "depth", "depth"
    channels = ("depth",)
    needs_calibration = True
    ensemble_spread = "std"
    decode = staticmethod(decoding.decode_depth)

    @staticmethod
    def dense_map(outputs):
        return np.asarray(outputs["logits"], np.float32)[:, 0]  # (B*N, H, W) log depth

    @classmethod
    def blank(cls, sample, task):
        N, H, W = pixels(sample)
        return {"depth": np.zeros((N, H, W), np.float32)}
