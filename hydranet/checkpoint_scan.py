"""A checkpoint checked without importing torch: is it a `hydranet train` checkpoint with finite weights?

`hydranet.checkpoint.load_checkpoint` answers that with `torch.load(weights_only=True)`, which costs the
import of torch (5 s here) before a byte is read.
A command that only vouches for a checkpoint (`hydranet engine promote`: the registry names it, nothing
runs it) reads torch's zip format here instead: `data.pkl` is unpickled with the same allow-list idea as
`weights_only` (an OrderedDict, `torch._utils._rebuild_tensor_v2` and the storage types; any other global is
refused, so a foreign pickle runs no code), each tensor of the state dict is a numpy view of its storage
record, and the floating ones are checked finite.

`checkpoint_sound(path)` is True only when all of that holds; anything else (a legacy or foreign file, a
tensor layout or dtype not handled here, a non-finite weight, a missing key) is False, and the caller then
runs `load_checkpoint`, which gives the one-line error or, for a file this reader is merely unsure of, accepts
it. So this module decides nothing on its own: it only skips torch when the answer is plainly yes.
"""
from __future__ import annotations

import collections
import pickle
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["checkpoint_sound"]

_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
           "BFloat16Storage": np.uint16, "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
           "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_}
_FLOATING = ("FloatStorage", "DoubleStorage", "HalfStorage", "BFloat16Storage")


class _Unsure(Exception):
    """Something this reader does not handle: let torch decide."""


class _StorageType:
    def __init__(self, name: str):
        self.name = name


class _Tensor:
    """A tensor record: its storage (type name, zip key), element offset, size and stride."""

    def __init__(self, storage, offset, size, stride, *rest):
        if not isinstance(storage, tuple) or len(storage) != 2:
            raise _Unsure("a tensor without a storage record")
        self.storage, self.offset, self.size, self.stride = storage, int(offset), tuple(size), tuple(stride)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _Tensor
        if module == "torch" and name in _DTYPES:
            return _StorageType(name)
        raise _Unsure(f"global {module}.{name}")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise _Unsure(f"persistent id {pid!r:.80}")
        return (pid[1].name, str(pid[2]))


def _finite(z: zipfile.ZipFile, prefix: str, t: _Tensor) -> bool:
    kind, key = t.storage
    dtype = np.dtype(_DTYPES[kind]).newbyteorder("<")
    data = np.frombuffer(z.read(f"{prefix}data/{key}"), dtype)
    if not t.size or 0 in t.size:
        return True
    last = t.offset + sum((n - 1) * s for n, s in zip(t.size, t.stride))
    if t.offset < 0 or any(s < 0 for s in t.stride) or last >= len(data):
        raise _Unsure("a tensor outside its storage")
    view = np.lib.stride_tricks.as_strided(data[t.offset:], t.size, tuple(s * dtype.itemsize for s in t.stride),
                                           writeable=False)
    if kind == "BFloat16Storage":  # the top 16 bits of a float32: all-ones exponent is Inf or NaN
        return not bool(((view & 0x7F80) == 0x7F80).any())
    return bool(np.isfinite(view).all())


def checkpoint_sound(path: str | Path) -> bool:
    """True when `path` is a torch zip checkpoint holding a dict with model, config, meta and step whose model
    tensors are all finite (read without torch); False for anything else (module docstring: then ask torch)."""
    try:
        with zipfile.ZipFile(path) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
            if len(pkl) != 1:
                return False
            prefix = pkl[0][: -len("data.pkl")]
            byteorder = f"{prefix}byteorder"
            if byteorder in z.namelist() and z.read(byteorder).strip() != b"little":
                return False
            with z.open(pkl[0]) as f:
                ckpt = _Unpickler(f).load()
            if not isinstance(ckpt, dict) or any(k not in ckpt for k in ("model", "config", "meta", "step")):
                return False
            if not isinstance(ckpt["model"], dict):
                return False
            return all(_finite(z, prefix, t) for t in ckpt["model"].values()
                       if isinstance(t, _Tensor) and t.storage[0] in _FLOATING)
    except (_Unsure, zipfile.BadZipFile, pickle.UnpicklingError, OSError, KeyError, ValueError, TypeError, EOFError,
            AttributeError, IndexError):
        return False
