"""2D detections and projected 3D boxes disagree: 1 - mean best IoU above threshold"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="box2d_vs_3d", version=1, signal="box2d_vs_3d", threshold=0.8, quota=50,
                  description="2D detections and projected 3D boxes disagree: 1 - mean best IoU above threshold")
