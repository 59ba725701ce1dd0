"""Files: the one owner of how hydranet reads and writes them. Torch-free: the car side uses it.

- Paths named by data: a name or relative path read from a dataset, fleet, catalog or label file
  stays inside the folder it belongs to: `path_inside` (a path), `check_name` (one component),
  `frame_path` (root/scenes/<scene>/<frame>/<file>). Symlinks are resolved: a link inside the
  root that points outside it is refused too.
- `read_json`: a JSON file, or one line naming the file, what it is and how to fix it.
- `atomic_write_text`/`atomic_write_bytes`/`atomic_path`: NAME.tmp-<pid> then rename, so a crash
  never leaves a half-written file; `remove_stale_temps` clears the temps of killed writers.
- `checkpoint_file`: "a run folder or a checkpoint.pt" -> the checkpoint file.
- `check_apart`: no output is, contains or sits inside an input (symlinks resolved), checked before
  anything is written; `check_replaceable`: a file or folder an output replaces is of its own kind.
- `file_sha256`, `exclusive_lock`.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from hydranet.rig import check_name

__all__ = ["CHECKPOINT", "PathOutsideRoot", "RUN_FILES", "TMP", "atomic_path", "check_apart", "check_replaceable",
           "file_kind", "atomic_write_bytes", "atomic_write_text", "temp_path",
           "check_name", "checkpoint_file", "exclusive_lock", "file_sha256", "frame_path", "path_inside", "pid_alive",
           "read_json", "remove_stale_temps", "replace_folder"]


class PathOutsideRoot(ValueError):
    """A path from a data file that would leave its root (`..`, absolute, or a symlink out)."""


def path_inside(root: str | Path, rel, where: str, error: type[Exception] = PathOutsideRoot) -> Path:
    """`root / rel` when it resolves (symlinks followed) inside `root`; else `error` naming `where`.

    `rel` must be a non-empty relative path string without NUL or control characters; '..' parts
    are allowed only while the result stays inside (e.g. 'a/../b'). The returned path is
    `root / rel` as written (not resolved), so messages and stored paths keep the user's spelling.
    """
    if not isinstance(rel, str) or not rel or rel != rel.strip() or any(ord(c) < 32 or ord(c) == 127 for c in rel):
        raise error(f"{where}: path {rel!r} is not a usable relative path (non-empty, no control characters or "
                    f"outer spaces); fix the file that names it")
    if os.path.isabs(rel) or rel.startswith(("/", "\\")) or (len(rel) > 1 and rel[1] == ":"):
        raise error(f"{where}: path {rel!r} is absolute; paths in this file must be relative to {root}")
    root = Path(root)
    path = root / rel
    real_root = root.resolve()
    real = path.resolve()  # follows every symlink that exists; a missing tail stays lexical
    if real != real_root and real_root not in real.parents:
        raise error(f"{where}: path {rel!r} leaves {root} (it resolves to {real}); data files may only name "
                    f"paths inside their own folder")
    return path


def frame_path(root: str | Path, scene, frame=None, file=None, *, where: str,
               error: type[Exception] = PathOutsideRoot) -> Path:
    """root/scenes/<scene>[/<frame>[/<file>]] of a dataset or fleet in docs/dataset_format.md's layout.

    Each name must be one safe path component (`check_name`) and the result must resolve inside
    `root` (a scene or frame folder that is a symlink out of the dataset is refused).
    """
    parts = ["scenes", check_name(scene, "scene", where, error)]
    if frame is not None:
        parts.append(check_name(frame, "frame dir", where, error))
    if file is not None:
        parts.append(check_name(file, "file", where, error))
    return path_inside(root, "/".join(parts), where, error)


def file_sha256(path: str | Path) -> str:
    """The hex sha256 of a file's bytes (a model's identity in the registry, an export's source)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def exclusive_lock(path: str | Path, what: str, error: type[Exception] = RuntimeError) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created, holding this process's pid) for the block; if another
    process holds it, raise `error` at once naming its pid. The kernel drops the lock when its holder
    dies (kill -9 included), so a stale lock file never blocks: only a live holder does."""
    path = Path(path)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise error(f"{what} is in use by another process (pid {holder}, lock file {path}); wait for it to finish or "
                    "stop it, then rerun") from None
    try:
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


LFS_POINTER = b"version https://git-lfs"  # how a Git LFS pointer file begins (git-lfs.com/spec/v1)
LFS_FIX = "fetch the file itself (`git lfs pull` in the repository it came from)"


def is_lfs_pointer(data: bytes | str) -> bool:
    """Whether a file's content is a Git LFS pointer (a placeholder of ~130 bytes), not the file it names."""
    return (data.encode() if isinstance(data, str) else bytes(data[:len(LFS_POINTER)])).startswith(LFS_POINTER)


def read_json(path: str | Path, what: str = "file", error: type[Exception] = ValueError,
              fix: str = "fix or regenerate it"):
    """The JSON at `path`, or `error` with one line naming the file, `what` it is and `fix`:

    - missing (or a folder): "PATH: WHAT is missing; FIX"
    - unreadable: "PATH: WHAT cannot be read: permission denied; check the file's permissions"
      (another OSError: "PATH: WHAT cannot be read: <reason>")
    - not JSON (or not UTF-8): "PATH: corrupt JSON (<where>); FIX"
    - a Git LFS pointer: "PATH: a Git LFS pointer, not the WHAT itself; fetch the file itself (...)"

    An `error` whose instances carry a `path` attribute (DatasetError) gets `path` set.
    """
    path = Path(path)

    def fail(message: str) -> Exception:
        e = error(message)
        if hasattr(e, "path"):
            e.path = path
        return e

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise fail(f"{path}: corrupt JSON ({e}); {fix}") from None
    except PermissionError:
        raise fail(f"{path}: {what} cannot be read: permission denied; check the file's permissions") from None
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise fail(f"{path}: {what} is missing; {fix}") from None
    except OSError as e:
        raise fail(f"{path}: {what} cannot be read: {(e.strerror or str(e)).lower()}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if is_lfs_pointer(text):
            raise fail(f"{path}: a Git LFS pointer, not the {what} itself; {LFS_FIX}") from None
        raise fail(f"{path}: corrupt JSON ({e}); {fix}") from None


TMP = ".tmp-"  # a file or folder being written: NAME.tmp-<pid>, renamed to NAME when complete


def temp_path(path: str | Path) -> Path:
    """PATH.tmp-<pid>: where `path` is written before it is renamed into place."""
    path = Path(path)
    return path.with_name(f"{path.name}{TMP}{os.getpid()}")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield PATH.tmp-<pid> to write `path` into; on a clean exit it is renamed to `path` (atomic on
    one filesystem), on an error it is removed and `path` is left as it was."""
    tmp = temp_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` through PATH.tmp-<pid> and a rename: a reader (or a crash) never sees
    a half-written file."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """`atomic_write_bytes` of `text` (UTF-8)."""
    return atomic_write_bytes(path, text.encode())


CHECKPOINT = "checkpoint.pt"  # the checkpoint file of a run folder


def checkpoint_file(path: str | Path) -> Path:
    """The checkpoint file a user named: RUN/checkpoint.pt for a run folder, else `path` itself
    (not checked: each caller says in its own words that it is missing)."""
    path = Path(path)
    return path / CHECKPOINT if path.is_dir() else path


RUN_FILES = (CHECKPOINT, "config.json", "retrain.json", "accepted", "trunk")  # what reading a run folder reads


def read_parts(path: Path) -> list[Path]:
    """What reading `path` reads: a run folder (one holding checkpoint.pt) is its RUN_FILES, so an output
    beside them (RUN/metrics.json, RUN/model.onnx) is fine; any other file or folder is itself."""
    if (path / CHECKPOINT).is_file():
        return [path / n for n in RUN_FILES if (path / n).exists()]
    return [path]


def check_apart(outputs: Mapping[str, str | Path | None], inputs: Mapping[str, object],
                error: type[Exception] = ValueError, refuse: tuple[str, ...] = ("is", "contains", "sits inside")) -> None:
    """Refuse, before anything is written, an output that is, contains or sits inside an input.

    `outputs` and `inputs` map a name the user knows ("--out", "--videos", "the catalog's fleet") to a
    path, or (inputs) a list of paths; None and missing paths are skipped. Symlinks are resolved, so a
    link to the input is the input. `refuse`: which of the three relations are refused (a command whose
    output folder only gains its own files may allow "contains"). One line naming both paths and what to do.
    """
    for oname, out in outputs.items():
        if out is None:
            continue
        real_out = Path(out).resolve()
        for iname, given in inputs.items():
            for path in given if isinstance(given, (list, tuple)) else [given]:
                if path is None or not Path(path).exists():
                    continue
                for part in read_parts(Path(path)):
                    real = part.resolve()
                    how = ("is" if real == real_out else "contains" if real_out in real.parents
                           else "sits inside" if real in real_out.parents else None)
                    if how not in refuse:
                        continue
                    shown = f"{part}" + (f" (resolves to {real})" if real != part.absolute() else "")
                    out_shown = f"{out}" + (f" (resolves to {real_out})" if real_out != Path(out).absolute() else "")
                    raise error(f"{oname} {out_shown} {how} {iname} {shown}, which this command reads: writing there would "
                                f"destroy its input; choose {oname} outside it")


_MAGIC = ((b"PK\x03\x04", "zip archive (a checkpoint)"), (b"SQLite format 3\x00", "SQLite database (a catalog)"),
          (b"\x89PNG", "PNG image"), (b"\xff\xd8\xff", "JPEG image"))


def file_kind(path: str | Path) -> str:
    """What an existing file is, from its first bytes (then its suffix): "json", "onnx", "tensorrt", a
    magic-number kind from _MAGIC, "folder", or "other"."""
    path = Path(path)
    if path.is_dir():
        return "folder"
    with open(path, "rb") as f:
        head = f.read(64)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if path.suffix in (".onnx", ".engine", ".plan"):
        return "onnx" if path.suffix == ".onnx" else "tensorrt"
    return "json" if head.lstrip()[:1] in (b"{", b"[") else "other"


def check_replaceable(path: str | Path, kind: str, error: type[Exception] = ValueError, flag: str = "--out") -> None:
    """An existing `path` that an output would replace must be of the output's own `kind` (file_kind's words);
    else one line naming it."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    have = file_kind(path) if path.exists() else "other"
    if have != kind:
        raise error(f"{flag} {path} exists and is a {have}, not the {kind} this command writes; it is never replaced: "
                    f"choose another {flag}")


def remove_stale_temps(folder: Path, dirs: bool = False) -> list[Path]:
    """Delete `*.tmp-<pid>` files (and with `dirs`, folders) in `folder` whose writing process is
    gone (killed mid-write)."""
    removed = []
    if not folder.is_dir():
        return removed
    for p in folder.glob(f"*{TMP}*"):
        pid = p.name.rsplit(TMP, 1)[1]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        if p.is_file():
            p.unlink(missing_ok=True)
        elif dirs and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            continue
        removed.append(p)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether process `pid` can still write: it exists and is not a zombie (killed, not yet reaped by its parent or
    by init: /proc/PID/stat state Z on Linux; a killed pool worker stays one for a while, for ever where PID 1 does
    not reap), else its temps were kept as a live writer's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): it exists
    return state not in ("Z", "X")


def replace_folder(tmp: Path, out: Path) -> None:
    """Move a completed folder `tmp` to `out`; an existing `out` is removed only once `tmp` is in its place."""
    if out.exists():
        old = out.with_name(f"{out.name}.old-{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        tmp.rename(out)
