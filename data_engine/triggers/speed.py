"""physically implausible speed: a 3D box faster than its class allows (|v| / vmax above threshold)"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="speed", version=1, signal="speed_excess", threshold=1.0, quota=50,
                  description="physically implausible speed: a 3D box faster than its class allows (|v| / vmax above threshold)")
