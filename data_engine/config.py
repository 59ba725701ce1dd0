"""The data engine's configuration (configs/engine.yaml): one section per stage of the loop.

    triggers: which triggers run, with which threshold and quota      (data_engine/triggers.py)
    mining:   the miner's knobs                                        (data_engine/mining.py)
    retrain:  fine-tuning from production on the accepted labels      (data_engine/retrain.py)
    suites:   the frozen scenario suites                               (data_engine/suites.py)
    gate:     the promotion rule                                       (data_engine/gate.py)
    loop:     what one round of `hydranet engine run` does             (data_engine/loop.py)
    autolabel: the offline auto-labeller's gates, smoothing and accept policy (data_engine/autolabel/)

A leaf: plain frozen dataclasses that check their own values, importing no stage of the engine. What
only a stage knows is checked where the stage is built: trigger names by `triggers.build_triggers`,
the loop's strategy by `mining.strategy_fn` (when the loop starts), the fleet config by the loop.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from hydranet.config import ConfigError
from sim.config import RareConfig

UNITS = ("frame", "clip")
# the loop's labeller: the oracle, label files a team fills or a Label Studio server's reviewers (engine run waits), or the
# auto-labeller (data_engine/autolabel/) first: "auto" alone keeps what its policy accepts and rejects the rest; "auto+X"
# sends the rest, pre-filled, to X
LABELLERS = ("oracle", "files", "label_studio", "auto", "auto+oracle", "auto+files", "auto+label_studio")
RARE_SCENARIOS = tuple(f.name for f in dataclasses.fields(RareConfig))  # the sim's rare scenarios (as data_engine.fleet)
UNIT_TESTS = "unit_tests"  # the suites' folder of unit tests (never a slice name)
TIMES_OF_DAY = ("day", "dusk", "night")
WEATHERS = ("clear", "rain", "fog")


@dataclass(frozen=True)
class TriggerParams:
    threshold: float | None = None
    quota: int | None = None
    enabled: bool = True


@dataclass(frozen=True)
class MiningConfig:
    pool_factor: float = 4.0  # hybrid: uncertainty pool = pool_factor * budget
    dedup: float = 0.25  # near-duplicate: distance below dedup x the median nearest-neighbour distance
    class_cap: float = 0.5  # share of the budget one dominant class may take
    seed: int = 0  # random strategy
    min_gap_s: float = 1.0  # two picks of one clip at least this many seconds apart (0: no gap); issue 34

    def __post_init__(self):
        v = self.min_gap_s
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 0):
            raise ConfigError(f"config key 'mining.min_gap_s' must be a finite number of seconds >= 0 (0: no gap), got {v!r}")


# keys added since a config could be written whose default is not what a config written before them did: a stored
# config (a loop's journal) that lacks one holds this value, not the default (retrain.norm_eval: retrains updated
# BatchNorm's statistics before the key existed)
BEFORE_KEY = {"retrain": {"norm_eval": False}}


@dataclass(frozen=True)
class RetrainConfig:
    """configs/engine.yaml `retrain:` (data_engine/retrain.py): fine-tuning from production."""
    steps: int = 100  # fine-tuning steps
    mix: float = 0.5  # fraction of batches drawn from the accepted labels (the rest: the base training set)
    lr: float | None = None  # peak learning rate (None: the production run's optim.lr)
    norm_eval: bool = True  # BatchNorm keeps the production's running statistics (hydranet's config key norm_eval)

    def __post_init__(self):
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise ConfigError(f"config key 'retrain.steps' must be an integer >= 1, got {self.steps!r}")
        if not (isinstance(self.mix, (int, float)) and 0 < self.mix < 1):
            raise ConfigError(f"config key 'retrain.mix' is the fraction of batches from accepted labels, in (0, 1); "
                              f"got {self.mix!r}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"config key 'retrain.lr' must be a finite number > 0 (or null), got {self.lr!r}")
        if not isinstance(self.norm_eval, bool):
            raise ConfigError(f"config key 'retrain.norm_eval' must be true or false, got {self.norm_eval!r}")


@dataclass(frozen=True)
class SliceSpec:
    """The conditions every clip of a slice is rendered under."""

    time_of_day: str = "day"
    weather: str = "clear"
    rare: tuple[str, ...] = ()

    def __post_init__(self):
        if self.time_of_day not in TIMES_OF_DAY:
            raise ConfigError(f"suites slice time_of_day {self.time_of_day!r} is not one of {list(TIMES_OF_DAY)}")
        if self.weather not in WEATHERS:
            raise ConfigError(f"suites slice weather {self.weather!r} is not one of {list(WEATHERS)}")
        bad = [r for r in self.rare if r not in RARE_SCENARIOS]
        if bad:
            raise ConfigError(f"suites slice rare scenario {bad[0]!r} is not one of {list(RARE_SCENARIOS)}")
        if "night_pedestrian_crossing" in self.rare and self.time_of_day != "night":
            raise ConfigError("suites slice with night_pedestrian_crossing needs time_of_day: night (the sim forces it)")


def _default_slices() -> dict[str, SliceSpec]:
    out = {"day": SliceSpec("day", "clear"), "night": SliceSpec("night", "clear"), "rain": SliceSpec("day", "rain"),
           "fog": SliceSpec("day", "fog")}
    for r in RARE_SCENARIOS:
        out[r] = SliceSpec("night" if r == "night_pedestrian_crossing" else "day", "clear", (r,))
    return out


@dataclass(frozen=True)
class SuitesConfig:
    """configs/engine.yaml `suites:` (data_engine/suites.py). Rig, frame rate and (unless set here) image
    size and frames per clip are the fleet config's."""

    clips: int = 2  # clips per slice
    seed: int = 7_000_000
    frames: int = 0  # frames per clip; 0: the fleet's frames_per_scene
    image_width: int = 0  # 0: the fleet's
    image_height: int = 0
    slices: dict[str, SliceSpec] = field(default_factory=_default_slices)

    def __post_init__(self):
        if self.clips < 1:
            raise ConfigError(f"suites.clips must be at least 1, got {self.clips}")
        if self.frames < 0 or self.image_width < 0 or self.image_height < 0:
            raise ConfigError("suites.frames, suites.image_width and suites.image_height must be >= 0 (0: the fleet's)")
        if (self.image_width > 0) != (self.image_height > 0):
            raise ConfigError("set both suites.image_width and suites.image_height (or neither)")
        if not self.slices:
            raise ConfigError("suites.slices is empty; give at least one slice")
        for name in self.slices:
            if name == UNIT_TESTS or not name.replace("_", "").replace("-", "").isalnum():
                raise ConfigError(f"suites slice name {name!r}: use letters, digits, '_' or '-' (and not {UNIT_TESTS!r})")


@dataclass(frozen=True)
class GateRule:
    """configs/engine.yaml `gate:` (data_engine/gate.py): what a candidate must do on the suites to be promoted."""

    tolerance: float = 0.02  # largest allowed loss per (slice, head), absolute, in the head's primary metric
    head_tolerance: dict[str, float] = field(default_factory=dict)  # per-head overrides of `tolerance`
    targeted: tuple[str, ...] = ()  # slices the candidate was trained to fix: must gain >= min_gain
    targeted_heads: tuple[str, ...] = ()  # heads judged on targeted slices (empty: every head)
    min_gain: float = 0.01
    aggregate_tolerance: float = 0.0  # largest allowed loss of a head's frame-weighted mean over slices
    summary_head: str = ""  # the head whose value per slice a one-line summary shows ("": the first head)
    # the noise-aware rule (issue 25): a paired bootstrap over each suite's clips gives every delta its
    # interval; a row fails only when the whole interval lies beyond the tolerance. 0 resamples: the
    # point estimates decide (the rule before the bootstrap)
    confidence: float = 0.95  # the two-sided interval's level
    resamples: int = 1000
    seed: int = 0  # of the resampling (the same resample of clips for both models and every head of a suite)
    # what is resampled (issue 34): a clip's frames are not independent, so the unit is the recorded clip (a suite
    # frozen from a recorded fleet keeps each frame's clip), split into blocks of block_s seconds (0: whole clips);
    # a slice of fewer than min_units units is "undecided" (it may still fail on a clear drop), never "improved"
    block_s: float = 10.0
    min_units: int = 5

    def __post_init__(self):
        for key in ("tolerance", "min_gain", "aggregate_tolerance"):
            v = getattr(self, key)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"gate.{key} must be a finite number >= 0, got {v!r}")
        if not (isinstance(self.confidence, (int, float)) and 0.5 <= self.confidence < 1):
            raise ConfigError(f"gate.confidence must be in [0.5, 1), got {self.confidence!r}")
        if isinstance(self.resamples, bool) or not isinstance(self.resamples, int) or \
                not (self.resamples == 0 or self.resamples >= 100):
            raise ConfigError(f"gate.resamples must be 0 (point estimates) or an integer >= 100, got {self.resamples!r}")
        for head, v in self.head_tolerance.items():
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"gate.head_tolerance.{head} must be a finite number >= 0, got {v!r}")
        if not (isinstance(self.block_s, (int, float)) and math.isfinite(self.block_s) and self.block_s >= 0):
            raise ConfigError(f"gate.block_s must be a finite number of seconds >= 0 (0: whole clips), got {self.block_s!r}")
        if isinstance(self.min_units, bool) or not isinstance(self.min_units, int) or self.min_units < 2:
            raise ConfigError(f"gate.min_units must be an integer >= 2, got {self.min_units!r}")


@dataclass(frozen=True)
class LoopConfig:
    """configs/engine.yaml `loop:`: what one round does."""

    fleet_clips: int = 40  # a new fleet each round (the cars keep driving)
    fleet_seed: int = 1000  # round r drives fleet seed fleet_seed + r
    budget: int = 16  # frames labelled per round
    strategy: str = "hybrid"  # a key of data_engine.mining.STRATEGIES (checked when the loop is built)
    unit: str = "frame"
    labeller: str = "oracle"  # oracle (the sim's or a dataset's own labels) | files (COCO/CVAT a team labels; the run waits)
    # | label_studio (a server's reviewers; the run waits) | auto | auto+oracle | auto+files | auto+label_studio: the
    # auto-labeller (the production and `ensemble`) first (docs/autolabel.md)
    fleet_config: str = "fleet"  # the fleet's YAML (a file or a shipped name); the suites share its rig and size
    fleet_set: tuple[str, ...] = ()  # overrides of the fleet config, e.g. ["sim.image_width=320"]
    unit_tests: bool = True  # grow the suites' unit tests with the labelled frames a trigger fired on
    workers: int | None = None  # shadow and fleet-render workers (None: one per CPU)
    ensemble: tuple[str, ...] = ()  # strategies ensemble | tta: exported models (ONNX) that join the production's ensemble

    def __post_init__(self):
        for key in ("fleet_clips", "budget"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ConfigError(f"config key 'loop.{key}' must be an integer >= 1, got {getattr(self, key)!r}")
        for key, allowed in (("unit", UNITS), ("labeller", LABELLERS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"config key 'loop.{key}' is {getattr(self, key)!r}; choose one of {list(allowed)}")


def _unit(key: str, v) -> None:
    """ConfigError unless `v` is a finite number in [0, 1] (a NaN fails)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 <= v <= 1):
        raise ConfigError(f"config key 'autolabel.{key}' must be a number in [0, 1], got {v!r}")


def _positive(key: str, v, integer: bool = False, zero: bool = False) -> None:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float)) and math.isfinite(v)
    if isinstance(v, bool) or not ok or not (v > 0 or (zero and v == 0)):
        raise ConfigError(f"config key 'autolabel.{key}' must be a{'n integer' if integer else ' finite number'} "
                          f"{'>= 0' if zero else '> 0'}, got {v!r}")


@dataclass(frozen=True)
class AutolabelConfig:
    """configs/engine.yaml `autolabel:` (data_engine/autolabel/, docs/autolabel.md): `hydranet engine autolabel`."""

    tta: bool = True  # add each model's horizontally flipped view (camera heads) to the ensemble
    fuse_iou: float = 0.55  # weighted box fusion: boxes of one class overlapping this much are one object
    fuse_conf: str = "avg"  # a fused box's score: avg (agreement of the views counts) | max (the surest view's)
    fuse_distance: float = 2.0  # 3D fusion: BEV centres of one class closer than this (m) are one object
    min_score: float = 0.1  # a member's box below this score does not enter the fusion
    track_iou: float = 0.3  # 2D tracking gate: IoU of the predicted box and the detection
    track_distance: float = 2.5  # 3D tracking gate: metres between the predicted world centre and the detection
    max_gap: int = 2  # frames a track may miss and still continue (the gap is filled by the smoother)
    min_track_length: int = 2  # detected frames a track needs to be kept
    min_track_score: float = 0.15  # a track's confidence (mean fused score over its span, gaps count 0) to be kept
    process_noise: float = 2.0  # Kalman constant-velocity model: acceleration variance (px/s^2 or m/s^2, squared)
    noise_px: float = 2.0  # 2D measurement sigma, pixels
    noise_m: float = 0.5  # 3D measurement sigma, metres
    noise_mps: float = 2.0  # 3D: sigma of a detection's own velocity, m/s (0: velocity from the positions alone)
    min_speed: float = 2.0  # m/s: a track this fast (smoothed) gets its yaw from its motion (slower: its detections')
    accept: dict[str, float] = field(default_factory=lambda: {"det2d": 0.5, "det3d": 0.5})  # per head: every box above
    accept_class: dict[str, float] = field(default_factory=dict)  # per class name: overrides its head's threshold
    dense_accept: float = 0.0  # a dense head's mean per-pixel agreement a frame needs (0: dense heads never block)
    accept_empty: bool = False  # accept a frame where a judged head found no box (false: a person checks what was missed)

    def __post_init__(self):
        if self.fuse_conf not in ("avg", "max"):
            raise ConfigError(f"config key 'autolabel.fuse_conf' must be avg or max, got {self.fuse_conf!r}")
        for key in ("fuse_iou", "min_score", "track_iou", "min_track_score", "dense_accept"):
            _unit(key, getattr(self, key))
        for key, mapping in (("accept", self.accept), ("accept_class", self.accept_class)):
            for name, v in mapping.items():
                _unit(f"{key}.{name}", v)
        for key in ("fuse_distance", "track_distance", "process_noise", "noise_px", "noise_m"):
            _positive(key, getattr(self, key))
        _positive("min_speed", self.min_speed, zero=True)
        _positive("noise_mps", self.noise_mps, zero=True)
        _positive("max_gap", self.max_gap, integer=True, zero=True)
        _positive("min_track_length", self.min_track_length, integer=True)


@dataclass(frozen=True)
class EngineConfig:
    """configs/engine.yaml, every section."""
    triggers: dict[str, TriggerParams] = field(default_factory=dict)  # overrides: every registered trigger runs
    mining: MiningConfig = field(default_factory=MiningConfig)
    retrain: RetrainConfig = field(default_factory=RetrainConfig)
    suites: SuitesConfig = field(default_factory=SuitesConfig)  # data_engine/suites.py: the frozen scenario suites
    gate: GateRule = field(default_factory=GateRule)  # data_engine/gate.py: the promotion rule
    loop: LoopConfig = field(default_factory=LoopConfig)  # data_engine/loop.py: what one round of `engine run` does
    autolabel: AutolabelConfig = field(default_factory=AutolabelConfig)  # data_engine/autolabel/: `engine autolabel`

    def trigger_params(self) -> dict[str, dict]:
        return {n: {k: v for k, v in (("threshold", p.threshold), ("quota", p.quota), ("enabled", p.enabled)) if v is not None}
                for n, p in self.triggers.items()}
