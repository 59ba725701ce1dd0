"""Offline auto-labelling with hindsight (server side; never imported by the car side). docs/autolabel.md.

    fuse.py     ensemble + flip TTA per frame: weighted box fusion (2D), BEV-distance fusion (3D)
    track.py    offline multi-object tracking over a clip, forward and backward (2D per camera, 3D in the world)
    smooth.py   track-level hindsight: Kalman filter + RTS smoother (filterpy), one size per track, yaw from motion
    dense.py    dense heads: the ensemble mean, per-pixel agreement as confidence
    ensemble.py the models (deploy.runtime.HydraRuntime, torch-free) checked against the fleet and run over a clip
    clip.py     one clip: fused, tracked, smoothed -> a labels.json payload per frame
    policy.py   auto-accept or queue for a person
    run.py      `hydranet engine autolabel`: selection -> clips -> labels in the catalog (source "auto") + OUT
"""
from data_engine.autolabel.ensemble import AutolabelError
from data_engine.autolabel.run import run_autolabel

__all__ = ["AutolabelError", "run_autolabel"]
