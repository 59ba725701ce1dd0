"""Repeat-factor sampling (Gupta, Dollár, Girshick, "LVIS", CVPR 2019; mmdetection's ClassBalancedDataset):
frames that hold a rare class are drawn more often. A class seen in a fraction f_c of the training frames gets
r_c = max(1, sqrt(t / f_c)) for the threshold t (`data.repeat_threshold`); a frame is drawn ceil(max r_c over
its classes) times an epoch (once without labelled objects). Every frame is still drawn at least once."""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from hydranet.data import DatasetError, SimDataset
from hydranet.data.sources import MixedDataset


def classes_in(labels: Mapping, cameras: Iterable[str] | None = None) -> set[str]:
    """The object classes of one frame's labels: its 3D boxes and the 2D boxes of `cameras` (None: every camera
    the labels name; a sim labels.json names the whole rig's, a run may read some of them)."""
    out = {b["class"] for b in labels.get("boxes3d", [])}
    cams = labels.get("cameras", {})
    for name in cams if cameras is None else [c for c in cameras if c in cams]:
        out.update(b["class"] for b in cams[name].get("boxes2d", []))
    return out


def frame_classes(ds, i: int) -> set[str]:
    """The classes of dataset frame i, as training sees them: a sim dataset's from its labels.json alone (a bad
    file under on_bad_frame=skip: no classes, the frame is drawn once and skipped as training reads it), a mixed
    run's through its source's class map, any other reader's from the frame itself (every file read once)."""
    if isinstance(ds, MixedDataset):
        k, j = ds.locate(i)
        source = ds.sources[k]
        return {source.class_map.get(c, c) for c in frame_classes(source.dataset, j)} - {None}
    if isinstance(ds, SimDataset):
        try:
            return classes_in(ds.frame_labels(i), ds.rig.names)
        except DatasetError:
            if ds.on_bad_frame == "raise":
                raise
            return set()
    sample = ds[i]
    return classes_in(sample["labels"], sample.get("camera_names"))


def repeat_counts(class_sets: Sequence[Iterable[str]], threshold: float) -> tuple[np.ndarray, dict[str, float]]:
    """Draws per epoch (F,) int of F frames given their class sets, and each class's repeat factor r_c."""
    if not threshold > 0 or not math.isfinite(threshold):
        raise ValueError(f"repeat threshold must be a finite number > 0, got {threshold!r}")
    sets = [set(s) for s in class_sets]
    freq = Counter(c for s in sets for c in s)
    factor = {c: max(1.0, math.sqrt(threshold / (n / max(len(sets), 1)))) for c, n in freq.items()}
    counts = np.array([math.ceil(max((factor[c] for c in s), default=1.0) - 1e-9) for s in sets], np.int64)
    return counts, factor


def repeat_line(counts: np.ndarray, factor: Mapping[str, float], threshold: float) -> str:
    """One line for the training log: what the sampling does to an epoch."""
    rare = sorted(factor, key=lambda c: -factor[c])[:3]
    return (f"class-balanced sampling (data.repeat_threshold {threshold:g}): {len(counts)} frames -> "
            f"{int(counts.sum())} draws an epoch; rarest: " + ", ".join(f"{c} x{factor[c]:.1f}" for c in rare))
