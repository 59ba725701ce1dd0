"""cameras disagree in their overlap: share of 3D boxes seen by one camera's 2D detector but not the other's"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="cross_camera", version=1, signal="cross_camera", threshold=0.5, quota=50,
                  description="cameras disagree in their overlap: share of 3D boxes seen by one camera's 2D detector but not the other's")
