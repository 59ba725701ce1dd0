"""nuScenes tables: the value checks every record goes through (a one-line DatasetError naming the table,
the token and the field), a record's pose, the version folders and a split's scene list. numpy only."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hydranet.data.reader import DatasetError
from hydranet.geometry import make_transform, quaternion_to_matrix
from hydranet.io import read_json
from hydranet.metrics.nuscenes_data import MINI_SPLITS, OFFICIAL_SPLITS

FIX = "re-extract the nuScenes metadata archive (v1.0-*.tgz) into the dataset root"


def _numbers(rec: dict, key: str, n: int) -> list[float] | None:
    """rec[key] as n finite floats, or None when it is not that (missing, null, wrong length, NaN/Inf)."""
    v = rec.get(key) if isinstance(rec, dict) else None
    if not isinstance(v, (list, tuple)) or len(v) != n or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v):
        return None
    return [float(x) for x in v]


def check_record(rec: dict, table: str, fields: dict[str, str], fix: str) -> None:
    """DatasetError naming the table, the record's token and the first bad field. `fields` maps a key
    to its kind: "vec3" (3 finite numbers), "size" (3 positive finite), "quat" (4 finite, not zero),
    "K" (3x3 finite with positive focal lengths)."""
    tok = rec.get("token", "?") if isinstance(rec, dict) else "?"
    for key, kind in fields.items():
        v = rec.get(key) if isinstance(rec, dict) else None
        if kind == "K":
            rows = v if isinstance(v, (list, tuple)) and len(v) == 3 else None
            vals = [_numbers({"r": r}, "r", 3) for r in rows] if rows else [None]
            ok = all(r is not None for r in vals) and vals[0][0] > 0 and vals[1][1] > 0
            want = "a 3x3 matrix of finite numbers with positive focal lengths"
        elif kind == "quat":
            q = _numbers(rec, key, 4)
            ok = q is not None and math.sqrt(sum(x * x for x in q)) > 1e-6
            want = "4 finite numbers (w, x, y, z) of a non-zero quaternion"
        elif kind == "size":
            sz = _numbers(rec, key, 3)
            ok = sz is not None and all(x > 0 for x in sz)
            want = "3 positive finite numbers"
        else:
            ok = _numbers(rec, key, 3) is not None
            want = "3 finite numbers"
        if not ok:
            raise DatasetError(f"{table} {tok}: field {key!r} must be {want}, got {v!r}; {fix}")


def pose(rec: dict, table: str = "", fix: str = FIX) -> np.ndarray:
    """nuScenes translation + rotation (w, x, y, z) -> 4x4; a DatasetError naming `table`, the token
    and the field when either is not finite (or the quaternion is zero)."""
    check_record(rec, table or "record", {"translation": "vec3", "rotation": "quat"}, fix)
    return make_transform(quaternion_to_matrix(rec["rotation"]), rec["translation"])


def find_versions(root: Path) -> list[str]:
    """Version folders under root (any folder holding a sample.json)."""
    return sorted(p.parent.name for p in Path(root).glob("*/sample.json"))


def scenes_of_split(table_root: Path, version: str, split: str, all_names: list[str]) -> list[str]:
    """Scene names of a split: the devkit's mini splits, `<version>/splits.json` (custom splits,
    as nuscenes.utils.splits), or "all"."""
    custom_path = table_root / "splits.json"
    custom = read_json(custom_path, error=DatasetError, fix="fix or remove splits.json") if custom_path.is_file() else {}
    if split in OFFICIAL_SPLITS and split not in custom:
        part = OFFICIAL_SPLITS[split]
        if not version.endswith(part):
            raise DatasetError(f"{table_root}: split {split!r} belongs to v1.0-{part}, not {version!r}; "
                               f"pick a split of this version")
        if split not in MINI_SPLITS:
            raise DatasetError(f"{table_root}: the scene list of official split {split!r} is not shipped with "
                               f"hydranet; write it into {custom_path} as {{\"{split}\": [scene names]}} "
                               "(from nuscenes.utils.splits)")
        return list(MINI_SPLITS[split])
    if split in custom:
        return list(custom[split])
    if split == "all":
        return list(all_names)
    raise DatasetError(f"{table_root}: unknown split {split!r}; known: "
                       f"{sorted(set(custom) | set(MINI_SPLITS)) + ['all']}")
