"""The data engine's configuration (configs/engine.yaml): one section per stage of the loop.

    triggers: which triggers run, with which threshold and quota      (data_engine/triggers/)
    mining:   the miner's knobs                                        (data_engine/mining.py)
    retrain:  fine-tuning from production on the accepted labels      (data_engine/retrain.py)
    suites:   the frozen scenario suites                               (data_engine/suites.py)
    gate:     the promotion rule                                       (data_engine/gate.py)
    loop:     what one round of `hydranet engine run` does             (data_engine/loop.py)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from data_engine.gate import GateRule
from data_engine.retrain import RetrainConfig
from data_engine.suites import SuitesConfig

STRATEGIES = ("random", "uncertainty", "diversity", "hybrid", "triggers")  # data_engine/mining.py
UNITS = ("frame", "clip")
LABELLERS = ("oracle",)  # the loop labels without a person; people label through `hydranet engine label`

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


@dataclass(frozen=True)
class LoopConfig:
    """configs/engine.yaml `loop:`: what one round does."""

    fleet_clips: int = 40  # a new fleet each round (the cars keep driving)
    fleet_seed: int = 1000  # round r drives fleet seed fleet_seed + r
    budget: int = 16  # frames labelled per round
    strategy: str = "hybrid"  # STRATEGIES
    unit: str = "frame"
    labeller: str = "oracle"  # the loop labels without a person: oracle (the sim's exact labels)
    fleet_config: str = "fleet"  # the fleet's YAML (a file or a shipped name); the suites share its rig and size
    fleet_set: tuple[str, ...] = ()  # overrides of the fleet config, e.g. ["sim.image_width=320"]
    unit_tests: bool = True  # grow the suites' unit tests with the labelled frames a trigger fired on
    workers: int | None = None  # shadow workers (None: one per CPU)

    def __post_init__(self):
        from hydranet.config import ConfigError

        for key in ("fleet_clips", "budget"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise ConfigError(f"config key 'loop.{key}' must be an integer >= 1, got {getattr(self, key)!r}")
        for key, allowed in (("strategy", STRATEGIES), ("unit", UNITS), ("labeller", LABELLERS)):
            if getattr(self, key) not in allowed:
                raise ConfigError(f"config key 'loop.{key}' is {getattr(self, key)!r}; choose one of {list(allowed)}")

    def fleet(self):
        from data_engine.fleet import FleetConfig
        from hydranet.config import load_config

        return load_config(FleetConfig, self.fleet_config, list(self.fleet_set))


@dataclass(frozen=True)
class EngineConfig:
    """configs/engine.yaml, every section."""
    triggers: dict[str, TriggerParams] = field(default_factory=dict)  # empty: every registered trigger, defaults
    mining: MiningConfig = field(default_factory=MiningConfig)
    retrain: RetrainConfig = field(default_factory=RetrainConfig)
    suites: SuitesConfig = field(default_factory=SuitesConfig)  # data_engine/suites.py: the frozen scenario suites
    gate: GateRule = field(default_factory=GateRule)  # data_engine/gate.py: the promotion rule
    loop: LoopConfig = field(default_factory=LoopConfig)  # data_engine/loop.py: what one round of `engine run` does

    def trigger_params(self) -> dict[str, dict]:
        return {n: {k: v for k, v in (("threshold", p.threshold), ("quota", p.quota), ("enabled", p.enabled)) if v is not None}
                for n, p in self.triggers.items()}
