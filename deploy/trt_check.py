"""What can be checked about TensorRT without TensorRT, run on every export.

- every operator is in the ONNX parser's supported list of TensorRT 10 (deploy/trt_supported_ops.txt,
  with its source) and in the default ONNX domain (no com.microsoft contrib ops), opset 9..20;
- no dynamic dimension other than the batch axis, for which the engine builder sets an
  optimization profile (deploy/tensorrt.py); any other symbolic dimension is an error;
- int64: graph inputs/outputs of type int64 are errors (TensorRT 8.x on JetPack 5 rejects int64
  bindings; TensorRT 10 accepts them but every consumer would have to follow); int64 initializers
  are warnings (TensorRT casts them down to int32) and errors when a value does not fit in int32;
  double tensors are warnings (cast down to float).
Errors fail `hydranet export --format tensorrt`; for `--format onnx` they are printed as warnings.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SUPPORTED_OPS_FILE = Path(__file__).with_name("trt_supported_ops.txt")
OPSET_RANGE = (9, 20)
BATCH_AXIS_NAMES = ("batch",)


def supported_ops() -> set[str]:
    lines = SUPPORTED_OPS_FILE.read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


@dataclass
class TrtReport:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    op_counts: dict[str, int] = field(default_factory=dict)
    dynamic_inputs: dict[str, list] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> dict:
        return {"errors": self.errors, "warnings": self.warnings, "op_counts": self.op_counts,
                "dynamic_inputs": self.dynamic_inputs}

    def format(self) -> str:
        lines = [f"TensorRT 10 checks: {len(self.op_counts)} operator types, {sum(self.op_counts.values())} nodes, "
                 f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)"]
        lines += [f"  error: {e}" for e in self.errors] + [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _nodes(graph):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.g is not None and len(a.g.node):
                yield from _nodes(a.g)
            for g in a.graphs:
                yield from _nodes(g)


def _dims(value_info) -> list:
    t = value_info.type.tensor_type
    return [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else "?") for d in t.shape.dim]


def check_tensorrt(model, batch_axis_names=BATCH_AXIS_NAMES) -> TrtReport:
    """Check an onnx.ModelProto (or a path) against what TensorRT 10's ONNX parser accepts."""
    import onnx
    from onnx import numpy_helper

    if isinstance(model, (str, Path)):
        model = onnx.load(str(model))
    rep = TrtReport()
    ops = supported_ops()
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and not OPSET_RANGE[0] <= imp.version <= OPSET_RANGE[1]:
            rep.errors.append(f"opset {imp.version} is outside TensorRT 10's range {OPSET_RANGE[0]}..{OPSET_RANGE[1]}; "
                              "export with an opset in that range")
    counts: Counter = Counter()
    for n in _nodes(model.graph):
        counts[n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"] += 1
    rep.op_counts = dict(sorted(counts.items()))
    for op in rep.op_counts:
        if "::" in op:
            rep.errors.append(f"operator {op} is a custom-domain op: TensorRT's ONNX parser has no importer for it "
                              "(a plugin would be needed)")
        elif op not in ops:
            rep.errors.append(f"operator {op} is not supported by TensorRT 10's ONNX parser ({SUPPORTED_OPS_FILE.name})")
    reducing = [(n.op_type, n.name) for n in _nodes(model.graph) if n.op_type in ("ScatterElements", "ScatterND")
                and next((a.s.decode() for a in n.attribute if a.name == "reduction"), "none") != "none"]
    if any(op == "ScatterElements" for op, _ in reducing):
        rep.warnings.append("ScatterElements with a reduction (the LSS splat): TensorRT's core scatter layer has none, "
                            "its parser uses the scatterElements plugin of libnvinfer_plugin (load it; onnx-tensorrt #953 "
                            "reports failures when indices outnumber outputs); model.bev.method lut avoids it")
    for op, name in reducing:
        if op == "ScatterND":
            rep.errors.append(f"ScatterND '{name}' has a reduction: TensorRT's parser lowers ScatterND to a scatter "
                              "layer without one (onnx-tensorrt #957), so results would be wrong; use ScatterElements")
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = _dims(vi)
        sym = [d for d in dims if isinstance(d, str)]
        if sym:
            rep.dynamic_inputs[vi.name] = dims
            other = [d for i, d in enumerate(dims) if isinstance(d, str) and not (i == 0 and d in batch_axis_names)]
            if other:
                rep.errors.append(f"tensor '{vi.name}' has dynamic dimension(s) {other} (shape {dims}); only a dynamic "
                                  "batch axis 0 gets an optimization profile: export with static shapes")
        elem = vi.type.tensor_type.elem_type
        if elem == onnx.TensorProto.INT64:
            rep.errors.append(f"graph {'input' if vi in model.graph.input else 'output'} '{vi.name}' is int64: TensorRT 8.x "
                              "on JetPack 5 rejects int64 bindings; cast it to int32 in the model")
        if elem == onnx.TensorProto.DOUBLE:
            rep.warnings.append(f"tensor '{vi.name}' is float64: TensorRT casts it to float32")
    n64, big = 0, []
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.INT64:
            n64 += 1
            a = numpy_helper.to_array(init)
            if a.size and (a.max() > np.iinfo(np.int32).max or a.min() < np.iinfo(np.int32).min):
                # INT64_MAX / MIN are the usual "to the end" Slice bounds: the parser clamps those
                if not np.isin(a[(a > np.iinfo(np.int32).max) | (a < np.iinfo(np.int32).min)],
                               [np.iinfo(np.int64).max, np.iinfo(np.int64).min]).all():
                    big.append(init.name)
    for name in big:
        rep.errors.append(f"int64 initializer '{name}' holds values outside int32: TensorRT would clamp them")
    if n64:
        rep.warnings.append(f"{n64} int64 initializer(s) (shapes, gather indices): TensorRT casts them to int32 "
                            "(all values fit)" if not big else f"{n64} int64 initializer(s)")
    return rep
