"""The experiment config: what `hydranet train` reads (configs/*.yaml), as frozen dataclasses,
and the checks across its sections (docs: configs/tiny.yaml is the annotated example).

    cfg = load_experiment("configs/tiny.yaml", ["optim.lr=1e-3"])

`data.image_size` is the one place the model's input size lives: the model is built on the rig
resized to it (`hydranet.checkpoint.model_meta`), so the BEV view transform reads it from there,
and `input_divisor` says what it must be a multiple of.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from hydranet.config import ConfigError, apply_overrides, from_dict, load_config
from hydranet.heads import heads_where
from hydranet.models import ModelConfig


DatasetFormat = str  # "auto" or a registered format's name (hydranet.data.formats.FORMATS; checked by check_data_sources)


@dataclass(frozen=True)
class SourceConfig:
    """One dataset of a mixed run (`data.sources`, docs/datasets.md): batches are drawn from one
    source at a time, source k with probability weight_k / sum(weights). `class_map` renames the
    source's project classes into the run's merged taxonomy (null drops a class)."""

    root: str
    format: DatasetFormat = "auto"  # auto = detected from the folder (hydranet.data.formats)
    weight: float = 1.0
    split: str | None = None  # nuScenes/KITTI/BDD100K split (None: the reader's default)
    version: str | None = None  # nuScenes version folder (None: the only one under root)
    cameras: tuple[str, ...] | None = None  # None = every camera of the source
    class_map: dict[str, str | None] = field(default_factory=dict)
    name: str | None = None  # its name in per-source results (default: "<format><index>")
    sweeps: int = 0  # nuScenes: up to N unlabelled camera sweeps read between two keyframes (video models)


Fit = Literal["stretch", "crop", "camera"]  # data.fit: hydranet.loader.fit_to
FITS: tuple[str, ...] = get_args(Fit)


@dataclass(frozen=True)
class DataConfig:
    root: str = "out/demo/sim"  # a dataset folder: sim (docs/dataset_format.md), nuScenes, BDD100K or KITTI
    format: DatasetFormat = "auto"  # auto = detected from the folder where unambiguous
    split: str | None = None  # nuScenes/KITTI/BDD100K split of root (None: the reader's default)
    version: str | None = None  # nuScenes version folder (None: the only one under root)
    val_root: str | None = None  # held-out dataset for metrics at the end of training
    val_split: str | None = None  # split of val_root (None: the reader's default)
    cameras: tuple[str, ...] | None = None  # None = every camera of the rig
    image_size: tuple[int, int] = (96, 160)  # (H, W) the network sees; multiples of input_divisor()
    on_bad_frame: Literal["raise", "skip"] = "raise"
    # how a frame of another size reaches image_size (hydranet.loader.fit_to): stretch | crop (aspect kept) |
    # camera (resampled to the model's own camera of that name: its focal length, so objects keep their training size)
    fit: Fit = "stretch"
    sources: tuple[SourceConfig, ...] = ()  # several datasets in one run (then root/format/split/version/cameras unused)
    sweeps: int = 0  # nuScenes root: up to N unlabelled camera sweeps read between two keyframes (0: keyframes only)
    # frames with rare classes drawn more often: repeat-factor sampling with this threshold (LVIS; mmdetection's
    # ClassBalancedDataset oversample_thr), hydranet/class_balance.py; None: every frame once an epoch
    repeat_threshold: float | None = None

    def __post_init__(self):
        t = self.repeat_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf")):
            raise ConfigError(f"config key 'data.repeat_threshold' must be a number > 0 (or null: off), got {t!r}")


@dataclass(frozen=True)
class AugmentConfig:
    photometric: bool = True
    # with photometric: also the camera and ISP effects the sim does not render (white balance, hue, gamma, sharpening,
    # JPEG, downscale; hydranet.loader.photometric_pipeline)
    isp: bool = False
    geometric: bool = True
    scale_range: tuple[float, float] = (1.0, 1.25)  # random zoom, then crop back to image_size
    geometric_p: float = 0.5
    bev_rotation_deg: float = 0.0  # BEV models: random yaw of the ego frame in [-a, a] (hydranet/bev_augment.py)
    # each camera mirrored left to right with this probability, its intrinsics with it (hydranet.loader.mirror), in
    # models without BEV heads (the two-stage recipe's trunk stage); with hflip_bev also in BEV models, where a
    # mirrored car keeps its label's yaw (docs/bev.md, "Image mirroring")
    hflip_p: float = 0.0
    hflip_bev: bool = False

    def __post_init__(self):
        if not 0.0 <= self.hflip_p <= 1.0:
            raise ConfigError(f"config key 'augment.hflip_p' is {self.hflip_p}; set it to a probability in [0, 1] "
                              "(0: off)")
        if self.isp and not self.photometric:
            raise ConfigError("config key 'augment.isp' adds to the photometric augmentation; set augment.photometric=true "
                              "or augment.isp=false")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 2e-3
    weight_decay: float = 1e-4
    schedule: Literal["cosine", "onecycle", "constant"] = "cosine"
    warmup_steps: int = 20
    grad_clip: float = 10.0  # max global gradient norm; 0 = off
    # parameter-name prefix -> learning-rate multiplier (mmengine's paramwise `lr_mult`), e.g. {backbone: 0.1}:
    # the longest matching prefix wins; 0 freezes those parameters (no gradient computed for them)
    lr_mult: dict[str, float] = field(default_factory=dict)
    # an exponential moving average of the weights, updated every step (hydranet.ema: YOLOv5's ModelEMA); the
    # checkpoint's "model" is then the average. 0 = off
    ema_decay: float = 0.0

    def __post_init__(self):
        if not (self.ema_decay == 0 or 0 < self.ema_decay < 1):
            raise ConfigError(f"config key 'optim.ema_decay' must be 0 (off) or in (0, 1), e.g. 0.99; got {self.ema_decay!r}")
        for prefix, m in self.lr_mult.items():
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m < float("inf"):
                raise ConfigError(f"config key 'optim.lr_mult.{prefix}' must be a finite number >= 0 (0 freezes), got {m!r}")


@dataclass(frozen=True)
class ExperimentConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    steps: int = 200
    batch_size: int = 2  # frames per process (each with every selected camera)
    checkpoint_every: int = 50
    log_every: int = 10
    amp: bool = True  # bf16 autocast on CUDA (no effect on CPU)
    seed: int = 0
    num_workers: int = 0
    device: str = "auto"  # auto | cpu | cuda
    init_from: str | None = None  # a checkpoint whose matching weights start the run (partial load, `--init`); optimizer fresh
    label_priors: bool = False  # heads start at their label prior (hydranet.train.fit_priors; configs/full.yaml)
    overfit_batch: bool = False  # Karpathy's check: train on the first batch only, every step, no augmentation (`--overfit-batch`)
    # BatchNorm layers keep the running statistics they start with (eval mode) while every weight trains: fine-tuning
    # a trained model on small batches (mmdetection's norm_eval); data_engine's retrain sets it (retrain.norm_eval)
    norm_eval: bool = False


def input_divisor(neck_levels: int) -> int:
    """What every image side must be a multiple of: the stride of the coarsest neck level."""
    return 32 * 2 ** max(neck_levels - 3, 0)


def check_experiment(cfg: ExperimentConfig) -> None:
    """Checks across sections; ConfigError naming the key."""
    H, W = cfg.data.image_size
    div = input_divisor(cfg.model.neck_levels)
    if H % div or W % div or H <= 0 or W <= 0:
        raise ConfigError(f"config key 'data.image_size': {[H, W]} must be positive multiples of {div} "
                          f"(the stride of the coarsest of model.neck_levels={cfg.model.neck_levels} levels)")
    if cfg.data.cameras is not None and len(cfg.data.cameras) == 0:
        raise ConfigError("config key 'data.cameras': an empty list selects no camera; leave it null for every "
                          "camera of the rig or name the cameras")
    if cfg.device not in ("auto", "cpu", "cuda") and not cfg.device.startswith("cuda:"):
        raise ConfigError(f"config key 'device': {cfg.device!r} is not supported; choose auto, cpu or cuda")
    for key in ("steps", "batch_size", "checkpoint_every", "log_every"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"config key '{key}' must be >= 1, got {getattr(cfg, key)}")
    if cfg.num_workers < 0:
        raise ConfigError(f"config key 'num_workers' must be >= 0, got {cfg.num_workers}")
    if cfg.init_from is not None and not cfg.init_from.strip():
        raise ConfigError("config key 'init_from' is empty; give a checkpoint (or its run folder) or null")
    check_data_sources(cfg)


GEOMETRY_HEADS = heads_where("needs_calibration")  # need camera calibration (or 3D labels only it gives)


def check_data_sources(cfg: ExperimentConfig) -> None:
    """data.sources against the single-dataset keys, weights and names; heads a format can never
    supervise (BDD100K has no calibration). Formats left on auto are checked again once detected
    (`check_heads`)."""
    from hydranet.data.formats import FORMATS

    d = cfg.data
    for key, fmt in [("data.format", d.format)] + [(f"data.sources[{i}].format", s.format) for i, s in enumerate(d.sources)]:
        if fmt != "auto" and fmt not in FORMATS:
            raise ConfigError(f"config key '{key}': {fmt!r} is not allowed; choose one of {['auto', *FORMATS]}")
    for key, fmt, n in [("data.sweeps", d.format, d.sweeps)] + [
            (f"data.sources[{i}].sweeps", s.format, s.sweeps) for i, s in enumerate(d.sources)]:
        if n < 0:
            raise ConfigError(f"config key '{key}' must be >= 0 (camera sweeps read between two nuScenes keyframes), "
                              f"got {n}")
        if n and fmt != "auto" and not FORMATS[fmt].sweeps:
            raise ConfigError(f"config key '{key}': only {', '.join(f.title for f in FORMATS.values() if f.sweeps)} has "
                              f"camera sweeps, the format is {fmt}; set it to 0")
    if d.sources:
        if d.sweeps:
            raise ConfigError("config key 'data.sweeps': with data.sources every source has its own sweeps; move it "
                              "into the sources (data.sources[i].sweeps)")
        for key in ("format", "split", "version", "cameras"):
            if getattr(d, key) not in (None, "auto"):
                raise ConfigError(f"config key 'data.{key}': with data.sources every source has its own {key}; "
                                  f"move it into the sources (data.sources[i].{key})")
        names = []
        for i, s in enumerate(d.sources):
            if not s.root:
                raise ConfigError(f"config key 'data.sources[{i}].root' is empty; name the dataset folder")
            if not s.weight > 0:
                raise ConfigError(f"config key 'data.sources[{i}].weight' must be > 0, got {s.weight}")
            if s.cameras is not None and len(s.cameras) == 0:
                raise ConfigError(f"config key 'data.sources[{i}].cameras': an empty list selects no camera; leave it "
                                  "null for every camera of the source or name the cameras")
            names.append(s.name or f"{s.format}{i}")
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"config key 'data.sources': two sources are named {dup[0]!r}; give them distinct names")
    formats = [s.format for s in d.sources] if d.sources else [d.format]
    check_heads([t.name for t in cfg.model.tasks], [f for f in formats if f != "auto"], bev_only=len(formats) > 1)


def check_heads(heads, formats, bev_only: bool = False, where: str = "data.format") -> None:
    """ConfigError for a head a run's formats cannot feed: on one uncalibrated dataset (BDD100K)
    every geometry head (a registered head whose spec needs calibration); with `bev_only` (a mix, where other sources supervise
    depth/normals, or evaluation) the BEV heads, whose view transform needs each batch's calibration."""
    from hydranet.data.formats import FORMATS
    from hydranet.tasks import BEV_TASKS

    bad_fmt = next((f for f in formats if f in FORMATS and not FORMATS[f].calibrated), None)
    if bad_fmt is None:
        return
    need = [h for h in heads if h in BEV_TASKS] if bev_only else [h for h in heads if h in heads_where("needs_calibration")]
    if need:
        raise ConfigError(f"config key 'model.tasks': head '{need[0]}' needs camera calibration, which {bad_fmt} lacks "
                          f"({where}={bad_fmt}); remove {need} from model.tasks or train on a calibrated dataset")


def load_experiment(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """A YAML experiment file (None: the defaults) with `a.b=v` overrides, checked."""
    cfg = load_config(ExperimentConfig, path, overrides)
    check_experiment(cfg)
    return cfg


def experiment_from_json(text: str, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """The experiment config stored as JSON (checkpoints, ONNX metadata), with overrides, checked."""
    data: dict[str, Any] = apply_overrides(json.loads(text), list(overrides))
    data.get("model", {}).get("bev", {}).pop("image_size", None)  # written before data.image_size was its one source
    cfg = from_dict(ExperimentConfig, data)
    check_experiment(cfg)
    return cfg
