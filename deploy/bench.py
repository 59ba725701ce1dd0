"""Latency of one checkpoint on every backend: torch eager fp32, ONNX Runtime fp32 and int8, and
TensorRT fp16/int8 where TensorRT and engines are present.

    hydranet bench --checkpoint runs/tiny [--data DIR] [--runs 50] [--out bench/]

One frame (all cameras, batch 1) from the sim, N timed runs after warm-up, the backends interleaved; per backend the median
and p90 of pre-processing (frames -> input tensor), inference, post-processing (decoding every
head) and their total. Writes `latency.md` and `latency.json`; prints the table and the ratios the
targets are about (ORT fp32 / eager; ORT fp32 / ORT int8). Timings are never pass/fail tests.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

STAGES = ("preprocess", "inference", "postprocess", "total")


def _stats(samples: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for s in STAGES:
        v = np.asarray([x[s] for x in samples]) * 1000.0
        out[s] = {"median_ms": float(np.median(v)), "p90_ms": float(np.percentile(v, 90))}
    return out


def _time_interleaved(fns: dict[str, Callable[[], dict[str, float]]], runs: int, warmup: int) -> dict[str, dict]:
    """Round-robin over the backends (A, B, C, A, B, C, ...), so a load change on a shared machine
    hits every backend alike and the ratios hold."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list] = {k: [] for k in fns}
    for _ in range(runs):
        for k, fn in fns.items():
            samples[k].append(fn())
    return {k: _stats(v) for k, v in samples.items()}


def torch_eager(checkpoint: str | Path, images: np.ndarray, threads: int) -> Callable[[], dict[str, float]]:
    import torch

    from hydranet.checkpoint import config_from_checkpoint, load_checkpoint, model_from_checkpoint

    torch.set_num_threads(threads)
    ckpt = load_checkpoint(checkpoint)
    model = model_from_checkpoint(ckpt, config_from_checkpoint(ckpt)).eval()

    def run() -> dict[str, float]:
        t0 = time.perf_counter()
        x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))[None]  # (1, N, 3, H, W) uint8
        t1 = time.perf_counter()
        with torch.inference_mode():
            raw = model({"images": x}, "tensor")
        t2 = time.perf_counter()
        with torch.inference_mode():
            model.decode({k: v for k, v in raw.items() if k != "bev_state"})
        t3 = time.perf_counter()
        return {"preprocess": t1 - t0, "inference": t2 - t1, "postprocess": t3 - t2, "total": t3 - t0}
    return run


def onnx_runtime(model_path: str | Path, images: np.ndarray, threads: int) -> Callable[[], dict[str, float]]:
    from deploy.runtime import HydraRuntime

    rt = HydraRuntime(model_path, threads=threads)

    def run() -> dict[str, float]:
        rt.reset()
        rt(list(images))
        t = dict(rt.timings)
        t["total"] = sum(t.values())
        return t
    return run


def tensorrt_backend(engine: str | Path, model_path: str | Path, images: np.ndarray) -> Callable[[], dict[str, float]]:
    from deploy.runtime import HydraRuntime
    from deploy.tensorrt import TrtRunner

    rt, trt = HydraRuntime(model_path), TrtRunner(engine)

    def run() -> dict[str, float]:
        t0 = time.perf_counter()
        rt.reset()
        feeds = rt.feeds(rt.preprocess(list(images)))
        t1 = time.perf_counter()
        raw = trt(feeds)
        t2 = time.perf_counter()
        rt.decode(raw)
        t3 = time.perf_counter()
        return {"preprocess": t1 - t0, "inference": t2 - t1, "postprocess": t3 - t2, "total": t3 - t0}
    return run


def format_markdown(res: dict[str, Any]) -> str:
    lines = [f"Latency of {res['checkpoint']} ({res['cameras']} cameras at {res['image_size'][1]}x{res['image_size'][0]}, "
             f"batch 1, {res['runs']} runs after {res['warmup']} warm-up, {res['threads']} threads), ms median / p90",
             "", "| backend | preprocess | inference | postprocess | total |", "|---|---|---|---|---|"]
    for name, st in res["backends"].items():
        cells = [f"{st[s]['median_ms']:.2f} / {st[s]['p90_ms']:.2f}" for s in STAGES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios (inference medians): " + ", ".join(f"{k} = {v:.2f}" for k, v in res["ratios"].items())]
    if res.get("kept_float"):
        q = res.get("quantization") or {}
        lines.append(f"INT8: {len(res['kept_float'])} node(s) kept in float (patterns {list(q.get('keep_float', []))}, "
                     f"op types {list(q.get('keep_float_op_types', []))}, head outputs: {q.get('keep_head_outputs')}); "
                     "the list is in latency.json")
    return "\n".join(lines)


def run_bench(checkpoint: str | Path, out: str | Path, data: str | Path | None = None, runs: int = 30, warmup: int = 5,
              threads: int = 2, int8_model: str | Path | None = None, engines: dict[str, str] | None = None) -> dict[str, Any]:
    """Export (and quantize) the checkpoint into `out`, time every backend, write latency.md/json."""
    from deploy.export import export_checkpoint, sim_frames
    from deploy.quantize import QuantizeConfig, quantize_model
    from hydranet.checkpoint import config_from_checkpoint, load_checkpoint

    for flag, value, least in (("--runs", runs, 1), ("--warmup", warmup, 0), ("--threads", threads, 1)):
        if value < least:  # refused before anything is exported: a median of no runs is no figure
            raise ValueError(f"{flag} {value}: must be >= {least}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fp32 = out / "model.onnx"
    res = export_checkpoint(checkpoint, fp32, data, frames=1, verbose=False)
    data = json.loads(res.metadata["hydranet.source"])["parity_data"]
    if int8_model is None:
        int8_model = out / "model.int8.onnx"
        quantize_model(fp32, data, int8_model, QuantizeConfig(calibration_frames=8), verbose=False)
    cfg = config_from_checkpoint(load_checkpoint(checkpoint))
    frame = sim_frames(cfg, data, 1)[0]["images"].transpose(0, 2, 3, 1)  # (N, H, W, 3) at the model size
    fns = {"torch eager fp32": torch_eager(checkpoint, frame, threads), "ORT fp32": onnx_runtime(fp32, frame, threads),
           "ORT int8": onnx_runtime(int8_model, frame, threads)}
    from deploy.tensorrt import tensorrt_available

    if tensorrt_available()[0]:
        for name, engine in (engines or {}).items():
            fns[f"TensorRT {name}"] = tensorrt_backend(engine, fp32, frame)
    backends = _time_interleaved(fns, runs, warmup)
    inf = {k: v["inference"]["median_ms"] for k, v in backends.items()}
    ratios = {"ORT fp32 / torch eager": inf["ORT fp32"] / inf["torch eager fp32"],
              "ORT fp32 / ORT int8 (speed-up)": inf["ORT fp32"] / inf["ORT int8"],
              "torch eager / ORT int8 (speed-up)": inf["torch eager fp32"] / inf["ORT int8"]}
    from deploy.metadata import read_metadata

    q = read_metadata(int8_model).get("quantization") or {}
    result = {"checkpoint": str(checkpoint), "cameras": int(frame.shape[0]), "image_size": list(frame.shape[1:3]),
              "runs": runs, "warmup": warmup, "threads": threads, "backends": backends, "ratios": ratios,
              "kept_float": q.get("kept_float_nodes", []), "quantization": {k: v for k, v in q.items() if k != "kept_float_nodes"},
              "tensorrt": tensorrt_available()[1] or "available"}
    (out / "latency.json").write_text(json.dumps(result, indent=2) + "\n")
    md = format_markdown(result)
    (out / "latency.md").write_text(md + "\n")
    print(md)
    return result
