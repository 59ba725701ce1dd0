"""normals' numpy side: unit-normal decoding and its label channel (needs calibration)."""
from __future__ import annotations

import numpy as np

from hydranet import decoding
from hydranet.heads.base import HeadSpec, pixels


class Normals(HeadSpec):
    name, decoder = "normals", "normals"
    channels = ("normals",)
    needs_calibration = True
    decode = staticmethod(decoding.decode_normals)

    @classmethod
    def blank(cls, sample, task):
        N, H, W = pixels(sample)
        return {"normals": np.zeros((N, H, W, 3), np.float32)}
