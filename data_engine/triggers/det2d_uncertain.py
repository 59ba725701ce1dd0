"""2D detections in the uncertain score band: more than threshold heatmap peaks with 0.3 <= p < 0.6"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="det2d_uncertain", version=1, signal="det2d_uncertain", threshold=3, quota=50,
                  description="2D detections in the uncertain score band: more than threshold heatmap peaks with 0.3 <= p < 0.6")
