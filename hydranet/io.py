"""Paths named by data: the one check that a name or relative path read from a dataset, fleet, catalog
or label file stays inside the folder it belongs to.

Every reader and every engine stage that turns a string from a file into a path goes through
`path_inside` (a path) or `check_name` (one path component). Symlinks are resolved: a link inside
the root that points outside it is refused too. Torch-free: the car side uses it.
"""
from __future__ import annotations

import os
from pathlib import Path

from hydranet.rig import check_name

__all__ = ["PathOutsideRoot", "check_name", "path_inside"]


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
