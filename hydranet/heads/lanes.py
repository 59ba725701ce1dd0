"""lanes' numpy side: lane-mask decoding, its labels (lanes2d), per-pixel entropy signals."""
from __future__ import annotations

from hydranet import decoding
from hydranet.heads.base import DenseSignals


class Lanes(DenseSignals):
    name, decoder = "lanes", "lanes"
    camera_labels = ("lanes2d",)
    signal_columns = ("lanes_entropy", "lanes_entropy_p95")
    uncertainty_columns = ("lanes_entropy_p95",)
    decode = staticmethod(decoding.decode_lanes)
