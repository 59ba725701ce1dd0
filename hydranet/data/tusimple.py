"""Read the TuSimple lane benchmark (clips/ + label_data_*.json) into the sample contract: lanes -> lanes2d.

    ds = TuSimpleDataset("data/tusimple")                  # every label file of the root
    ds = TuSimpleDataset("data/tusimple", split="label_data_0531")

TuSimple Lane Detection Challenge (CVPR 2017 Workshop on Autonomous Driving; github.com/TuSimple/
tusimple-benchmark). Layout read (train_set.zip, and test_set.zip with test_label.json, unzipped into one root):

    clips/<date>/<clip>/20.jpg               1280x720, the labelled 20th frame of a one-second clip
    label_data_{0313,0531,0601}.json         one JSON object a line: {"lanes", "h_samples", "raw_file"}
    test_label.json                          the test set's labels, same lines

- One line = one sample (`CAM_FRONT`), its own scene (named after its clip: `0313-1_6040`). `raw_file` is
  the image's path under the root (it must stay inside it). `lanes[k][j]` is the x of lane k at row
  `h_samples[j]` (pixel centres at integers), -2 where the lane has no point; each run of consecutive points
  becomes one `lanes2d` polyline (`lane_id` k + 1, type "unknown": TuSimple does not type its lanes), so the
  lanes head's target is drawn from them exactly as from the sim's (hydranet/tasks/lanes.py, at the model's
  resolution). Supervises lanes only; no calibration (intrinsics, cam2ego, ego2world NaN).
- Splits: None or "all" = every label file in the root, "train" = label_data_*.json, "test" =
  test_label.json, or one label file's name without .json (e.g. "label_data_0531", often held out as val).
- Bad input is one line naming the file (and line) and what to do: an unknown split, a line that is not
  JSON or lacks a field (the reader does not open), a lane whose length differs from h_samples, a point that
  is not a number or lies outside its image (with `on_bad_frame="skip"`: a skipped, counted frame), a
  missing image.
- The benchmark's own score on lane points (accuracy, FP, FN): `hydranet.metrics.tusimple`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from hydranet.data.lane_benchmark import LaneBenchmarkReader
from hydranet.data.reader import BBOX_SLACK_PX, DatasetError, decode_image
from hydranet.io import LFS_FIX, is_lfs_pointer, path_inside

FORMAT = "tusimple"
SPLITS = {"train": "label_data_*.json", "test": "test_label.json", "all": "*.json"}
WIDTH, HEIGHT = 1280, 720
_FIX = "unzip the TuSimple train_set/test_set archives into the root as docs/datasets.md shows"
_LINE_FIX = "fix or remove that line (one JSON object a line: lanes, h_samples, raw_file)"


def label_files(root: Path, split: str | None) -> list[Path]:
    """The label files of a split (module docstring); DatasetError for an unknown split or none found."""
    known = sorted(p.stem for p in root.glob("*.json") if p.stem.startswith("label_data") or p.stem == "test_label")
    split = split or "all"
    if split in SPLITS:
        files = [p for p in sorted(root.glob(SPLITS[split])) if p.stem in known]
    elif split in known:
        files = [root / f"{split}.json"]
    else:
        raise DatasetError(f"{root}: unknown TuSimple split {split!r}; choose one of {list(SPLITS)} or a label file's "
                           f"name {known}")
    if not files:
        raise DatasetError(f"{root}: split {split!r} has no label file ({SPLITS.get(split, split)}); {_FIX}", root)
    return files


def read_records(path: Path) -> list[dict]:
    """The records of one label file, each with its file and 1-based line; DatasetError naming file:line when a
    line is not a JSON object with raw_file, lanes and h_samples."""
    out = []
    content = path.read_text(encoding="utf-8", errors="replace")
    if is_lfs_pointer(content):
        raise DatasetError(f"{path}: a Git LFS pointer, not the label file itself; {LFS_FIX}", path)
    for k, text in enumerate(content.splitlines()):
        if not text.strip():
            continue
        where = f"{path}:{k + 1}"
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{where}: not a JSON object ({e.msg} at column {e.colno}); {_LINE_FIX}", path) from None
        missing = [f for f in ("raw_file", "lanes", "h_samples") if not isinstance(rec, dict) or f not in rec]
        if missing:
            raise DatasetError(f"{where}: field {missing[0]!r} is missing; {_LINE_FIX}", path)
        if not isinstance(rec["raw_file"], str):
            raise DatasetError(f"{where}: field 'raw_file' must be the image's path, got {rec['raw_file']!r}; "
                               f"{_LINE_FIX}", path)
        out.append({**rec, "file": path, "line": k + 1})
    return out


def lane_polylines(rec: dict, width: int, height: int) -> list[dict]:
    """The record's lanes as lanes2d entries: each run of points (x >= 0) one polyline, lane_id k + 1; a
    DatasetError naming file:line for a lane of another length than h_samples, a value that is not a number,
    or a point outside the width x height image (1 px slack)."""
    where = f"{rec['file']}:{rec['line']}"
    ys, lanes = rec["h_samples"], rec["lanes"]
    fix = "fix that line or use data.on_bad_frame=skip"

    def numbers(vals, field):
        if not isinstance(vals, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                 and math.isfinite(v) for v in vals):
            raise DatasetError(f"{where}: field {field!r} must be a list of finite numbers; {fix}", rec["file"])
        return np.asarray(vals, np.float64)

    ys = numbers(ys, "h_samples")
    if not isinstance(lanes, list):
        raise DatasetError(f"{where}: field 'lanes' must be a list of lanes; {fix}", rec["file"])
    out = []
    for k, lane in enumerate(lanes):
        xs = numbers(lane, f"lanes[{k}]")
        if len(xs) != len(ys):
            raise DatasetError(f"{where}: lanes[{k}] has {len(xs)} points, h_samples {len(ys)}; {fix}", rec["file"])
        valid = xs >= 0
        s = BBOX_SLACK_PX
        bad = valid & ((xs > width - 1 + s) | (ys < -s) | (ys > height - 1 + s))
        if bad.any():
            j = int(np.argmax(bad))
            raise DatasetError(f"{where}: lanes[{k}] point ({xs[j]:g}, {ys[j]:g}) lies outside the {width}x{height} "
                               f"image {rec['raw_file']}; {fix}", rec["file"])
        edges = np.diff(np.concatenate([[0], valid.astype(np.int8), [0]]))  # +1 where a run starts, -1 after it
        for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
            out.append({"points": np.stack([xs[a:b], ys[a:b]], 1).tolist(), "type": "unknown", "lane_id": k + 1})
    return out


class TuSimpleDataset(LaneBenchmarkReader):
    """The labelled frames of TuSimple label files (see the module docstring).

    Args:
        root: the folder holding clips/ and the label files.
        split: None/"all", "train", "test" or a label file's name.
        channels: ("images",) or ().
        on_bad_frame: as SimDataset.
    """

    format, title = FORMAT, "TuSimple"

    def __init__(self, root, split: str | None = None, cameras: list[str] | None = None, channels=("images",),
                 on_bad_frame: str = "raise"):
        self._open(root, split, cameras, channels, on_bad_frame, _FIX)
        self.records = [r for path in label_files(self.root, split) for r in read_records(path)]
        if not self.records:
            raise DatasetError(f"{self.root}: split {self.split!r} has no labelled frames; {_FIX}", self.root)
        for r in self.records:  # a raw_file names one image under the root: never '../x' or '/x'
            path_inside(self.root, r["raw_file"], f"{r['file']}:{r['line']}: raw_file", DatasetError)
        self._init_lanes_only([{"name": clip_name(r["raw_file"]), "frames": [r["raw_file"]]} for r in self.records],
                              self.image_path(0), (WIDTH, HEIGHT))

    def frame_name(self, scene: int, frame: int) -> str:
        return self.records[scene]["raw_file"]

    def image_path(self, i: int) -> Path:
        r = self.records[i]
        return path_inside(self.root, r["raw_file"], f"{r['file']}:{r['line']}: raw_file", DatasetError)

    def load(self, i: int) -> dict:
        rec = self.records[i]
        fix = f"{_FIX} (the image of {rec['file'].name} line {rec['line']}), or use data.on_bad_frame=skip"
        image = decode_image(self.image_path(i), fix) if "images" in self.channels else None  # (H, W, 3)
        return self._lanes_sample(i, lane_polylines(rec, *self.image_wh(self.image_path(i), image, fix)),
                                  image)


def clip_name(raw_file: str) -> str:
    """'clips/0313-1/6040/20.jpg' -> '0313-1_6040' (the clip a labelled frame ends)."""
    parts = Path(raw_file).parent.parts
    return "_".join(parts[1:] if parts[:1] == ("clips",) else parts) or Path(raw_file).stem

