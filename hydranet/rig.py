"""Camera rigs: presets and YAML calibration files (format in docs/rig_format.md).

A rig is an ordered tuple of `Camera`s. Presets live as YAML beside this module
(`hydranet/rigs/*.yaml`); any other rig loads from a calibration file with the same format.
Every rig is validated: each key's shape, type and finiteness before numpy sees it (one RigError line
naming the file, camera and key), a normalised K with positive focal lengths and at most a small skew,
orthonormal rotations, principal point inside the image, unique names, and every camera must see the
road around the car. Files are read by `hydranet.config.yaml_load` (a key written twice is an error).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hydranet.config import yaml_load
from hydranet.geometry import (DISTORTION_MODELS, Camera, Distortion, camera_rotation, distortion_array, is_rotation,
                               make_transform, yaw_pitch_roll)

PRESET_DIR = Path(__file__).parent / "rigs"


class RigError(ValueError):
    """A rig file or preset is invalid."""


MAX_PINHOLE_FOV_DEG = 179.0  # a pinhole camera cannot see 180 degrees: the focal length goes to 0
MAX_LENS_FOV_DEG = 170.0  # a distorted camera's rays, within 85 deg of its axis (the sim renders through a pinhole)
LENS_ROUND_TRIP_PX = 0.01  # undistort -> distort must give every image pixel back within this
K_ROW_TOL = 1e-9  # K's last row must be [0, 0, 1] and K[1][0] zero within this (a normalised camera matrix)
MAX_SKEW_RATIO = 0.01  # |K[0][1]| <= this * fx: axes within 0.6 deg of square (KITTI, nuScenes: 0)
MAX_IMAGE_SIDE = 16384  # pixels a side: larger is a typo (and past most GL drivers' framebuffer limit)
MAX_MOUNT_DISTANCE_M = 1000.0  # a camera this far from the ego origin is a unit mistake (millimetres for metres)


def check_name(name, what: str, where: str, error: type[Exception] = RigError) -> str:
    """`name` if it is safe as one file or folder name (a camera, scene or frame name becomes a path
    component); else raise `error` naming `where` and the name. Refused: non-strings, empty, '.', '..',
    '/', '\\', NUL and other control characters, leading or trailing spaces."""
    if not isinstance(name, str):
        raise error(f"{where}: {what} name must be a string, got {name!r}")
    bad = (not name or name in (".", "..") or "/" in name or "\\" in name or name != name.strip()
           or any(ord(ch) < 32 or ord(ch) == 127 for ch in name))
    if bad:
        raise error(f"{where}: {what} name {name!r} cannot be used as a file name (it must be non-empty, not '.' "
                    f"or '..', without '/', '\\', control characters or outer spaces); rename the {what}")
    return name


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


@dataclass(frozen=True)
class Rig:
    name: str
    cameras: tuple[Camera, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.cameras]

    def __len__(self) -> int:
        return len(self.cameras)

    def resized(self, width: int, height: int, fit: str = "stretch") -> "Rig":
        """Every camera resampled to `width` x `height` pixels (`fit`: stretch or crop, `hydranet.geometry.fit_window`)."""
        return Rig(self.name, tuple(c.scaled(width, height, fit) for c in self.cameras))

    def select(self, names: "list[str] | tuple[str, ...] | None") -> "Rig":
        """The named cameras in the given order (None: all); an unknown name raises RigError."""
        if names is None:
            return self
        by = {c.name: c for c in self.cameras}
        missing = [n for n in names if n not in by]
        if missing:
            raise RigError(f"camera '{missing[0]}' is not in rig '{self.name}' (cameras: {self.names})")
        return Rig(self.name, tuple(by[n] for n in names))

    def common_size(self) -> tuple[int, int]:
        """(H, W) shared by every camera; RigError naming the sizes when they differ (resize the rig
        to one size first: `resized`, as training does with data.image_size)."""
        sizes = {(c.height, c.width) for c in self.cameras}
        if len(sizes) > 1:
            detail = ", ".join(f"{c.name} {c.width}x{c.height}" for c in self.cameras)
            raise RigError(f"rig cameras have different resolutions ({detail}); resize them to one size "
                           "(data.image_size; Rig.resized)")
        return sizes.pop()

    def calibration(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """K (N, 3, 3), cam2ego (N, 4, 4) and names of the cameras, in rig order."""
        return (np.stack([c.K for c in self.cameras]), np.stack([c.cam2ego for c in self.cameras]),
                list(self.names))

    def distortion(self) -> np.ndarray:
        """(N, 6) float32 lens rows in rig order (zeros for pinholes; `hydranet.geometry.distortion_array`)."""
        return distortion_array(self.cameras)

    @property
    def distorted(self) -> list[str]:
        """Names of the cameras with a lens distortion model."""
        return [c.name for c in self.cameras if c.distortion is not None]

    def to_dict(self) -> dict:
        """The YAML/JSON calibration form (explicit K and 4x4 matrices; `distortion` where a lens has one)."""
        cams = []
        for c in self.cameras:
            d = {"name": c.name, "width": c.width, "height": c.height, "K": np.round(c.K, 9).tolist(),
                 "cam2ego": np.round(c.cam2ego, 12).tolist()}
            if c.distortion is not None:
                d["distortion"] = c.distortion.as_dict()
            cams.append(d)
        return {"name": self.name, "cameras": cams}


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_finite_number(x) -> bool:
    try:
        return _is_number(x) and math.isfinite(x)
    except OverflowError:  # an int past 1.8e308
        return False


def _number(value, where: str, key: str, what: str = "") -> float:
    """`value` as a float if it is a finite number (not a bool, a string or null), else a RigError naming `key`."""
    if not _is_number(value):
        raise RigError(f"{where}: key '{key}' must be a number{what}, got {value!r}")
    if not _is_finite_number(value):
        raise RigError(f"{where}: key '{key}' must be a finite number{what}, got {value!r}")
    return float(value)


def _numbers(value, n: int, where: str, key: str, what: str) -> np.ndarray:
    """(n,) float64 from a list of n finite numbers, checked before numpy sees it (else numpy says 'could not
    broadcast' or 'could not convert string to float' without naming the key)."""
    if not isinstance(value, (list, tuple)):
        raise RigError(f"{where}: key '{key}' must be a list of {n} numbers ({what}), got {value!r}")
    if len(value) != n:
        raise RigError(f"{where}: key '{key}' must be {n} numbers ({what}), got {len(value)}: {list(value)!r}")
    return np.array([_number(x, where, f"{key}[{i}]", f" ({what})") for i, x in enumerate(value)], np.float64)


def _matrix(value, rows: int, cols: int, where: str, key: str, what: str) -> np.ndarray:
    """(rows, cols) float64 from a list of `rows` lists of `cols` finite numbers, each entry checked."""
    shape_ok = (isinstance(value, (list, tuple)) and len(value) == rows
                and all(isinstance(r, (list, tuple)) and len(r) == cols for r in value))
    if not shape_ok:
        if isinstance(value, (list, tuple)) and all(isinstance(r, (list, tuple)) for r in value):
            got = f"{len(value)} rows of {', '.join(str(len(r)) for r in value) or 'no'} numbers"
        else:
            got = repr(value)
        raise RigError(f"{where}: key '{key}' must be a {rows}x{cols} matrix ({what}: {rows} rows of {cols} numbers), "
                       f"got {got}")
    return np.array([[_number(x, where, f"{key}[{r}][{c}]", f" ({what})") for c, x in enumerate(row)]
                     for r, row in enumerate(value)], np.float64)


def _distortion_from_dict(d, where: str) -> Distortion:
    if not isinstance(d, dict) or set(d) != {"model", "coeffs"}:
        raise RigError(f"{where}: distortion must be {{model: radtan|fisheye, coeffs: [...]}}, got {d!r}")
    model, coeffs = d["model"], d["coeffs"]
    if not isinstance(model, str) or model not in DISTORTION_MODELS:
        raise RigError(f"{where}: unknown distortion model {model!r}; known: {sorted(DISTORTION_MODELS)}")
    n = DISTORTION_MODELS[model]
    ok = isinstance(coeffs, list) and len(coeffs) == n and all(_is_finite_number(c) for c in coeffs)
    if not ok:
        names = "k1, k2, p1, p2, k3" if model == "radtan" else "k1, k2, k3, k4"
        raise RigError(f"{where}: {model} distortion needs {n} finite coefficients ({names}, OpenCV order), got {coeffs!r}")
    return Distortion(model, tuple(coeffs))


def _lens(d, where: str) -> Distortion | None:
    """The camera's lens from its `distortion` entry; None for none or an all-zero radtan (a pinhole)."""
    if d is None:
        return None
    lens = _distortion_from_dict(d, where)
    return None if lens.model == "radtan" and not any(lens.coeffs) else lens


def _border_pixels(width: int, height: int, n: int = 65) -> np.ndarray:
    """(M, 2) pixels along the image border (and its centre lines), where a lens is most extreme."""
    u, v = np.linspace(-0.5, width - 0.5, n), np.linspace(-0.5, height - 0.5, n)
    return np.concatenate([np.stack([u, np.full(n, -0.5)], 1), np.stack([u, np.full(n, height - 0.5)], 1),
                           np.stack([np.full(n, -0.5), v], 1), np.stack([np.full(n, width - 0.5), v], 1),
                           np.stack([u, np.full(n, (height - 1) / 2)], 1), np.stack([np.full(n, (width - 1) / 2), v], 1)])


def _fold_fix(lens) -> str:
    """What to do about a lens mapping that folds over inside the image. A genuine OpenCV fit does this: with k3 free,
    `cv2.calibrateCamera` fits the polynomial where the chessboard was and lets it turn over in the corners it never saw."""
    crop = ("or crop the images to the region the calibration is valid in (cv2.getOptimalNewCameraMatrix with alpha=0 "
            "gives that rectangle) and give the rig at the cropped size with K shifted by the crop")
    if lens.model == "radtan" and lens.coeffs[4] != 0:
        return (f"an OpenCV fit with a free k3 ({lens.coeffs[4]:g}) typically turns over in corners the calibration "
                "pattern never reached: refit with flags=cv2.CALIB_FIX_K3 (k3 = 0), " + crop)
    return "refit the calibration with fewer free coefficients (cv2.CALIB_FIX_K3 and up), " + crop


def _check_lens(cam: Camera, where: str) -> None:
    """Every pixel of a distorted camera must come from one ray: the lens mapping is monotonic over
    the image, undistort -> distort returns each border pixel, and the rays stay within MAX_LENS_FOV_DEG."""
    px = _border_pixels(cam.width, cam.height)
    rays = cam.pixel_rays(px)  # (M, 3), z = 1
    back = cam.distortion.distort(rays[:, :2]) @ cam.K[:2, :2].T + cam.K[:2, 2]
    err = np.linalg.norm(back - px, axis=1)
    if not np.isfinite(err).all() or err.max() > LENS_ROUND_TRIP_PX:
        raise RigError(f"{where}: the {cam.distortion.model} distortion {list(cam.distortion.coeffs)} folds over "
                       f"inside the {cam.width}x{cam.height} image (a pixel there comes from two rays, or from none); "
                       f"{_fold_fix(cam.distortion)}")
    angle = np.degrees(np.arctan(np.linalg.norm(rays[:, :2], axis=1))).max()
    if angle > MAX_LENS_FOV_DEG / 2:
        raise RigError(f"{where}: the lens sees rays {angle:.1f} deg off its axis; at most {MAX_LENS_FOV_DEG / 2:g} "
                       f"(a field of view of {MAX_LENS_FOV_DEG:g} deg): use a longer focal length")


CAMERA_KEYS = ("name", "width", "height", "K", "intrinsics", "hfov_deg", "cam2ego", "translation", "ypr_deg",
               "distortion")
INTRINSICS = ("K", "intrinsics", "hfov_deg")  # one of them
K_LAYOUT = "[[fx, s, cx], [0, fy, cy], [0, 0, 1]]"


def _check_size(d: dict, where: str) -> tuple[int, int]:
    width, height = d["width"], d["height"]
    for key, v in (("width", width), ("height", height)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_IMAGE_SIDE:
            raise RigError(f"{where}: key '{key}' must be a whole number of pixels from 1 to {MAX_IMAGE_SIDE}, got {v!r} "
                           f"(size {width!r}x{height!r})")
    return width, height


def _check_K(K: np.ndarray, width: int, height: int, where: str, key: str) -> None:
    """A pinhole K of OpenCV's layout [[fx, s, cx], [0, fy, cy], [0, 0, 1]]: normalised (last row exactly
    [0, 0, 1] within 1e-9; a K scaled by its last entry is a different camera for everything that divides
    by z), K[1][0] = 0, positive focal lengths (so K is never singular), a skew of at most MAX_SKEW_RATIO * fx
    (real cameras, KITTI's and nuScenes' included, have none), the principal point inside the image."""
    if np.abs(K[2] - [0.0, 0.0, 1.0]).max() > K_ROW_TOL:
        raise RigError(f"{where}: key '{key}' is not a normalised camera matrix: its last row must be [0, 0, 1], got "
                       f"{K[2].tolist()}; divide K by K[2][2] if it is a scaled K, or check the layout {K_LAYOUT}")
    if abs(K[1, 0]) > K_ROW_TOL:
        raise RigError(f"{where}: key '{key}' entry [1][0] must be 0 (the layout is {K_LAYOUT}), got {K[1, 0]:g}; "
                       "is K transposed?")
    if not (K[0, 0] > 0 and K[1, 1] > 0):
        raise RigError(f"{where}: key '{key}': focal lengths must be positive, got fx={K[0, 0]:g}, fy={K[1, 1]:g} "
                       "(a zero focal length makes K singular)")
    if abs(K[0, 1]) > MAX_SKEW_RATIO * K[0, 0]:
        raise RigError(f"{where}: key '{key}' has a skew K[0][1] = {K[0, 1]:g}, more than {MAX_SKEW_RATIO:g} * fx = "
                       f"{MAX_SKEW_RATIO * K[0, 0]:g}; real cameras have (next to) none: check the layout {K_LAYOUT}")
    if not (0 <= K[0, 2] <= width and 0 <= K[1, 2] <= height):
        raise RigError(f"{where}: principal point ({K[0, 2]:g}, {K[1, 2]:g}) lies outside the {width}x{height} image")


def _intrinsics(d: dict, width: int, height: int, lens: Distortion | None, where: str) -> np.ndarray:
    """K (3x3) from the camera's one intrinsics key: K, intrinsics {fx, fy, cx, cy} or hfov_deg."""
    given = [k for k in INTRINSICS if k in d]
    if len(given) > 1:
        raise RigError(f"{where}: the intrinsics are given twice ({' and '.join(given)}); keep one of K, intrinsics, "
                       "hfov_deg")
    if not given:
        raise RigError(f"{where}: give the intrinsics as K, intrinsics {{fx, fy, cx, cy}} or hfov_deg")
    if "K" in d:
        K = _matrix(d["K"], 3, 3, where, "K", f"the camera matrix {K_LAYOUT}, in pixels")
        _check_K(K, width, height, where, "K")
        return K
    if "intrinsics" in d:
        i = d["intrinsics"]
        names = ("fx", "fy", "cx", "cy")
        if not isinstance(i, dict):
            raise RigError(f"{where}: key 'intrinsics' must be a mapping {{fx, fy, cx, cy}} in pixels, got {i!r}")
        missing, unknown = [k for k in names if k not in i], sorted(map(str, set(i) - set(names)))
        if missing or unknown:
            what = f"missing '{missing[0]}'" if missing else f"unknown key '{unknown[0]}'; for a skew give K"
            raise RigError(f"{where}: key 'intrinsics' needs exactly fx, fy, cx, cy ({what})")
        fx, fy, cx, cy = (_number(i[k], where, f"intrinsics.{k}", " (pixels)") for k in names)
        K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]], dtype=np.float64)
        _check_K(K, width, height, where, "intrinsics")
        return K
    hfov = d["hfov_deg"]
    top = MAX_PINHOLE_FOV_DEG if lens is None else MAX_LENS_FOV_DEG
    if not _is_finite_number(hfov) or not 0 < hfov <= top:
        why = "a pinhole camera cannot see 180 degrees" if lens is None else "the sim renders a lens through a pinhole"
        raise RigError(f"{where}: hfov_deg {hfov!r} is not a {'pinhole' if lens is None else 'lens'} field of view; "
                       f"give a number above 0 and at most {top:g} degrees ({why})")
    # the horizontal edge rays (hfov / 2 off the axis) land on the image's left and right edges
    r = np.array([[np.tan(np.radians(float(hfov)) / 2), 0.0]])
    f = (width / 2) / float((r if lens is None else lens.distort(r))[0, 0])
    if not np.isfinite(f):
        turn = np.degrees(np.arctan(lens.max_radius))
        raise RigError(f"{where}: the {lens.model} distortion {list(lens.coeffs)} folds over {turn:.1f} deg off the "
                       f"axis, inside the hfov_deg {hfov} image; use smaller coefficients or a smaller hfov_deg")
    return np.array([[f, 0, (width - 1) / 2], [0, f, (height - 1) / 2], [0, 0, 1]])


def _extrinsics(d: dict, where: str) -> np.ndarray:
    """cam2ego (4x4) from cam2ego, or from translation + ypr_deg; a rigid transform with the camera
    within MAX_MOUNT_DISTANCE_M of the ego origin."""
    if "cam2ego" in d:
        both = [k for k in ("translation", "ypr_deg") if k in d]
        if both:
            raise RigError(f"{where}: the extrinsics are given twice (cam2ego and {' and '.join(both)}); keep cam2ego "
                           "or translation + ypr_deg")
        key = "cam2ego"
        T = _matrix(d["cam2ego"], 4, 4, where, key, "camera-to-ego rigid transform, metres")
        if np.abs(T[3] - [0.0, 0.0, 0.0, 1.0]).max() > 1e-6:
            raise RigError(f"{where}: key 'cam2ego' must be a 4x4 rigid transform with last row 0 0 0 1, got "
                           f"{T[3].tolist()}")
        R = T[:3, :3]
        if not is_rotation(R):
            det = float(np.linalg.det(R))
            what = ("singular (determinant 0)" if abs(det) < 1e-6 else
                    "a reflection (determinant -1): an axis is flipped" if abs(det + 1) < 1e-3 else
                    f"not orthonormal with determinant +1 (determinant {det:.4g})")
            raise RigError(f"{where}: key 'cam2ego': its rotation (the top-left 3x3) is {what}; fix the extrinsics "
                           "(columns: the camera's x right, y down, z forward axes in the ego frame)")
    elif "translation" in d or "ypr_deg" in d:
        missing = [k for k in ("translation", "ypr_deg") if k not in d]
        if missing:
            raise RigError(f"{where}: key '{missing[0]}' is missing: give the extrinsics as cam2ego (4x4) or "
                           "translation + ypr_deg")
        key = "translation"
        t = _numbers(d["translation"], 3, where, "translation", "metres in the ego frame: x forward, y left, z up")
        ypr = _numbers(d["ypr_deg"], 3, where, "ypr_deg", "yaw, pitch, roll in degrees")
        T = make_transform(camera_rotation(*np.radians(ypr)), t)
    else:
        raise RigError(f"{where}: give the extrinsics as cam2ego (4x4) or translation + ypr_deg")
    far = float(np.linalg.norm(T[:3, 3]))
    if far > MAX_MOUNT_DISTANCE_M:
        raise RigError(f"{where}: key '{key}' mounts the camera {far:g} m from the ego origin, more than "
                       f"{MAX_MOUNT_DISTANCE_M:g} m; the translation is in metres (x forward, y left, z up): "
                       "millimetres?")
    return T


def _camera_from_dict(d, where: str) -> Camera:
    if not isinstance(d, dict):
        raise RigError(f"{where}: a camera must be a mapping with name, width, height, intrinsics and extrinsics, "
                       f"got {d!r}")
    unknown = sorted(map(str, set(d) - set(CAMERA_KEYS)))
    if unknown:
        raise RigError(f"{where}: unknown key '{unknown[0]}'; allowed: {sorted(CAMERA_KEYS)}")
    for key in ("name", "width", "height"):
        if key not in d:
            raise RigError(f"{where}: missing key '{key}'")
    name = d["name"]
    name = check_name(str(name) if isinstance(name, int) and not isinstance(name, bool) else name, "camera", where)
    where = f"{where} (camera {name})"
    width, height = _check_size(d, where)
    lens = _lens(d.get("distortion"), where)
    K = _intrinsics(d, width, height, lens, where)
    fov = np.degrees([np.arctan2(K[0, 2], K[0, 0]) + np.arctan2(width - K[0, 2], K[0, 0]),
                      np.arctan2(K[1, 2], K[1, 1]) + np.arctan2(height - K[1, 2], K[1, 1])])
    if lens is None and fov.max() > MAX_PINHOLE_FOV_DEG + 1e-6:
        raise RigError(f"{where}: field of view {fov[0]:.1f} x {fov[1]:.1f} deg; a pinhole camera cannot see 180 degrees "
                       f"(at most {MAX_PINHOLE_FOV_DEG:g}): use a longer focal length or split it into several cameras")
    cam = Camera(name, K, _extrinsics(d, where), width, height, lens)
    if lens is not None:
        _check_lens(cam, where)
    return cam


def _check_sees_road(cam: Camera, where: str, max_range: float = 100.0) -> None:
    """Raise unless some pixel ray of `cam` hits the ground (z=0) within `max_range` metres."""
    u, v = np.meshgrid(np.linspace(0, cam.width - 1, 17), np.linspace(0, cam.height - 1, 17))
    rays = cam.pixel_rays(np.stack([u, v], -1).reshape(-1, 2))
    d = rays @ cam.cam2ego[:3, :3].T  # ray directions in ego frame
    o = cam.cam2ego[:3, 3]
    if o[2] <= 0:
        raise RigError(f"{where}: camera {cam.name} is mounted at z={o[2]:.2f} m, at or below the road; mount it above z=0")
    down = d[:, 2] < -1e-9
    t = -o[2] / d[down, 2]  # ray length to the ground for rays pointing down
    hit = np.linalg.norm(d[down, :2] * t[:, None], axis=1) < max_range
    if not hit.any():
        yaw, pitch, _ = np.degrees(yaw_pitch_roll(cam.cam2ego[:3, :3]))
        raise RigError(
            f"{where}: camera {cam.name} sees no road within {max_range:.0f} m (pitch {pitch:.1f} deg points it at the "
            "sky); tilt it towards the ground")


def camera_sizes(data, where: str = "rig") -> dict[str, tuple[int, int]]:
    """{camera name: (width, height)} in rig order of a dataset's or fleet's rig mapping (its meta "rig"), read
    from each camera's name and size alone: a fleet without calibration (BDD100K) records nothing else. RigError
    naming `where` when a camera has no valid name or size."""
    cams = data.get("cameras") if isinstance(data, dict) else None
    if not isinstance(cams, list) or not cams:
        raise RigError(f"{where}: expected a mapping with a non-empty 'cameras' list")
    out = {}
    for i, c in enumerate(cams):
        at = f"{where} cameras[{i}]"
        if not isinstance(c, dict) or not {"name", "width", "height"} <= set(c):
            raise RigError(f"{at}: a camera needs 'name', 'width' and 'height'")
        out[check_name(str(c["name"]), "camera", at)] = _check_size(c, at)
    if len(out) != len(cams):
        raise RigError(f"{where}: camera names must be unique, got {[c['name'] for c in cams]}")
    return out


def rig_from_dict(data: dict, where: str = "rig") -> Rig:
    if not isinstance(data, dict) or "cameras" not in data:
        raise RigError(f"{where}: expected a mapping with 'name' and a 'cameras' list")
    unknown = sorted(map(str, set(data) - {"name", "cameras"}))
    if unknown:
        raise RigError(f"{where}: unknown key '{unknown[0]}'; a rig has 'name' and 'cameras'")
    if "name" in data and not isinstance(data["name"], str):
        raise RigError(f"{where}: key 'name' must be a string, got {data['name']!r}")
    cams = data["cameras"]
    if not isinstance(cams, list) or not cams:
        raise RigError(f"{where}: 'cameras' must be a non-empty list")
    cameras = tuple(_camera_from_dict(c, f"{where} cameras[{i}]") for i, c in enumerate(cams))
    names = [c.name for c in cameras]
    if len(set(names)) != len(names):
        raise RigError(f"{where}: camera names must be unique, got {names}")
    for c in cameras:
        _check_sees_road(c, where)
    return Rig(str(data.get("name", Path(where).stem)), cameras)


def _read_yaml(path: Path, where: str):
    """A rig file's YAML (the config loader's: 1e-4 is a number, a key written twice is an error)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise RigError(f"{where} cannot be read: {(e.strerror or str(e)).lower()}; check its permissions") from None
    except UnicodeDecodeError:
        raise RigError(f"{where} is not a text file; give a YAML calibration file (docs/rig_format.md)") from None
    return yaml_load(text, where, RigError)


def load_rig(name_or_file: str | Path) -> Rig:
    """A preset by name (see `preset_names()`) or a YAML calibration file."""
    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        if not path.is_file():
            raise RigError(f"rig file {path} does not exist")
        return rig_from_dict(_read_yaml(path, f"rig file {path}"), str(path))
    preset = PRESET_DIR / f"{name_or_file}.yaml"
    if not preset.is_file():
        raise RigError(f"unknown rig preset '{name_or_file}'; known presets: {preset_names()} (or pass a .yaml calibration file)")
    return rig_from_dict(_read_yaml(preset, f"rig preset {preset}"), str(name_or_file))


RIG_FOLDER_FILES = (("dataset.json", "hydranet-sim", "sim dataset or fleet"),  # `sim generate`, `engine fleet`
                    ("fleet.json", "hydranet-fleet", "recorded fleet"))  # `engine ingest` (data_engine/fleet.py)


def rig_from_path(path: str | Path) -> Rig:
    """The rig of a rig YAML file or preset name (`load_rig`), of a sim dataset / sim fleet folder
    (DIR/dataset.json) or of a recorded fleet folder (DIR/fleet.json): the calibration a fleet's clips were
    taken with. Every failure is one RigError line naming the file and what to give instead."""
    import json

    path = Path(path)
    if not path.is_dir():
        if not path.exists() and path.suffix not in (".yaml", ".yml", ".json") and path.name in preset_names():
            return load_rig(path.name)
        if not path.exists():
            raise RigError(f"rig {path} does not exist; give a rig YAML file (docs/rig_format.md), a preset "
                           f"({', '.join(preset_names())}), a sim dataset or fleet folder, or a recorded fleet folder")
        return load_rig(path)
    for file, fmt, what in RIG_FOLDER_FILES:
        f = path / file
        if not f.is_file():
            continue
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except OSError as e:
            raise RigError(f"{f} cannot be read: {(e.strerror or str(e)).lower()}; check its permissions") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RigError(f"{f} is not valid JSON ({e}); regenerate the {what}") from None
        if not isinstance(data, dict) or data.get("format") != fmt:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise RigError(f"{f}: format {got!r} is not {fmt!r}: {path} is not a {what}; give a rig YAML file instead")
        if not isinstance(data.get("rig"), dict):
            raise RigError(f"{f} has no 'rig' mapping (cameras with K, cam2ego and size); regenerate the {what}")
        return rig_from_dict(data["rig"], f"{f} rig")
    raise RigError(f"{path} is a folder but neither a sim dataset/fleet (no dataset.json) nor a recorded fleet (no "
                   "fleet.json); give a rig YAML file (docs/rig_format.md) or such a folder")


def calibration_difference(a: Rig, b: Rig) -> dict[str, dict[str, float]]:
    """Per camera of `a` found in `b` (by name; give both at one image size): the largest intrinsics difference
    in pixels, how far it is mounted away (metres) and turned (degrees), and its lens: 1.0 where the lens
    model differs (a pinhole against a fisheye), else the largest distortion coefficient difference."""
    by = {c.name: c for c in b.cameras}
    out = {}
    for c in a.cameras:
        if c.name in by:
            d = by[c.name]
            R = c.cam2ego[:3, :3].T @ d.cam2ego[:3, :3]  # the relative rotation; its angle by atan2 (exact near 0)
            sin = np.linalg.norm([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / 2
            out[c.name] = {"K_px": float(np.abs(c.K - d.K).max()),
                           "moved_m": float(np.linalg.norm(c.cam2ego[:3, 3] - d.cam2ego[:3, 3])),
                           "turned_deg": float(np.degrees(np.arctan2(sin, (np.trace(R) - 1) / 2))),
                           "lens": _lens_difference(c.distortion, d.distortion)}
    return out


def _lens_difference(a, b) -> float:
    """1.0 for another lens model (None: a pinhole), else the largest coefficient difference."""
    if (a.model if a is not None else "pinhole") != (b.model if b is not None else "pinhole"):
        return 1.0
    return 0.0 if a is None else float(np.abs(np.subtract(a.coeffs, b.coeffs)).max())


def camera_subset(model_cameras: list[str], available) -> list[str] | None:
    """The model's cameras that `available` (names) holds, in the model's order, when it holds some but not all of
    them: where the camera heads run alone (None: all of them, or none, where the caller's own check speaks)."""
    present = [n for n in model_cameras if n in available]
    return present if 0 < len(present) < len(model_cameras) else None


def camera_subset_line(where: str, skipped: list[str], model_cameras: list[str], heads: list[str],
                       cameras: list[str]) -> str:
    """The one line said when a model runs on some of its cameras: which BEV heads are not run, what they need,
    and where its camera heads run ('' when no head is left out)."""
    if not skipped:
        return ""
    return (f"{where}: BEV head(s) {', '.join(skipped)} not run: they need every camera of the model "
            f"({', '.join(model_cameras)}); its camera heads ({', '.join(heads)}) run on {', '.join(cameras)}")
