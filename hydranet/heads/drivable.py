"""drivable's numpy side: binary-mask decoding, its label channel, per-pixel entropy signals."""
from __future__ import annotations

import numpy as np

from hydranet import decoding
from hydranet.heads.base import DenseSignals, pixels


class Drivable(DenseSignals):
    name, decoder = "drivable", "binary_mask"
    channels = ("drivable",)
    signal_columns = ("drivable_entropy", "drivable_entropy_p95")
    uncertainty_columns = ("drivable_entropy_p95",)
    ensemble_spread = "var"
    trigger_rows = (("dense_entropy", 1, "drivable_entropy_p95", 0.6, 50,
                     "drivable-area tail entropy: the 95th percentile pixel entropy above threshold (nats)"),)
    trigger_rank = 3
    decode = staticmethod(decoding.decode_binary_mask)

    @staticmethod
    def dense_map(outputs):
        return decoding.sigmoid(np.asarray(outputs["logits"], np.float32)[:, 0])  # (B*N, H, W) probability

    @classmethod
    def blank(cls, sample, task):
        N, H, W = pixels(sample)
        return {"drivable": np.zeros((N, H, W), bool)}
