"""Training input pipeline: a torch Dataset over `SimDataset` frames, augmentation, collate and a
resumable, shardable batch order.

- `resize_crop(sample, sx, sy, x0, y0, out_hw)`: scale every camera by (sx, sy) and crop the window
  at (x0, y0); images bilinear, dense labels nearest; intrinsics, 2D boxes and 2D lanes follow.
  Pixel centres sit at integer coordinates (docs/dataset_format.md): a pixel centre u maps to
  sx * (u + 0.5) - 0.5 - x0, a box edge x to sx * x - x0.
- `fit_to(sample, out_hw, fit, camera_K)`: bring a source's cameras to the model's input size: `stretch`
  (each image resized to out_hw, its aspect changed), `crop` (one scale for both axes, the larger; centre crop) or
  `camera` (each image resampled to the model's own pinhole camera of the same name: its focal length and
  principal point at out_hw, so objects keep the pixel size they had in training).
- `Augmenter`: per camera a photometric albumentations pipeline (brightness/contrast, blur, noise,
  fog, rain, shadows), a random zoom (scale >= 1, then crop back to the output size) and a left-right mirror
  (`mirror`: the camera's intrinsics mirrored with it; `Augmenter.from_config`: in models without BEV heads
  unless augment.hflip_bev), seeded
  from (seed, epoch, frame, camera) so a resumed run sees the very same pixels; for BEV models a
  random yaw of the whole ego frame (hydranet/bev_augment.py), the same for every frame of a clip.
- `StepBatchSampler`: the frame order of epoch e is a permutation drawn from (seed, e); rank r of
  W takes every W-th frame (as torch's DistributedSampler); batches are numbered by global step,
  so resuming at step s yields exactly the batches s, s+1, ... of an uninterrupted run.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hydranet.bev_augment import rotate_sample
from hydranet.bevgrid import BevGrid
from hydranet.data import SimDataset
from hydranet.experiment import FITS, AugmentConfig
from hydranet.geometry import (DISTORTION_WIDTH, clip_polyline, fit_window, mirror_boxes, mirror_normals, warp_affine,
                               window_affine)
from hydranet.heads import HEADS
from hydranet.tasks import Task

DENSE_KEYS = ("depth", "normals", "semantic", "drivable", "instance")


def window_box(box: Sequence[float], scale: tuple[float, float], offset: tuple[float, float],
               out_hw: tuple[int, int]) -> list[float] | None:
    """An xyxy box's edges scaled by (sx, sy), shifted by -(x0, y0) and clipped to the (H, W) window; None where
    nothing of it is left."""
    (sx, sy), (x0, y0), (H, W) = scale, offset, out_hw
    b = [min(max(sx * box[0] - x0, 0.0), W), min(max(sy * box[1] - y0, 0.0), H),
         min(max(sx * box[2] - x0, 0.0), W), min(max(sy * box[3] - y0, 0.0), H)]
    return b if b[2] > b[0] and b[3] > b[1] else None


def resize_crop(sample: Mapping, scales: Sequence[tuple[float, float]], offsets: Sequence[tuple[float, float]],
                out_hw: tuple[int, int]) -> dict:
    """A new sample whose camera n is camera n of `sample` scaled by scales[n] = (sx, sy) and
    cropped at offsets[n] = (x0, y0) (in scaled pixels) to out_hw = (H, W).

    Updates images (bilinear), the dense channels present (nearest), `intrinsics`, and the per
    camera `boxes2d` and `dontcare` regions (clipped; boxes left empty are dropped) and `lanes2d` (cut at the new image's edges,
    `hydranet.geometry.clip_polyline`: a lane leaving and re-entering it is two polylines of one lane id) of
    `labels`."""
    out = dict(sample)
    H, W = out_hw
    n_cam = len(sample["camera_names"])
    Ms = []
    for (sx, sy), (x0, y0) in zip(scales, offsets, strict=True):
        Ms.append(window_affine(sx, sy, x0, y0))
    if "images" in sample:
        out["images"] = np.stack([warp_affine(sample["images"][i], Ms[i], out_hw, True) for i in range(n_cam)])  # (N, H, W, 3)
    for key in DENSE_KEYS:
        if key in sample:
            out[key] = np.stack([warp_affine(sample[key][i], Ms[i], out_hw, False) for i in range(n_cam)])
    K = np.array(sample["intrinsics"], np.float32, copy=True)  # (N, 3, 3)
    for i, M in enumerate(Ms):
        K[i, 0, :] = M[0, 0] * K[i, 0, :] + M[0, 2] * K[i, 2, :]
        K[i, 1, :] = M[1, 1] * K[i, 1, :] + M[1, 2] * K[i, 2, :]
    out["intrinsics"] = K
    # per-camera entries are rebuilt below; everything else is shared with the input, not copied
    labels = {**sample["labels"], "cameras": {k: dict(v) for k, v in sample["labels"]["cameras"].items()}}
    for i, name in enumerate(sample["camera_names"]):
        cam = labels["cameras"].get(name)
        if cam is None:
            continue
        (sx, sy), (x0, y0) = scales[i], offsets[i]
        cam["boxes2d"] = [{**b, "bbox": nb} for b in cam.get("boxes2d", [])
                          if (nb := window_box(b["bbox"], scales[i], offsets[i], out_hw))]
        if "dontcare" in cam:  # a reader's ignore regions (KITTI's DontCare) follow the pixels as the boxes do
            cam["dontcare"] = [nb for box in cam["dontcare"] if (nb := window_box(box, scales[i], offsets[i], out_hw))]
        lanes = []
        for lane in cam.get("lanes2d", []):
            pts = np.asarray(lane["points"], np.float64).reshape(-1, 2)
            pts = pts * [sx, sy] + [0.5 * sx - 0.5 - x0, 0.5 * sy - 0.5 - y0]
            # cut where the window cuts it (a segment crossing the edge ends on it), not just its outside points;
            # the window is the pixels' extent [-0.5, W - 0.5), half-open as before
            inner = (np.nextafter(W - 0.5, 0.0), np.nextafter(H - 0.5, 0.0))
            lanes += [{**lane, "points": run.tolist()} for run in clip_polyline(pts, (-0.5, -0.5), inner)]
        cam["lanes2d"] = lanes
    out["labels"] = labels
    return out


def mirror(sample: Mapping, flip: Sequence[bool]) -> dict:
    """A new sample whose camera n is mirrored left to right where flip[n]: its image and dense channels
    reversed along x, its normals' x negated (camera frame, x right), its `boxes2d` and `dontcare` boxes (edges:
    x -> W - x) and `lanes2d` (pixel centres: u -> W - 1 - u) mirrored, and its intrinsics those of the mirrored
    camera (K row 0 -> (W - 1) K row 2 - K row 0: fx -> -fx, cx -> W - 1 - cx), so a 3D point projects to the
    mirrored pixel and the view transform lifts every mirrored pixel to the BEV cell it came from (the BEV
    labels stay as they are; BEVDet's image-view flip)."""
    out = dict(sample)
    idx = np.flatnonzero(np.asarray(flip, bool))
    if not len(idx):
        return out
    W = sample["images"].shape[2]
    for key in ("images", *DENSE_KEYS):
        if key in sample:
            arr = np.array(sample[key], copy=True)  # (N, H, W, ...)
            arr[idx] = mirror_normals(arr[idx]) if key == "normals" else arr[idx, :, ::-1]
            out[key] = arr
    K = np.array(sample["intrinsics"], np.float32, copy=True)  # (N, 3, 3)
    K[idx, 0, :] = (W - 1) * K[idx, 2, :] - K[idx, 0, :]
    out["intrinsics"] = K
    labels = {**sample["labels"], "cameras": dict(sample["labels"]["cameras"])}
    for n in idx:
        cam = labels["cameras"].get(sample["camera_names"][n])
        if cam is None:
            continue
        cam = labels["cameras"][sample["camera_names"][n]] = dict(cam)
        cam["boxes2d"] = [{**b, "bbox": mirror_boxes(b["bbox"], W)[0].tolist()} for b in cam.get("boxes2d", [])]
        if "dontcare" in cam:
            cam["dontcare"] = mirror_boxes(cam["dontcare"], W).tolist()
        cam["lanes2d"] = [{**lane, "points": (np.asarray(lane["points"], np.float64).reshape(-1, 2) * [-1, 1]
                                              + [W - 1, 0]).tolist()} for lane in cam.get("lanes2d", [])]
    out["labels"] = labels
    return out


def resize_to(sample: Mapping, out_hw: tuple[int, int]) -> dict:
    """Every camera resized to out_hw (no crop); a no-op when it already has that size. Cameras of
    several resolutions (a list of images, see SimDataset) are each scaled by their own factors."""
    sizes = [img.shape[:2] for img in sample["images"]]
    if all(tuple(hw) == tuple(out_hw) for hw in sizes) and not isinstance(sample["images"], list):
        return dict(sample)
    return resize_crop(sample, [(out_hw[1] / w, out_hw[0] / h) for h, w in sizes], [(0.0, 0.0)] * len(sizes), out_hw)


def fit_to(sample: Mapping, out_hw: tuple[int, int], fit: str = "stretch",
           camera_K: Mapping[str, np.ndarray] | None = None) -> dict:
    """Every camera of `sample` at out_hw = (H, W), by `fit`:
    - "stretch": resized to out_hw (`resize_to`); a 1242x375 KITTI frame at 160x96 has its objects
      squeezed 2x across against down;
    - "crop": scaled by max(H/h, W/w) on both axes, centre-cropped: the aspect kept, the sides lost;
    - "camera": resampled to the pinhole camera_K[name] (3, 3) (the model's camera of that name at
      out_hw): scaled by the ratio of the focal lengths, the principal points aligned, cropped or padded
      with black. A car then has the pixel size it had in training at the same distance, whatever
      the source camera. Needs each camera's finite intrinsics and an entry in camera_K: ValueError naming the camera.
      A lens model is not undone: a fisheye stays a fisheye at the new focal length. Padded pixels are black, and
      their dense labels 0 (not drivable, no depth)."""
    if fit == "stretch":
        return resize_to(sample, out_hw)
    return resize_crop(sample, *fit_windows(sample, out_hw, fit, camera_K), out_hw)


def fit_windows(sample: Mapping, out_hw: tuple[int, int], fit: str = "stretch",
                camera_K: Mapping[str, np.ndarray] | None = None) -> tuple[list, list]:
    """(scales [(sx, sy)], offsets [(x0, y0)]) per camera of `fit_to`'s `resize_crop`: a model pixel's box edge x'
    is sx * x - x0 of the source's edge x, so x = (x' + x0) / sx maps a prediction back to the source image."""
    if fit not in FITS:
        raise ValueError(f"data.fit must be one of {', '.join(FITS)}, got {fit!r}")
    H, W = out_hw
    scales, offsets = [], []
    for i, name in enumerate(sample["camera_names"]):
        h, w = sample["images"][i].shape[:2]
        if fit in ("crop", "stretch"):
            sx, sy, x0, y0 = fit_window(w, h, W, H, "crop") if fit == "crop" else (W / w, H / h, 0.0, 0.0)
            scales.append((sx, sy))
            offsets.append((x0, y0))
            continue
        K = np.asarray(sample["intrinsics"][i], np.float64)  # (3, 3) at the source's (h, w)
        if camera_K is None or name not in camera_K:
            raise ValueError(f"data.fit=camera: the model has no camera {name!r} to resample to "
                             f"(it has {', '.join(camera_K or {}) or 'none'}); use data.fit=crop or stretch")
        if not np.isfinite(K).all() or K[0, 0] <= 0 or K[1, 1] <= 0:
            raise ValueError(f"data.fit=camera: camera {name} of {sample.get('scene', 'this source')} has no "
                             "intrinsics (a source without calibration); use data.fit=crop or stretch")
        Kt = np.asarray(camera_K[name], np.float64)
        if not np.isfinite(Kt).all():
            raise ValueError(f"data.fit=camera: the model's camera {name} has no intrinsics to resample to "
                             "(trained on an uncalibrated source); use data.fit=crop or stretch")
        sx, sy = Kt[0, 0] / K[0, 0], Kt[1, 1] / K[1, 1]
        # resize_crop maps a pixel centre u to sx * (u + 0.5) - 0.5 - x0: the principal point lands on Kt's
        x0, y0 = sx * (K[0, 2] + 0.5) - 0.5 - Kt[0, 2], sy * (K[1, 2] + 0.5) - 0.5 - Kt[1, 2]
        if abs(sx * w - W) < 1e-3 and abs(sy * h - H) < 1e-3 and abs(x0) < 1e-3 and abs(y0) < 1e-3:
            sx, sy, x0, y0 = W / w, H / h, 0.0, 0.0  # the model's own camera: the resize exactly (float32 K)
        scales.append((sx, sy))
        offsets.append((x0, y0))
    return scales, offsets


def camera_intrinsics(rig, image_hw: tuple[int, int]) -> dict[str, np.ndarray]:
    """{camera name: K (3, 3)} of a hydranet.rig.Rig's cameras resized to image_hw = (H, W): what
    data.fit=camera resamples a source's camera of that name to."""
    K, _, names = rig.resized(image_hw[1], image_hw[0]).calibration()
    return dict(zip(names, K))


def _haze_transform():
    """Haze as fog looks from a car: the image blended towards a light grey, most at the top rows
    (far away), as a cheap stand-in for albumentations' RandomFog (which draws thousands of
    blurred circles: ~60 ms a 96x160 camera, the loader's largest cost on two cores)."""
    import albumentations as A

    class Haze(A.ImageOnlyTransform):
        def __init__(self, density_range: tuple[float, float] = (0.15, 0.45), p: float = 0.5):
            super().__init__(p=p)
            self.density_range = density_range

        def get_params_dependent_on_data(self, params, data):
            return {"density": self.py_random.uniform(*self.density_range), "grey": self.py_random.uniform(150, 210)}

        def apply(self, img, density: float = 0.3, grey: float = 180.0, **params):
            ramp = np.linspace(1.0, 0.35, img.shape[0], dtype=np.float32)[:, None, None] * density  # (H, 1, 1)
            return np.clip(img * (1 - ramp) + grey * ramp, 0, 255).astype(np.uint8)

    return Haze


def photometric_pipeline(isp: bool = False):
    """Per-camera photometric augmentation (albumentations): lighting, blur, noise, weather, shadows. `isp`: also
    the camera and ISP effects the sim does not render (augment.isp): white balance (a black-body colour
    temperature), hue and saturation, gamma, sharpening, JPEG compression and a downscale-upscale."""
    import albumentations as A  # imported here: the car-side runtime does not need it

    camera = [
        A.PlanckianJitter(mode="blackbody", p=0.4),
        A.HueSaturationValue(hue_shift_limit=8, sat_shift_limit=30, val_shift_limit=0, p=0.4),
        A.RandomGamma(gamma_limit=(75, 135), p=0.4),
        A.Sharpen(alpha=(0.1, 0.4), lightness=(0.9, 1.1), p=0.2),
        A.ImageCompression(quality_range=(30, 90), p=0.4),
        A.Downscale(scale_range=(0.5, 0.9), p=0.2),
    ] if isp else []
    return A.Compose([
        A.RandomBrightnessContrast(brightness_limit=0.25, contrast_limit=0.25, p=0.6),
        *camera[:4],
        A.OneOf([A.GaussianBlur(blur_limit=(3, 5)), A.MotionBlur(blur_limit=(3, 5))], p=0.2),
        A.GaussNoise(std_range=(0.02, 0.06), p=0.2),
        _haze_transform()(p=0.08),
        A.RandomRain(drop_length=8, blur_value=3, brightness_coefficient=0.9, p=0.08),
        A.RandomShadow(p=0.1),
        *camera[4:],  # last, as a camera's encoder: compression and resampling after the scene's light
    ], seed=0)


class Augmenter:
    """Seeded per-camera augmentation: `__call__(sample, key)` with key = (seed, epoch, frame)."""

    def __init__(self, photometric: bool = True, geometric: bool = True, scale_range: tuple[float, float] = (1.0, 1.25),
                 geometric_p: float = 0.5, bev_rotation_deg: float = 0.0, bev_raster_grid: BevGrid | None = None,
                 isp: bool = False, hflip_p: float = 0.0):
        if not 1.0 <= scale_range[0] <= scale_range[1]:
            raise ValueError(f"augment.scale_range must satisfy 1 <= low <= high, got {list(scale_range)}")
        if bev_rotation_deg < 0:
            raise ValueError(f"augment.bev_rotation_deg must be >= 0, got {bev_rotation_deg}")
        self.photometric, self.geometric = photometric, geometric
        self.scale_range, self.geometric_p = scale_range, geometric_p
        self.bev_rotation, self.bev_raster_grid = np.deg2rad(bev_rotation_deg), bev_raster_grid
        if not 0.0 <= hflip_p <= 1.0:
            raise ValueError(f"augment.hflip_p must be a probability in [0, 1], got {hflip_p}")
        self.hflip_p = hflip_p
        self._photo = photometric_pipeline(isp) if photometric else None

    @classmethod
    def from_config(cls, a: AugmentConfig, bev: bool, grid: BevGrid | None = None) -> Augmenter:
        """The augmenter of config section `augment` for a model with BEV heads (`bev`: the BEV rotation on the
        raster `grid`; mirroring only with `hflip_bev`) or without (mirroring, no rotation)."""
        return cls(a.photometric, a.geometric, a.scale_range, a.geometric_p, a.bev_rotation_deg if bev else 0.0,
                   grid if bev else None, a.isp, a.hflip_p if not bev or a.hflip_bev else 0.0)

    @property
    def active(self) -> bool:
        return self.photometric or self.geometric or self.bev_rotation > 0 or self.hflip_p > 0

    def __call__(self, sample: Mapping, key: Sequence[int]) -> dict:
        rng = np.random.default_rng(list(key))
        n = len(sample["camera_names"])
        H, W = sample["images"].shape[1:3]
        out = dict(sample)
        if self.bev_rotation > 0:  # own stream: the same key (all frames of a clip) gives the same yaw
            theta = np.random.default_rng([*key, 0xB0A]).uniform(-self.bev_rotation, self.bev_rotation)
            out = rotate_sample(out, theta, self.bev_raster_grid)
        if self.geometric:
            scales, offsets = [], []
            for _ in range(n):
                s = rng.uniform(*self.scale_range) if rng.random() < self.geometric_p else 1.0
                x0, y0 = rng.uniform(0, W * s - W), rng.uniform(0, H * s - H)
                scales.append((s, s))
                offsets.append((float(np.floor(x0)), float(np.floor(y0))))
            out = resize_crop(out, scales, offsets, (H, W))
        if self.hflip_p > 0:  # own stream: the same key (all frames of a clip) mirrors the same cameras
            out = mirror(out, np.random.default_rng([*key, 0xF11B]).random(n) < self.hflip_p)
        if self._photo is not None:
            imgs = []
            for i in range(n):
                self._photo.set_random_seed(int(rng.integers(2**31 - 1)))
                imgs.append(self._photo(image=np.ascontiguousarray(out["images"][i]))["image"])
            out["images"] = np.stack(imgs)
        return out


class DecodedFrames:
    """Decoded samples at a model's input size, by key, kept in this process while `mb` megabytes have room
    (a loader worker has its own copy): decoding PNG/JPEG is most of a frame's loading cost and small sets
    fit in memory."""

    def __init__(self, mb: int):
        self.entries: dict[int | tuple, list[dict]] = {}
        self.room = int(mb) << 20

    def get(self, key: int | tuple, load: Callable[[], list[dict]]) -> list[dict]:
        """The samples `load()` gives for `key`, kept while there is room."""
        samples = self.entries.get(key)
        if samples is None:
            samples = load()
            size = sum(v.nbytes for s in {id(s): s for s in samples}.values() for v in s.values()
                       if isinstance(v, np.ndarray))
            if size <= self.room:
                self.entries[key] = samples
                self.room -= size
        return samples


class LabelledFrames(torch.utils.data.Dataset):
    """Items are (epoch, i) pairs (see StepBatchSampler) -> {"images": uint8 (N, 3, H, W),
    "intrinsics" (N, 3, 3), "cam2ego" (N, 4, 4), "ego2world" (4, 4), "targets": {task: build_targets}}.
    Without an augmenter, items may be plain indices.

    `clip_length` T > 1 (a model with the video module, docs/bev.md): item i is the clip of T
    frames of one scene ending at dataset frame i (`SimDataset.clip(i, T, pad=True)`: the first
    T-1 frames of a scene repeat the scene's first frame); images (T, N, 3, H, W),
    intrinsics (T, N, 3, 3), cam2ego (T, N, 4, 4), ego2world (T, 4, 4), targets of the last frame.
    Every frame of a clip gets the same augmentation (same crop per camera, same photometrics)."""

    def __init__(self, data: SimDataset, tasks: Mapping[str, Task], image_hw: tuple[int, int],
                 augmenter: Augmenter | None = None, seed: int = 0, clip_length: int = 1, cache_mb: int = 1024,
                 fit: str = "stretch", camera_K: Mapping[str, np.ndarray] | None = None):
        self.data, self.tasks, self.image_hw = data, dict(tasks), tuple(image_hw)
        if fit not in FITS or (fit == "camera" and not camera_K):
            raise ValueError(f"data.fit {fit!r}: give one of {', '.join(FITS)} (camera with the model's camera_K)")
        self.fit, self.camera_K = fit, camera_K  # how a frame reaches image_hw (`fit_to`)
        self.augmenter, self.seed, self.clip_length = augmenter, seed, int(clip_length)
        self.cache = DecodedFrames(cache_mb)  # frames at the model size, by dataset index (whole clips: ("clip", end))
        # every frame ends a clip; the first T-1 of a scene are padded with its first frame (stream
        # starts: the video module is trained on them as it meets them in evaluation and in the car)
        self.ends = data.clip_ends(self.clip_length, pad=True) if self.clip_length > 1 else None

    def __len__(self) -> int:
        return len(self.data) if self.ends is None else len(self.ends)

    def frame_index(self, item: int | tuple[int, int]) -> int:
        """The dataset frame index of an item (the last frame of its clip)."""
        index = item[1] if isinstance(item, tuple) else item
        return int(index) if self.ends is None else self.ends[index]

    def sibling(self, tasks: Mapping[str, Task]) -> LabelledFrames:
        """These frames for other heads, unaugmented single frames (items are frame indices), sharing this
        object's decoded-frame cache: what one of them decoded the other does not decode again."""
        out = LabelledFrames(self.data, tasks, self.image_hw, fit=self.fit, camera_K=self.camera_K, cache_mb=0)
        out.cache = self.cache
        return out

    def prepare(self, item: int | tuple[int, int]) -> dict:
        """The transformed numpy sample (uint8 images (N, H, W, 3), labels updated) of the item's
        (last) frame."""
        epoch, index = item if isinstance(item, tuple) else (0, item)
        sample = self.frame(self.frame_index(index))
        return self.augmenter(sample, (self.seed, epoch, index)) if self.augmenter is not None else sample

    def frame(self, i: int) -> dict:
        """Dataset frame i at the model's input size, from the cache when decoded before."""
        return self.cache.get(i, lambda: [self.fitted(self.data[i])])[0]

    def fitted(self, sample: Mapping) -> dict:
        """A dataset sample at the model's input size (`fit_to` with this dataset's fit)."""
        return fit_to(sample, self.image_hw, self.fit, self.camera_K)

    def prepare_clip(self, item: int | tuple[int, int]) -> list[dict]:
        """The transformed samples of the item's clip, oldest first (one sample without clips). Each frame
        is decoded, checked and resized once and cached, and the clips that hold it share it (a clip's
        padding repeats one sample); a dataset that cannot name a clip's frames without reading them (a
        reader skipping bad frames) has its clips cached whole."""
        epoch, index = item if isinstance(item, tuple) else (0, item)
        if self.ends is None:
            return [self.prepare(item)]
        end = self.ends[index]
        frames = self.data.clip_indices(end, self.clip_length, True)
        if frames is not None:
            got = {i: self.frame(i) for i in dict.fromkeys(frames)}  # padding repeats one frame: read once
            clip = [got[i] for i in frames]
        else:
            def load() -> list[dict]:
                clip = self.data.clip(end, self.clip_length, pad=True)
                resized = {id(s): self.fitted(s) for s in clip}
                return [resized[id(s)] for s in clip]

            clip = self.cache.get(("clip", end), load)
        if self.augmenter is None:
            return list(clip)
        return [self.augmenter(s, (self.seed, epoch, index)) for s in clip]

    def __getitem__(self, item: int | tuple[int, int]) -> dict:
        clip = self.prepare_clip(item)
        supervised = {name: is_supervised(clip[-1], name) for name in self.tasks}
        targets = {name: task.build_targets(clip[-1] if supervised[name] else blank_sample(clip[-1], task))
                   for name, task in self.tasks.items()}
        for s in clip:  # a reader without lens models has pinholes: zero lens rows
            s.setdefault("distortion", np.zeros((len(s["camera_names"]), DISTORTION_WIDTH), np.float32))
        out = {key: np.stack([np.asarray(s[key], dtype) for s in clip])
               for key, dtype in (("images", np.uint8), ("intrinsics", np.float32), ("cam2ego", np.float32),
                                  ("distortion", np.float32), ("ego2world", np.float64))}
        # (T, N, H, W, 3), (T, N, 3, 3), (T, N, 4, 4), (T, N, 6), (T, 4, 4)
        out = {k: torch.from_numpy(np.ascontiguousarray(v if self.ends is not None else v[0])) for k, v in out.items()}
        out["images"] = out["images"].movedim(-1, -3)  # ([T,] N, 3, H, W) uint8
        return {**out, "targets": targets, "supervised": supervised}


def is_supervised(sample: Mapping, objective: str) -> bool:
    """Whether the sample has labels for a head (or an auxiliary objective: LSS depth reads
    "depth"): `sample["supervises"]` names them; a sample without it (the sim) has every label."""
    from hydranet.data.sources import LABELS_OF

    sup = sample.get("supervises")
    return sup is None or LABELS_OF.get(objective, objective) in sup


def blank_sample(sample: Mapping, task: Any) -> dict:
    """The sample with no labels at all and zero dense maps: the shape-keeping stand-in targets
    of a head the sample does not supervise, from every registered head's spec (its label keys and
    `blank`) and the task's own. The loss never reads them (its per-sample
    `supervised` mask drops the sample, hydranet/models/partial.py), nor does a metric."""
    specs = list(dict.fromkeys([*HEADS.values(), *([task.spec] if getattr(task, "spec", None) else [])]))
    per_camera = dict.fromkeys(k for s in specs for k in s.camera_labels)
    out = dict(sample)
    out["labels"] = {"cameras": {n: {k: [] for k in per_camera} for n in sample["camera_names"]},
                     **{k: [] for s in specs for k in s.frame_labels}}
    for s in specs:  # every head's blank dense maps (each head's spec: hydranet/heads/<name>.py)
        out.update(s.blank(sample, task))
    return out


class Collate:
    """Frames -> batch {"images": float ([B, T,] N, 3, H, W) in [0, 1], "intrinsics", "cam2ego",
    "ego2world" stacked over B (when the items have them), "targets": {task: task.collate(...)}}."""

    def __init__(self, tasks: Mapping[str, Task]):
        self.tasks = dict(tasks)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict:
        images = torch.stack([it["images"] for it in items]).float().div_(255.0)  # (B, [T,] N, 3, H, W)
        batch = {"images": images}
        for key in ("intrinsics", "cam2ego", "distortion", "ego2world"):
            if all(key in it for it in items):
                batch[key] = torch.stack([it[key] for it in items])
        batch["targets"] = {n: t.collate([it["targets"][n] for it in items]) for n, t in self.tasks.items()}
        if all("supervised" in it for it in items):  # (B,) bool per head: which frames have its labels
            for n, t in batch["targets"].items():
                t["supervised"] = torch.tensor([bool(it["supervised"][n]) for it in items])
        return batch


class StepBatchSampler(torch.utils.data.Sampler):
    """Batches of (epoch, frame) for global steps start_step .. total_steps-1 of rank `rank` of `world`.

    Epoch e's order is `default_rng([seed, e]).permutation(n)`, padded by wrapping to a multiple of
    world (as DistributedSampler); rank r takes positions r, r + world, ...; the last incomplete
    batch of an epoch is dropped. Step s is batch s % per_epoch of epoch s // per_epoch."""

    def __init__(self, num_frames: int, batch_size: int, seed: int, total_steps: int, start_step: int = 0,
                 rank: int = 0, world: int = 1, repeats: np.ndarray | None = None):
        per_rank = -(-num_frames // world)
        if per_rank < batch_size:
            raise ValueError(f"the training set has {num_frames} frames, {per_rank} per process: fewer than "
                             f"batch_size {batch_size}; generate more frames or lower batch_size")
        # `repeats` (num_frames,) draws of each frame an epoch (`hydranet.class_balance`): the order permutes
        # the draws; a frame's k-th draw of epoch e is item (e * most + k, frame), so each draw has its own
        # augmentation (the item's first element seeds it), and without repeats items stay (e, frame)
        counts = np.ones(num_frames, np.int64) if repeats is None else np.asarray(repeats, np.int64)
        if counts.shape != (num_frames,) or (counts < 1).any():
            raise ValueError(f"repeats must be {num_frames} counts >= 1, got shape {counts.shape}")
        self.frame = np.repeat(np.arange(num_frames), counts)  # draw -> frame
        self.copy = np.arange(len(self.frame)) - np.repeat(np.cumsum(counts) - counts, counts)  # draw -> k
        self.most = int(counts.max())
        self.n, self.batch_size, self.seed = len(self.frame), batch_size, seed
        self.total_steps, self.start_step, self.rank, self.world = total_steps, start_step, rank, world
        self.per_epoch = -(-self.n // world) // batch_size

    def epoch_order(self, epoch: int) -> np.ndarray:
        order = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        total = -(-self.n // self.world) * self.world
        order = np.concatenate([order, order[:total - self.n]]) if total > self.n else order
        return order[self.rank::self.world]

    def batch(self, step: int) -> list[tuple[int, int]]:
        epoch, b = divmod(step, self.per_epoch)
        idx = self.epoch_order(epoch)[b * self.batch_size:(b + 1) * self.batch_size]
        return [(epoch * self.most + int(self.copy[i]), int(self.frame[i])) for i in idx]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for step in range(self.start_step, self.total_steps):
            yield self.batch(step)

    def __len__(self) -> int:
        return max(self.total_steps - self.start_step, 0)


class SourceBatchSampler(torch.utils.data.Sampler):
    """Batches of a mixed run (data.sources): each global step draws one source, source k with
    probability weights[k] / sum(weights), from `default_rng([seed, step, 0x5EC])` (the same on
    every rank), and takes that source's next batch of its own `StepBatchSampler` order over its
    items ranges[k] = (first, end). Every batch comes from one source, so its frames share a camera
    rig; resuming at step s replays the draws of steps < s and continues exactly."""

    def __init__(self, ranges: Sequence[tuple[int, int]], weights: Sequence[float], batch_size: int, seed: int,
                 total_steps: int, start_step: int = 0, rank: int = 0, world: int = 1, repeats: np.ndarray | None = None):
        if len(ranges) != len(weights) or not ranges:
            raise ValueError(f"{len(ranges)} item ranges but {len(weights)} weights")
        w = np.asarray(weights, np.float64)
        if not (w > 0).all():
            raise ValueError(f"source weights must be > 0, got {list(weights)}")
        self.p = w / w.sum()
        self.ranges, self.seed = [tuple(r) for r in ranges], seed
        self.total_steps, self.start_step = total_steps, start_step
        self.samplers = [StepBatchSampler(b - a, batch_size, seed + k, 1 << 62, 0, rank, world,
                                          None if repeats is None else repeats[a:b])
                         for k, (a, b) in enumerate(self.ranges)]

    def source(self, step: int) -> int:
        return int(np.random.default_rng([self.seed, step, 0x5EC]).choice(len(self.p), p=self.p))

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        counts = [0] * len(self.ranges)
        for step in range(self.total_steps):
            k = self.source(step)
            if step >= self.start_step:
                a = self.ranges[k][0]
                yield [(epoch, a + i) for epoch, i in self.samplers[k].batch(counts[k])]
            counts[k] += 1

    def __len__(self) -> int:
        return max(self.total_steps - self.start_step, 0)


def to_device(obj: Any, device: torch.device | str) -> Any:
    """Move tensors inside nested dicts/lists/tuples to `device` (other values unchanged)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, non_blocking=True)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj
