"""the depth head contradicts the 3D boxes: mean relative depth error at box centres above threshold"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="depth_vs_3d", version=1, signal="depth_vs_3d", threshold=0.5, quota=50,
                  description="the depth head contradicts the 3D boxes: mean relative depth error at box centres above threshold")
