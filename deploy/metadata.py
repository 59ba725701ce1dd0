"""The ONNX metadata format: everything the torch-free runtime needs, stored in the model file.

An exported HydraNet carries `hydranet.<key>` entries in its `metadata_props`, each a JSON value
(every key is described in docs/deploy.md): the format name and version, the inputs and outputs
with their layouts, the heads and how to decode them, the rig (names, K, cam2ego, sizes), the
normalization, the BEV grid and the video state's input/output names, the training config and
dataset meta, the source checkpoint, the parity report and, after `hydranet quantize`, what was
quantized. This module is the one place that writes and reads it; it imports no torch.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hydranet.geometry import Camera, Distortion, distortion_from_row

FORMAT, FORMAT_VERSION = "hydranet-onnx", 2  # 2: the `embedding` output and its "embedding" entry
PREFIX = "hydranet."
REQUIRED_KEYS = ("format", "inputs", "outputs", "heads", "rig", "normalization")
STATE_INPUTS = ("prev_bev", "ego_motion")  # the video state fed back by the runtime
STATE_OUTPUT = "bev_state.bev_queue"
EMBEDDING_OUTPUT = "embedding"  # (B*N, C) pooled trunk feature per camera image


class MetadataError(ValueError):
    """A model whose HydraNet metadata is missing, unreadable, of another format version or
    inconsistent with its graph; the message says what to do."""


def _finite(value: Any, shape: tuple[int, ...], what: str, names: list[str]) -> np.ndarray:
    """`value` as a float64 array of `shape` with finite entries; else MetadataError `what` has shape ..."""
    try:
        a = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        a = np.zeros(0)
    if a.shape != shape or not np.isfinite(a).all():
        raise MetadataError(f"{what} has shape {a.shape} for cameras {names}; re-export it")
    return a


@dataclass(frozen=True, eq=False)
class ModelRig:
    """The rig an exported model takes, from its metadata's `hydranet.rig`: camera names in input order,
    the input size, each camera's K and cam2ego at that size, the size it is calibrated at and its lens.
    Built once per model by `ModelRig.from_metadata` (`HydraRuntime.rig`); read it instead of the raw entry."""
    name: str
    names: tuple[str, ...]
    image_size: tuple[int, int]  # (H, W) the model's input
    K: np.ndarray  # (N, 3, 3) float64 at image_size
    cam2ego: np.ndarray  # (N, 4, 4) float64
    source_sizes: tuple[tuple[int, int], ...]  # (H, W) each camera is calibrated at
    lenses: tuple[Distortion | None, ...]  # per camera (None: a pinhole)

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any], where: str) -> "ModelRig":
        """The checked rig of metadata `md` (`read_metadata`'s); MetadataError naming `where` (the model
        file) and the key when the entry is not what `hydranet export` writes."""
        rig = md.get("rig")
        fix = "the file was edited or corrupted: re-export it with `hydranet export`"
        if not isinstance(rig, Mapping):
            raise MetadataError(f"{where}: metadata rig is {type(rig).__name__}, not a mapping; {fix}")
        names = rig.get("names")
        if not (isinstance(names, list) and names and all(isinstance(n, str) and n for n in names)):
            raise MetadataError(f"{where}: metadata rig names {names!r} is not a list of camera names; {fix}")
        size = rig.get("image_size")
        if not (isinstance(size, Sequence) and len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size)):
            raise MetadataError(f"{where}: metadata rig image_size {size!r} is not [H, W] in pixels; re-export it with "
                                "`hydranet export`")
        N = len(names)
        K, T = (_finite(rig.get(key), shape, f"{where}: metadata rig {key}", names)
                for key, shape in (("K", (N, 3, 3)), ("cam2ego", (N, 4, 4))))
        sources = rig.get("source_sizes")
        if not (isinstance(sources, list) and len(sources) == N and all(
                isinstance(s, Sequence) and len(s) == 2 and all(isinstance(v, int) and v > 0 for v in s) for s in sources)):
            raise MetadataError(f"{where}: metadata rig source_sizes {sources!r} is not one [H, W] per camera {names}; {fix}")
        lenses: tuple[Distortion | None, ...] = (None,) * N
        if rig.get("distortion") is not None:
            try:
                D = np.asarray(rig["distortion"], np.float64)
                if D.shape[:1] != (N,):
                    raise ValueError(f"shape {D.shape} for {N} cameras")
                lenses = tuple(distortion_from_row(row) for row in D)
            except (TypeError, ValueError) as e:
                raise MetadataError(f"{where}: metadata rig distortion is not a lens row per camera ({e}); re-export it") from None
        return cls(str(rig.get("name", "")), tuple(names), (int(size[0]), int(size[1])), K, T,
                   tuple((int(h), int(w)) for h, w in sources), lenses)

    def select(self, names: Sequence[str]) -> "ModelRig":
        """These cameras of the rig (names it has), in the order given."""
        idx = [self.names.index(n) for n in names]
        return ModelRig(self.name, tuple(names), self.image_size, self.K[idx], self.cam2ego[idx],
                        tuple(self.source_sizes[i] for i in idx), tuple(self.lenses[i] for i in idx))

    @property
    def cameras(self) -> tuple[Camera, ...]:
        """The model's cameras at its input size, in input order."""
        H, W = self.image_size
        return tuple(Camera(n, self.K[i], self.cam2ego[i], W, H, self.lenses[i]) for i, n in enumerate(self.names))


def _layout(shape: Sequence[int], space: str, N: int) -> str:
    if space == "image":
        return f"(B*N, {', '.join(str(s) for s in shape[1:])}) camera-major: row b*N + n is camera n of frame b (N={N})"
    if space == "state":
        return f"(B, T-1, C, X, Y) = ({', '.join(str(s) for s in shape)}): feed back as prev_bev next frame"
    return f"(B, {', '.join(str(s) for s in shape[1:])}) per frame, BEV rows = -x (ahead first), columns = -y (left first)"


def build_metadata(model, cfg, meta: Mapping, input_shapes: Mapping[str, Sequence], input_dtype: str,
                   outputs: Mapping[str, tuple[str, str, Sequence[int]]], dynamic_batch: bool,
                   source: Mapping[str, Any], opset: int) -> dict[str, str]:
    """`hydranet.*` metadata_props (JSON strings) of a HydraNet `model` exported with experiment
    config `cfg` and dataset `meta`; `outputs`: graph output name -> (head, key, shape)."""
    from hydranet.config import to_dict
    from hydranet.geometry import distortion_array
    from hydranet.rig import rig_from_dict

    H, W = cfg.data.image_size
    rig = rig_from_dict(meta["rig"], "checkpoint meta rig")
    try:
        sub = rig.select(list(cfg.data.cameras) if cfg.data.cameras else None)
    except ValueError as e:
        raise MetadataError(f"config data.cameras: {e}") from None
    K, T, names = sub.resized(W, H).calibration()
    N = len(names)
    heads = {}
    for name, task in model.heads.items():
        entry: dict[str, Any] = {"space": task.space, "outputs": [o for o, (h, _, _) in outputs.items() if h == name],
                                 "decoding": task.decoding()}
        for attr in ("classes", "channels", "sign_classes", "light_states"):
            if isinstance(getattr(task, attr, None), (list, tuple)):
                entry[attr] = list(getattr(task, attr))
        heads[name] = entry
    out_meta = {}
    for oname, (head, key, shape) in outputs.items():
        space = {"bev_state": "state", EMBEDDING_OUTPUT: "image"}.get(head) or model.heads[head].space
        out_meta[oname] = {"head": head, "key": key, "shape": list(shape), "space": space, "layout": _layout(shape, space, N)}
    inputs = {"images": {"shape": list(input_shapes["images"]), "dtype": input_dtype,
                         "layout": "(B, N, 3, H, W) RGB, cameras in rig order"}}
    bev = None
    if model.fusion is not None:
        grid = model.fusion.grid
        video = model.video_frames > 1
        bev = {"grid": grid.as_dict(), "shape": list(grid.shape), "channels": model.fusion.out_channels,
               "video_frames": model.video_frames}
        if video:
            inputs["prev_bev"] = {"shape": list(input_shapes["prev_bev"]), "dtype": "float32",
                                  "layout": "(B, T-1, C, X, Y) the previous call's bev_state.bev_queue; zeros at start"}
            inputs["ego_motion"] = {"shape": list(input_shapes["ego_motion"]), "dtype": "float32",
                                    "layout": "(B, 4, 4) previous ego -> current ego = inv(E_t) @ E_{t-1}, E = ego2world"}
            bev["state"] = {"input": STATE_INPUTS[0], "output": STATE_OUTPUT, "motion": STATE_INPUTS[1]}
    md = {
        "format": {"name": FORMAT, "version": FORMAT_VERSION, "opset": opset},
        "inputs": inputs,
        "outputs": out_meta,
        "output_names": list(outputs),
        "heads": heads,
        "head_names": list(model.heads),
        "classes": list(meta.get("classes", [])),
        "rig": {"name": rig.name, "names": names, "K": np.round(K, 6).tolist(), "cam2ego": np.round(T, 9).tolist(),
                "image_size": [H, W], "source_sizes": _source_sizes(meta, sub.cameras),
                # lens rows (N, 6) (hydranet.geometry.distortion_array) where a camera has a lens model
                **({"distortion": distortion_array(sub.cameras).tolist()} if sub.distorted else {})},
        "normalization": {"input_dtype": input_dtype, "scale": 1 / 255 if input_dtype == "uint8" else 1.0,
                          "mean": [float(v) for v in model.mean.flatten()], "std": [float(v) for v in model.std.flatten()],
                          "in_graph": True, "note": "feed RGB; (x*scale - mean)/std happens inside the graph"},
        "dynamic_batch": dynamic_batch,
        "embedding": {"output": EMBEDDING_OUTPUT, "dim": int(outputs[EMBEDDING_OUTPUT][2][-1]),
                      "source": "global average pool of the coarsest neck level",
                      "layout": _layout(outputs[EMBEDDING_OUTPUT][2], "image", N)} if EMBEDDING_OUTPUT in outputs else None,
        "bev": bev,
        "config": json.loads(json.dumps(to_dict(cfg))),
        "meta": {k: v for k, v in meta.items() if k != "scenes"},
        "source": dict(source),
    }
    return {PREFIX + k: json.dumps(v) for k, v in md.items()}


def _source_sizes(meta: Mapping, cams) -> list[list[int]]:
    """(H, W) each camera is calibrated at: the dataset's own rig (meta "source_rig", written by
    training) or, for older checkpoints, the model rig."""
    own = {c["name"]: [int(c["height"]), int(c["width"])] for c in meta.get("source_rig", meta["rig"])["cameras"]}
    return [own.get(c.name, [c.height, c.width]) for c in cams]


def set_metadata(model, props: Mapping[str, str]) -> None:
    """Write `props` into an onnx ModelProto's metadata_props (replacing equal keys, keeping others)."""
    keep = [p for p in model.metadata_props if p.key not in props]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    for k, v in props.items():
        e = model.metadata_props.add()
        e.key, e.value = k, v


def decode_props(props: Mapping[str, str], where: str) -> dict[str, Any]:
    """{key: value} of the `hydranet.*` entries of a metadata map, checked: every required key
    present, valid JSON, this format and version."""
    raw = {k[len(PREFIX):]: v for k, v in props.items() if k.startswith(PREFIX)}
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    if missing:
        raise MetadataError(f"{where} has no HydraNet metadata (missing key '{PREFIX}{missing[0]}'); the runtime needs a "
                            "model written by `hydranet export` (or quantized from one by `hydranet quantize`)")
    md = {}
    for k, v in raw.items():
        try:
            md[k] = json.loads(v)
        except json.JSONDecodeError as e:
            raise MetadataError(f"{where}: metadata key '{PREFIX}{k}' is not valid JSON ({e}); re-export the model") from None
    fmt = md["format"]
    if not isinstance(fmt, Mapping) or fmt.get("name") != FORMAT:
        raise MetadataError(f"{where}: metadata format {fmt!r} is not {FORMAT!r}; re-export it with `hydranet export`")
    version = fmt.get("version")
    if not isinstance(version, int) or version < FORMAT_VERSION:
        raise MetadataError(f"{where} was written by an older metadata format (version {version}); this runtime reads "
                            f"version {FORMAT_VERSION}: re-export it from its checkpoint with `hydranet export`")
    if version > FORMAT_VERSION:
        raise MetadataError(f"{where} was written by a newer metadata format (version {version}); this runtime reads "
                            f"version {FORMAT_VERSION}: update the hydranet package")
    return md


def read_metadata(model_or_path) -> dict[str, Any]:
    """The checked `hydranet.*` metadata of an onnx ModelProto or .onnx file."""
    import onnx

    if isinstance(model_or_path, (str, Path)):
        where = str(model_or_path)
        model = onnx.load(where, load_external_data=False)
    else:
        where, model = "the ONNX model", model_or_path
    return decode_props({p.key: p.value for p in model.metadata_props}, where)


_METADATA_PROPS = 14  # ModelProto.metadata_props (onnx.proto): repeated StringStringEntryProto {key = 1, value = 2}


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message's top-level fields; a length-delimited value is its bytes.
    ValueError (or IndexError) when `buf` is not a well-formed message."""
    i, n = 0, len(buf)
    while i < n:
        tag, i = _varint(buf, i)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1 or wire == 5:
            value, i = buf[i:i + (8 if wire == 1 else 4)], i + (8 if wire == 1 else 4)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        else:
            raise ValueError(f"wire type {wire}")
        if field == 0 or i > n:
            raise ValueError("truncated or not a protobuf message")
        yield field, wire, value


def file_metadata(path: str | Path) -> dict[str, Any]:
    """`read_metadata` of a .onnx file without importing onnx (its import, through ml_dtypes, takes seconds): the
    `metadata_props` read from the file's top-level protobuf fields, the graph skipped unparsed. A file this cannot
    parse, or without `hydranet.*` entries, goes to `read_metadata`, so every refusal is that function's."""
    try:
        props = {}
        for field, wire, value in _fields(Path(path).read_bytes()):
            if field == _METADATA_PROPS and wire == 2:
                entry = {f: v for f, w, v in _fields(value) if w == 2}
                props[entry.get(1, b"").decode()] = entry.get(2, b"").decode()
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return read_metadata(path)
    if not any(k.startswith(PREFIX) for k in props):
        return read_metadata(path)
    return decode_props(props, str(path))


def check_graph(md: Mapping[str, Any], input_names: Sequence[str], output_names: Sequence[str], where: str,
                input_shapes: Mapping[str, Sequence] | None = None) -> None:
    """MetadataError unless the metadata's inputs, outputs and heads are those of the graph: at least
    one head, each with outputs; with `input_shapes` ({input name: the graph's shape, a dimension an
    int or a symbolic name}) the `images` input must be (B, N cameras, 3, H, W) of the rig's image size."""
    declared_in, declared_out = set(md["inputs"]), set(md["outputs"])
    heads = md["heads"]
    if not isinstance(heads, Mapping) or not heads:
        raise MetadataError(f"{where}: metadata lists no heads ({PREFIX}heads = {json.dumps(heads)[:60]}), so the model "
                            "would decode nothing; the file was edited or corrupted: re-export it with `hydranet export`")
    empty = [name for name, head in heads.items() if not isinstance(head, Mapping) or not head.get("outputs")]
    if empty:
        raise MetadataError(f"{where}: metadata head '{empty[0]}' lists no outputs; the file was edited or corrupted: "
                            "re-export it with `hydranet export`")
    if declared_in != set(input_names):
        raise MetadataError(f"{where}: metadata declares inputs {sorted(declared_in)} but the graph has "
                            f"{sorted(input_names)}; the file was edited or corrupted: re-export it")
    if declared_out != set(output_names):
        extra = sorted(declared_out ^ set(output_names))
        raise MetadataError(f"{where}: metadata and graph disagree on outputs {extra}; the file was edited or "
                            "corrupted: re-export it")
    for name, head in md["heads"].items():
        unknown = [o for o in head.get("outputs", []) if o not in declared_out]
        if unknown:
            raise MetadataError(f"{where}: head '{name}' names output '{unknown[0]}' that the graph lacks; re-export it")
    rig = ModelRig.from_metadata(md, where)
    if input_shapes is not None and "images" in input_shapes:
        _check_image_input(rig, list(input_shapes["images"]), where)


def _check_image_input(rig: ModelRig, shape: list, where: str) -> None:
    """MetadataError unless the graph's `images` input (B, N, 3, H, W) fits the rig: N cameras of the
    metadata's image size (symbolic dimensions, a dynamic batch, are not compared)."""
    size, N = rig.image_size, len(rig.names)
    want = [None, N, 3, *size]
    if len(shape) != 5 or any(isinstance(g, int) and w is not None and g != w for g, w in zip(shape, want)):
        H, W = size
        raise MetadataError(f"{where}: metadata says {N} camera(s) at {W}x{H} (image_size [H, W] = "
                            f"{list(size)}) but the graph's input 'images' has shape {shape} (B, N, 3, H, W); the file "
                            "was edited or corrupted: re-export it with `hydranet export`")
