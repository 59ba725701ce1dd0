"""physically implausible acceleration of a tracked 3D box (m/s^2 above threshold)"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="accel", version=1, signal="accel", threshold=15.0, quota=50,
                  description="physically implausible acceleration of a tracked 3D box (m/s^2 above threshold)")
