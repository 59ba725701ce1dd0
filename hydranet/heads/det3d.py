"""det3d's numpy side: CenterPoint decoding in the BEV, its labels (boxes3d), peak signals."""
from __future__ import annotations

from hydranet import decoding
from hydranet.heads.base import PeakSignals, detections


class Det3d(PeakSignals):
    name, space, decoder = "det3d", "bev", "centerpoint"
    frame_labels = ("boxes3d",)
    needs_calibration = True
    signal_columns = ("det3d_entropy", "det3d_uncertain", "det3d_margin")
    uncertainty_columns = ("det3d_entropy", "det3d_uncertain")
    trigger_rows = (("det3d_uncertain", 1, "det3d_uncertain", 2, 50,
                     "3D detections in the uncertain score band: more than threshold BEV heatmap peaks with 0.3 <= p < 0.6"),)
    trigger_rank = 1
    decode = staticmethod(decoding.decode_centerpoint)

    @classmethod
    def predictions(cls, results, n_cams):
        return detections(results[0], 2)
