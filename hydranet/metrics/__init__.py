"""Evaluation metrics that need no deep-learning framework (numpy only)."""
from hydranet.metrics.nuscenes_data import (ATTRIBUTE_NAMES, DETECTION_NAMES, EvalBox, NuScenesEvalError,
                                            NuScenesTables, category_to_detection_name, load_predictions)
from hydranet.metrics.nuscenes_detection import (TP_METRICS, DetectionConfig, DetectionMetrics, evaluate_boxes,
                                                 evaluate_nuscenes, format_metrics, write_metrics)

__all__ = ["ATTRIBUTE_NAMES", "DETECTION_NAMES", "TP_METRICS", "DetectionConfig", "DetectionMetrics", "EvalBox",
           "NuScenesEvalError", "NuScenesTables", "category_to_detection_name", "evaluate_boxes", "evaluate_nuscenes",
           "format_metrics", "load_predictions", "write_metrics"]
