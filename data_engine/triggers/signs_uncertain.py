"""signs and lights the model hesitates on: mean peak entropy above threshold (nats)"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="signs_uncertain", version=1, signal="signs_lights_entropy", threshold=0.45, quota=50,
                  description="signs and lights the model hesitates on: mean peak entropy above threshold (nats)")
