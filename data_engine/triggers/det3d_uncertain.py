"""3D detections in the uncertain score band: more than threshold BEV heatmap peaks with 0.3 <= p < 0.6"""
from data_engine.triggers import Trigger

TRIGGER = Trigger(name="det3d_uncertain", version=1, signal="det3d_uncertain", threshold=2, quota=50,
                  description="3D detections in the uncertain score band: more than threshold BEV heatmap peaks with 0.3 <= p < 0.6")
