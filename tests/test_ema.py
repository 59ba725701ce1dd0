"""`optim.ema_decay`: the run's checkpoint holds the exponential moving average of its weights (YOLOv5's ModelEMA,
timm's ModelEmaV2) as "model", what evaluation, export and --init read; the trained weights stay in it to resume
from, and a resumed run averages exactly as an uninterrupted one."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dataset_fixtures import make_sim
from hydranet.checkpoint import load_checkpoint
from hydranet.config import ConfigError
from hydranet.ema import WeightEma
from hydranet.experiment import load_experiment
from hydranet.train import train

REPO = Path(__file__).resolve().parents[1]


def test_average_follows_the_formula_with_its_warm_up():
    net = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.BatchNorm1d(1))
    ema = WeightEma(net, decay=0.9)
    ref = {k: v.clone() for k, v in net.state_dict().items()}
    for t in range(120):  # the warm-up reaches the cap 0.9 at t = 81
        with torch.no_grad():
            net[0].weight.add_(1.0)
            net[1].running_mean.add_(0.5)
            net[1].num_batches_tracked.add_(1)
        d = min(0.9, (1 + t) / (10 + t))  # 0.1, 0.18, ..., 0.9 from t = 81 on
        ref = {k: (d * ref[k] + (1 - d) * v if v.dtype.is_floating_point else v.clone())
               for k, v in net.state_dict().items()}
        ema.update(net)
    for k in ref:
        torch.testing.assert_close(ema.state[k], ref[k], rtol=1e-6, atol=1e-6)
    assert ema.current_decay() == 0.9 and WeightEma(net, 0.99).current_decay() == 0.1
    assert ema.state["1.num_batches_tracked"] == 120  # counters copied, not averaged
    assert not torch.equal(ema.state["0.weight"], net[0].weight)  # it lags the model


def test_decay_outside_zero_one_is_refused():
    net = torch.nn.Linear(2, 1)
    for bad in (1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="optim.ema_decay"):
            WeightEma(net, bad)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_sim(tmp_path_factory.mktemp("sim") / "tiny", scenes=1)


def cfg(root, *overrides):
    return load_experiment(REPO / "configs" / "tiny.yaml",
                           [f"data.root={root}", "data.cameras=[CAM_FRONT]", "num_workers=0", "batch_size=1", "steps=6",
                            "checkpoint_every=3", "optim.warmup_steps=1", "optim.ema_decay=0.5", *overrides])


def test_checkpoint_holds_the_average_and_resumes_exactly(data, tmp_path):
    c = cfg(data)
    model = train(c, tmp_path / "a", progress=False)
    ca = load_checkpoint(tmp_path / "a")
    assert ca["ema"]["updates"] == 6
    moved = [k for k, v in ca["model"].items() if v.dtype.is_floating_point and not torch.equal(v, ca["ema"]["raw"][k])]
    assert moved  # the average is not the trained weights
    assert all(torch.equal(v, ca["model"][k]) for k, v in model.state_dict().items())  # train() returns the average

    train(c, tmp_path / "b", progress=False, stop_at=3)
    train(c, tmp_path / "b", resume=tmp_path / "b", progress=False)
    cb = load_checkpoint(tmp_path / "b")
    for key in ("model",):
        assert all(torch.equal(ca[key][k], cb[key][k]) for k in ca[key]), key
    assert all(torch.equal(ca["ema"]["raw"][k], cb["ema"]["raw"][k]) for k in ca["ema"]["raw"])
    assert cb["ema"]["updates"] == 6


def test_ema_cannot_be_switched_on_a_resumed_run(data, tmp_path):
    train(cfg(data, "optim.ema_decay=0"), tmp_path / "r", progress=False, stop_at=3)
    assert "ema" not in load_checkpoint(tmp_path / "r")
    with pytest.raises(ConfigError, match="optim.ema_decay"):
        train(cfg(data), tmp_path / "r", resume=tmp_path / "r", progress=False)


def test_bad_decay_is_a_config_error():
    with pytest.raises(ConfigError, match="optim.ema_decay"):
        load_experiment(REPO / "configs" / "tiny.yaml", ["optim.ema_decay=1.0"])
