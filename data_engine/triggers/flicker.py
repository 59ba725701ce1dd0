"""flickering 2D detections: more than threshold one-frame blinks or gaps across consecutive frames"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="flicker", version=1, signal="flicker", threshold=1, quota=50,
                  description="flickering 2D detections: more than threshold one-frame blinks or gaps across consecutive frames")
