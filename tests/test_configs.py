"""Every YAML under configs/ loads, validates and (for experiments) builds its model."""
from pathlib import Path

import pytest

from fake_samples import FAKE_META
from hydranet.config import ConfigError, load_config
from hydranet.models import build_model
from hydranet.experiment import load_experiment
from sim.config import SimConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# bev.yaml, full.yaml and engine_tiny.yaml need a rig in the meta (tests/test_bev_train_eval.py,
# tests/test_recipe.py and the engine tests train them on generated data); sim.yaml, fleet.yaml and
# engine.yaml are not experiment configs (their own schemas are tested in test_sim_* and test_engine_*)
EXPERIMENTS = sorted(p.name for p in CONFIGS.glob("*.yaml")
                     if p.name not in ("sim.yaml", "bev.yaml", "full.yaml", "engine_tiny.yaml", "fleet.yaml", "engine.yaml"))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_config_loads_and_builds(name):
    cfg = load_experiment(CONFIGS / name)
    model = build_model(cfg.model, FAKE_META)
    assert set(model.heads) == {t.name for t in cfg.model.tasks}
    assert all(H % model.size_divisor == 0 for H in cfg.data.image_size)


def test_sim_config_loads():
    assert load_config(SimConfig, CONFIGS / "sim.yaml") == SimConfig()


def test_image_size_must_fit_the_coarsest_neck_level():
    with pytest.raises(ConfigError, match="multiples of 128"):
        load_experiment(CONFIGS / "regnet.yaml", ["data.image_size=[448, 800]"])
