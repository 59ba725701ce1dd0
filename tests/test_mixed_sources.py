"""Datasets in the config and mixed training with partial labels (issue 13, docs/datasets.md):
data.format/sources, heads without labels masked (zero loss, zero gradient), metrics that skip
unlabelled frames, NaN velocities, and a short sim + BDD100K + nuScenes run that trains, evaluates
per source and exports."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from dataset_fixtures import make_sim, write_bdd100k, write_nuscenes
from hydranet.bevgrid import BevGrid
from hydranet.config import ConfigError, to_dict
from hydranet.data.sources import MixedDataset, open_sources
from hydranet.experiment import experiment_from_json, load_experiment
from hydranet.loader import Collate, LabelledFrames, SourceBatchSampler
from hydranet.models import build_model
from hydranet.models.config import ModelConfig, TaskConfig
from hydranet.models.partial import supervised_update

HW = (64, 96)
MODEL = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1,
                    tasks=(TaskConfig("det2d"), TaskConfig("drivable"), TaskConfig("depth")))


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("mixed")
    sim = make_sim(base / "sim")
    return {"sim": sim, "bdd100k": write_bdd100k(sim, base / "bdd"), "nuscenes": write_nuscenes(sim, base / "nusc")}


def _sources_cfg(roots, tasks=("det2d", "drivable", "depth"), extra=(), bdd_format="auto"):
    src = [{"root": str(roots["sim"]), "cameras": ["CAM_FRONT"]},
           {"root": str(roots["bdd100k"]), "split": "val", "format": bdd_format},
           {"root": str(roots["nuscenes"]), "cameras": ["CAM_FRONT"], "weight": 0.5}]
    return [f"data.sources={json.dumps(src)}", f"data.image_size=[{HW[0]},{HW[1]}]", "model.backbone=tiny",
            "model.neck_width=16", "model.neck_repeats=1", f"model.tasks={json.dumps([{'name': t} for t in tasks])}",
            "batch_size=2", "num_workers=0", "augment.photometric=false", "augment.geometric=false", *extra]


@pytest.fixture(scope="module")
def mixed(roots):
    cfg = load_experiment(None, _sources_cfg(roots))
    data = MixedDataset(open_sources(cfg.data))
    torch.manual_seed(0)
    model = build_model(MODEL, data.meta)
    return data, model, LabelledFrames(data, model.target_builders(), HW)


def _batch(model, frames, idx):
    return Collate(model.target_builders())([frames[i] for i in idx])


def test_merged_taxonomy_and_per_source_supervision(mixed):
    data, _, frames = mixed
    assert [s.format for s in data.sources] == ["sim", "bdd100k", "nuscenes"]
    sim_classes = data.sources[0].dataset.classes
    assert data.classes[:len(sim_classes)] == sim_classes and {"rider", "bicycle", "train"} <= set(data.classes)
    assert data.meta["sources"][1]["supervises"] == ["det2d", "drivable", "lanes", "signs_lights"]
    a, b = data.ranges[1]
    item = frames[a]
    assert item["supervised"] == {"det2d": True, "drivable": True, "depth": False}
    assert frames[data.ranges[2][0]]["supervised"] == {"det2d": True, "drivable": False, "depth": False}
    assert all(frames[0]["supervised"].values())  # a sim frame has every label
    assert data[a]["scene"].startswith(data.sources[1].name + "/") and data[a]["source"] == data.sources[1].name


def test_class_map_renames_and_drops(roots):
    src = [{"root": str(roots["bdd100k"]), "class_map": {"rider": "cyclist", "train": None}}]
    cfg = load_experiment(None, [f"data.sources={json.dumps(src)}"])
    src = open_sources(cfg.data)
    data = MixedDataset(src)
    assert "rider" not in data.classes and "train" not in data.classes and "cyclist" in data.classes
    classes = {b["class"] for i in range(len(data)) for b in data[i]["labels"]["cameras"]["CAM_FRONT"]["boxes2d"]}
    assert classes <= set(data.classes)


def test_a_head_without_labels_in_the_batch_gets_exactly_zero_gradient(mixed):
    data, model, frames = mixed
    a, _ = data.ranges[1]
    batch = _batch(model, frames, [a, a + 1])  # two BDD100K frames: no depth labels
    model.train()
    model.zero_grad(set_to_none=True)
    losses = model(batch, "loss")
    assert losses["depth"].item() == 0.0 and losses["depth.samples"].item() == 0.0
    assert losses["drivable.samples"].item() == 2.0 and losses["drivable"].item() > 0
    model.backward(losses)
    depth = [p.grad for p in model.heads["depth"].parameters()]
    assert all(g is None or bool((g == 0).all()) for g in depth)
    assert any(g is not None and bool(g.abs().sum() > 0) for g in (p.grad for p in model.heads["drivable"].parameters()))


def test_uncertainty_balancer_sees_only_heads_present(mixed):
    data, _, frames = mixed
    model = build_model(ModelConfig(**{**MODEL.__dict__, "balancer": "uncertainty"}), data.meta)
    a, _ = data.ranges[1]
    losses = model(_batch(model, frames, [a, a + 1]), "loss")
    model.zero_grad(set_to_none=True)
    model.backward(losses)
    lv = model.balancer.log_vars
    assert lv["depth"].grad is None and lv["drivable"].grad is not None


def test_a_frame_without_labels_is_masked_not_a_zero_target(mixed):
    _, model, frames = mixed
    model.eval()  # BatchNorm on running statistics: frames do not see each other
    batch = _batch(model, frames, [0, 1])
    batch["targets"]["drivable"]["supervised"] = torch.tensor([True, False])
    images = batch["images"].clone().requires_grad_(True)
    loss = model({**batch, "images": images}, "loss")["drivable"]
    (grad,) = torch.autograd.grad(loss, images)
    assert bool((grad[1] == 0).all()) and bool(grad[0].abs().sum() > 0)
    alone = model(_batch(model, frames, [0]), "loss")["drivable"]
    assert torch.allclose(loss, alone, rtol=1e-5, atol=1e-6)
    batch["targets"]["drivable"]["mask"][1] = 1.0 - batch["targets"]["drivable"]["mask"][1]  # another target: same loss
    assert torch.allclose(model(batch, "loss")["drivable"], loss, rtol=1e-6, atol=1e-7)


def test_metrics_ignore_frames_without_the_heads_labels(mixed):
    _, model, frames = mixed
    task = model.heads["drivable"]
    batch = _batch(model, frames, [0, 1])
    decoded = task.decode(model.eval()(batch, "tensor")["drivable"])
    masked, alone = task.metric(), task.metric()
    t = dict(batch["targets"]["drivable"], supervised=torch.tensor([True, False]))
    supervised_update(masked, decoded, t)
    one = _batch(model, frames, [0])["targets"]["drivable"]
    alone.update(decoded[:1], {k: v for k, v in one.items() if k != "supervised"})
    assert masked.compute() == alone.compute()


def test_source_batches_follow_weights_and_resume_exactly():
    s = SourceBatchSampler([(0, 10), (10, 14)], [3.0, 1.0], 2, seed=1, total_steps=400)
    batches = list(s)
    assert all(len({i < 10 for _, i in b}) == 1 for b in batches)
    share = np.mean([b[0][1] < 10 for b in batches])
    assert 0.65 < share < 0.85
    assert list(SourceBatchSampler([(0, 10), (10, 14)], [3.0, 1.0], 2, 1, 400, start_step=123)) == batches[123:]


def test_config_errors_for_heads_a_dataset_cannot_feed(roots, tmp_path):
    from hydranet.train import train

    with pytest.raises(ConfigError, match=r"head 'det3d' needs camera calibration, which bdd100k lacks"):
        load_experiment(None, ["data.format=bdd100k", 'model.tasks=[{"name": "det2d"}, {"name": "det3d"}]'])
    with pytest.raises(ConfigError, match=r"head 'depth' needs camera calibration"):
        load_experiment(None, ["data.format=bdd100k", 'model.tasks=[{"name": "depth"}]'])
    load_experiment(None, _sources_cfg(roots))  # depth in a mix with BDD100K: the sim supervises it
    with pytest.raises(ConfigError, match=r"head 'det3d' needs camera calibration, which bdd100k lacks"):
        load_experiment(None, _sources_cfg(roots, ("det2d", "det3d"), bdd_format="bdd100k"))
    cfg = load_experiment(None, _sources_cfg(roots, ("det2d", "det3d")))  # auto: caught once the folders are read
    with pytest.raises(ConfigError, match=r"head 'det3d' needs camera calibration, which bdd100k lacks"):
        train(cfg, tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match=r"'data.split': with data.sources"):
        load_experiment(None, _sources_cfg(roots, extra=("data.split=val",)))
    cfg = load_experiment(None, [f"data.root={roots['bdd100k']}", "data.split=val", 'model.tasks=[{"name": "normals"}]'])
    with pytest.raises(ConfigError, match=r"head 'normals' needs camera calibration.*detected format"):
        train(cfg, tmp_path / "run", progress=False)  # auto-detected: caught once the folder is read
    cfg = load_experiment(None, [f"data.root={roots['nuscenes']}", 'model.tasks=[{"name": "det2d"}, {"name": "lanes"}]'])
    with pytest.raises(ConfigError, match=r"no dataset of this run has labels for head 'lanes'"):
        train(cfg, tmp_path / "run", progress=False)


def test_configs_written_before_the_dataset_keys_still_load():
    old = to_dict(load_experiment(None))
    for key in ("format", "split", "version", "val_split", "sources"):
        old["data"].pop(key)
    cfg = experiment_from_json(json.dumps(old))
    assert cfg.data.format == "auto" and cfg.data.sources == () and cfg.data.split is None


def test_nan_velocity_is_masked_in_the_det3d_loss():
    from hydranet.tasks.det3d import Det3dTask

    task = Det3dTask(["car"], 8, BevGrid((-8.0, 8.0), (-8.0, 8.0), 1.0))
    boxes = [{"center": [2.0, 1.0, 0.5], "size": [4.0, 2.0, 1.5], "yaw": 0.3, "velocity": [math.nan] * 3, "class": "car"},
             {"center": [-3.0, -2.0, 0.5], "size": [4.0, 2.0, 1.5], "yaw": 0.0, "velocity": [2.0, 0.0, 0.0], "class": "car"}]
    sample = {"labels": {"boxes3d": boxes}, "ego2world": np.eye(4)}
    targets = task.collate([task.build_targets(sample)])
    out = {k: torch.zeros(1, c, 16, 16, requires_grad=True) for k, c in
           {"heatmap": 1, "offset": 2, "height": 1, "size": 3, "rot": 2, "vel": 2}.items()}
    loss = task.loss(out, targets)
    assert all(math.isfinite(v.item()) for v in loss.values())
    assert float(loss["vel"]) == pytest.approx(task.weights["vel"] * 2.0 / 1)  # only the known velocity counts
    (g,) = torch.autograd.grad(loss["vel"], out["vel"])
    assert torch.isfinite(g).all() and int((g.abs().sum(1) > 0).sum()) == 1


def test_short_mixed_run_trains_evaluates_per_source_and_exports(roots, tmp_path):
    from deploy.export import export_checkpoint
    from hydranet.evaluate import evaluate_checkpoint
    from hydranet.train import train

    cfg = load_experiment(None, _sources_cfg(roots, extra=("steps=2", "checkpoint_every=2", "log_every=1")))
    seen = []
    train(cfg, tmp_path / "run", progress=False, on_step=lambda step, losses: seen.append(losses))
    sampler = SourceBatchSampler([(0, 1)] * 3, [1.0, 1.0, 0.5], 1, cfg.seed, 2)
    for step, losses in enumerate(seen):
        assert all(math.isfinite(v) for v in losses.values())
        if sampler.source(step) != 0:  # BDD100K or nuScenes: no depth labels, no depth loss
            assert losses["depth"] == 0.0 and losses["depth.samples"] == 0.0
    per_source = {}
    for name, root in roots.items():
        r = evaluate_checkpoint(tmp_path / "run", root, progress=False)
        per_source[name] = r
        assert r["format"] == name and r["frames"] > 0
    assert math.isnan(per_source["bdd100k"]["model"]["depth"]["abs_rel"])  # no depth labels: not scored
    assert math.isfinite(per_source["sim"]["model"]["depth"]["abs_rel"])
    assert per_source["bdd100k"]["split"] == "val"
    res = export_checkpoint(tmp_path / "run", tmp_path / "model.onnx", roots["sim"], verbose=False)
    assert res.path.is_file() and res.parity


def test_another_folder_is_read_on_the_cameras_the_model_is_built_on(roots, tmp_path):
    """A folder outside the config (a gate's suite, a held-out set) is read with the model's cameras:
    data.cameras, else the first source's. A retrained model's config names its cameras only in its
    sources; reading every camera of the suite for it made the gate compare it on 6 cameras against
    the production on 1 (and reject every retrain)."""
    import shutil

    from hydranet.data.sources import open_data

    cfg = load_experiment(None, _sources_cfg(roots))
    assert cfg.data.cameras is None
    other = shutil.copytree(roots["sim"], tmp_path / "suite")
    assert open_data(cfg.data, other).rig.names == ["CAM_FRONT"]
    plain = load_experiment(None, [f"data.root={roots['sim']}", "data.cameras=[CAM_FRONT, CAM_BACK]"])
    assert open_data(plain.data, other).rig.names == ["CAM_FRONT", "CAM_BACK"]
