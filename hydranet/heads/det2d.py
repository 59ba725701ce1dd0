"""det2d's numpy side: CenterNet decoding, its labels (boxes2d, drawn by people too), peak signals."""
from __future__ import annotations

import numpy as np

from hydranet import decoding
from hydranet.heads.base import PeakSignals, detections


class Det2d(PeakSignals):
    name, decoder = "det2d", "centernet"
    camera_labels = ("boxes2d", "dontcare")
    human_labels = True
    signal_columns = ("det2d_entropy", "det2d_uncertain", "det2d_margin")
    uncertainty_columns = ("det2d_entropy", "det2d_uncertain")
    ensemble_spread = "var"
    trigger_rows = (("det2d_uncertain", 1, "det2d_uncertain", 3, 50,
                     "2D detections in the uncertain score band: more than threshold heatmap peaks with 0.3 <= p < 0.6"),)
    trigger_rank = 0
    decode = staticmethod(decoding.decode_centernet)

    @staticmethod
    def dense_map(outputs):
        return decoding.sigmoid(np.asarray(outputs["heatmap"], np.float32)).max(1)  # (B*N, H, W) strongest class

    @classmethod
    def predictions(cls, results, n_cams):
        return [detections(r, 1) for r in results[:n_cams]]
