"""signs_lights' numpy side: CenterNet decoding, its labels (boxes2d, drawn by people too), peak signals."""
from __future__ import annotations

from hydranet import decoding
from hydranet.heads.base import PeakSignals


class SignsLights(PeakSignals):
    name, decoder = "signs_lights", "centernet"
    camera_labels = ("boxes2d",)
    human_labels = True
    signal_columns = ("signs_lights_entropy", "signs_lights_uncertain", "signs_lights_margin")
    uncertainty_columns = ("signs_lights_entropy",)
    trigger_rows = (("signs_uncertain", 1, "signs_lights_entropy", 0.45, 50,
                     "signs and lights the model hesitates on: mean peak entropy above threshold (nats)"),)
    trigger_rank = 2
    decode = staticmethod(decoding.decode_centernet)
