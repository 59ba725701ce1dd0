"""box jitter: the second difference of tracked 2D boxes, relative to their size, above threshold"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="jitter", version=1, signal="jitter", threshold=0.08, quota=50,
                  description="box jitter: the second difference of tracked 2D boxes, relative to their size, above threshold")
