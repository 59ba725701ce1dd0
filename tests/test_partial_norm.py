"""BatchNorm under partial labels (hydranet/models/partial.py, docs/datasets.md): a head whose labels
a batch lacks leaves its BatchNorm running statistics untouched, so a head trained on one source is
not evaluated with statistics of another source's images; the trunk and the supervised heads still
update theirs."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from dataset_fixtures import make_sim, write_bdd100k
from hydranet.data.sources import MixedDataset, open_sources
from hydranet.experiment import load_experiment
from hydranet.loader import Collate, LabelledFrames
from hydranet.models import build_model
from hydranet.models.config import ModelConfig, TaskConfig
from hydranet.models.partial import frozen_norm, no_labels

HW = (64, 96)
MODEL = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1, tasks=(TaskConfig("drivable"), TaskConfig("depth")))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    base = tmp_path_factory.mktemp("partial_norm")
    sim = make_sim(base / "sim")
    src = [{"root": str(sim), "cameras": ["CAM_FRONT"]}, {"root": str(write_bdd100k(sim, base / "bdd")), "split": "val"}]
    cfg = load_experiment(None, [f"data.sources={json.dumps(src)}", f"data.image_size=[{HW[0]},{HW[1]}]"])
    data = MixedDataset(open_sources(cfg.data))
    torch.manual_seed(0)
    model = build_model(MODEL, data.meta)
    return data, model, LabelledFrames(data, model.target_builders(), HW)


def _norm_state(module: nn.Module) -> list[torch.Tensor]:
    return [t.clone() for m in module.modules() if isinstance(m, nn.BatchNorm2d)
            for t in (m.running_mean, m.running_var, m.num_batches_tracked)]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_a_head_without_labels_leaves_its_batchnorm_statistics_alone(mixed):
    data, model, frames = mixed
    a, _ = data.ranges[1]
    batch = Collate(model.target_builders())([frames[a], frames[a + 1]])  # two BDD100K frames: no depth labels
    assert no_labels(batch["targets"]["depth"]) and not no_labels(batch["targets"]["drivable"])
    depth, drivable, trunk = (_norm_state(m) for m in (model.heads["depth"], model.heads["drivable"], model.backbone))
    assert depth, "the depth head has BatchNorm layers"
    model.train()
    losses = model(batch, "loss")
    assert losses["depth"].item() == 0.0 and losses["drivable"].item() > 0
    assert _same(depth, _norm_state(model.heads["depth"]))  # BDD100K images never enter the depth head's statistics
    assert not _same(drivable, _norm_state(model.heads["drivable"]))  # the supervised head learns its statistics
    assert not _same(trunk, _norm_state(model.backbone))  # the shared trunk sees every source
    assert all(m.training for m in model.modules())  # modes restored after the pass


def test_a_batch_with_the_heads_labels_updates_its_statistics(mixed):
    data, model, frames = mixed
    batch = Collate(model.target_builders())([frames[0], frames[1]])  # sim frames: every head labelled
    depth = _norm_state(model.heads["depth"])
    model.train()
    model(batch, "loss")
    assert not _same(depth, _norm_state(model.heads["depth"]))


def test_predict_and_tensor_modes_are_unchanged(mixed):
    """Only mode "loss" reads the masks: a training-mode predict pass still updates every head."""
    data, model, frames = mixed
    a, _ = data.ranges[1]
    batch = Collate(model.target_builders())([frames[a], frames[a + 1]])
    depth = _norm_state(model.heads["depth"])
    model.train()
    model(batch, "tensor")
    assert not _same(depth, _norm_state(model.heads["depth"]))


def test_frozen_norm_restores_modes_on_error():
    net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm2d(4)))
    net.train()
    net[2].eval()  # an already-frozen layer stays in eval mode afterwards
    with pytest.raises(RuntimeError):
        with frozen_norm(net, True):
            assert not net[1].training and not net[2][0].training
            raise RuntimeError("boom")
    assert net[1].training and not net[2][0].training
    with frozen_norm(net, False):
        assert net[1].training
    assert not no_labels(None) and not no_labels({"mask": 1}) and no_labels({"supervised": torch.zeros(2, dtype=torch.bool)})
