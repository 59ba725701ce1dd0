"""INT8 post-training static quantization of an exported HydraNet with onnxruntime.quantization.

    hydranet quantize --onnx model.onnx --data out/demo/sim --out model.int8.onnx [--keep-float 'PATTERN' ...]

QDQ format (QuantizeLinear/DequantizeLinear pairs around each quantized op: what ONNX Runtime runs
with its int8 kernels and what TensorRT 10 builds as explicit quantization), weights per output
channel, activation ranges calibrated on real sim frames through a `CalibrationDataReader`
(Jacob et al., "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only
Inference", CVPR 2018; Wu et al., "Integer Quantization for Deep Learning Inference", NVIDIA 2020).

Targets: "cpu" (default) uses uint8 activations with a zero point (ORT's fast U8S8 path on x86);
"tensorrt" uses symmetric int8 activations and weights (TensorRT requires zero points of 0).
Layers that lose too much stay float: `QuantizeConfig.keep_float` holds node-name patterns
(fnmatch, e.g. "*/depth/*"; default "*/neck/*": the BiFPN, whose int8 error flipped ~19% of the
drivable decisions of the tiny model) and `keep_float_op_types` op types; `keep_head_outputs` keeps the
last op before every graph output in float (the raw logits, whose small differences move peaks
and thresholds). The hydranet metadata is copied over and `hydranet.quantization` records what was
done and which nodes stayed float.
"""
from __future__ import annotations

import fnmatch
import json
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.io import atomic_path


@dataclass(frozen=True)
class QuantizeConfig:
    target: str = "cpu"  # cpu | tensorrt
    per_channel: bool = True
    calibrate_method: str = "minmax"  # minmax | entropy | percentile
    calibration_frames: int = 16
    # node-name patterns (fnmatch) kept in float. Default: the BiFPN neck, measured: quantized it flips
    # the sign of ~19% of the drivable logits of the tiny model (1% with it in float), see docs/deploy.md
    keep_float: tuple[str, ...] = ("*/neck/*",)
    keep_float_op_types: tuple[str, ...] = ()  # op types kept in float, e.g. ("Resize", "GridSample")
    keep_head_outputs: bool = True  # the op producing each graph output stays float
    op_types: tuple[str, ...] | None = None  # op types to quantize (None: every type ORT quantizes)


class FrameReader:
    """CalibrationDataReader over sim frames: the graph feeds of each frame, in order, with the
    video state carried by running the float model (so calibration sees real queues)."""

    def __init__(self, model_path: str | Path, data: str | Path, frames: int):
        from deploy.runtime import HydraRuntime

        self.rt = HydraRuntime(model_path)
        self.frames = frames
        self.data = Path(data)
        self._it: Iterator[dict[str, np.ndarray]] | None = None

    def _feeds(self) -> Iterator[dict[str, np.ndarray]]:
        from deploy.frames import dataset_frames
        from hydranet.stream import stream

        rt = self.rt

        def step(f, prev_bev, ego_motion):
            feeds = rt.feeds(rt.preprocess(f["images"]), prev_bev, ego_motion)
            raw = rt.run(feeds)  # NonFiniteOutput (a DeployError naming the output) for a NaN model: never calibrated
            return feeds, (rt.state_output(raw) if rt.state_spec else None)

        frames = dataset_frames(self.data, rt.camera_names, self.frames)
        for _, feeds in stream(frames, step, video=bool(rt.state_spec)):
            yield dict(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._it is None:
            self._it = self._feeds()
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = None


def _float_nodes(model, cfg: QuantizeConfig) -> list[str]:
    outputs = {o.name for o in model.graph.output}
    keep = []
    for n in model.graph.node:
        if any(fnmatch.fnmatch(n.name, p) for p in cfg.keep_float) or n.op_type in cfg.keep_float_op_types:
            keep.append(n.name)
        elif cfg.keep_head_outputs and outputs.intersection(n.output):
            keep.append(n.name)
    return keep


def quantize_model(model_path: str | Path, data: str | Path, out: str | Path, cfg: QuantizeConfig = QuantizeConfig(),
                   verbose: bool = True) -> dict[str, Any]:
    """Write the INT8 QDQ model to `out`; returns the `hydranet.quantization` record."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod

    from deploy.runtime import DeployError, load_session, model_metadata

    if cfg.target not in ("cpu", "tensorrt"):
        raise ValueError(f"quantize target must be 'cpu' or 'tensorrt', got {cfg.target!r}")
    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    if cfg.calibrate_method not in methods:
        raise ValueError(f"calibrate_method must be one of {sorted(methods)}, got {cfg.calibrate_method!r}")
    model_path, out = Path(model_path), Path(out)
    model_metadata(load_session(model_path), str(model_path))  # a readable hydranet model, or DeployError
    src = onnx.load(str(model_path))
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in src.graph.node):
        raise DeployError(f"{model_path} is already quantized; quantize the float model written by `hydranet export`")
    keep = _float_nodes(src, cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as part:  # renamed to `out` once complete: no half-written model
        record = _quantize(model_path, data, part, src, keep, cfg, methods)
    if verbose:
        counts = record["qdq_nodes"]
        print(f"quantized {model_path} -> {out}: {counts.get('QuantizeLinear', 0)} Q / {counts.get('DequantizeLinear', 0)} "
              f"DQ nodes, {len(keep)} node(s) kept float, calibrated on {cfg.calibration_frames} frame(s) of {data}")
    return record


def _quantize(model_path: Path, data, out: Path, src, keep: list[str], cfg: QuantizeConfig, methods) -> dict[str, Any]:
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from deploy.metadata import set_metadata

    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(model_path), str(pre), skip_symbolic_shape=True)
        reader = FrameReader(model_path, data, cfg.calibration_frames)
        trt = cfg.target == "tensorrt"
        extra = {"ActivationSymmetric": trt, "WeightSymmetric": True, "DedicatedQDQPair": False}
        quantize_static(str(pre), str(out), reader, quant_format=QuantFormat.QDQ, per_channel=cfg.per_channel,
                        activation_type=QuantType.QInt8 if trt else QuantType.QUInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=keep, op_types_to_quantize=list(cfg.op_types) if cfg.op_types else None,
                        calibrate_method=methods[cfg.calibrate_method], extra_options=extra)
    q = onnx.load(str(out))
    counts: dict[str, int] = {}
    for n in q.graph.node:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    record = {**asdict(cfg), "kept_float_nodes": keep, "qdq_nodes": counts, "calibration_data": str(data),
              "float_model": str(model_path)}
    props = {p.key: p.value for p in src.metadata_props}
    props["hydranet.quantization"] = json.dumps(record)
    set_metadata(q, props)
    onnx.save(q, str(out))
    return record


def parse_keep_float(values: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """CLI --keep-float values: "op:Resize" keeps an op type, anything else is a node-name pattern."""
    ops = tuple(v[3:] for v in values if v.startswith("op:"))
    pats = tuple(v for v in values if not v.startswith("op:"))
    return pats, ops

