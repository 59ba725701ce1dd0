"""Export a trained HydraNet checkpoint as ONE ONNX graph that checks itself.

    hydranet export --checkpoint runs/tiny --out model.onnx [--dynamic-batch] [--format onnx|tensorrt]

All cameras go in as one tensor `images` (B, N, 3, H, W) (uint8 RGB by default; normalization is
inside the graph), every registered head's raw outputs come out under "<head>.<output>" (the
model's "tensor" mode, camera heads flattened (B*N, ...), index b*N + n; BEV heads (B, ...)), and
`embedding` (B*N, C): the pooled trunk feature per camera image (metadata "embedding").
A model with the video module also takes `prev_bev` (B, T-1, C, X, Y) and `ego_motion` (B, 4, 4)
and gives `bev_state.bev_queue`: the deployed graph is stateless, the runtime carries the state.

Steps: torch.onnx.export (TorchScript exporter, opset 17; static shapes, optionally a dynamic
batch axis) -> onnx.checker (full check) -> onnxslim -> checker again -> metadata (everything
the runtime needs: `hydranet.*` keys, docs/deploy.md) -> a parity report against PyTorch for
every output on real sim frames (max absolute and relative error) -> the TensorRT compatibility
checks (deploy/trt_check.py). Above tolerance the export fails and leaves no model file.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from deploy.metadata import EMBEDDING_OUTPUT, STATE_INPUTS, STATE_OUTPUT, build_metadata, set_metadata
from hydranet.io import atomic_path
from hydranet.models import HydraNet
from hydranet.stream import stream

OPSET = 17
ATOL, RTOL = 1e-3, 1e-3  # parity: max |onnx - torch| <= ATOL + RTOL * max |torch| per output


class ExportError(ValueError):
    """The export cannot be done or did not verify (parity, checker); the message says what to do."""


class ExportGraph(nn.Module):
    """Flat tensors in and out around `HydraNet.forward(batch, "tensor")`:
    images (B, N, 3, H, W) [, prev_bev (B, T-1, C, X, Y), ego_motion (B, 4, 4)] -> tuple of every
    head's outputs in `output_names` order (+ the BEV queue)."""

    def __init__(self, model: HydraNet, output_keys: Sequence[tuple[str, str]], video: bool):
        super().__init__()
        self.model, self.output_keys, self.video = model, list(output_keys), video

    def forward(self, images: torch.Tensor, prev_bev: torch.Tensor | None = None,
                ego_motion: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        batch: dict[str, Any] = {"images": images}
        if self.video:
            batch["prev_bev"], batch["ego_motion"] = prev_bev, ego_motion
        out = self.model(batch, "tensor")
        flat = [out[head][key] for head, key in self.output_keys] + [out[EMBEDDING_OUTPUT]]
        if self.video:
            flat.append(out["bev_state"]["bev_queue"])
        return tuple(flat)


@dataclass
class ExportResult:
    path: Path
    parity: list[dict[str, Any]]
    trt_report: Any
    metadata: dict[str, str]
    warnings: list[str] = field(default_factory=list)


# -- inputs ----------------------------------------------------------------------------------------
def has_video(model: HydraNet) -> bool:
    return model.video_frames > 1


def example_inputs(model: HydraNet, images: np.ndarray, prev_bev: np.ndarray | None = None,
                   ego_motion: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Graph inputs for frames `images` (B, N, 3, H, W); an empty queue / identity motion by default."""
    feeds = {"images": images}
    if has_video(model):
        B = images.shape[0]
        if prev_bev is None:
            v = model.fusion.video
            X, Y = v.grid.shape
            prev_bev = np.zeros((B, v.frames - 1, v.channels, X, Y), np.float32)
        if ego_motion is None:
            ego_motion = np.eye(4, dtype=np.float32)
        ego_motion = np.broadcast_to(np.asarray(ego_motion, np.float32).reshape(-1, 4, 4), (B, 4, 4)).copy()
        feeds["prev_bev"], feeds["ego_motion"] = prev_bev.astype(np.float32), ego_motion.astype(np.float32)
    return feeds


def sim_frames(cfg, data: str | Path, count: int) -> list[dict]:
    """Up to `count` consecutive frames of `data` (the checkpoint's cameras, resized to its image size):
    {"images" (N, 3, H, W) uint8, "ego2world" (4, 4), "scene"}."""
    from hydranet.data.sources import model_cameras, open_data
    from hydranet.loader import resize_to

    ds = open_data(cfg.data, data, cameras=model_cameras(cfg.data), channels=("images",))  # any format, the model's cameras
    out = []
    for i in range(min(count, len(ds))):
        s = resize_to(ds[i], tuple(cfg.data.image_size))
        out.append({"images": np.ascontiguousarray(s["images"].transpose(0, 3, 1, 2)), "ego2world": s["ego2world"],
                    "scene": s["scene"]})
    if not out:
        raise ExportError(f"dataset {data} has no frames for the parity check")
    return out


def frame_feeds(model: HydraNet, frames: Sequence[Mapping], dtype: str, run_torch) -> list[dict[str, np.ndarray]]:
    """Inputs for a sequence of frames ({"images", "ego2world", "scene"}); with the video module the
    queue comes from the torch outputs, carried through each scene by `hydranet.stream`."""
    def step(f, prev_bev, ego_motion):
        img = f["images"][None]  # (1, N, 3, H, W) uint8
        feed = example_inputs(model, img if dtype == "uint8" else img.astype(np.float32) / 255.0, prev_bev, ego_motion)
        return feed, (run_torch(feed)[STATE_OUTPUT] if has_video(model) else None)

    return [feed for _, feed in stream(frames, step, has_video(model))]


# -- parity ----------------------------------------------------------------------------------------
def parity_report(onnx_path: str | Path, run_torch, feeds: Sequence[Mapping[str, np.ndarray]],
                  atol: float = ATOL, rtol: float = RTOL) -> list[dict[str, Any]]:
    """Per output: max abs error, relative error (max abs / max |torch|), pass flag, over all feeds."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    stats: dict[str, dict[str, float]] = {n: {"max_abs": 0.0, "ref_max": 0.0} for n in names}
    for feed in feeds:
        got = dict(zip(names, sess.run(None, dict(feed))))
        ref = run_torch(feed)
        for n in names:
            r, g = ref[n].astype(np.float64), got[n].astype(np.float64)
            if r.shape != g.shape:
                raise ExportError(f"output '{n}': ONNX shape {g.shape} vs PyTorch {r.shape}")
            finite = bool(np.isfinite(r).all() and np.isfinite(g).all())
            stats[n]["finite"] = stats[n].get("finite", True) and finite
            if finite and r.size:  # NaN never hides in a max: a non-finite output fails on its own
                stats[n]["max_abs"] = max(stats[n]["max_abs"], float(np.abs(r - g).max()))
                stats[n]["ref_max"] = max(stats[n]["ref_max"], float(np.abs(r).max()))
    rows = []
    for n in names:
        s = stats[n]
        finite = s.get("finite", True)
        rows.append({"output": n, "max_abs": s["max_abs"] if finite else float("nan"),
                     "rel": s["max_abs"] / max(s["ref_max"], 1e-12) if finite else float("nan"),
                     "finite": finite, "ok": finite and s["max_abs"] <= atol + rtol * s["ref_max"]})
    return rows


def format_parity(rows: Sequence[Mapping[str, Any]], frames: int) -> str:
    w = max(len(r["output"]) for r in rows)
    lines = [f"parity vs PyTorch over {frames} sim frame(s) (pass: max_abs <= {ATOL:g} + {RTOL:g} * max|torch|)",
             f"{'output'.ljust(w)}  {'max_abs':>10}  {'rel':>10}  ok"]
    lines += [f"{r['output'].ljust(w)}  {r['max_abs']:10.3e}  {r['rel']:10.3e}  {'yes' if r['ok'] else 'NO'}" for r in rows]
    return "\n".join(lines)


def torch_runner(graph: ExportGraph, names: Sequence[str]):
    def run(feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(feed["images"]))]
        if graph.video:
            args += [torch.from_numpy(feed["prev_bev"]), torch.from_numpy(feed["ego_motion"])]
        with torch.no_grad():
            outs = graph(*args)
        return {n: o.numpy() for n, o in zip(names, outs)}
    return run


# -- export ----------------------------------------------------------------------------------------
def export_model(model: HydraNet, cfg, meta: Mapping, out: str | Path, frames: Sequence[Mapping],
                 dynamic_batch: bool = False, input_dtype: str = "uint8", simplify: bool = True,
                 source: Mapping[str, Any] | None = None, atol: float = ATOL, rtol: float = RTOL,
                 verbose: bool = True) -> ExportResult:
    """Export `model` to `out`, verify it (checker, parity on `frames`, TensorRT checks); on failure
    the file is removed and ExportError raised."""
    import onnx

    from deploy.trt_check import check_tensorrt

    if input_dtype not in ("uint8", "float32"):
        raise ExportError(f"input dtype must be uint8 or float32, got {input_dtype!r}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    model = model.eval().cpu()
    video = has_video(model)
    feeds_probe = example_inputs(model, frames[0]["images"][None] if input_dtype == "uint8"
                                 else frames[0]["images"][None].astype(np.float32) / 255.0)
    probe_args = [torch.from_numpy(feeds_probe["images"])]
    if video:
        probe_args += [torch.from_numpy(feeds_probe["prev_bev"]), torch.from_numpy(feeds_probe["ego_motion"])]
    with torch.no_grad():
        raw = model({"images": probe_args[0], **({"prev_bev": probe_args[1], "ego_motion": probe_args[2]} if video else {})},
                    "tensor")
    output_keys = [(h, k) for h in model.heads for k in raw[h]]
    names = [f"{h}.{k}" for h, k in output_keys] + [EMBEDDING_OUTPUT] + ([STATE_OUTPUT] if video else [])
    shapes = ([tuple(raw[h][k].shape) for h, k in output_keys] + [tuple(raw[EMBEDDING_OUTPUT].shape)]
              + ([tuple(raw["bev_state"]["bev_queue"].shape)] if video else []))
    graph = ExportGraph(model, output_keys, video).eval()
    input_names = ["images"] + (list(STATE_INPUTS) if video else [])
    dynamic_axes = None
    if dynamic_batch:
        dynamic_axes = {n: {0: "batch"} for n in input_names + names}
    with atomic_path(out) as tmp:  # renamed to `out` only when every check passed: no half-written model
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(graph, tuple(probe_args), str(tmp), dynamo=False, opset_version=OPSET,
                              input_names=input_names, output_names=names, dynamic_axes=dynamic_axes,
                              do_constant_folding=True)
        m = onnx.load(str(tmp))
        onnx.checker.check_model(m, full_check=True)
        if simplify:
            import onnxslim

            m = onnxslim.slim(m)
            onnx.checker.check_model(m, full_check=True)
        special = {STATE_OUTPUT: ("bev_state", "bev_queue"), EMBEDDING_OUTPUT: (EMBEDDING_OUTPUT, EMBEDDING_OUTPUT)}
        outputs = {n: (special[n] if n in special else output_keys[i]) + (s,) for i, (n, s) in enumerate(zip(names, shapes))}
        src = dict(source or {})
        in_shapes = {k: v.shape for k, v in feeds_probe.items()}
        props = build_metadata(model, cfg, meta, in_shapes, input_dtype, outputs, dynamic_batch, src, OPSET)
        set_metadata(m, props)
        onnx.save(m, str(tmp))
        run_torch = torch_runner(graph, names)
        feeds = frame_feeds(model, frames, input_dtype, run_torch)
        rows = parity_report(tmp, run_torch, feeds, atol, rtol)
        if dynamic_batch:  # the batch axis must really be free: run two frames at once
            both = {k: np.concatenate([feeds[0][k], feeds[-1][k]]) for k in feeds[0]}
            rows_b = parity_report(tmp, run_torch, [both], atol, rtol)
            for r, rb in zip(rows, rows_b):
                r["max_abs"], r["rel"] = max(r["max_abs"], rb["max_abs"]), max(r["rel"], rb["rel"])
                r["ok"], r["finite"] = r["ok"] and rb["ok"], r["finite"] and rb["finite"]
        if verbose:
            print(format_parity(rows, len(feeds) + (1 if dynamic_batch else 0)))
        bad = [r for r in rows if not r["ok"]]
        if bad and not bad[0]["finite"]:
            raise ExportError(f"output '{bad[0]['output']}' is NaN or Inf (PyTorch or ONNX) on the parity frames; the model "
                              "is broken (non-finite weights or activations); no model written")
        if bad:
            raise ExportError(f"ONNX output '{bad[0]['output']}' differs from PyTorch by {bad[0]['max_abs']:.3g} (rel "
                              f"{bad[0]['rel']:.3g}), above tolerance {atol:g} + {rtol:g}*max; no model written")
        report = check_tensorrt(m)
        props["hydranet.parity"] = json.dumps(rows)
        props["hydranet.tensorrt_check"] = json.dumps(report.as_dict())
        set_metadata(m, props)
        onnx.save(m, str(tmp))
    return ExportResult(out, rows, report, props)


def export_checkpoint(checkpoint: str | Path, out: str | Path, data: str | Path | None = None, frames: int = 2,
                      dynamic_batch: bool = False, input_dtype: str = "uint8", simplify: bool = True,
                      verbose: bool = True, rig: str | Path | None = None,
                      cameras: Sequence[str] | None = None) -> ExportResult:
    """Load a checkpoint and export it; parity frames come from `data` (default: the config's
    data.val_root, else data.root). `rig` (a rig YAML, a sim dataset/fleet or a recorded fleet folder):
    export for that rig's calibration (`hydranet.checkpoint.model_for_rig`: same weights, the BEV view
    transform's tables rebuilt; the metadata records that rig). `cameras`: the camera heads alone on those
    cameras of the model (`model_for_cameras`: a one-camera dashcam from a multi-camera model; no BEV heads)."""
    from hydranet.checkpoint import config_from_checkpoint, load_checkpoint, load_model, model_for_cameras, model_for_rig
    from hydranet.io import checkpoint_file, file_sha256
    from hydranet.rig import calibration_difference, rig_from_dict, rig_from_path

    rebind = None
    if rig is not None and cameras:
        raise ExportError("give --rig or --cameras, not both: export the camera subset, then shadow it on its fleet")
    if cameras:
        ckpt = load_checkpoint(checkpoint)
        model, cfg = model_for_cameras(ckpt, config_from_checkpoint(ckpt), list(cameras), f"checkpoint {checkpoint}")
        meta = json.loads(ckpt["meta"])
    elif rig is not None:
        new_rig = rig_from_path(rig)  # before the checkpoint: a bad rig is named first, and fast
        ckpt = load_checkpoint(checkpoint)
        cfg = config_from_checkpoint(ckpt)
        trained = rig_from_dict(json.loads(ckpt["meta"])["rig"], f"checkpoint {checkpoint} meta rig")
        model, meta = model_for_rig(ckpt, cfg, new_rig, f"rig {rig}")
        change = calibration_difference(trained, rig_from_dict(meta["rig"], f"rig {rig}"))  # at the model's size
        rebind = {"from": str(rig), "name": new_rig.name, "trained_rig": trained.name, "change": change,
                  "bev_coverage": model.fusion.view.coverage if model.fusion is not None else None}
    else:
        model, cfg, ckpt = load_model(checkpoint)
        meta = json.loads(ckpt["meta"])
    if data is None:
        data = next((d for d in (cfg.data.val_root, cfg.data.root, *(s.root for s in cfg.data.sources))
                     if d and Path(d).is_dir()), None)
        if data is None:
            raise ExportError(f"no sim dataset for the parity check: the checkpoint's data.root {cfg.data.root!r} does not "
                              "exist here; pass --data DIR (a dataset generated with `hydranet sim generate`)")
    fr = sim_frames(cfg, data, frames)
    ckpt_file = checkpoint_file(checkpoint)
    source = {"checkpoint": str(checkpoint), "checkpoint_sha256": file_sha256(ckpt_file), "step": int(ckpt["step"]),
              "parity_data": str(data)}  # the sha256 lets `engine promote` refuse an ONNX of another checkpoint
    if rebind is not None:
        source["rig"] = rebind
    if cameras:
        source["cameras"] = list(cameras)  # the camera heads of the checkpoint on these of its cameras
    return export_model(model, cfg, meta, out, fr, dynamic_batch, input_dtype, simplify, source, verbose=verbose)


def rig_line(source: Mapping[str, Any]) -> str:
    """What `export --rig` did, from the metadata's source["rig"]."""
    r = source["rig"]
    if r.get("bev_coverage") is None:
        return (f"rig {r['name']} ({r['from']}): the model's cameras found and recorded (camera-only model: nothing "
                "in it is bound to the calibration)")
    cam, d = max(r["change"].items(), key=lambda kv: (kv[1]["moved_m"], kv[1]["turned_deg"], kv[1]["K_px"],
                                                       kv[1].get("lens", 0.0)))
    lenses = sorted(c for c, v in r["change"].items() if v.get("lens", 0.0) > 1e-9)
    what = (f"largest change: {cam} moved {100 * d['moved_m']:.1f} cm, turned {d['turned_deg']:.2f} deg, K "
            f"{d['K_px']:.2f} px" if max(d.values()) > 1e-6 else "the trained calibration (tables unchanged)")
    if lenses and not any(d[k] > 1e-6 for k in ("moved_m", "turned_deg", "K_px")):
        what = f"another lens on {', '.join(lenses)}; mounts and K unchanged"
    elif lenses:
        what += f"; another lens on {', '.join(lenses)}"
    return (f"rig {r['name']} ({r['from']}; trained on rig {r['trained_rig']}): view transform tables rebuilt from its "
            f"calibration ({what}), weights unchanged; BEV cells seen {100 * r['bev_coverage']:.0f}%")


def export_command(checkpoint: str | Path, out: str | Path, data: str | Path | None = None, fmt: str = "onnx",
                   dynamic_batch: bool = False, input_dtype: str = "uint8", int8: bool = False,
                   rig: str | Path | None = None, overwrite: bool = False,
                   cameras: Sequence[str] | None = None) -> list[str]:
    """What `hydranet export` does; returns the lines it printed. `fmt` "tensorrt": `out` names the
    engine; the ONNX model is written next to it (and, with int8, its Q/DQ version for TensorRT).
    `rig`: export for another rig (`export_checkpoint`). An existing output is refused unless `overwrite`."""
    if fmt not in ("onnx", "tensorrt"):
        raise ExportError(f"--format must be onnx or tensorrt, got {fmt!r}")
    out = Path(out)
    onnx_path = out if fmt == "onnx" else out.with_suffix(".onnx")
    for p in dict.fromkeys((out, onnx_path)):
        if not overwrite and (p.exists() or p.is_symlink()):
            raise ExportError(f"--out {out}: {p} already exists; pass --overwrite to replace it, or give another path")
        if p.is_dir():
            raise ExportError(f"--out {out}: {p} is a folder; give a file path such as {p / 'model.onnx'}")
    res = export_checkpoint(checkpoint, onnx_path, data, dynamic_batch=dynamic_batch, input_dtype=input_dtype, rig=rig,
                            cameras=cameras)
    lines = [res.trt_report.format()]
    if rig is not None:
        lines.append(rig_line(json.loads(res.metadata["hydranet.source"])))
    if fmt == "onnx":
        lines.append(f"wrote {onnx_path}")
        print("\n".join(lines))
        return lines
    if not res.trt_report.ok:
        onnx_path.unlink(missing_ok=True)
        raise ExportError(f"the graph fails the TensorRT checks ({res.trt_report.errors[0]}); no engine built")
    from deploy.tensorrt import export_tensorrt

    int8_path = None
    if int8:
        from deploy.quantize import QuantizeConfig, quantize_model

        int8_path = onnx_path.with_name(onnx_path.stem + ".int8.trt.onnx")
        calib = json.loads(res.metadata["hydranet.source"])["parity_data"]
        quantize_model(onnx_path, calib, int8_path, QuantizeConfig(target="tensorrt"))
    from deploy.metadata import read_metadata

    md = read_metadata(onnx_path)
    shapes = {k: v["shape"] for k, v in md["inputs"].items()}
    trt = export_tensorrt(onnx_path, out, shapes, int8_path, dynamic_batch)
    lines += [f"wrote {onnx_path}", trt["message"]]
    print("\n".join(lines))
    return lines
