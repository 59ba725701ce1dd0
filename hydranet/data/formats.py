"""Dataset formats by name: one registry (`FORMATS`), detection from a folder, opening a reader, and
`hydranet data check`.

    fmt = detect_format("data/nuscenes")                     # "nuscenes"
    ds = open_dataset("data/kitti", split="val")             # KittiDataset
    print(format_report(check_dataset("data/bdd100k", split="val")))

A reader is its own file (hydranet/data/<format>.py: a `FrameReader` giving the sample of
docs/dataset_format.md plus `sample["supervises"]`) and one `register_format` line below: its name, the
reader class (imported when a dataset opens), how a folder is recognised, the heads it can supervise at
most, whether it is calibrated, which of split / version / sweeps it takes. Every list of formats is derived
from the registry: the config's allowed `data.format` values (`hydranet.experiment.check_experiment`), the
CLI's `--format` choices, the heads a source can supervise, the calibration check, detection and `data check`.
"""
from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hydranet.data.reader import DatasetError
from hydranet.data.sim_reader import SIM_HEADS


@dataclass(frozen=True)
class DatasetFormat:
    """One registered dataset format (see the module docstring)."""

    name: str
    title: str  # as its authors write it, for messages
    reader: str  # "module:Class" of its FrameReader, imported when a dataset of this format opens
    looks_like: Callable[[Path], bool]  # whether a folder has this format's layout
    layout: str  # what `looks_like` looks for, for the error when no format matches
    heads: tuple[str, ...]  # the heads it can supervise at most (a sample may supervise fewer)
    calibrated: bool = True  # intrinsics and extrinsics: the BEV view transform and 3D labels
    splits: bool = True  # takes a split (`default_split` when none is given)
    default_split: str | None = None
    versions: bool = False  # takes a version folder (nuScenes)
    sweeps: bool = False  # reads unlabelled camera sweeps between keyframes
    # every project class its reader gives -> the sim class it stands for, None where the sim has none (the
    # cross-dataset class map, hydranet.data.sources.cross_class_map; a test checks it covers the reader's CLASSES)
    counterpart: Mapping[str, str | None] = field(default_factory=dict)

    def open(self, root, split: str | None, version: str | None, sweeps: int, **kw):
        if not self.splits and (split or version):
            raise DatasetError(f"{root}: a {self.name} dataset has no split or version (one folder per split)")
        if version and not self.versions:
            raise DatasetError(f"{root}: format {self.name} has no version; leave it empty")
        module, cls = self.reader.split(":")
        reader = getattr(importlib.import_module(module), cls)
        if self.splits:
            kw["split"] = split or self.default_split
        if self.versions:
            kw["version"] = version
        if self.sweeps:
            kw["sweeps"] = sweeps
        return reader(root, **kw)


FORMATS: dict[str, DatasetFormat] = {}


def register_format(fmt: DatasetFormat) -> DatasetFormat:
    """Make a format known by name (another format under a taken name raises)."""
    if FORMATS.get(fmt.name, fmt) != fmt:
        raise ValueError(f"dataset format {fmt.name!r} is already registered with another reader ({FORMATS[fmt.name].reader})")
    FORMATS[fmt.name] = fmt
    return fmt


# The sim's object classes (sim/classes.py OBJECT_CLASSES; hydranet does not import sim, a test keeps the two equal)
SIM_CLASSES = ("car", "truck", "bus", "pedestrian", "cyclist", "traffic_cone", "debris", "construction_vehicle",
               "barrier", "trailer", "motorcycle", "traffic_sign", "traffic_light")

# -- the readers of this package, one registration each -------------------------------------------------
register_format(DatasetFormat("sim", "sim", "hydranet.data.sim_reader:SimDataset", lambda r: (r / "dataset.json").is_file(),
                              "sim: dataset.json", SIM_HEADS, splits=False, counterpart={c: c for c in SIM_CLASSES}))
# nuScenes' 11 mapped classes are the sim's box classes by name (vehicle.bicycle -> cyclist: nuScenes draws the
# rider inside the bicycle's box, as the sim does); it labels no signs or lights
register_format(DatasetFormat("nuscenes", "nuScenes", "hydranet.data.nuscenes:NuScenesDataset",
                              lambda r: any(r.glob("*/sample.json")), "nuscenes: v1.0-*/sample.json",
                              ("det2d", "det3d", "drivable", "lanes", "bevmap"), versions=True, sweeps=True,
                              counterpart={c: c for c in ("car", "truck", "bus", "trailer", "construction_vehicle",
                                                          "pedestrian", "motorcycle", "cyclist", "traffic_cone", "barrier",
                                                          "debris")}))
# KITTI's Cyclist box holds the bicycle and its rider (as the sim's cyclist); Tram (-> train) has no counterpart
register_format(DatasetFormat("kitti", "KITTI", "hydranet.data.kitti:KittiDataset",
                              lambda r: any((r / d).is_dir() for d in ("training/label_2", "training/image_2",
                                                                        "testing/image_2")),
                              "kitti: training/label_2", ("det2d", "det3d"),
                              counterpart={"car": "car", "truck": "truck", "pedestrian": "pedestrian", "cyclist": "cyclist",
                                           "train": None}))
# BDD100K boxes a bicycle and its rider apart: bicycle -> cyclist (the box is the bicycle's, smaller than the sim's
# rider-inclusive one), rider has no counterpart (it rides motorcycles too), nor train
register_format(DatasetFormat("bdd100k", "BDD100K", "hydranet.data.bdd100k:BDD100KDataset",
                              lambda r: (r / "images" / "100k").is_dir(), "bdd100k: images/100k",
                              ("det2d", "signs_lights", "drivable", "lanes"), calibrated=False, default_split="val",
                              counterpart={"car": "car", "truck": "truck", "bus": "bus", "pedestrian": "pedestrian",
                                           "rider": None, "bicycle": "cyclist", "motorcycle": "motorcycle", "train": None,
                                           "trailer": "trailer", "traffic_sign": "traffic_sign",
                                           "traffic_light": "traffic_light"}))
# Cityscapes as BDD100K: bicycle -> cyclist (the bicycle's own box), rider has no counterpart; caravan and train
# are ignore regions of the reader, not classes
register_format(DatasetFormat("cityscapes", "Cityscapes", "hydranet.data.cityscapes:CityscapesDataset",
                              lambda r: (r / "leftImg8bit").is_dir(), "cityscapes: leftImg8bit/", ("det2d", "drivable"),
                              calibrated=False, default_split="val",
                              counterpart={"car": "car", "truck": "truck", "bus": "bus", "trailer": "trailer",
                                           "pedestrian": "pedestrian", "rider": None, "bicycle": "cyclist",
                                           "motorcycle": "motorcycle"}))
register_format(DatasetFormat("tusimple", "TuSimple", "hydranet.data.tusimple:TuSimpleDataset",
                              lambda r: (r / "clips").is_dir() and (any(r.glob("label_data*.json"))
                                                                     or (r / "test_label.json").is_file()),
                              "tusimple: clips/ + label_data_*.json", ("lanes",), calibrated=False))
register_format(DatasetFormat("culane", "CULane", "hydranet.data.culane:CULaneDataset",
                              lambda r: any(r.glob("driver_*/*/*.lines.txt")),
                              "culane: driver_*/<clip>/<frame>.jpg + .lines.txt", ("lanes",), calibrated=False))


def format_names() -> tuple[str, ...]:
    """Every registered format's name, in registration order."""
    return tuple(FORMATS)


def detect_format(root) -> str:
    """The format of a dataset folder; DatasetError when none or several match."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: no such folder; pass a dataset root")
    found = [name for name, f in FORMATS.items() if f.looks_like(root)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise DatasetError(f"{root}: not a known dataset layout ({'; '.join(f.layout for f in FORMATS.values())}); "
                           "pass --format and see docs/datasets.md")
    raise DatasetError(f"{root}: looks like several formats {found}; pass --format (data.format) to choose")


def open_dataset(root, format: str | None = None, split: str | None = None, version: str | None = None,
                 cameras: list[str] | None = None, on_bad_frame: str = "raise", channels=None, sweeps: int = 0):
    """The reader of `format` (None: detected) over root. `split`/`version` where the format has them
    (nuScenes: version folder and split; KITTI: ImageSets split or "testing"; BDD100K and Cityscapes:
    train/val/test, default val; TuSimple: all/train/test or a label file's name); `channels` None = the
    reader's default; `sweeps` (nuScenes only): unlabelled camera sweeps read between two keyframes."""
    fmt = format if format not in (None, "auto") else detect_format(root)
    if fmt not in FORMATS:
        raise DatasetError(f"unknown dataset format {fmt!r}; known: {list(FORMATS)}")
    if sweeps and not FORMATS[fmt].sweeps:
        raise DatasetError(f"{root}: sweeps={sweeps}, but only {', '.join(f.title for f in FORMATS.values() if f.sweeps)} has "
                           f"camera sweeps and this folder is {fmt}; set sweeps: 0 for it")
    kw = {"cameras": cameras, "on_bad_frame": on_bad_frame}
    if channels is not None:
        kw["channels"] = channels
    return FORMATS[fmt].open(root, split, version, sweeps, **kw)


def supervised_heads(ds) -> list[str]:
    return sorted(getattr(ds, "supervises", SIM_HEADS))


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
        counts.update(ds.own_classes(i, sample))
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
