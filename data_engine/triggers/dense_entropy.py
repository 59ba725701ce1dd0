"""drivable-area tail entropy: the 95th percentile pixel entropy above threshold (nats)"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="dense_entropy", version=1, signal="drivable_entropy_p95", threshold=0.6, quota=50,
                  description="drivable-area tail entropy: the 95th percentile pixel entropy above threshold (nats)")
