"""the candidate model disagrees with production on the 2D detections (1 - F1 above threshold)"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="model_disagreement", version=1, signal="disagree_det2d", threshold=0.5, quota=50,
                  description="the candidate model disagrees with production on the 2D detections (1 - F1 above threshold)")
