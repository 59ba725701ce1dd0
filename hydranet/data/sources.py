"""The datasets of a run, opened through one function: `data.root` (any format) or several
`data.sources` mixed into one flat dataset with a merged class taxonomy (docs/datasets.md).

    sources = open_sources(cfg.data)            # [Source(name, format, dataset, weight)]
    ds = run_dataset(sources)                   # the reader itself, or a MixedDataset over them
    ds = open_data(cfg.data, "data/nuscenes")   # another folder, read as the config says

Every dataset returned has SimDataset's interface (meta, rig, classes, scenes, frame_ids,
__getitem__, clip, clip_indices, clip_ends, skipped) and samples carry `sample["supervises"]` (the heads whose
labels they hold; a sim sample supervises every head). numpy + OpenCV only.

Merged taxonomy of a mix: a source's project classes (what its reader maps its own categories
to, hydranet.data.<format>.CATEGORY_MAP/TYPE_MAP) pass through its `class_map` (null drops the
class); `classes`, `sign_classes`, `light_states` and `lane_types` are the ordered unions over
sources (first source first). The model's rig (meta["rig"], what export and the BEV view
transform's build-time table use) is the first source's; BEV batches carry their own calibration.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydranet.data.reader import DatasetError
from hydranet.data.sim_reader import SIM_HEADS
from hydranet.data.formats import FORMATS, detect_format, open_dataset

MERGED_LISTS = ("classes", "sign_classes", "light_states", "lane_types")
# objectives that are not heads but read a head's labels (LSS depth supervision reads the depth maps)
LABELS_OF = {"view_depth": "depth"}

# -- cross-dataset class maps (docs/datasets.md, "Cross-dataset evaluation") ------------------------
# every registered format's project class -> its sim counterpart (DatasetFormat.counterpart), None where the sim has none
SIM_COUNTERPART: dict[str, dict[str, str | None]] = {name: dict(f.counterpart) for name, f in FORMATS.items()}
_NO_COUNTERPART = object()


def sim_counterpart(name: str):
    """The sim class a project class stands for (the same in every format's table), None where the
    sim has none; `_NO_COUNTERPART` for a name no table knows."""
    for table in SIM_COUNTERPART.values():
        if name in table:
            return table[name]
    return _NO_COUNTERPART


def cross_class_map(dataset_classes, model_classes) -> dict[str, str | None]:
    """How a dataset's box classes are scored by a model of another taxonomy: every dataset class
    that is not one of the model's -> the model class with the same sim counterpart (SIM_COUNTERPART;
    the sim's own name first), None (dropped, not scored) when the model has none. Classes the model
    has by name are kept as they are and left out of the map. Works in both directions: a sim-trained
    model on BDD100K (bicycle -> cyclist) and a BDD100K-trained model on sim data (cyclist -> bicycle)."""
    model = list(model_classes)
    out: dict[str, str | None] = {}
    for c in dataset_classes:
        if c in model:
            continue
        sim = sim_counterpart(c)
        same = [m for m in model if sim is not None and sim is not _NO_COUNTERPART and sim_counterpart(m) == sim]
        out[c] = sim if sim in same else (same[0] if same else None)
    return out


@dataclass
class Source:
    name: str
    format: str
    dataset: Any
    weight: float = 1.0
    class_map: dict[str, str | None] = field(default_factory=dict)

    @property
    def supervises(self) -> frozenset[str]:
        return frozenset(getattr(self.dataset, "supervises", FORMATS[self.format].heads))


def _cams(cameras) -> list[str] | None:
    return list(cameras) if cameras else None


def open_sources(data, on_bad_frame: str | None = None, channels=None) -> list[Source]:
    """The datasets of a DataConfig: its sources, or data.root as the one source."""
    bad = on_bad_frame or data.on_bad_frame
    if not data.sources:
        fmt = data.format if data.format != "auto" else detect_format(data.root)
        ds = open_dataset(data.root, fmt, data.split, data.version, _cams(data.cameras), bad, channels, data.sweeps)
        return [Source(fmt, fmt, ds)]
    out = []
    for i, s in enumerate(data.sources):
        try:
            fmt = s.format if s.format != "auto" else detect_format(s.root)
            ds = open_dataset(s.root, fmt, s.split, s.version, _cams(s.cameras), bad, channels, s.sweeps)
        except DatasetError as e:
            raise DatasetError(f"data.sources[{i}]: {e}", e.path) from None
        out.append(Source(s.name or f"{fmt}{i}", fmt, ds, s.weight, dict(s.class_map)))
    return out


def run_dataset(sources: list[Source]):
    """One source's reader as it is (no class map), else a MixedDataset over all of them."""
    if len(sources) == 1 and not sources[0].class_map:
        return sources[0].dataset
    return MixedDataset(sources)


def open_data(data, root: str | Path | None = None, format: str | None = None, split: str | None = None,
              version: str | None = None, cameras: list[str] | None = None, on_bad_frame: str | None = None,
              channels=None, all_cameras: bool = False):
    """A folder read with the config's settings: data.root (or the source whose root it is) with
    its format, split, version and cameras unless given; data.val_root with data.val_split and
    data.cameras; another folder auto-detected, with the model's cameras (`model_cameras`: data.cameras,
    else the first source's) when given. `all_cameras`:
    every camera of the folder, whatever the config selects. nuScenes sweeps (data.sweeps,
    data.sources[i].sweeps) are read for data.root and the sources, not for other folders. A
    source with a class_map is read through it (`ClassMapped`), as training saw it."""
    bad = on_bad_frame or data.on_bad_frame
    # another folder (a gate's suite, a held-out set): the cameras the model is built on
    spec = (root, "auto", None, None, model_cameras(data), 0)
    if root is None or same_path(root, data.root) and not data.sources:
        spec = (data.root, data.format, data.split, data.version, data.cameras, data.sweeps)
    elif data.val_root and same_path(root, data.val_root):
        spec = (root, "auto", data.val_split, None, data.cameras, 0)
    else:
        spec = next(((s.root, s.format, s.split, s.version, s.cameras, s.sweeps) for s in data.sources
                     if same_path(root, s.root)), spec)
    r, f, sp, v, c, sw = spec
    ds = open_dataset(r, format or f, split if split is not None else sp, version if version is not None else v,
                      None if all_cameras else cameras if cameras is not None else _cams(c), bad, channels, sw)
    class_map = next((dict(s.class_map) for s in data.sources if same_path(r, s.root) and s.class_map), None)
    return ClassMapped(ds, class_map) if class_map else ds


def model_cameras(data) -> list[str] | None:
    """The cameras the model is built on (its meta rig): data.cameras, or the first source's
    (None: every camera of that dataset)."""
    return _cams(data.sources[0].cameras if data.sources else data.cameras)


def same_path(a, b) -> bool:
    """Whether two paths name the same file or folder (resolved; compared as written if that fails)."""
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return str(a) == str(b)


_same = same_path  # the old name, until hydranet/evaluate.py imports the public one


def check_supervision(heads, sources: list[Source]) -> None:
    """ConfigError for a head no source has labels for, and for heads a detected format cannot
    feed (hydranet.experiment.check_heads)."""
    from hydranet.config import ConfigError
    from hydranet.experiment import check_heads

    check_heads(heads, [s.format for s in sources], bev_only=len(sources) > 1,
                where="the detected format of " + ", ".join(str(getattr(s.dataset, "root", s.name)) for s in sources))
    have = set().union(*(s.supervises for s in sources))
    missing = [h for h in heads if h not in have]
    if missing:
        what = "; ".join(f"{s.name} ({s.format}) supervises {sorted(s.supervises) or 'nothing'}" for s in sources)
        raise ConfigError(f"config key 'model.tasks': no dataset of this run has labels for head '{missing[0]}' ({what}); "
                          f"remove {missing} from model.tasks or add a source that has them")


def remap_sample(sample: dict, class_map: dict[str, str | None], source: str | None = None) -> dict:
    """A copy of `sample` whose box classes pass through class_map (None drops the box)."""
    out = dict(sample)
    if source is not None:
        out["source"] = source
    if not class_map:
        return out
    labels = dict(sample["labels"])

    def boxes(items):
        kept = []
        for b in items:
            c = class_map.get(b["class"], b["class"])
            if c is not None:
                kept.append({**b, "class": c} if c != b["class"] else b)
        return kept

    labels["cameras"] = {n: {**cam, "boxes2d": boxes(cam.get("boxes2d", []))} for n, cam in labels["cameras"].items()}
    labels["boxes3d"] = boxes(labels.get("boxes3d", []))
    out["labels"] = labels
    return out


def merged_meta(sources: list[Source]) -> dict:
    first = sources[0].dataset.meta
    meta = {k: v for k, v in first.items() if k not in ("scenes",)}
    for key in MERGED_LISTS:
        merged: list[str] = []
        for s in sources:
            names = s.dataset.meta.get(key, [])
            if key == "classes":
                names = [s.class_map.get(c, c) for c in names]
            merged += [c for c in names if c is not None and c not in merged]
        meta[key] = merged
    bev = next((s.dataset.meta["bev"] for s in sources if "bev" in s.dataset.meta), None)
    if "bev" not in meta and bev is not None:
        meta["bev"] = bev
    meta["rig"] = sources[0].dataset.rig.to_dict()
    meta["supervises"] = sorted(set().union(*(s.supervises for s in sources)))
    meta["sources"] = [{"name": s.name, "format": s.format, "root": str(getattr(s.dataset, "root", "")),
                        "split": getattr(s.dataset, "split", None), "weight": s.weight,
                        "classes": list(s.dataset.meta.get("classes", [])), "class_map": dict(s.class_map),
                        "supervises": sorted(s.supervises)} for s in sources]
    return meta


class MixedDataset:
    """Several datasets as one flat dataset: source 0's frames, then source 1's, ... Scene names
    are prefixed with the source name ("<source>/<scene>"); samples carry "source" and classes in
    the merged taxonomy. `ranges[k]` = (first, end) flat indices of source k."""

    def __init__(self, sources: list[Source]):
        if not sources:
            raise ValueError("MixedDataset needs at least one source")
        self.sources = list(sources)
        self.meta = merged_meta(self.sources)
        self.rig = self.sources[0].dataset.rig
        self.classes = list(self.meta["classes"])
        self.supervises = frozenset(self.meta["supervises"])
        self.ranges: list[tuple[int, int]] = []
        start = 0
        for s in self.sources:
            self.ranges.append((start, start + len(s.dataset)))
            start += len(s.dataset)
        self.frame_ids = [(f"{s.name}/{scene}", f) for s in self.sources for scene, f in s.dataset.frame_ids]
        self.scenes = [{**sc, "name": f"{s.name}/{sc['name']}"} for s in self.sources for sc in s.dataset.scenes]
        self.root = self.sources[0].dataset.root

    @property
    def skipped(self) -> list[str]:
        return [p for s in self.sources for p in s.dataset.skipped]

    def __len__(self) -> int:
        return self.ranges[-1][1]

    def locate(self, i: int) -> tuple[int, int]:
        """(source position, index in that source) of flat index i."""
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"frame index {i} out of range for {n} frames")
        i %= n
        for k, (a, b) in enumerate(self.ranges):
            if a <= i < b:
                return k, i - a
        raise IndexError(i)

    def _fix(self, k: int, sample: dict) -> dict:
        s = self.sources[k]
        out = remap_sample(sample, s.class_map, s.name)
        out["scene"] = f"{s.name}/{sample['scene']}"
        if "supervises" not in out:
            out["supervises"] = set(s.supervises)
        return out

    def __getitem__(self, i: int) -> dict:
        k, j = self.locate(i)
        return self._fix(k, self.sources[k].dataset[j])

    def is_bad(self, i: int) -> bool:
        k, j = self.locate(i)
        return self.sources[k].dataset.is_bad(j)

    def clip(self, i: int, length: int, pad: bool = False) -> list[dict]:
        k, j = self.locate(i)
        return [self._fix(k, s) for s in self.sources[k].dataset.clip(j, length, pad)]

    def clip_indices(self, i: int, length: int, pad: bool = False) -> list[int] | None:
        k, j = self.locate(i)
        got = self.sources[k].dataset.clip_indices(j, length, pad)
        return None if got is None else [self.ranges[k][0] + x for x in got]

    def clip_ends(self, length: int, pad: bool = False) -> list[int]:
        return [a + j for (a, _), s in zip(self.ranges, self.sources) for j in s.dataset.clip_ends(length, pad)]


class ClassMapped:
    """One dataset whose samples pass through a source's class_map (`remap_sample`), as in a
    mixed run: what evaluating that source alone must see. Everything else is the reader's.
    `unscored`: heads taken out of every sample's `supervises` (their labels have no counterpart
    in the evaluated model: they get no loss and no metric), `cross_map`: what evaluation reports."""

    def __init__(self, dataset, class_map: dict[str, str | None], unscored=(), cross_map: dict | None = None):
        self.dataset, self.class_map = dataset, dict(class_map)
        self.meta = {**dataset.meta, "classes": [c for c in dict.fromkeys(class_map.get(n, n) for n in dataset.classes)
                                                 if c is not None]}
        self.classes = list(self.meta["classes"])
        self.unscored = frozenset(unscored)
        self.cross_map = cross_map
        if self.unscored:
            self.supervises = frozenset(getattr(dataset, "supervises", SIM_HEADS)) - self.unscored
            self.meta["supervises"] = sorted(self.supervises)

    def _map(self, sample: dict) -> dict:
        out = remap_sample(sample, self.class_map)
        if self.unscored:
            out["supervises"] = set(sample.get("supervises", SIM_HEADS)) - self.unscored
        return out

    def __getattr__(self, name: str):
        if name == "dataset":  # not yet set (copy/pickle): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict:
        return self._map(self.dataset[i])

    def clip(self, i: int, length: int, pad: bool = False) -> list[dict]:
        return [self._map(s) for s in self.dataset.clip(i, length, pad)]


def model_vocabulary(heads) -> dict[str, list[str]]:
    """The label names a model's heads were built with: "classes" (box classes, the union over heads
    with a `classes` list and no `sign_classes`), "sign_classes", "light_states"; read from the heads'
    attributes, so no task is named here."""
    vocab: dict[str, list[str]] = {"classes": [], "sign_classes": [], "light_states": []}
    for task in heads.values():
        has_signs = hasattr(task, "sign_classes")
        for key in ("sign_classes", "light_states") if has_signs else ("classes",):
            vocab[key] += [c for c in getattr(task, key, None) or [] if c not in vocab[key]]
    return vocab


def cross_mapped(ds, heads, model_classes: list[str] | None = None):
    """`ds` as a model with these heads scores it: its box classes through `cross_class_map` onto the
    model's classes (None: dropped, not scored), and the heads reading sign classes / light states
    unscored when a name the dataset declares is not one of the model's. `ds` itself when nothing
    differs; else a ClassMapped whose `cross_map` says {"renamed", "dropped", "model_only", "unscored"}."""
    vocab = model_vocabulary(heads)
    if model_classes and vocab["classes"]:  # the model's whole taxonomy (its checkpoint meta), when it has box heads
        vocab["classes"] = list(model_classes)
    fmt = getattr(ds, "format", "sim")
    fmt = fmt if fmt in FORMATS else "sim"
    mapping = cross_class_map(ds.classes, vocab["classes"]) if vocab["classes"] else {}
    unscored = {}
    for name, task in heads.items():
        if not hasattr(task, "sign_classes"):
            continue
        for key in ("sign_classes", "light_states"):
            other = [c for c in ds.meta.get(key, []) if c not in getattr(task, key)]
            if other:
                unscored[name] = (f"the dataset's {key.replace('_', ' ')} {other} have no counterpart among the "
                                  f"model's {list(getattr(task, key))}")
                break
    mapped = {mapping.get(c, c) for c in ds.classes} - {None}
    # a dataset without box labels (TuSimple: lanes only) leaves the box heads unscored: no class is "missing"
    model_only = [m for m in vocab["classes"] if m not in mapped] if ds.classes else []
    if not mapping and not unscored and not model_only:
        return ds
    cross = {"format": fmt, "renamed": {c: m for c, m in mapping.items() if m is not None},
             "dropped": sorted(c for c, m in mapping.items() if m is None), "model_only": model_only,
             "unscored": unscored}
    return ClassMapped(ds, mapping, unscored, cross)
