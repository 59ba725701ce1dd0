"""The one image decoder and its corruption policy, used by training, evaluation, every dataset
reader, shadow mode, labelling and retrain.

An image file is an image only when all of these hold; otherwise `ImageError` says which failed:
- its bytes are the format its name says (`.jpg`/`.jpeg`: JPEG, `.png`: PNG; a PNG named `.jpg`
  is refused, not decoded as whatever it happens to be);
- it is complete (a JPEG ends with its EOI marker FF D9, a PNG holds its IEND chunk: OpenCV
  decodes a truncated file into grey rows silently);
- libjpeg printed no warning while decoding it ("Corrupt JPEG data: ...", "Premature end of JPEG
  file": the pixels after the damage are invented). libjpeg's warnings go to the C stderr with no
  API in OpenCV, so fd 2 is pointed at a temp file for the one call (under a lock).
numpy + OpenCV only: the car side uses it.
"""
from __future__ import annotations

import ctypes
import os
import re
import struct
import tempfile
import threading
from pathlib import Path

import cv2
import numpy as np

from hydranet.io import LFS_FIX, is_lfs_pointer

JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUFFIX_FORMAT = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG"}


class ImageError(ValueError):
    """Bytes that are not a whole, undamaged image of the format their file name says."""


def image_format(data: bytes | np.ndarray) -> str | None:
    """"JPEG", "PNG" or None, from the file's first bytes."""
    head = bytes(data[:8])
    if head.startswith(JPEG_MAGIC):
        return "JPEG"
    if head == PNG_MAGIC:
        return "PNG"
    return None


def decode_bytes(data: bytes | np.ndarray, name: str | Path, flags: int = cv2.IMREAD_UNCHANGED) -> np.ndarray:
    """The image in `data` as OpenCV returns it (BGR or grey, uint8 or uint16); `name` is the file name
    (its suffix says the format it must be). ImageError with the reason when it is not a whole image."""
    data = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data
    fmt, expected = image_format(data), SUFFIX_FORMAT.get(Path(name).suffix.lower())
    if fmt is None and is_lfs_pointer(data):
        raise ImageError(f"is a Git LFS pointer, not the image itself: {LFS_FIX}")
    if fmt is None:
        raise ImageError("is not a JPEG or PNG image (empty, or another format)")
    if expected is not None and fmt != expected:
        raise ImageError(f"is a {fmt} file named {Path(name).suffix}: re-encode it as {expected} or rename it")
    if fmt == "JPEG" and data[-2:].tobytes() != b"\xff\xd9":
        raise ImageError("is corrupt or truncated (the JPEG has no end marker)")
    if fmt == "PNG" and b"IEND" not in data[-12:].tobytes():
        raise ImageError("is corrupt or truncated (the PNG has no IEND chunk)")
    img, warned = _imdecode(data, flags, jpeg=fmt == "JPEG")
    if warned:
        raise ImageError(f"is corrupt (decoder: {warned})")
    if img is None:
        raise ImageError("is corrupt or truncated (the decoder could not read it)")
    return img


def read_image_file(path: str | Path, flags: int = cv2.IMREAD_UNCHANGED) -> np.ndarray:
    """`decode_bytes` of a file; OSError (missing, unreadable) passes through for the caller to word."""
    return decode_bytes(np.fromfile(path, dtype=np.uint8), path, flags)


def read_rgb(path: str | Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a colour image file; OSError and ImageError pass through for the caller to word."""
    return cv2.cvtColor(read_image_file(path, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


_STDERR_LOCK = threading.Lock()
_CAPTURE: dict = {}  # pid -> unlinked temp file receiving the decoder's stderr
try:
    _fflush = ctypes.CDLL(None).fflush  # C stdio's stderr may buffer: flush it while fd 2 is redirected
except (OSError, AttributeError):
    _fflush = None
_DECODER_WARNING = re.compile(r"corrupt|jpeg|premature|invalid|huffman|scanline|bogus", re.IGNORECASE)


def _imdecode(data: np.ndarray, flags: int, jpeg: bool) -> tuple[np.ndarray | None, str]:
    """cv2.imdecode, and for JPEG the warnings libjpeg printed while decoding. Other text that lands on
    fd 2 meanwhile is passed on to the real stderr."""
    if not jpeg:
        return cv2.imdecode(data, flags), ""
    with _STDERR_LOCK:
        try:
            if os.getpid() not in _CAPTURE:  # per process: a forked DataLoader worker gets its own file
                _CAPTURE[os.getpid()] = tempfile.TemporaryFile()
            fd = _CAPTURE[os.getpid()].fileno()
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            saved = os.dup(2)
        except OSError:  # no stderr to redirect: decode without the warning check
            return cv2.imdecode(data, flags), ""
        try:
            if _fflush is not None:
                _fflush(None)
            os.dup2(fd, 2)
            img = cv2.imdecode(data, flags)
            if _fflush is not None:
                _fflush(None)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 1 << 16).decode(errors="replace")
    lines = text.splitlines()
    warnings = [ln.strip() for ln in lines if _DECODER_WARNING.search(ln)]
    other = [ln for ln in lines if not _DECODER_WARNING.search(ln)]
    if other:
        os.write(2, ("\n".join(other) + "\n").encode())
    return img, "; ".join(dict.fromkeys(warnings))


def image_size(path: Path) -> tuple[int, int] | None:
    """(width, height) from a JPEG's SOF or a PNG's IHDR header, without decoding; None when the file
    is missing or its header is not one of those (the decoder then says what is wrong)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
                w, h = struct.unpack(">II", head[16:24])
                return int(w), int(h)
            if head[:2] != b"\xff\xd8":
                return None
            f.seek(2)
            while True:
                marker = f.read(2)
                if len(marker) < 2 or marker[0] != 0xFF:
                    return None
                if marker[1] == 0xFF:  # a fill byte before the marker
                    f.seek(-1, 1)
                    continue
                if marker[1] in (0xD8, 0x01) or 0xD0 <= marker[1] <= 0xD7:  # standalone markers
                    continue
                n = f.read(2)
                if len(n) < 2:
                    return None
                size = struct.unpack(">H", n)[0]
                if 0xC0 <= marker[1] <= 0xCF and marker[1] not in (0xC4, 0xC8, 0xCC):  # start of frame
                    sof = f.read(5)
                    if len(sof) < 5:
                        return None
                    h, w = struct.unpack(">HH", sof[1:5])
                    return int(w), int(h)
                f.seek(size - 2, 1)
    except OSError:
        return None
