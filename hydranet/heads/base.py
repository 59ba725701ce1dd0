"""The numpy side of a head: the `HeadSpec` contract, the signals the built-in heads share
(`PeakSignals`, `DenseSignals`) and the registry (`HEADS`, `register_head`, `heads_where`). The
package `hydranet.heads` (its __init__) registers every head module; see its docstring.

This module must not import torch (the car side reads it; a test checks it in a fresh process). A
spec is a class of class attributes and class methods, never instantiated:

- `name`, `space` ("image": results per camera, b*N + n; "bev": one per frame);
- `decoder`: the `hydranet.decoding.DECODERS` kind it registers (None: the runtime hands out raw
  outputs), with `decode(outputs, **params)` numpy outputs -> per-item results;
- `camera_labels`, `frame_labels`, `channels`: the label keys it reads (labels.json entries per
  camera and per frame, dense sample arrays); `blank(sample, task)` what stands in for them in a
  frame that does not supervise the head (the loss never reads it);
- `needs_calibration`, `human_labels`;
- engine signals, in the spirit of Lightly's scorers: `signal_columns` (catalog columns, one float
  per frame, NaN where they do not apply), `signal_outputs` (the raw outputs they read, refused when
  non-finite) and `signals(outputs, decoded, n_cams) -> ({column: float}, {column: [per camera]})`;
  `uncertainty_columns` (those of its columns the miner's uncertainty strategy ranks frames by);
  `ensemble_spread` ("var" for a probability map, "std" for a regression, None: not compared) and
  `dense_map(outputs)`: the per-pixel map of its raw outputs that ensemble members and flip TTA are
  compared on (data_engine.uncertainty's `ens_<head>`, `tta_<head>` columns);
  `predictions(results, n_cams)`: what shadow mode keeps of a frame's results (JSON), or None;
- `trigger_rows`: its default triggers (`data_engine.triggers` builds its table from them), each
  `(name, version, signal, threshold, quota, description)` reading one of its `signal_columns`;
  `trigger_rank`: where its rows run among the heads' (the triggers strategy takes one frame per
  trigger in turn; equal ranks keep registration order).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from hydranet import decoding


def entropy(p: np.ndarray) -> np.ndarray:
    """Binary entropy H(p) = -p ln p - (1-p) ln(1-p) in nats (at most ln 2)."""
    p = np.clip(np.asarray(p, np.float64), 1e-7, 1 - 1e-7)
    return -(p * np.log(p) + (1 - p) * np.log(1 - p))


PEAK_TOP_K, PEAK_MIN, UNCERTAIN_BAND = 20, 0.05, (0.3, 0.6)


def peak_scores(logits: np.ndarray) -> list[np.ndarray]:
    """Per item of heatmaps (B, C, h, w): the scores of its top-K (K=20) 3x3 peaks above 0.05."""
    return [p[0] for p in decoding.heatmap_peaks(np.asarray(logits, np.float32), PEAK_MIN, PEAK_TOP_K)]


def peak_stats(logits: np.ndarray | None = None, scores: list[np.ndarray] | None = None) -> tuple[float, float, float]:
    """(mean entropy, uncertain count, mean margin) of the top-K peaks of heatmaps (B, C, h, w), all items
    (or of `scores`, peak_scores' per-item lists, so the peaks are found once per head)."""
    per_item = peak_scores(logits) if scores is None else scores
    scores = np.concatenate(per_item or [np.zeros(0)])
    if scores.size == 0:
        return 0.0, 0.0, 0.0
    band = float(((scores >= UNCERTAIN_BAND[0]) & (scores < UNCERTAIN_BAND[1])).sum())
    return float(entropy(scores).mean()), band, float((1 - np.abs(2 * scores - 1)).mean())


class HeadSpec:
    """The numpy side of a head; subclass it with class attributes (see the module docstring)."""

    name: str = ""
    space: str = "image"
    decoder: str | None = None
    camera_labels: tuple[str, ...] = ()
    frame_labels: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    needs_calibration: bool = False
    human_labels: bool = False
    signal_columns: tuple[str, ...] = ()
    signal_outputs: tuple[str, ...] = ()
    uncertainty_columns: tuple[str, ...] = ()
    ensemble_spread: str | None = None
    trigger_rows: tuple[tuple, ...] = ()  # (name, version, signal, threshold, quota, description)
    trigger_rank: int = 100  # after the built-in heads' rows

    @classmethod
    def label_keys(cls) -> tuple[str, ...]:
        return (*cls.camera_labels, *cls.frame_labels, *cls.channels)

    @staticmethod
    def decode(outputs: Mapping[str, np.ndarray], **params: Any) -> list:
        raise NotImplementedError("a head with a `decoder` kind defines `decode(outputs, **params)`")

    @staticmethod
    def dense_map(outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Raw outputs {key: (B*N, C, H, W)} -> (B*N, H, W) float32 per-pixel map (a head with `ensemble_spread`)."""
        raise NotImplementedError("a head with an `ensemble_spread` defines `dense_map(outputs)`")

    @classmethod
    def blank(cls, sample: Mapping, task: Any) -> dict[str, Any]:
        """Dense sample arrays standing in for `channels` in a frame without this head's labels
        (label entries are blanked from `camera_labels`/`frame_labels` by `blank_sample`)."""
        return {}

    @classmethod
    def signals(cls, outputs: Mapping[str, np.ndarray], decoded: list | None,
                n_cams: int) -> tuple[dict[str, float], dict[str, list[float]]]:
        """This head's engine signals of one frame from its raw outputs {output: array} (the prefix
        "<name>." removed) and its decoded results (None without a decoder)."""
        return {}, {}

    @classmethod
    def predictions(cls, results: list, n_cams: int) -> Any:
        """What shadow mode stores of this head's results on a frame (JSON-able), or None."""
        return None


def pixels(sample: Mapping) -> tuple[int, int, int]:
    """(N, H, W) of a sample's camera images."""
    images = sample["images"]  # (N, H, W, 3) uint8
    return len(images), images.shape[1], images.shape[2]


class PeakSignals(HeadSpec):
    """Signals of a heatmap head: `<name>_entropy` (mean H(p) over the top-20 3x3 peaks above 0.05 of
    every camera or of the BEV heatmap), `<name>_uncertain` (peaks with 0.3 <= p < 0.6),
    `<name>_margin` (mean 1 - |2p - 1|); camera heads also give the entropy per camera."""

    signal_outputs = ("heatmap",)

    @classmethod
    def signals(cls, outputs, decoded, n_cams):
        if "heatmap" not in outputs:
            return {}, {}
        per_item = peak_scores(outputs["heatmap"])  # peaks found once: the frame's stats and each camera's
        e, u, m = peak_stats(scores=per_item)
        sig = {f"{cls.name}_entropy": e, f"{cls.name}_uncertain": u, f"{cls.name}_margin": m}
        per_cam = {f"{cls.name}_entropy": [peak_stats(scores=per_item[n:n + 1])[0] for n in range(n_cams)]} \
            if cls.space == "image" else {}
        return sig, per_cam


class DenseSignals(HeadSpec):
    """Signals of a per-pixel sigmoid head: `<name>_entropy` (mean H(p) over all pixels of every
    camera) and `<name>_entropy_p95` (its 95th percentile, the uncertain tail)."""

    signal_outputs = ("logits",)

    @classmethod
    def signals(cls, outputs, decoded, n_cams):
        if "logits" not in outputs:
            return {}, {}
        h = entropy(decoding.sigmoid(np.asarray(outputs["logits"], np.float32))).astype(np.float32)
        return {f"{cls.name}_entropy": float(h.mean()), f"{cls.name}_entropy_p95": float(np.percentile(h, 95))}, {}


def detections(r: Mapping[str, Any], digits: int, min_score: float = 0.1) -> dict[str, list]:
    """A detection head's result as shadow mode keeps it: boxes rounded to `digits`, scores >= `min_score`."""
    keep = np.asarray(r["scores"]) >= min_score
    return {"boxes": np.round(np.asarray(r["boxes"])[keep], digits).tolist(),
            "scores": np.round(np.asarray(r["scores"])[keep], 3).tolist(),
            "labels": np.asarray(r["labels"])[keep].astype(int).tolist()}


# -- the registry ---------------------------------------------------------------------------------
HEADS: dict[str, type[HeadSpec]] = {}


def register_head(spec: type[HeadSpec]) -> type[HeadSpec]:
    """Make a head's numpy side known (its decoder kind to `hydranet.decoding.DECODERS`); registering
    the same spec again is a no-op, another spec under a taken name or decoder kind raises."""
    if not (isinstance(spec, type) and issubclass(spec, HeadSpec)) or not spec.name:
        raise ValueError(f"{spec!r} is not a HeadSpec subclass with a `name`")
    if HEADS.get(spec.name, spec) is not spec:
        raise ValueError(f"head '{spec.name}' is already registered with another spec ({HEADS[spec.name].__qualname__})")
    if spec.signal_outputs and not spec.signal_columns:
        raise ValueError(f"head '{spec.name}': `signal_outputs` without `signal_columns`")
    stray = [c for c in spec.uncertainty_columns if c not in spec.signal_columns]
    if stray:
        raise ValueError(f"head '{spec.name}': uncertainty column {stray[0]!r} is not one of its `signal_columns`")
    for row in spec.trigger_rows:
        if not (isinstance(row, tuple) and len(row) == 6 and row[2] in spec.signal_columns):
            raise ValueError(f"head '{spec.name}': trigger row {row!r} is not (name, version, signal, threshold, quota, "
                             "description) reading one of its `signal_columns`")
    if spec.decoder is not None:
        known: Callable | None = decoding.DECODERS.get(spec.decoder)
        if known is not None and known is not spec.decode:
            raise ValueError(f"head '{spec.name}': decoder kind '{spec.decoder}' is another head's; name yours differently")
        decoding.DECODERS[spec.decoder] = spec.decode
    HEADS[spec.name] = spec
    return spec


def heads_where(attr: str, specs: Sequence[type[HeadSpec]] | None = None) -> tuple[str, ...]:
    """Names of the registered heads (in registration order) whose `attr` is true."""
    return tuple(s.name for s in (HEADS.values() if specs is None else specs) if getattr(s, attr))


def signal_columns() -> tuple[str, ...]:
    """Every registered head's engine signal columns, in registration order."""
    return tuple(c for s in HEADS.values() for c in s.signal_columns)
