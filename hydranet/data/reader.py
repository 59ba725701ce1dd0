"""The base reader: `DatasetError`, `FrameReader` (frames grouped by scene, indexing with the
`on_bad_frame` policy, clips) and what every reader (sim and public datasets) shares: the label
plausibility limits, image decoding, the 2D box a 3D box projects to. The sim format's reader is
`hydranet.data.sim_reader`, each public dataset's its own module (nuscenes, bdd100k, kitti, video).

A reader subclasses `FrameReader`, fills `scenes` (list of {"name", "frames": [...]}) and
`meta`/`rig`, and implements `load(i)` returning the in-memory sample of docs/dataset_format.md
plus `sample["supervises"]`: the set of head names whose labels the sample carries (mixed
training masks the others). Indexing, `clip`, `clip_ends`, `skipped` and `frame_ids` behave
exactly as `SimDataset`'s. numpy + OpenCV only: no torch here.
"""
from __future__ import annotations

import abc
from pathlib import Path

import cv2
import numpy as np

from hydranet.data.image import ImageError, decode_bytes
from hydranet.geometry import Camera, box_corners
from hydranet.rig import Rig


class DatasetError(ValueError):
    """The dataset on disk is missing, of another format, or has a broken file (`.path`, when known)."""

    def __init__(self, message: str, path: Path | None = None):
        super().__init__(message)
        self.path = path


# -- label plausibility limits (every reader's label checks) ---------------------------------
MAX_BOX_CENTER_M = 1000.0  # a 3D box farther from the ego than this is a broken label, not an object
MAX_BOX_SIZE_M = 100.0
MAX_SPEED_MPS = 150.0
BBOX_SLACK_PX = 1.0  # a 2D box may exceed the image by this much (it is a pixel extent)


# -- the reader base ----------------------------------------------------------------------
class FrameReader(abc.ABC):
    """Frames of a dataset flattened over scenes in order (see module docstring).

    Subclasses set `self.root`, `self.meta` (at least "format", "classes"), `self.rig`,
    `self.scenes` (list of {"name": str, "frames": list}) and implement `load(i)`; then call
    `self._index_frames()`. `self.class_map` maps the dataset's own category names to project
    classes (None = not used), for `hydranet data check`."""

    format: str = "?"
    on_bad_frame: str = "raise"
    remedy: str = ""  # what to do when no frame or clip is readable, appended to that error

    def _init_policy(self, on_bad_frame: str) -> None:
        if on_bad_frame not in ("raise", "skip"):
            raise ValueError(f"on_bad_frame must be 'raise' or 'skip', got {on_bad_frame!r}")
        self.on_bad_frame = on_bad_frame
        self.skipped: list[str] = []
        self._bad: set[int] = set()

    def _one_camera(self, cameras, camera: str, dataset: str) -> None:
        """DatasetError unless `cameras` (a reader's argument) is None or exactly the one camera of the one-camera
        `dataset` (its name, e.g. "KITTI object")."""
        if cameras is not None and list(cameras) != [camera]:
            raise DatasetError(f"{self.root}: {dataset} has one camera, {camera!r}; got cameras={list(cameras)}")

    def _index_frames(self) -> None:
        self._frames = [(si, fi) for si, s in enumerate(self.scenes) for fi in range(len(s["frames"]))]
        self.frame_ids = [(self.scenes[s]["name"], self.frame_name(s, f)) for s, f in self._frames]

    def frame_name(self, scene: int, frame: int) -> str:
        """A readable id of frame `frame` of scene position `scene` (the second element of frame_ids)."""
        return f"{frame:06d}"

    @property
    def classes(self) -> list[str]:
        return list(self.meta["classes"])

    def own_classes(self, i: int, sample: dict) -> list[tuple[str, str | None]]:
        """(the dataset's own category name, project class or None) of every labelled object of frame i
        (`hydranet data check`); here from the sample's labels, whose names are the project's: an object seen
        in several cameras counts once, a box without a track id (a person's label) as one object."""
        labels = sample["labels"]
        out = [(b["class"], b["class"]) for b in labels.get("boxes3d", [])]
        seen = {b["track_id"] for b in labels.get("boxes3d", []) if "track_id" in b}
        out += [(b["class"], b["class"]) for cam in labels["cameras"].values() for b in cam.get("boxes2d", [])
                if "track_id" not in b or b["track_id"] not in seen and not seen.add(b["track_id"])]
        return out

    def __len__(self) -> int:
        return len(self._frames)

    def __getitem__(self, i: int) -> dict:
        return self._first_good(self._index(i))

    def is_bad(self, i: int) -> bool:
        """As `SimDataset.is_bad`: frame i was found bad so far (skip mode gave another frame for it)."""
        return self._index(i) in self._bad

    @abc.abstractmethod
    def load(self, i: int) -> dict:
        """Frame i as on disk (never skips); DatasetError on a bad file."""

    def clip(self, i: int, length: int, pad: bool = False) -> list[dict]:
        """As `SimDataset.clip`: the `length` frames of one scene ending at flat index i."""
        i, ends = self._clip_end(i, length, pad)
        pos = ends.index(i)
        for j in ends[pos:] + ends[:pos]:
            have = min(length - 1, self._frames[j][1])
            try:
                frames = [self._load_checked(k) for k in range(j - have, j + 1)]
            except DatasetError:
                if self.on_bad_frame == "raise":
                    raise
                continue
            return [frames[0]] * (length - 1 - have) + frames
        raise DatasetError(f"{self.root}: no clip of length {length} is readable ({len(self.skipped)} bad files){self.remedy}")

    def clip_indices(self, i: int, length: int, pad: bool = False) -> list[int] | None:
        """The flat indices of the frames `clip(i, length, pad)` reads, oldest first (padding repeats the scene's first
        frame), without reading them; None with on_bad_frame "skip", where a bad frame swaps the clip for another."""
        if self.on_bad_frame != "raise":
            return None
        i = self._index(i)
        if not pad and self._frames[i][1] < length - 1:
            self._clip_end(i, length, pad)  # raises, naming the frame
        have = min(length - 1, self._frames[i][1])
        return [i - have] * (length - 1 - have) + list(range(i - have, i + 1))

    def _clip_end(self, i: int, length: int, pad: bool) -> tuple[int, list[int]]:
        """(i as a flat index, every clip end); ValueError when frame i ends no clip of this length."""
        i, ends = self._index(i), self.clip_ends(length, pad)
        if i not in ends:
            s, f = self._frames[i]
            raise ValueError(f"frame {i} is frame {f} of scene {self.scenes[s]['name']}; a clip of length {length} "
                             f"needs at least {length - 1} earlier frames; pick i from clip_ends({length}) or pass pad=True")
        return i, ends

    def clip_ends(self, length: int, pad: bool = False) -> list[int]:
        if length < 1:
            raise ValueError(f"clip length must be >= 1, got {length}")
        return [i for i, (_, f) in enumerate(self._frames) if pad or f >= length - 1]

    def _index(self, i: int) -> int:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"frame index {i} out of range for {n} frames")
        return i % n

    def _first_good(self, i: int) -> dict:
        for k in range(len(self)):
            j = (i + k) % len(self)
            try:
                return self._load_checked(j)
            except DatasetError:
                if self.on_bad_frame == "raise":
                    raise
        raise DatasetError(f"{self.root}: no frame is readable ({len(self.skipped)} bad files){self.remedy}")

    def _load_checked(self, j: int) -> dict:
        if j in self._bad:
            raise DatasetError(f"frame {j} was already found bad")
        try:
            return self.load(j)
        except DatasetError as e:
            if self.on_bad_frame == "skip":
                self._bad.add(j)
                self.skipped.append(str(e.path or e))
            raise


def decode_image(path: Path, fix: str, shape: tuple | None = None, flags: int = cv2.IMREAD_COLOR) -> np.ndarray:
    """Decode an image file (RGB for colour images); DatasetError if missing, truncated,
    undecodable or (with `shape`) of another (H, W)."""
    path = Path(path)
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError:
        raise DatasetError(f"{path}: image is missing; {fix}", path) from None
    try:
        img = decode_bytes(data, path, flags)
    except ImageError as e:
        raise DatasetError(f"{path}: image {e}; {fix}", path) from None
    if shape is not None and img.shape[:2] != tuple(shape):
        raise DatasetError(f"{path}: expected {shape[0]}x{shape[1]} (HxW), got {img.shape[0]}x{img.shape[1]}; {fix}", path)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB) if img.ndim == 3 else img


def make_rig(name: str, cameras: list[tuple[str, np.ndarray, np.ndarray, int, int]]) -> Rig:
    """A Rig from (name, K, cam2ego, width, height) tuples, without the sim's mounting checks
    (a public dataset's calibration is what it is)."""
    return Rig(name, tuple(Camera(n, np.asarray(K, np.float64), np.asarray(T, np.float64), int(w), int(h))
                           for n, K, T, w, h in cameras))


def select_cameras(available: list[str], wanted: list[str] | None, where: str) -> list[str]:
    if wanted is None:
        return list(available)
    wanted = list(wanted)
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise DatasetError(f"{where}: unknown camera '{unknown[0]}'; this dataset's cameras are {available}")
    if not wanted or len(set(wanted)) != len(wanted):
        raise DatasetError(f"{where}: cameras must be a non-empty list of distinct names from {available}, got {wanted}")
    return wanted


# -- 2D boxes derived from 3D boxes -------------------------------------------------------
NEAR = 0.1  # metres: the near plane a 3D box is cut at before projecting
_EDGES = ((0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (1, 5), (2, 6), (3, 7))


def _clip_polygon(poly: np.ndarray, x0: float, y0: float, x1: float, y1: float) -> np.ndarray:
    """Sutherland-Hodgman: convex polygon (P, 2) clipped to the rectangle [x0, x1] x [y0, y1]."""
    for axis, bound, keep_less in ((0, x0, False), (0, x1, True), (1, y0, False), (1, y1, True)):
        if len(poly) == 0:
            break
        out = []
        for i in range(len(poly)):
            a, b = poly[i], poly[(i + 1) % len(poly)]
            ina = a[axis] <= bound if keep_less else a[axis] >= bound
            inb = b[axis] <= bound if keep_less else b[axis] >= bound
            if ina:
                out.append(a)
            if ina != inb:
                t = (bound - a[axis]) / (b[axis] - a[axis])
                out.append(a + t * (b - a))
        poly = np.asarray(out, np.float64).reshape(-1, 2)
    return poly


def _convex_hull(pts: np.ndarray) -> np.ndarray:
    """Andrew's monotone chain; (P, 2) -> hull vertices in counter-clockwise order."""
    pts = np.unique(np.round(pts, 9), axis=0)
    if len(pts) < 3:
        return pts

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower, upper = [], []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in pts[::-1]:
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return np.asarray(lower[:-1] + upper[:-1])


def project_box_2d(corners_cam: np.ndarray, K: np.ndarray, width: int, height: int) -> tuple[list[float], float] | None:
    """The 2D box of a 3D box (8 corners (8, 3) in the camera frame) in a width x height image.

    Rule (docs/datasets.md): the box is cut at the near plane z = NEAR (each of its 12 edges
    crossing it is clipped there, corners behind it dropped), the remaining points are projected,
    their convex hull is clipped to the image's continuous extent [-0.5, W - 0.5] x [-0.5, H - 0.5]
    (pixel centres at integers) and the 2D box is the extent of what is left, written in the
    labels' convention [x0, y0, x1, y1] = continuous extent + 0.5 (so it lies in [0, W] x [0, H]).
    Returns (bbox, inside) with `inside` = clipped hull area / unclipped hull area (1 = the whole
    projection is in the image), or None when nothing of the box is in front of the camera and
    inside the image."""
    z = corners_cam[:, 2]
    pts = [corners_cam[z >= NEAR]]
    for a, b in _EDGES:
        za, zb = z[a], z[b]
        if (za >= NEAR) != (zb >= NEAR):
            t = (NEAR - za) / (zb - za)
            pts.append((corners_cam[a] + t * (corners_cam[b] - corners_cam[a]))[None])
    P = np.concatenate(pts)
    if len(P) < 3:
        return None
    uvw = P @ np.asarray(K, np.float64).T
    uv = uvw[:, :2] / uvw[:, 2:3]
    hull = _convex_hull(uv)
    if len(hull) < 3:
        return None
    clipped = _clip_polygon(hull, -0.5, -0.5, width - 0.5, height - 0.5)
    if len(clipped) < 3:
        return None
    area = _area(clipped)
    if area <= 0:
        return None
    lo, hi = clipped.min(0) + 0.5, clipped.max(0) + 0.5
    return [float(lo[0]), float(lo[1]), float(hi[0]), float(hi[1])], float(min(area / max(_area(hull), 1e-12), 1.0))


def _area(poly: np.ndarray) -> float:
    x, y = poly[:, 0], poly[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2)


def project_boxes_2d(corners_cam: np.ndarray, K: np.ndarray, width: int, height: int) -> list:
    """`project_box_2d` for many boxes (B, 8, 3) at once: boxes wholly behind the near plane or
    wholly outside one image side are rejected, boxes wholly in front and inside the image take
    their corners' extent, only the rest go through the hull clipping. Same results."""
    out: list = [None] * len(corners_cam)
    if len(corners_cam) == 0:
        return out
    z = corners_cam[..., 2]  # (B, 8)
    front = z >= NEAR
    uvw = corners_cam @ np.asarray(K, np.float64).T  # (B, 8, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = uvw[..., :2] / uvw[..., 2:3]  # (B, 8, 2)
    all_front = front.all(1)
    lo, hi = uv.min(1), uv.max(1)  # (B, 2)
    lim = np.array([width - 0.5, height - 0.5])
    inside = all_front & (lo >= -0.5).all(1) & (hi <= lim).all(1)
    outside = all_front & ((hi < -0.5).any(1) | (lo > lim).any(1))
    for b in range(len(corners_cam)):
        if not front[b].any() or outside[b]:
            continue
        if inside[b]:
            out[b] = ([float(lo[b, 0] + 0.5), float(lo[b, 1] + 0.5), float(hi[b, 0] + 0.5), float(hi[b, 1] + 0.5)], 1.0)
        else:
            out[b] = project_box_2d(corners_cam[b], K, width, height)
    return out


def boxes_in_camera(boxes: list[dict], ego2cam: np.ndarray) -> np.ndarray:
    """Corners (B, 8, 3) in a camera frame of labels.json boxes3d entries (ego frame)."""
    if not boxes:
        return np.zeros((0, 8, 3))
    c = np.stack([box_corners(b["center"], b["size"], b["yaw"]) for b in boxes])  # (B, 8, 3)
    return c @ ego2cam[:3, :3].T + ego2cam[:3, 3]


def box_in_camera(center, size, yaw, ego2cam: np.ndarray) -> np.ndarray:
    """8 corners (8, 3) of an ego-frame box (size l, w, h; yaw about +z) in a camera frame."""
    c = box_corners(center, size, yaw)
    return c @ ego2cam[:3, :3].T + ego2cam[:3, 3]
