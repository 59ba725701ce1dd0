"""Camera rigs: presets and YAML calibration files (format in docs/rig_format.md).

A rig is an ordered tuple of `Camera`s. Presets live as YAML beside this module
(`hydranet/rigs/*.yaml`); any other rig loads from a calibration file with the same format.
Every rig is validated: positive focal lengths, orthonormal rotations, principal point inside
the image, unique names, and every camera must see the road around the car.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from hydranet.geometry import Camera, camera_rotation, is_rotation, make_transform, yaw_pitch_roll

PRESET_DIR = Path(__file__).parent / "rigs"


class RigError(ValueError):
    """A rig file or preset is invalid."""


MAX_PINHOLE_FOV_DEG = 179.0  # a pinhole camera cannot see 180 degrees: the focal length goes to 0


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

    def resized(self, width: int, height: int) -> "Rig":
        """Every camera resampled to `width` x `height` pixels."""
        return Rig(self.name, tuple(c.scaled(width, height) for c in self.cameras))

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

    def to_dict(self) -> dict:
        """The YAML/JSON calibration form (explicit K and 4x4 matrices)."""
        return {
            "name": self.name,
            "cameras": [
                {
                    "name": c.name,
                    "width": c.width,
                    "height": c.height,
                    "K": np.round(c.K, 9).tolist(),
                    "cam2ego": np.round(c.cam2ego, 12).tolist(),
                }
                for c in self.cameras
            ],
        }


def _camera_from_dict(d: dict, where: str) -> Camera:
    allowed = {"name", "width", "height", "K", "intrinsics", "hfov_deg", "cam2ego", "translation", "ypr_deg"}
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise RigError(f"{where}: unknown key '{unknown[0]}'; allowed: {sorted(allowed)}")
    for key in ("name", "width", "height"):
        if key not in d:
            raise RigError(f"{where}: missing key '{key}'")
    name = d["name"]
    name = check_name(str(name) if isinstance(name, int) and not isinstance(name, bool) else name, "camera", where)
    where = f"{where} (camera {name})"
    width, height = d["width"], d["height"]
    if not (isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0):
        raise RigError(f"{where}: width and height must be positive integers, got {width}x{height}")
    if "K" in d:
        K = np.asarray(d["K"], dtype=np.float64)
        if K.shape != (3, 3):
            raise RigError(f"{where}: K must be a 3x3 matrix")
    elif "intrinsics" in d:
        i = d["intrinsics"]
        try:
            K = np.array([[i["fx"], 0, i["cx"]], [0, i["fy"], i["cy"]], [0, 0, 1]], dtype=np.float64)
        except KeyError as e:
            raise RigError(f"{where}: intrinsics need fx, fy, cx, cy (missing {e})") from None
    elif "hfov_deg" in d:
        hfov = d["hfov_deg"]
        if isinstance(hfov, bool) or not isinstance(hfov, (int, float)) or not 0 < hfov <= MAX_PINHOLE_FOV_DEG:
            raise RigError(f"{where}: hfov_deg {hfov!r} is not a pinhole field of view; give a number above 0 and at "
                           f"most {MAX_PINHOLE_FOV_DEG:g} degrees (a pinhole camera cannot see 180 degrees)")
        f = (width / 2) / np.tan(np.radians(float(hfov)) / 2)
        K = np.array([[f, 0, (width - 1) / 2], [0, f, (height - 1) / 2], [0, 0, 1]])
    else:
        raise RigError(f"{where}: give the intrinsics as K, intrinsics {{fx, fy, cx, cy}} or hfov_deg")
    if not (K[0, 0] > 0 and K[1, 1] > 0) or not np.isfinite(K).all():
        raise RigError(f"{where}: focal lengths must be positive, got fx={K[0, 0]}, fy={K[1, 1]}")
    if not (0 <= K[0, 2] <= width and 0 <= K[1, 2] <= height):
        raise RigError(f"{where}: principal point ({K[0, 2]}, {K[1, 2]}) lies outside the {width}x{height} image")
    fov = np.degrees([np.arctan2(K[0, 2], K[0, 0]) + np.arctan2(width - K[0, 2], K[0, 0]),
                      np.arctan2(K[1, 2], K[1, 1]) + np.arctan2(height - K[1, 2], K[1, 1])])
    if fov.max() > MAX_PINHOLE_FOV_DEG + 1e-6:
        raise RigError(f"{where}: field of view {fov[0]:.1f} x {fov[1]:.1f} deg; a pinhole camera cannot see 180 degrees "
                       f"(at most {MAX_PINHOLE_FOV_DEG:g}): use a longer focal length or split it into several cameras")
    if "cam2ego" in d:
        T = np.asarray(d["cam2ego"], dtype=np.float64)
        if T.shape != (4, 4) or not np.allclose(T[3], [0, 0, 0, 1]):
            raise RigError(f"{where}: cam2ego must be a 4x4 rigid transform with last row 0 0 0 1")
        if not is_rotation(T[:3, :3]):
            raise RigError(f"{where}: cam2ego rotation is not orthonormal with determinant +1; fix the extrinsics")
    elif "translation" in d and "ypr_deg" in d:
        yaw, pitch, roll = np.radians(np.asarray(d["ypr_deg"], dtype=np.float64))
        T = make_transform(camera_rotation(yaw, pitch, roll), d["translation"])
    else:
        raise RigError(f"{where}: give the extrinsics as cam2ego (4x4) or translation + ypr_deg")
    return Camera(name, K, T, width, height)


def _check_sees_road(cam: Camera, where: str, max_range: float = 100.0) -> None:
    """Raise unless some pixel ray of `cam` hits the ground (z=0) within `max_range` metres."""
    u, v = np.meshgrid(np.linspace(0, cam.width - 1, 17), np.linspace(0, cam.height - 1, 17))
    rays = np.stack([u, v, np.ones_like(u)], -1).reshape(-1, 3) @ np.linalg.inv(cam.K).T
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


def rig_from_dict(data: dict, where: str = "rig") -> Rig:
    if not isinstance(data, dict) or "cameras" not in data:
        raise RigError(f"{where}: expected a mapping with 'name' and a 'cameras' list")
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


def load_rig(name_or_file: str | Path) -> Rig:
    """A preset by name (see `preset_names()`) or a YAML calibration file."""
    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        if not path.is_file():
            raise RigError(f"rig file {path} does not exist")
        try:
            data = yaml.safe_load(path.read_text())
        except OSError as e:
            raise RigError(f"rig file {path} cannot be read: {(e.strerror or str(e)).lower()}; check its permissions") from None
        except yaml.YAMLError as e:
            raise RigError(f"rig file {path} is not valid YAML: {str(e).splitlines()[0]}") from None
        return rig_from_dict(data, str(path))
    preset = PRESET_DIR / f"{name_or_file}.yaml"
    if not preset.is_file():
        raise RigError(f"unknown rig preset '{name_or_file}'; known presets: {preset_names()} (or pass a .yaml calibration file)")
    return rig_from_dict(yaml.safe_load(preset.read_text()), str(name_or_file))
