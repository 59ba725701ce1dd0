"""Dataset formats by name: detection from a folder, opening a reader, and `hydranet data check`.

    fmt = detect_format("data/nuscenes")                     # "nuscenes"
    ds = open_dataset("data/kitti", split="val")             # KittiDataset
    print(format_report(check_dataset("data/bdd100k", split="val")))

Readers: sim (`SimDataset`), nuscenes, kitti, bdd100k (hydranet/data/<format>.py). Every reader
gives the sample of docs/dataset_format.md plus `sample["supervises"]` (heads with labels).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from hydranet.data.reader import DatasetError
from hydranet.data.sim_reader import SIM_HEADS, SimDataset

FORMATS = ("sim", "nuscenes", "kitti", "bdd100k")
# which heads each format can supervise at most (a sample may supervise fewer: nuScenes drivable, lanes and
# bevmap need the map expansion of its location)
FORMAT_HEADS = {"sim": SIM_HEADS, "nuscenes": ("det2d", "det3d", "drivable", "lanes", "bevmap"), "kitti": ("det2d", "det3d"),
                "bdd100k": ("det2d", "signs_lights", "drivable", "lanes")}
UNCALIBRATED = ("bdd100k",)  # no intrinsics/extrinsics: no BEV view transform, no 3D labels


def _looks_like(root: Path) -> list[str]:
    found = []
    if (root / "dataset.json").is_file():
        found.append("sim")
    if any(root.glob("*/sample.json")):
        found.append("nuscenes")
    if (root / "training" / "label_2").is_dir() or (root / "training" / "image_2").is_dir() or \
            (root / "testing" / "image_2").is_dir():
        found.append("kitti")
    if (root / "images" / "100k").is_dir():
        found.append("bdd100k")
    return found


def detect_format(root) -> str:
    """The format of a dataset folder; DatasetError when none or several match."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such folder; pass a dataset root")
    found = _looks_like(root)
    if len(found) == 1:
        return found[0]
    if not found:
        raise DatasetError(f"{root}: not a known dataset layout (sim: dataset.json; nuscenes: v1.0-*/sample.json; "
                           "kitti: training/label_2; bdd100k: images/100k); pass --format and see docs/datasets.md")
    raise DatasetError(f"{root}: looks like several formats {found}; pass --format (data.format) to choose")


def open_dataset(root, format: str | None = None, split: str | None = None, version: str | None = None,
                 cameras: list[str] | None = None, on_bad_frame: str = "raise", channels=None, sweeps: int = 0):
    """The reader of `format` (None: detected) over root. `split`/`version` where the format has them
    (nuScenes: version folder and split; KITTI: ImageSets split or "testing"; BDD100K: train/val/test,
    default val); `channels` None = the reader's default; `sweeps` (nuScenes only): unlabelled
    camera sweeps read between two keyframes."""
    fmt = format if format not in (None, "auto") else detect_format(root)
    if fmt not in FORMATS:
        raise DatasetError(f"unknown dataset format {fmt!r}; known: {list(FORMATS)}")
    if sweeps and fmt != "nuscenes":
        raise DatasetError(f"{root}: sweeps={sweeps}, but only nuScenes has camera sweeps and this folder is {fmt}; "
                           "set sweeps: 0 for it")
    kw = {"cameras": cameras, "on_bad_frame": on_bad_frame}
    if channels is not None:
        kw["channels"] = channels
    if fmt == "sim":
        if split or version:
            raise DatasetError(f"{root}: a sim dataset has no split or version (generate one folder per split)")
        return SimDataset(root, **kw)
    if fmt == "nuscenes":
        from hydranet.data.nuscenes import NuScenesDataset
        return NuScenesDataset(root, version=version, split=split, sweeps=sweeps, **kw)
    if version:
        raise DatasetError(f"{root}: format {fmt} has no version; leave it empty")
    if fmt == "kitti":
        from hydranet.data.kitti import KittiDataset
        return KittiDataset(root, split=split, **kw)
    from hydranet.data.bdd100k import BDD100KDataset
    return BDD100KDataset(root, split=split or "val", **kw)


def supervised_heads(ds) -> list[str]:
    return sorted(getattr(ds, "supervises", SIM_HEADS))


def _own_classes(ds, i: int, sample: dict) -> list[tuple[str, str | None]]:
    """(dataset's own category name, project class or None) of every labelled object of frame i."""
    fmt = getattr(ds, "format", "sim")
    if fmt == "nuscenes":
        from hydranet.data.nuscenes import CATEGORY_MAP
        return [(c, CATEGORY_MAP[c]) for c in ds.own_categories(i)]
    if fmt == "kitti":
        from hydranet.data.kitti import TYPE_MAP
        return [(lab["type"], TYPE_MAP.get(lab["type"])) for lab in (ds.kitti_labels(i) if ds.has_labels else [])]
    if fmt == "bdd100k":
        from hydranet.data.bdd100k import CATEGORY_MAP
        return [(lab["category"], CATEGORY_MAP[lab["category"]]) for lab in ds.frames[i].get("labels") or []]
    labels = sample["labels"]
    out = [(b["class"], b["class"]) for b in labels.get("boxes3d", [])]
    seen = {b["track_id"] for b in labels.get("boxes3d", []) if "track_id" in b}
    # an object seen in several cameras counts once; a box without a track id (a person's label) counts as one object
    out += [(b["class"], b["class"]) for cam in labels["cameras"].values() for b in cam.get("boxes2d", [])
            if "track_id" not in b or b["track_id"] not in seen and not seen.add(b["track_id"])]
    return out


def check_dataset(root, format: str | None = None, split: str | None = None, version: str | None = None,
                  limit: int | None = None, progress: bool = False) -> dict:
    """Read every frame (or the first `limit`) and report what the folder holds and what is broken."""
    ds = open_dataset(root, format, split, version)
    n = len(ds) if limit is None else min(limit, len(ds))
    counts: Counter = Counter()
    bad: list[str] = []
    sizes: dict[str, set[tuple[int, int]]] = {c.name: set() for c in ds.rig.cameras}  # camera -> {(w, h)} seen
    rng = range(n)
    if progress:
        from tqdm import tqdm
        rng = tqdm(rng, desc="data check", unit="frame")
    for i in rng:
        try:
            sample = ds.load(i)
        except DatasetError as e:
            bad.append(str(e))
            continue
        counts.update(_own_classes(ds, i, sample))
        for name, img in zip(sample.get("camera_names", []), sample.get("images", [])):
            sizes.setdefault(name, set()).add((int(img.shape[1]), int(img.shape[0])))
    return {"root": str(root), "format": getattr(ds, "format", "sim"), "split": getattr(ds, "split", None),
            "frames": len(ds), "checked": n, "scenes": len(ds.scenes),
            "cameras": [(c.name, c.width, c.height) for c in ds.rig.cameras],
            "sizes": {name: size_range(seen) for name, seen in sizes.items() if seen},
            "classes": sorted(((own, proj, k) for (own, proj), k in counts.items()), key=lambda t: (-t[2], t[0])),
            "supervises": supervised_heads(ds), "notes": list(getattr(ds, "notes", [])), "bad": bad}


def size_range(sizes) -> tuple[int, int, int, int]:
    """(min width, max width, min height, max height) of (w, h) pairs."""
    ws, hs = [w for w, _ in sizes], [h for _, h in sizes]
    return min(ws), max(ws), min(hs), max(hs)


def camera_size_text(name: str, w: int, h: int, sizes: dict | None) -> str:
    """"CAM_FRONT 1600x900", or "CAM_FRONT: 1224-1242 x 370-376 (differs between frames)" when the
    checked frames' images differ (`sizes`: camera -> size_range of the images read; else the rig's)."""
    rng = (sizes or {}).get(name)
    if rng is None or (rng[0] == rng[1] and rng[2] == rng[3]):
        w, h = (rng[0], rng[2]) if rng is not None else (w, h)
        return f"{name} {w}x{h}"
    span = lambda a, b: f"{a}" if a == b else f"{a}-{b}"  # noqa: E731
    return f"{name}: {span(rng[0], rng[1])} x {span(rng[2], rng[3])} (differs between frames)"


def format_report(r: dict) -> str:
    lines = [f"{r['root']}: format {r['format']}" + (f", split {r['split']}" if r["split"] else ""),
             f"  frames: {r['frames']} in {r['scenes']} scenes (checked {r['checked']})",
             "  cameras: " + ", ".join(camera_size_text(n, w, h, r.get("sizes")) for n, w, h in r["cameras"]),
             "  supervises: " + (", ".join(r["supervises"]) or "nothing (no labels)"),
             "  classes (dataset name -> project class: count):"]
    lines += [f"    {own} -> {proj or '(not used)'}: {k}" for own, proj, k in r["classes"]] or ["    (none)"]
    lines += [f"  note: {n}" for n in r["notes"]]
    if r["bad"]:
        lines.append(f"  {len(r['bad'])} bad frames:")
        lines += [f"    {b}" for b in r["bad"]]
    else:
        lines.append("  every checked frame is readable")
    return "\n".join(lines)
