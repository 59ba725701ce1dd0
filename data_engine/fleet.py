"""A simulated fleet: many sim clips with conditions and rare scenarios at low, realistic rates.

    hydranet engine fleet --out DIR --clips N --seed S [--config configs/fleet.yaml]

Each clip's conditions (time of day, weather) and rare scenario are drawn here from a seeded RNG
with the rates of `FleetConfig` and handed to the sim as a one-clip `SimConfig` (one-hot condition
weights, probability 1 for the drawn rare scenario, 0 for the others), so the sim renders exactly
what was drawn. The clips are written by the sim's own writer (docs/dataset_format.md, one scene
per clip), except that scene.json withholds the conditions: the tags go to DIR/truth/scenarios.json,
which only benchmarks and reports read (data_engine/truth.py); the miner never opens it.

Reading (`Fleet`, `read_frame`) is numpy + OpenCV only: the shadow path imports neither torch nor
the sim's renderer. A missing or undecodable image makes the frame "corrupt" (recorded, skipped).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from hydranet.data.image import ImageError, read_rgb
from hydranet.data.reader import DatasetError
from hydranet.data.recording import RECORDED_FILE, Recording
from hydranet.io import frame_path
from hydranet.rig import RigError, camera_sizes, rig_from_dict
from sim.config import RareConfig, SimConfig, _need, _weights

if TYPE_CHECKING:
    from deploy.metadata import ModelRig

TRUTH_FILE = "truth/scenarios.json"
CALIB_TOLERANCE = (1.0, 0.02, 0.2)  # a BEV model's camera vs the fleet's: px (at the model's size), m, degrees
RARE_SCENARIOS = tuple(f.name for f in dataclasses.fields(RareConfig))


class FleetError(ValueError):
    """A fleet folder that cannot be read; one line naming the file and what to do."""


def _fleet_rare() -> RareConfig:
    return RareConfig(cones_on_road=0.03, debris_on_road=0.03, night_pedestrian_crossing=0.02, unusual_vehicle=0.03)


@dataclass(frozen=True)
class FleetConfig:
    """Rates of a fleet's clips; `sim` is the base config of every clip (its own conditions
    weights and rare probabilities are replaced per clip by what the fleet draws)."""

    sim: SimConfig = field(default_factory=lambda: SimConfig(image_width=160, image_height=96, frames_per_scene=4,
                                                             frame_rate_hz=2.0))
    time_of_day: tuple[str, ...] = ("day", "dusk", "night")
    time_of_day_weights: tuple[float, ...] = (0.75, 0.10, 0.15)
    weather: tuple[str, ...] = ("clear", "rain", "fog")
    weather_weights: tuple[float, ...] = (0.8, 0.1, 0.1)
    rare: RareConfig = field(default_factory=_fleet_rare)  # probability per clip of each rare scenario
    max_rare_per_clip: int = 1

    def __post_init__(self):
        _weights(self.time_of_day, self.time_of_day_weights, "fleet.time_of_day_weights")
        _weights(self.weather, self.weather_weights, "fleet.weather_weights")
        _need(self.max_rare_per_clip >= 1, "max_rare_per_clip", self.max_rare_per_clip, "give at least 1")


def clip_seed(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([seed, index, 0xF1EE7]).generate_state(1)[0])


def draw_clip(cfg: FleetConfig, seed: int, index: int) -> dict:
    """The conditions of clip `index`: {"time_of_day", "weather", "rare": [...]} (seeded, independent per clip)."""
    rng = np.random.default_rng(clip_seed(seed, index))
    tw, ww = np.asarray(cfg.time_of_day_weights), np.asarray(cfg.weather_weights)
    tod = str(rng.choice(cfg.time_of_day, p=tw / tw.sum()))
    weather = str(rng.choice(cfg.weather, p=ww / ww.sum()))
    rare = [n for n in RARE_SCENARIOS if rng.random() < getattr(cfg.rare, n)]
    if len(rare) > cfg.max_rare_per_clip:
        rare = sorted(rng.choice(rare, cfg.max_rare_per_clip, replace=False).tolist())
    if "night_pedestrian_crossing" in rare:
        tod = "night"
    return {"time_of_day": tod, "weather": weather, "rare": rare}


def clip_config(cfg: FleetConfig, drawn: dict) -> SimConfig:
    """The one-clip SimConfig that renders exactly the drawn conditions."""
    cond = dataclasses.replace(cfg.sim.conditions, time_of_day=(drawn["time_of_day"],), time_of_day_weights=(1.0,),
                               weather=(drawn["weather"],), weather_weights=(1.0,))
    rare = RareConfig(**{n: float(n in drawn["rare"]) for n in RARE_SCENARIOS})
    return dataclasses.replace(cfg.sim, conditions=cond, rare=rare)


def generate_fleet(out: str | Path, cfg: FleetConfig, clips: int, seed: int, progress: bool = True,
                   workers: int = 1) -> Path:
    """Render `clips` clips into `out` (atomically, the sim's dataset format) and their tags into
    out/truth/scenarios.json. `workers` > 1: clips rendered by that many processes, the output
    byte-identical to one (`sim.generate.render_scenes`)."""
    from tqdm import tqdm

    from sim.generate import SceneTask, check_workers, dataset_meta, render_scenes, scene_seed, sim_rig
    from sim.writer import DatasetWriter, to_json

    if clips < 1:
        raise ValueError(f"--clips must be at least 1, got {clips}")
    workers = check_workers(workers)
    rig = sim_rig(cfg.sim)
    meta = dataset_meta(cfg.sim, rig, seed)
    tasks = [SceneTask(f"clip_{i:05d}", scene_seed(seed, i), clip_config(cfg, draw_clip(cfg, seed, i)), TRUTH_FILE)
             for i in range(clips)]
    with DatasetWriter(out, meta) as writer, tqdm(total=clips * cfg.sim.frames_per_scene, desc="engine fleet",
                                                  unit="frame", disable=not progress) as bar:
        got = render_scenes(writer, tasks, rig, workers, bar)
        truth = {t.name: g for t, g in zip(tasks, got)}
        (writer.tmp / "truth").mkdir()
        (writer.tmp / TRUTH_FILE).write_text(to_json({"seed": seed, "clips": truth,
                                                      "fleet_config": dataclasses.asdict(cfg)}))
    return Path(out)


# -- reading (torch-free, renderer-free) ------------------------------------------------------------
@dataclass
class Clip:
    name: str
    frames: list[dict]  # {"index", "dir", "timestamp_us", "ego2world" (4, 4) or None}


class Fleet:
    """A fleet folder: a hydranet-sim dataset (`hydranet engine fleet`, `sim generate`) or a recorded fleet
    (`hydranet engine ingest`: FLEET/fleet.json); its rig, clips and frames, never its tags."""

    calibrated = True  # a recorded fleet of a source without calibration (BDD100K) says False

    def __new__(cls, root: str | Path):
        if cls is Fleet and (Path(root) / RECORDED_FILE).is_file():
            return super().__new__(RecordedFleet)
        return super().__new__(cls)

    def __init__(self, root: str | Path):
        self.root = Path(root)
        path = self.root / "dataset.json"
        if not self.root.is_dir():
            raise FleetError(f"fleet {self.root} does not exist; generate one with `hydranet engine fleet --out {self.root}` "
                             f"or ingest recordings with `hydranet engine ingest --out {self.root}`")
        try:
            meta = json.loads(path.read_text())
        except FileNotFoundError:
            raise FleetError(f"{path} is missing: {self.root} is not a fleet; generate one with `hydranet engine fleet` or "
                             "ingest recordings with `hydranet engine ingest`") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise FleetError(f"{path} is not valid JSON ({e}); regenerate the fleet") from None
        if not isinstance(meta, dict) or meta.get("format") != "hydranet-sim" or not isinstance(meta.get("scenes"), list):
            raise FleetError(f"{path} is not a hydranet-sim dataset (format {meta.get('format') if isinstance(meta, dict) else None!r});"
                             " give a folder written by `hydranet engine fleet`")
        self.meta = meta
        try:
            sizes = camera_sizes(meta.get("rig"), f"{path} rig")  # {name: (width, height)} in rig order
        except RigError as e:
            raise FleetError(f"{e}; regenerate the fleet") from None
        self.rig_name = str(meta["rig"].get("name", "?"))
        self.cameras = {name: (h, w) for name, (w, h) in sizes.items()}
        self.clip_names = [s.get("name") if isinstance(s, dict) else None for s in meta["scenes"]]
        for i, name in enumerate(self.clip_names):  # a clip named '../../x' must never be read
            frame_path(self.root, name, where=f"{path}: key 'scenes[{i}].name'", error=FleetError)

    def clip(self, name: str) -> Clip:
        path = frame_path(self.root, name, file="scene.json", where=f"fleet {self.root} clip {name!r}", error=FleetError)
        try:
            scene = json.loads(path.read_text())
            frames = [{"index": int(f["index"]), "dir": str(f["dir"]), "timestamp_us": int(f["timestamp_us"]),
                       "ego2world": None if f.get("ego2world") is None else np.asarray(f["ego2world"], np.float64)}
                      for f in scene["frames"]]
        except FileNotFoundError:
            raise FleetError(f"{path} is missing; regenerate the fleet") from None
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as e:
            raise FleetError(f"{path} is unreadable ({type(e).__name__}: {e}); regenerate the fleet") from None
        for f in frames:
            frame_path(self.root, name, f["dir"], where=f"{path}: frame {f['index']}", error=FleetError)
        return Clip(name, sorted(frames, key=lambda f: f["index"]))

    @property
    def rig(self):
        """The fleet's Rig (cameras with K, camera-to-ego pose and size)."""
        if getattr(self, "_rig", None) is None:
            try:
                self._rig = rig_from_dict(self.meta.get("rig"), f"{self.root / 'dataset.json'} rig")
            except (RigError, ValueError, TypeError, KeyError) as e:
                raise FleetError(f"{self.root / 'dataset.json'}: bad rig ({e}); regenerate the fleet") from None
        return self._rig

    def check_rig(self, model_rig: ModelRig, model: str, bev: bool) -> None:
        """FleetError unless every camera of the model (`model_rig`: `HydraRuntime.rig`) is in this fleet and, for a
        BEV model (its view transform is bound to its calibration), each camera's calibration is the model's:
        intrinsics equal once scaled to the model's input size (the same rig recorded at another resolution is the
        same calibration), the camera-to-ego pose within CALIB_TOLERANCE. A camera-only model takes any resolution
        (resized by name)."""
        missing = [n for n in model_rig.names if n not in self.cameras]
        if missing:
            raise FleetError(f"fleet {self.root} (rig {self.rig_name}, cameras {sorted(self.cameras)}) lacks camera "
                             f"{missing[0]} of model {model}; run the model on a fleet of its own rig")
        if not bev:
            return
        if not self.calibrated:
            raise FleetError(f"fleet {self.root} has no camera calibration (its source records none, e.g. BDD100K); BEV "
                             f"model {model} needs it: run a camera-only model on this fleet")
        cams = {c.name: c for c in self.rig.cameras}
        fix = "run it on a fleet of its own rig, or train a model on this rig's calibration"
        for m in model_rig.cameras:
            W, H, n = m.width, m.height, m.name
            c = cams[n]
            K = c.scaled(W, H).K  # the fleet's K at the model's size, as the model's own was resized (pixel centres kept)
            dk = float(np.abs(K - m.K).max())
            dt = float(np.linalg.norm(np.asarray(c.cam2ego)[:3, 3] - m.cam2ego[:3, 3]))
            cos = (np.trace(np.asarray(c.cam2ego)[:3, :3].T @ m.cam2ego[:3, :3]) - 1) / 2
            da = float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))
            tol_px, tol_m, tol_deg = CALIB_TOLERANCE
            if dk > tol_px:
                raise FleetError(f"fleet {self.root} camera {n}: intrinsics differ from model {model}'s by {dk:.2f} px at its "
                                 f"{W}x{H} input (fx {K[0, 0]:.1f} vs {m.K[0, 0]:.1f}; tolerance {tol_px} px): another "
                                 f"calibration, and a BEV model's view transform is bound to its own; {fix}")
            if dt > tol_m or da > tol_deg:
                raise FleetError(f"fleet {self.root} camera {n}: mounted {dt * 100:.1f} cm and {da:.2f} deg away from model "
                                 f"{model}'s (tolerance {tol_m * 100:.0f} cm, {tol_deg} deg): another calibration; {fix}")

    def read(self, clip: str, frame_dir: str, cameras: list[str]) -> list[np.ndarray]:
        return read_frame(self.root, clip, frame_dir, cameras)


class RecordedFleet(Recording, Fleet):
    """FLEET/fleet.json as a fleet of the engine (`hydranet.data.recording.Recording`: the file's checks and the
    frames read in place), with the clip tags and the source's own labels the engine's suites and stand-in
    oracle read."""

    def __init__(self, root: str | Path):
        Recording.__init__(self, root, FleetError)

    def clip(self, name: str) -> Clip:
        return Clip(name, self.clip_frames(name))

    def tags(self, name: str) -> list[str]:
        """The clip's tags (scene description, location, folder): for suites, reports and benchmarks only."""
        return [str(t) for t in self._clips[name].get("tags", [])]

    def reader(self, channels: tuple[str, ...]):
        """The source dataset's reader loading `channels` (built once per process and fleet source)."""
        key = (str(self.source_root), json.dumps(self.source, sort_keys=True), channels)
        if key not in _READERS:
            from hydranet.data.formats import open_dataset

            s = self.source
            _READERS[key] = open_dataset(self.source_root, s.get("format"), s.get("split"), s.get("version"),
                                         channels=channels, sweeps=int(s.get("sweeps") or 0))
        return _READERS[key]

    def _dataset_images(self, sample: int, cameras: list[str]) -> list[np.ndarray]:
        """The reader's decoded images of sample `sample`, in `cameras` order."""
        ds = self.reader(("images",))
        try:
            images = ds.load(int(sample))["images"]  # (N, H, W, 3) in the reader's camera order
        except DatasetError as e:
            raise ValueError(str(e)) from None
        names = ds.rig.names
        return [np.asarray(images[names.index(c)]) for c in cameras]

    def sample(self, clip: str, frame_dir: str) -> dict[str, Any]:
        """The source reader's sample of a frame with its labels and calibration, no image (a dataset fleet only)."""
        try:
            return self.reader(()).load(int(self.frame_refs(clip, frame_dir)["sample"]))
        except DatasetError as e:
            raise ValueError(str(e)) from None


    def truth(self, clip: str, frame_dir: str) -> dict[str, Any] | None:
        """The source's own annotations of a frame (`truth_of` its reader sample), or None where the source has none
        (videos, image sequences). For evaluation, suites and the stand-in oracle of benchmarks only: the miner never
        reads it (docs/data_engine.md, withheld truth)."""
        return truth_of(self.sample(clip, frame_dir)) if self.kind == "dataset" else None


def truth_of(sample: Mapping[str, Any]) -> dict[str, Any] | None:
    """A reader sample's labels as a labels.json payload plus "supervises": the heads those boxes and lanes supervise
    (the reader's, less those read from dense label files, which a fleet does not carry); None when it supervises
    nothing (nuScenes' unlabelled sweeps). A box whose velocity the dataset leaves unknown (NaN: a nuScenes box
    annotated once) has no velocity and says so in `attributes.velocity_unknown` (labels.json holds finite numbers;
    det3d gives such a box no velocity loss)."""
    from hydranet.heads import HEADS

    heads = sorted(h for h in sample.get("supervises") or () if h in HEADS and not HEADS[h].channels)
    if not heads:
        return None
    labels = json.loads(json.dumps(sample["labels"]))
    for b in labels.get("boxes3d") or []:
        if "velocity" in b and not np.all(np.isfinite(np.asarray(b["velocity"], np.float64))):
            del b["velocity"]
            b["attributes"] = {**(b.get("attributes") or {}), "velocity_unknown": True}
    return {**labels, "supervises": heads}


def read_frame(root: Path, clip: str, frame_dir: str, cameras: list[str]) -> list[np.ndarray]:
    """N (H, W, 3) uint8 RGB images of one frame; ValueError naming the file when one is missing or not a whole
    image (hydranet.data.image's policy: the one training and evaluation use)."""
    if (Path(root) / RECORDED_FILE).is_file():
        return recorded_fleet(root).read(clip, frame_dir, cameras)
    out = []
    for cam in cameras:
        path = frame_path(root, clip, frame_dir, f"{cam}.jpg", where=f"fleet {root}")
        try:
            out.append(read_rgb(path))
        except OSError as e:
            raise ValueError(f"{path}: {e.strerror or e}") from None
        except ImageError as e:
            raise ValueError(f"{path}: image {e}") from None
    return out


_RECORDED: dict[str, RecordedFleet] = {}  # per process: recorded fleets opened by read_frame


_READERS: dict = {}  # per process: the dataset readers of recorded fleets


def recorded_fleet(root) -> RecordedFleet:
    """The RecordedFleet at `root`, opened once per process (shadow, labelling and retrain read many frames)."""
    key = str(Path(root).resolve())
    if key not in _RECORDED:
        _RECORDED[key] = RecordedFleet(root)
    return _RECORDED[key]


def frame_image(root: str | Path, clip: str, frame_dir: str, camera: str) -> tuple[bytes, str]:
    """(bytes, suffix) of one camera image of a frame, as a labelling tool receives it: the file itself where the
    fleet has one (sim fleets, image sequences; after the one decoder's check), else the decoded frame encoded as
    PNG (videos, dataset readers: lossless and deterministic, so a resend is bit-identical)."""
    import cv2

    from hydranet.data.image import ImageError, decode_bytes

    if (Path(root) / RECORDED_FILE).is_file():
        fl = recorded_fleet(root)
        ref = fl.frame_refs(clip, frame_dir).get(camera)
        if fl.kind == "images" and ref is not None:
            path = fl.source_file(ref["file"], f"fleet {root} clip {clip} frame {frame_dir} camera {camera}")
        else:
            rgb = fl.read(clip, frame_dir, [camera])[0]
            ok, png = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
            return png.tobytes(), ".png"
    else:
        path = frame_path(root, clip, frame_dir, f"{camera}.jpg", where=f"fleet {root}")
    try:
        data = path.read_bytes()
        decode_bytes(data, path)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror or e}") from None
    except ImageError as e:
        raise ValueError(f"{path}: image {e}") from None
    return data, path.suffix.lower()


def image_suffix(root: str | Path, clip: str, frame_dir: str, camera: str) -> str:
    """The suffix `frame_image` gives that image (".jpg" or ".png"), without reading it."""
    if not (Path(root) / RECORDED_FILE).is_file():
        return ".jpg"
    fl = recorded_fleet(root)
    ref = fl.frame_refs(clip, frame_dir).get(camera)
    return Path(ref["file"]).suffix.lower() if fl.kind == "images" and ref is not None else ".png"
