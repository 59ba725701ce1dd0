"""TensorRT 10 engines from the exported ONNX graph (JetPack 6 ships TensorRT 10.3), and where
TensorRT is missing, the equivalent `trtexec` command lines for a Jetson.

Build (`build_engine`): builder -> network from the ONNX parser (explicit batch: the only mode in
TensorRT 10) -> builder config with FP16, INT8 from a Q/DQ model (explicit quantization: the scales
come from the graph, no calibrator; implicit INT8 calibrators are deprecated in 10.x), a timing
cache file reused across builds, and an optimization profile when the batch axis is dynamic.
Run (`TrtRunner`): named I/O tensors, `set_input_shape`, `set_tensor_address` and
`execute_async_v3` on a CUDA stream (cuda-python's cudart for buffers: no torch on the car).
Engines are specific to the GPU and TensorRT version: build on the Jetson itself.
"""
from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def tensorrt_available() -> tuple[bool, str]:
    try:
        import tensorrt  # noqa: F401
    except Exception as e:  # ImportError, or a broken install raising OSError for its libraries
        return False, f"{type(e).__name__}: {e}"
    return True, ""


def _shape_arg(shape: Sequence[int]) -> str:
    return "x".join(str(int(s)) for s in shape)


def trtexec_commands(onnx_path: str | Path, engine_path: str | Path, input_shapes: Mapping[str, Sequence[int]],
                     int8_onnx: str | Path | None = None, dynamic_batch: bool = False, max_batch: int = 4,
                     workspace_mib: int = 2048) -> list[str]:
    """trtexec lines building the FP16 engine (and the INT8 engine from the Q/DQ model) with a shared
    timing cache, then timing them. Paths are written relative to the script's folder, and every
    argument is shell-quoted (`shlex.quote`): a space or `$(...)` in a file name stays one literal
    argument, never split or run."""
    onnx_path, engine_path = Path(onnx_path), Path(engine_path)
    cache = engine_path.with_suffix(".timing.cache").name
    common = [f"--memPoolSize=workspace:{workspace_mib}M", f"--timingCacheFile={cache}"]
    if dynamic_batch:
        for key, b in (("min", 1), ("opt", 1), ("max", max_batch)):
            common.append(f"--{key}Shapes=" + ",".join(f"{n}:{_shape_arg([b, *s[1:]])}" for n, s in input_shapes.items()))
    fp16 = engine_path.with_name(engine_path.stem + ".fp16.engine").name
    lines = [_command(["trtexec", f"--onnx={onnx_path.name}", f"--saveEngine={fp16}", "--fp16", *common])]
    engines = [fp16]
    if int8_onnx is not None:
        int8 = engine_path.with_name(engine_path.stem + ".int8.engine").name
        lines.append(_command(["trtexec", f"--onnx={Path(int8_onnx).name}", f"--saveEngine={int8}", "--int8", "--fp16",
                               *common]))
        engines.append(int8)
    for e in engines:
        shapes = []
        if dynamic_batch:
            shapes = ["--shapes=" + ",".join(f"{n}:{_shape_arg([1, *s[1:]])}" for n, s in input_shapes.items())]
        lines.append(_command(["trtexec", f"--loadEngine={e}", *shapes, "--warmUp=500", "--iterations=200",
                               "--useCudaGraph", "--noDataTransfers"]))
    return lines


def _command(args: Sequence[str]) -> str:
    """One shell command line; each argument quoted so the shell passes it through unchanged."""
    return " ".join(shlex.quote(str(a)) for a in args)


def write_trtexec_script(path: str | Path, lines: Sequence[str], note: str) -> Path:
    path = Path(path)
    note = " ".join(str(note).split())  # one comment line: a newline in a file name must not end the comment
    body = ["#!/usr/bin/env bash", f"# {note}", "# Run on the Jetson (JetPack 6, TensorRT 10.3) in this folder: engines are",
            "# specific to the GPU and TensorRT version. trtexec lives in /usr/src/tensorrt/bin.", "set -euo pipefail",
            'cd "$(dirname "$0")"', 'export PATH="$PATH:/usr/src/tensorrt/bin"', *lines, ""]
    path.write_text("\n".join(body))
    path.chmod(0o755)
    return path


# -- with TensorRT -------------------------------------------------------------------------------
def build_engine(onnx_path: str | Path, engine_path: str | Path, fp16: bool = True, int8: bool = False,
                 timing_cache: str | Path | None = None, dynamic_batch: bool = False, max_batch: int = 4,
                 workspace_mib: int = 2048) -> Path:
    """Serialize an engine for `onnx_path` (int8=True expects a Q/DQ model: explicit quantization)."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if int(trt.__version__.split(".")[0]) < 10:  # explicit batch is the only mode (and the default) from 10 on
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT's ONNX parser rejected {onnx_path}: {errs}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_mib << 20)
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    if int8:
        config.set_flag(trt.BuilderFlag.INT8)
    cache_path = Path(timing_cache) if timing_cache else Path(engine_path).with_suffix(".timing.cache")
    cache = config.create_timing_cache(cache_path.read_bytes() if cache_path.is_file() else b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    dynamic = [network.get_input(i) for i in range(network.num_inputs) if -1 in tuple(network.get_input(i).shape)]
    if dynamic:
        if not dynamic_batch:
            raise RuntimeError(f"input '{dynamic[0].name}' has a dynamic shape {tuple(dynamic[0].shape)} but no profile "
                               "was requested; export with static shapes or pass dynamic_batch=True")
        profile = builder.create_optimization_profile()
        for i in range(network.num_inputs):
            t = network.get_input(i)
            rest = tuple(t.shape)[1:]
            if -1 in rest:
                raise RuntimeError(f"input '{t.name}' is dynamic beyond the batch axis: {tuple(t.shape)}")
            profile.set_shape(t.name, (1, *rest), (1, *rest), (max_batch, *rest))
        config.add_optimization_profile(profile)
    blob = builder.build_serialized_network(network, config)
    if blob is None:
        raise RuntimeError(f"TensorRT could not build an engine for {onnx_path} (see the log above)")
    cache_path.write_bytes(memoryview(config.get_timing_cache().serialize()))
    Path(engine_path).write_bytes(memoryview(blob))
    return Path(engine_path)


class TrtRunner:
    """Runs a serialized engine with named I/O tensors and execute_async_v3 (numpy in, numpy out)."""

    def __init__(self, engine_path: str | Path):
        import tensorrt as trt
        from cuda import cudart

        self.trt, self.cudart = trt, cudart
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.engine = trt.Runtime(self.logger).deserialize_cuda_engine(Path(engine_path).read_bytes())
        if self.engine is None:
            raise RuntimeError(f"{engine_path} is not an engine of this TensorRT version / GPU; rebuild it here")
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        _, self.stream = cudart.cudaStreamCreate()
        self._buffers: dict[str, tuple[int, int]] = {}  # name -> (device pointer, bytes)

    def _device(self, name: str, nbytes: int) -> int:
        ptr, size = self._buffers.get(name, (0, 0))
        if size < nbytes:
            if ptr:
                self.cudart.cudaFree(ptr)
            _, ptr = self.cudart.cudaMalloc(max(nbytes, 1))
            self._buffers[name] = (ptr, nbytes)
        return ptr

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cu, trt = self.cudart, self.trt
        H2D, D2H = cu.cudaMemcpyKind.cudaMemcpyHostToDevice, cu.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name in self.inputs:
            a = np.ascontiguousarray(feeds[name], dtype=trt.nptype(self.engine.get_tensor_dtype(name)))
            self.context.set_input_shape(name, a.shape)
            ptr = self._device(name, a.nbytes)
            cu.cudaMemcpyAsync(ptr, a.ctypes.data, a.nbytes, H2D, self.stream)
            self.context.set_tensor_address(name, ptr)
        outs = {}
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            outs[name] = np.empty(shape, trt.nptype(self.engine.get_tensor_dtype(name)))
            self.context.set_tensor_address(name, self._device(name, outs[name].nbytes))
        if not self.context.execute_async_v3(self.stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        for name, a in outs.items():
            cu.cudaMemcpyAsync(a.ctypes.data, self._buffers[name][0], a.nbytes, D2H, self.stream)
        cu.cudaStreamSynchronize(self.stream)
        return outs

    def __del__(self):
        for ptr, _ in getattr(self, "_buffers", {}).values():
            self.cudart.cudaFree(ptr)


def export_tensorrt(onnx_path: str | Path, engine_path: str | Path, input_shapes: Mapping[str, Sequence[int]],
                    int8_onnx: str | Path | None = None, dynamic_batch: bool = False) -> dict[str, Any]:
    """Build the FP16 (and INT8) engines where TensorRT imports; otherwise write `<engine>.trtexec.sh`
    with the same builds as trtexec lines and say so. Returns {"engines": [...], "script": path|None,
    "message": one line}."""
    ok, why = tensorrt_available()
    engine_path = Path(engine_path)
    lines = trtexec_commands(onnx_path, engine_path, input_shapes, int8_onnx, dynamic_batch)
    if not ok:
        script = write_trtexec_script(engine_path.with_suffix(".trtexec.sh"), lines,
                                      f"equivalent of `hydranet export --format tensorrt` for {Path(onnx_path).name}")
        return {"engines": [], "script": str(script),
                "message": f"TensorRT is not installed here ({why}); wrote the trtexec commands for a Jetson to {script}"}
    cache = engine_path.with_suffix(".timing.cache")
    engines = [build_engine(onnx_path, engine_path.with_name(engine_path.stem + ".fp16.engine"), fp16=True,
                            timing_cache=cache, dynamic_batch=dynamic_batch)]
    if int8_onnx is not None:
        engines.append(build_engine(int8_onnx, engine_path.with_name(engine_path.stem + ".int8.engine"), fp16=True,
                                    int8=True, timing_cache=cache, dynamic_batch=dynamic_batch))
    return {"engines": [str(e) for e in engines], "script": None,
            "message": f"built {', '.join(str(e) for e in engines)} (timing cache {cache})"}
