"""The car-side runtime: numpy + onnxruntime (+ OpenCV for resizing), never torch.

    rt = HydraRuntime("model.onnx")            # everything it needs comes from the model's metadata
    res = rt(images)                           # images: N x (H, W, 3) uint8 RGB in rig order (or {name: image})
    res["det2d"][n]["boxes"]                   # camera heads: one result per camera (b*N + n for a batch)
    res["det3d"][0]["boxes"]                   # BEV heads: one result per frame
    res = rt.step(next_images, ego2world=pose) # a model with the video module carries its BEV queue itself
    rt.reset()                                 # a new drive: forget the queue
    front = HydraRuntime("model.onnx", cameras=["CAM_FRONT"])  # the camera heads alone on some of its cameras

The video state is a `hydranet.stream.VideoState` (numpy): `step()` feeds the remembered queue and
the ego motion since the last frame, and stores the new queue; `rt(...)` is `rt.step(...)`.

`cameras=`: the camera heads (per camera: each image's outputs depend on that image alone) on a subset of
the model's cameras, e.g. a six-camera HydraNet on a one-camera dashcam, without re-exporting. The graph still
runs its N camera slots (the other slots get a copy of the first given image, their outputs dropped), so it
costs what the whole model costs; `hydranet export --cameras` writes the graph of the subset alone. The BEV
heads, which read every camera, are not run: `skipped_heads` names them and `subset_line()` says why.

Decoding is `hydranet.decoding` (numpy), the same code the torch tasks' `decode` runs, driven by
the per-head "decoding" entry of the metadata. A head without a numpy decoder gives its raw
outputs per item. Bad input (wrong camera count, size or dtype; a model without the metadata, whose
metadata lists no heads or whose image size is not its graph's; a corrupt or truncated file) raises
`DeployError`, a one-line ValueError naming what was expected, at load where the file is at fault.
Outputs holding NaN or Inf (a broken model) are never decoded: `run` raises `NonFiniteOutput`, a
DeployError naming the output and the camera (and batch item), before the video state takes them in.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from deploy.metadata import MetadataError, ModelRig, check_graph, decode_props
from hydranet import decoding
from hydranet.geometry import fit_window, warp_affine, window_affine
from hydranet.stream import VideoState


class DeployError(ValueError):
    """A model file or an input the runtime cannot use; the message says what was expected."""


class NonFiniteOutput(DeployError):
    """A graph output holding NaN or Inf. `output`: its name; `value`: "NaN" or "Inf"; `camera`: the
    camera of the first bad item (None for a BEV or state output); `item`: that frame's index in the batch."""

    def __init__(self, message: str, output: str, value: str, camera: str | None, item: int):
        super().__init__(message)
        self.output, self.value, self.camera, self.item = output, value, camera, item


def load_session(path: str | Path, providers: Sequence[str] | None = None, threads: int | None = None,
                 optimization: str = "all", spinning: bool = False) -> ort.InferenceSession:
    """An ORT session, or DeployError for a missing / corrupt / truncated file. `spinning`: ORT's intra-op
    workers busy-wait for work after each run (ORT's default). Off here: on a small, shared CPU the spinning
    workers take the cores from the numpy decoding that follows each run and from the next run itself
    (docs/benchmarks.md, "Runtime pre/post-processing": on 2 cores inference 1.6-2.9x faster without it)."""
    path = Path(path)
    if not path.is_file():
        raise DeployError(f"model file {path} does not exist; export one with `hydranet export --checkpoint C --out {path}`")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if threads:
        so.intra_op_num_threads = threads
    so.graph_optimization_level = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                   "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                   "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}[optimization]
    try:
        return ort.InferenceSession(str(path), so, providers=list(providers or ["CPUExecutionProvider"]))
    except Exception as e:  # onnxruntime raises its own pybind exception types
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise DeployError(f"{path} is not a readable ONNX model (truncated or corrupt?): {first}; "
                          "re-export it with `hydranet export`") from None


def model_metadata(session: ort.InferenceSession, where: str) -> dict[str, Any]:
    """The checked HydraNet metadata of a session (deploy/metadata.py), consistent with its graph."""
    try:
        md = decode_props(session.get_modelmeta().custom_metadata_map, where)
        check_graph(md, [i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()], where,
                    {i.name: i.shape for i in session.get_inputs()})
    except MetadataError as e:
        raise DeployError(str(e)) from None
    return md


class HydraRuntime:
    """One exported HydraNet: preprocess -> ONNX Runtime -> numpy decoding of every head.

    `timings` holds the last call's seconds for "preprocess", "inference" and "postprocess". `cameras`: run
    the camera heads alone on these of the model's cameras (module docstring)."""

    def __init__(self, model_path: str | Path, providers: Sequence[str] | None = None, threads: int | None = None,
                 optimization: str = "all", spinning: bool = False, cameras: Sequence[str] | None = None):
        self.path = Path(model_path)
        self.session = load_session(self.path, providers, threads, optimization, spinning)
        self.meta = model_metadata(self.session, str(self.path))
        self.rig = ModelRig.from_metadata(self.meta, str(self.path))  # checked by model_metadata
        self.camera_names: list[str] = list(self.rig.names)
        self.image_size: tuple[int, int] = self.rig.image_size
        self.source_sizes = list(self.rig.source_sizes)
        self.checked_sizes: dict[str, tuple[int, int]] = {}  # allow_sizes: a fleet's sizes checked to be this calibration
        self.any_size = False  # allow_sizes(any_size=True): every size resized (a model that runs no view transform)
        # how an image of another size reaches the input, as training did (data.fit; hydranet.geometry.fit_window): crop
        # keeps the aspect; under "camera" the runtime takes the model's own cameras, where it is the stretch
        self.fit = (self.meta.get("config") or {}).get("data", {}).get("fit", "stretch")
        self.input_dtype = self.meta["normalization"]["input_dtype"]
        self.heads: dict[str, dict] = self.meta["heads"]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.input_names = [i.name for i in self.session.get_inputs()]
        bev = self.meta.get("bev") or {}
        self.state_spec = bev.get("state")
        self.graph_state = self.state_spec  # the graph's video inputs (fed even when its BEV heads are not run)
        self.batch_fixed = None if self.meta.get("dynamic_batch") else int(self.meta["inputs"]["images"]["shape"][0])
        self.video = VideoState()
        self.timings: dict[str, float] = {}
        self.graph_cameras: list[str] = list(self.camera_names)
        self.slots: np.ndarray | None = None  # (k,) graph slot of each camera run; None: every camera, in order
        self.skipped_heads: list[str] = []
        if cameras is not None:
            self._narrow([cameras] if isinstance(cameras, str) else list(cameras))  # one name or several

    def _narrow(self, cameras: list[str]) -> None:
        """Run the camera heads alone on `cameras` (see the module docstring); every camera in another order runs
        every head, the camera heads' results in that order."""
        names = self.graph_cameras
        unknown = [c for c in cameras if c not in names]
        if unknown or not cameras or len(set(cameras)) != len(cameras):
            raise DeployError(f"{self.path}: cameras {cameras}: give distinct cameras of the model ({', '.join(names)})"
                              + (f"; it has no camera {unknown[0]!r}" if unknown else ""))
        space = {o: (self.meta["outputs"].get(o) or {}).get("space") for o in self.output_names}
        self._image_outputs = {o for o, sp in space.items() if sp == "image"}
        if len(cameras) == len(names):  # all of them: each image to its own slot, nothing left out
            if cameras != names:
                self.slots = np.array([names.index(c) for c in cameras])
                self._fill = np.array([cameras.index(n) for n in names])
                self.rig = self.rig.select(cameras)
                self.camera_names, self.source_sizes = list(cameras), list(self.rig.source_sizes)
            return
        per_camera = {n: h for n, h in self.heads.items() if all(space[o] == "image" for o in h["outputs"])}
        if not per_camera:
            raise DeployError(f"{self.path}: its heads ({', '.join(self.heads)}) read every camera of its rig "
                              f"({', '.join(names)}) and it has no camera head to run on {', '.join(cameras)} alone")
        self.skipped_heads = [n for n in self.heads if n not in per_camera]
        self.heads = per_camera
        self.slots = np.array([names.index(c) for c in cameras])
        self._fill = np.array([cameras.index(n) if n in cameras else 0 for n in names])  # (N,) image given to each slot
        self.output_names = [o for o in self.output_names if space[o] == "image"]
        self.state_spec = None  # no BEV head runs: nothing to remember
        self.rig = self.rig.select(cameras)
        self.camera_names, self.source_sizes = list(cameras), list(self.rig.source_sizes)

    @property
    def runs_bev(self) -> bool:
        """Whether a view transform into BEV (bound to the cameras' calibration) runs: metadata "bev", all cameras."""
        return bool(self.meta.get("bev")) and len(self.camera_names) == len(self.graph_cameras)

    def subset_line(self) -> str:
        """One line: which heads a camera subset leaves out and what they need ('' when none is left out)."""
        from hydranet.rig import camera_subset_line

        return camera_subset_line(str(self.path), self.skipped_heads, self.graph_cameras, list(self.heads),
                                  self.camera_names)

    # -- input ----------------------------------------------------------------------------------
    @property
    def num_cameras(self) -> int:
        return len(self.camera_names)

    def allow_sizes(self, sizes: dict[str, tuple[int, int]], any_size: bool = False) -> None:
        """Also take these (H, W) camera sizes, resized to the model's input: sizes the caller has checked to be
        this model's calibration at another resolution; data_engine.fleet.Fleet.check_rig does that for shadow mode.
        `any_size`: every size, resized (for a run without a BEV view transform, whose camera heads read each image
        alone: a recording whose frames differ in size, as KITTI's do; refused when the view transform runs)."""
        if any_size and self.runs_bev:
            raise DeployError(f"{self.path}: its BEV view transform is bound to its cameras' calibration; it cannot take "
                              "images of any size")
        if any_size and self.fit == "camera":
            raise DeployError(f"{self.path}: trained with data.fit=camera (each frame resampled to the model's camera by its "
                              "own intrinsics), which the runtime cannot do for images of any size; export a model "
                              "trained with data.fit crop or stretch")
        self.checked_sizes = {str(k): (int(v[0]), int(v[1])) for k, v in sizes.items()}
        self.any_size = any_size

    def _expect(self) -> str:
        H, W = self.image_size
        return (f"{self.num_cameras} camera image(s) ({', '.join(self.camera_names)}) as (H, W, 3) uint8 RGB of size "
                f"{W}x{H} (the model size) or each camera's own size")

    def _camera(self, img: Any, n: int) -> np.ndarray:
        import cv2

        img = np.asarray(img)
        name = self.camera_names[n]
        if img.ndim != 3 or img.shape[2] != 3:
            raise DeployError(f"camera {name}: image has shape {img.shape}; the model expects {self._expect()}")
        if img.dtype != np.uint8:
            raise DeployError(f"camera {name}: image is {img.dtype}; the model expects {self._expect()}")
        H, W = self.image_size
        if img.shape[:2] == (H, W):
            return img
        if self.any_size or img.shape[:2] in (self.source_sizes[n], self.checked_sizes.get(name)):
            h, w = img.shape[:2]
            sx, sy, x0, y0 = fit_window(w, h, W, H, self.fit)
            if x0 == y0 == 0 and min(sx, sy) >= 0.5:  # the stretch (or a crop of the same aspect), no large shrink
                return cv2.resize(img, (W, H), interpolation=cv2.INTER_LINEAR)
            return warp_affine(img, window_affine(sx, sy, x0, y0), (H, W), linear=True)  # as hydranet.loader.resize_crop
        sh, sw = self.source_sizes[n]
        raise DeployError(f"camera {name}: image is {img.shape[1]}x{img.shape[0]}; the model takes {W}x{H} or the "
                          f"camera's calibrated {sw}x{sh} (resized here); other sizes would break the calibration")

    def preprocess(self, images: Any) -> np.ndarray:
        """Frames -> the `images` input (B, N, 3, H, W). `images`: N images (list or (N, H, W, 3)),
        a dict {camera name: image}, or a batch (B, N, H, W, 3)."""
        if isinstance(images, Mapping):
            unknown = [k for k in images if k not in self.camera_names]
            missing = [k for k in self.camera_names if k not in images]
            if unknown or missing:
                raise DeployError(f"camera images keyed {sorted(images)}; the model expects exactly {self.camera_names}")
            images = [images[k] for k in self.camera_names]
        if isinstance(images, np.ndarray) and images.ndim == 5:
            frames = [list(f) for f in images]
        else:
            frames = [list(images)]
        out = []
        for cams in frames:
            if len(cams) != self.num_cameras:
                raise DeployError(f"got {len(cams)} camera image(s); the model expects {self._expect()}")
            out.append(np.stack([self._camera(c, n) for n, c in enumerate(cams)]))
        x = np.ascontiguousarray(np.stack(out).transpose(0, 1, 4, 2, 3))  # (B, N, 3, H, W)
        if self.batch_fixed is not None and x.shape[0] != self.batch_fixed:
            raise DeployError(f"got a batch of {x.shape[0]} frame(s); this model was exported for batch {self.batch_fixed} "
                              "(export with --dynamic-batch for other sizes)")
        return x if self.input_dtype == "uint8" else x.astype(np.float32) / np.float32(255.0)

    # -- run ------------------------------------------------------------------------------------
    def feeds(self, images: np.ndarray, prev_bev: np.ndarray | None = None,
              ego_motion: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Graph inputs for preprocessed `images` (B, N, 3, H, W); a video model also gets the queue
        `prev_bev` (zeros, a stream start, when None) and `ego_motion` (identity when None)."""
        if self.slots is not None:
            images = images[:, self._fill]  # (B, k, ...) -> the graph's (B, N, ...) slots
        feeds = {"images": images}
        spec = self.graph_state
        if spec:
            B = images.shape[0]
            if prev_bev is None or prev_bev.shape[0] != B:
                prev_bev = np.zeros((B, *self.meta["inputs"]["prev_bev"]["shape"][1:]), np.float32)
                ego_motion = None
            motion = np.eye(4, dtype=np.float32) if ego_motion is None else np.asarray(ego_motion, np.float32)
            feeds[spec["input"]] = np.ascontiguousarray(prev_bev, np.float32)
            feeds[spec["motion"]] = np.ascontiguousarray(np.broadcast_to(motion.reshape(-1, 4, 4), (B, 4, 4)),
                                                                    np.float32)
        return feeds

    def state_output(self, raw: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """The new BEV queue among a run's raw outputs (None without the video module)."""
        return raw[self.state_spec["output"]] if self.state_spec else None

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Raw outputs {name: array} of the graph; `NonFiniteOutput` when one holds NaN or Inf."""
        raw = dict(zip(self.output_names, self.session.run(self.output_names, dict(feeds))))
        if self.slots is not None:  # image-space rows b*N + n -> b*k + i of the cameras run, in their order
            N = len(self.graph_cameras)
            raw = {o: a.reshape(-1, N, *a.shape[1:])[:, self.slots].reshape(-1, *a.shape[1:])
                   if o in self._image_outputs else a for o, a in raw.items()}
        self.check_finite(raw)
        return raw

    def check_finite(self, raw: Mapping[str, np.ndarray]) -> None:
        """`NonFiniteOutput` naming the first output holding NaN or Inf, its camera and batch item (an
        image-space output's row b*N + n is camera n of frame b); one `np.isfinite` pass per output."""
        bad = decoding.first_non_finite(raw)
        if bad is None:
            return
        name, what, row = bad
        if (self.meta["outputs"].get(name) or {}).get("space") == "image":
            item, n = divmod(row, self.num_cameras)
            camera: str | None = self.camera_names[n]
            where = f"camera {camera}" + (f" of batch frame {item}" if self.batch_fixed != 1 else "")
        else:
            item, camera, where = row, None, f"batch frame {row}"
        raise NonFiniteOutput(f"{self.path}: output {name} is non-finite ({what} at {where}): the model is broken (a "
                              "NaN or Inf weight, or an overflow) and its results are not decoded; export it again "
                              "from a good checkpoint", name, what, camera, item)

    def decode(self, raw: Mapping[str, np.ndarray], checked: bool = False) -> dict[str, list]:
        """Every head's decoded results (camera heads: B*N items, index b*N + n; BEV heads: B items).
        Outputs holding NaN or Inf raise `NonFiniteOutput`; `checked`: `raw` is what `run` returned
        (already checked: not scanned a second time)."""
        out = {}
        for name, head in self.heads.items():
            arrays = {o.split(".", 1)[1]: raw[o] for o in head["outputs"]}
            spec = head.get("decoding")
            if spec is None:
                n = len(next(iter(arrays.values())))
                out[name] = [{k: v[i] for k, v in arrays.items()} for i in range(n)]
                continue
            try:
                out[name] = decoding.decode(spec["kind"], arrays, spec["params"], checked)
            except decoding.NonFiniteError:  # outputs that did not come from `run` (e.g. a TensorRT engine)
                self.check_finite({o: raw[o] for o in head["outputs"]})
                raise
        return out

    def reset(self) -> None:
        """Forget the video state (a new drive, or a jump in time)."""
        self.video.reset()

    def step(self, images: Any, ego2world: np.ndarray | None = None, ego_motion: np.ndarray | None = None) -> dict[str, list]:
        """Preprocess, run, decode one frame of a stream. With the video module pass `ego2world`
        (4, 4) of every frame (or `ego_motion` prev->cur) so the remembered BEV features are
        aligned; the first frame after `reset()` starts from an empty queue."""
        t0 = time.perf_counter()
        x = self.preprocess(images)
        prev_bev = None
        if self.state_spec:
            try:
                prev_bev, ego_motion = self.video.inputs(ego2world, ego_motion=ego_motion)
            except ValueError as e:
                raise DeployError(str(e)) from None
        feeds = self.feeds(x, prev_bev, ego_motion)
        t1 = time.perf_counter()
        raw = self.run(feeds)
        t2 = time.perf_counter()
        if self.state_spec:
            self.video.update(self.state_output(raw), ego2world)
        results = self.decode(raw, checked=True)
        t3 = time.perf_counter()
        self.timings = {"preprocess": t1 - t0, "inference": t2 - t1, "postprocess": t3 - t2}
        return results

    __call__ = step
