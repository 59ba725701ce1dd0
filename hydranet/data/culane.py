"""Read the CULane lane benchmark (driver_*/ + list/) into the sample contract: lanes -> lanes2d.

    ds = CULaneDataset("data/culane")                      # every annotated frame under the root
    ds = CULaneDataset("data/culane", split="test")        # the frames of list/test.txt
    ds = CULaneDataset("data/culane", split="test8_night")  # one of list/test_split/*.txt

CULane (Pan et al., "Spatial As Deep: Spatial CNN for Traffic Scene Understanding", AAAI 2018;
xingangpan.github.io/projects/CULane.html). Layout read (the archives unzipped into one root):

    driver_<id>_<n>frame/<clip>.MP4/<frame>.jpg          1640x590 front-camera frames
    driver_<id>_<n>frame/<clip>.MP4/<frame>.lines.txt    its lanes: one a line, "x y x y ..." in pixels
    list/{train_gt,val_gt}.txt, list/{train,val,test}.txt, list/test_split/test<k>_<scene>.txt

- One annotated frame = one sample (`CAM_FRONT`), its own scene (named after its path: CULane samples frames
  seconds apart, so a clip is not a video here). Each line of a `.lines.txt` is one lane (`lane_id` its line
  number, type "unknown": CULane does not type its lanes), cut where it leaves the image (the official splines
  run on past the left and right edges: the segment crossing an edge ends on it, `clip_polyline`); a row outside
  the image (1 px slack) is an error: an annotation of another image size. An empty file is a frame without
  lanes (a label, not a missing one).
- Splits: None or "all" = every `*.lines.txt` under the root's driver_* folders; "train", "val", "test" =
  list/{train_gt,val_gt,test}.txt (the first field of a line is the image's path under the root); any other
  name = list/<name>.txt or list/test_split/<name>.txt (CULane's nine test scenarios, e.g. "test8_night").
- Bad input is one line naming the file (and line) and what to do: an unknown split (listing the list files
  there), a list line naming a path outside the root or not an image, a Git LFS pointer in place of a list or an
  annotation, a lane line that is not pairs of finite numbers or a row outside the image, a missing image or
  annotation (with `on_bad_frame="skip"`: a skipped, counted frame).
- Supervises lanes only; no calibration (intrinsics, cam2ego, ego2world NaN). The lanes head's metric gives the
  pixel IoU and the CULane-style F1 (hydranet/tasks/lanes.py: lanes drawn 30 px wide at 590 rows).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from hydranet.data.lane_benchmark import LaneBenchmarkReader
from hydranet.data.reader import BBOX_SLACK_PX, DatasetError, decode_image
from hydranet.geometry import clip_polyline
from hydranet.io import LFS_FIX, is_lfs_pointer, path_inside

FORMAT = "culane"
LISTS = {"train": "train_gt.txt", "val": "val_gt.txt", "test": "test.txt"}
WIDTH, HEIGHT = 1640, 590
ANNOTATION = ".lines.txt"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
_FIX = "unzip the CULane archives (driver_*, list) into the root as docs/datasets.md shows"


def annotation_path(image: Path) -> Path:
    """driver_x/c.MP4/00000.jpg -> driver_x/c.MP4/00000.lines.txt"""
    return image.with_name(image.stem + ANNOTATION)


def read_text(path: Path) -> str:
    """A list or annotation file's text; DatasetError when it is a Git LFS pointer, not the file."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if is_lfs_pointer(text):
        raise DatasetError(f"{path}: a Git LFS pointer, not the file itself; {LFS_FIX}", path)
    return text


def list_file(root: Path, split: str) -> Path:
    """The list file of a named split (module docstring); DatasetError naming the list files there are."""
    if not split or any(c in split for c in "/\\") or split.startswith("."):
        raise DatasetError(f"{root}: CULane split {split!r} is not a list file's name; give 'all' or a name in "
                           f"{root / 'list'}", root)
    names = ([LISTS[split]] if split in LISTS else []) + [f"{split}.txt"]
    for path in [root / "list" / n for n in names] + [root / "list" / "test_split" / f"{split}.txt"]:
        if path.is_file():
            return path
    known = sorted({p.stem for p in (root / "list").glob("*.txt")} |
                   {p.stem for p in (root / "list" / "test_split").glob("*.txt")})
    if not known:
        raise DatasetError(f"{root / 'list'}: no CULane list file, so no split {split!r}; unzip list.tar.gz into "
                           f"the root, or use split 'all' (every annotated frame)", root)
    raise DatasetError(f"{root}: unknown CULane split {split!r} (no list/{names[0]}); choose 'all' or one of the "
                       f"list files there {known}", root)


def split_images(root: Path, split: str | None) -> list[str]:
    """The image paths (relative to the root, '/'-separated) of a split (module docstring)."""
    split = split or "all"
    if split == "all":
        out = [p.relative_to(root).with_name(p.name[:-len(ANNOTATION)] + ".jpg").as_posix()
               for p in root.glob(f"driver_*/*/*{ANNOTATION}")]
        for rel in out:  # a symlinked folder must not lead outside the root
            path_inside(root, rel, f"{root}: annotated frame", DatasetError)
        return sorted(out)
    path = list_file(root, split)
    out = []
    for k, text in enumerate(read_text(path).splitlines()):
        fields = text.split()
        if fields:
            rel = fields[0].lstrip("/")
            where = f"{path}:{k + 1}: image path"
            path_inside(root, rel, where, DatasetError)
            if Path(rel).suffix.lower() not in IMAGE_SUFFIXES:
                raise DatasetError(f"{where} {rel!r} is not an image (.jpg or .png); a list line starts with the "
                                   f"frame's image, as CULane's list files do", path)
            out.append(rel)
    return out


def read_lanes(path: Path, width: int, height: int) -> list[dict]:
    """The lanes2d entries of one `.lines.txt`, cut at the image's left and right edges (`clip_polyline`);
    DatasetError naming file:line for a line that is not pairs of finite numbers, or a row outside the
    width x height image (1 px slack: CULane's splines start at row = height): the annotation of another size."""
    out = []
    for k, text in enumerate(read_text(path).splitlines()):
        if not text.strip():
            continue
        where, fix = f"{path}:{k + 1}", "fix that line or use data.on_bad_frame=skip"
        try:
            vals = [float(v) for v in text.split()]
        except ValueError:
            vals = [math.nan]
        if len(vals) % 2 or len(vals) < 4 or not all(math.isfinite(v) for v in vals):
            raise DatasetError(f"{where}: a lane must be 2 or more points 'x y x y ...' of finite numbers, got "
                               f"{text.strip()[:60]!r}; {fix}", path)
        pts = np.asarray(vals, np.float64).reshape(-1, 2)
        bad = (pts[:, 1] < -BBOX_SLACK_PX) | (pts[:, 1] > height - 1 + BBOX_SLACK_PX)
        if bad.any():
            y = pts[np.argmax(bad), 1]
            raise DatasetError(f"{where}: row {y:g} lies outside the {width}x{height} image (was the image resized "
                               f"without its annotation?); {fix}", path)
        for run in clip_polyline(pts, (0.0, 0.0), (width - 1.0, height - 1.0)):
            out.append({"points": run.tolist(), "type": "unknown", "lane_id": k + 1})
    return out


def frame_scene(rel: str) -> str:
    """'driver_161_90frame/06030819_0755.MP4/00090.jpg' -> 'driver_161_90frame_06030819_0755_00090'"""
    p = Path(rel)
    return "_".join([*(s.removesuffix(".MP4") for s in p.parent.parts), p.stem])


class CULaneDataset(LaneBenchmarkReader):
    """The annotated frames of a CULane root (see the module docstring).

    Args:
        root: the folder holding the driver_* folders (and list/).
        split: None/"all", "train", "val", "test" or a list file's name.
        channels: ("images",) or ().
        on_bad_frame: as SimDataset.
    """

    format, title = FORMAT, "CULane"

    def __init__(self, root, split: str | None = None, cameras: list[str] | None = None, channels=("images",),
                 on_bad_frame: str = "raise"):
        self._open(root, split, cameras, channels, on_bad_frame, _FIX)
        self.images = split_images(self.root, split)
        if not self.images:
            raise DatasetError(f"{self.root}: split {self.split!r} has no annotated frames; {_FIX}", self.root)
        self._init_lanes_only([{"name": frame_scene(rel), "frames": [rel]} for rel in self.images],
                              self.root / self.images[0], (WIDTH, HEIGHT))

    def frame_name(self, scene: int, frame: int) -> str:
        return self.images[scene]

    def image_path(self, i: int) -> Path:
        return self.root / self.images[i]

    def load(self, i: int) -> dict:
        image_path = self.image_path(i)
        fix = f"{_FIX}, or use data.on_bad_frame=skip"
        labels = annotation_path(image_path)
        if not labels.is_file():
            raise DatasetError(f"{labels}: the annotation of {self.images[i]} is missing; {fix}", labels)
        image = decode_image(image_path, fix) if "images" in self.channels else None  # (H, W, 3)
        return self._lanes_sample(i, read_lanes(labels, *self.image_wh(image_path, image, fix)), image)
