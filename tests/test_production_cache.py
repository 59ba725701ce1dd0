"""benchmarks/production_cache.py: the engine benchmarks' 60-CPU-minute production, cached under its recipe's hash.
A changed recipe is another folder (never reused); a folder a killed run left, or whose recipe.json was edited, is
refused; a run is adopted only when its config, trunk stage and data are the recipe's, else refused naming the key.
No training here: the recipe is read, the run folders are written by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.production_cache import CacheError, adopt, cached, folder_of, recipe, recipe_hash, training_config
from hydranet.config import to_dict
from hydranet.curriculum import recipe_experiment

SMALL = {"scenes": 4, "val_scenes": 1, "steps": 10, "trunk_steps": 5, "seed": 0}


def test_the_hash_follows_every_part_of_the_recipe():
    base = recipe(**SMALL)
    assert recipe_hash(base) == recipe_hash(recipe(**SMALL))
    for key, value in (("steps", 11), ("trunk_steps", 6), ("scenes", 5), ("seed", 1)):
        assert recipe_hash(recipe(**{**SMALL, key: value})) != recipe_hash(base), key
    changed = json.loads(json.dumps(base))
    changed["experiment"]["optim"]["lr"] *= 2
    assert recipe_hash(changed) != recipe_hash(base)
    # where the data lies, how often checkpoints are saved and how many processes load the data are not the recipe
    moved = to_dict(recipe_experiment("/elsewhere", "/elsewhere_val", 0, 10))
    moved["checkpoint_every"], moved["init_from"], moved["num_workers"] = 3, "/some/trunk", 4
    assert training_config(moved) == base["experiment"]


def test_loader_workers_do_not_change_the_items(tmp_path):
    """Why num_workers is left out of the recipe: a training run's batches are the same in the training process and
    in a loader worker (augmentation seeded per item, never from a process's RNG)."""
    import torch
    from dataset_fixtures import make_sim

    from hydranet.experiment import load_experiment
    from hydranet.models import build_model
    from hydranet.train import build_training_data
    from hydranet.data import SimDataset
    from hydranet.loader import Collate, StepBatchSampler

    data = make_sim(tmp_path / "sim")
    cfg = load_experiment("tiny", [f"data.root={data}", "batch_size=2", "augment.photometric=true"])
    model = build_model(cfg.model, SimDataset(data, channels=()).meta)
    frames = build_training_data(cfg, model)
    batches = []
    for workers in (0, 1):
        loader = torch.utils.data.DataLoader(frames, batch_sampler=StepBatchSampler(len(frames), 2, 0, 4),
                                             collate_fn=Collate(model.target_builders()), num_workers=workers)
        batches.append([b["images"] for b in loader])
    assert len(batches[0]) == 4 and all(torch.equal(a, b) for a, b in zip(*batches))


def test_unfinished_or_edited_folders_are_refused(tmp_path):
    r = recipe(**SMALL)
    assert cached(tmp_path, r) is None
    folder = folder_of(tmp_path, r)
    folder.mkdir()
    (folder / "recipe.json").write_text(json.dumps(r))
    with pytest.raises(CacheError, match="no done.json"):
        cached(tmp_path, r)
    (folder / "done.json").write_text("{}")
    assert cached(tmp_path, r) == folder
    (folder / "recipe.json").write_text(json.dumps({**r, "scenes": 99}))
    with pytest.raises(CacheError, match="not the recipe its name hashes"):
        cached(tmp_path, r)


def _run(root: Path, steps: int = 10, trunk_steps: int = 5, lr_scale: float = 1.0, lr_mult: dict | None = None) -> Path:
    """A run folder as time_to_accuracy leaves it (config.json, trunk/config.json), without weights."""
    cfg = to_dict(recipe_experiment(root / "data" / "sim", root / "data" / "sim_val", 0, steps))
    cfg["optim"]["lr"] *= lr_scale
    if lr_mult is not None:
        cfg["optim"]["lr_mult"] = lr_mult
    run = root / "seed0" / "run"
    (run / "trunk").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "trunk" / "config.json").write_text(json.dumps({"steps": trunk_steps}))
    return run


def test_adopt_refuses_a_run_of_another_recipe_naming_the_key(tmp_path):
    r = recipe(**SMALL)
    with pytest.raises(CacheError, match="key 'optim.lr'"):
        adopt(tmp_path / "cache", r, _run(tmp_path / "a", lr_scale=2.0))
    with pytest.raises(CacheError, match="key 'steps' is 20"):
        adopt(tmp_path / "cache", r, _run(tmp_path / "b", steps=20))
    with pytest.raises(CacheError, match="trunk stage 5"):
        adopt(tmp_path / "cache", r, _run(tmp_path / "c", trunk_steps=7))
    # a key with a dot of its own (a parameter prefix): named whole, with both values
    with pytest.raises(CacheError, match=r"key 'optim.lr_mult.backbone.stem' is 0.1, the recipe's None"):
        adopt(tmp_path / "cache", r, _run(tmp_path / "d", lr_mult={"backbone.stem": 0.1}))
    assert not (tmp_path / "cache").exists()


def test_adopt_refuses_before_writing_when_a_file_is_missing(tmp_path):
    r = recipe(**SMALL)
    run = _run(tmp_path / "a")
    with pytest.raises(CacheError, match="dataset.json cannot be read"):  # its data is not there
        adopt(tmp_path / "cache", r, run)
    with pytest.raises(CacheError, match="config.json cannot be read"):
        adopt(tmp_path / "cache", r, tmp_path / "nowhere")
    assert not (tmp_path / "cache").exists()


def test_adopt_needs_the_snapshot_and_writes_nothing_without_it(tmp_path):
    r = recipe(**SMALL)
    run = _run(tmp_path / "a")
    def write_data(val_sim: dict) -> None:
        for name, n, sim in (("sim", SMALL["scenes"], r["sim"]), ("sim_val", SMALL["val_scenes"], val_sim)):
            (tmp_path / "a" / "data" / name).mkdir(parents=True, exist_ok=True)
            (tmp_path / "a" / "data" / name / "dataset.json").write_text(json.dumps(
                {"sim_config": sim, "scenes": [{"name": f"scene_{i}"} for i in range(n)], "seed": 0}))

    (run / "checkpoint.pt").write_bytes(b"weights")
    write_data(r["sim"])  # held-out scenes as busy as the training ones: not the recipe's
    assert r["sim"]["density"] > r["val_sim"]["density"]
    with pytest.raises(CacheError, match="sim_val.*density"):
        adopt(tmp_path / "cache", r, run)
    write_data(r["val_sim"])  # the recipe's data, as written
    with pytest.raises(CacheError, match=r"step6\.pt is missing.*second ensemble member"):
        adopt(tmp_path / "cache", r, run)
    assert not (tmp_path / "cache").exists()


def test_a_dataset_written_before_a_sim_key_existed_reads_it_at_its_default(tmp_path):
    """A dataset.json without `roadside.clutter` (written before the key) is the recipe's data (the default is the
    old behaviour); the same key at another value is refused naming it."""
    r = recipe(**SMALL)
    run = _run(tmp_path / "a")
    (run / "checkpoint.pt").write_bytes(b"weights")
    for name, n, sim in (("sim", SMALL["scenes"], r["sim"]), ("sim_val", SMALL["val_scenes"], r["val_sim"])):
        old = json.loads(json.dumps(sim))
        del old["roadside"]["clutter"]
        (tmp_path / "a" / "data" / name).mkdir(parents=True)
        (tmp_path / "a" / "data" / name / "dataset.json").write_text(json.dumps(
            {"sim_config": old, "scenes": [{"name": f"scene_{i}"} for i in range(n)], "seed": 0}))
    with pytest.raises(CacheError, match=r"step6\.pt is missing"):  # past the data checks: only the snapshot lacks
        adopt(tmp_path / "cache", r, run)
    meta = json.loads((tmp_path / "a" / "data" / "sim" / "dataset.json").read_text())
    meta["sim_config"]["roadside"]["clutter"] = 5.0
    (tmp_path / "a" / "data" / "sim" / "dataset.json").write_text(json.dumps(meta))
    with pytest.raises(CacheError, match="key 'roadside.clutter' is 5.0"):
        adopt(tmp_path / "cache", r, run)


def test_a_recipe_written_before_a_config_key_existed_is_found_with_it_at_its_default(tmp_path):
    """A complete folder whose recipe.json lacks a key added since (norm_eval; roadside.clutter) holds the recipe
    asked for: the key's default is the behaviour before it; the same key at another value is another recipe."""
    r = recipe(**SMALL)
    old = json.loads(json.dumps(r))
    del old["experiment"]["norm_eval"], old["sim"]["roadside"]["clutter"]
    folder = tmp_path / f"production-{recipe_hash(old)}"
    folder.mkdir()
    (folder / "recipe.json").write_text(json.dumps(old))
    assert cached(tmp_path, r) is None  # not complete: not used
    (folder / "done.json").write_text("{}")
    assert folder != folder_of(tmp_path, r) and cached(tmp_path, r) == folder
    other = json.loads(json.dumps(r))
    other["experiment"]["norm_eval"] = True
    assert cached(tmp_path, other) is None


def test_a_key_whose_default_is_new_behaviour_reads_at_the_old_value(tmp_path):
    """A recipe or dataset written before `roadside.parked_against_traffic` parked vehicles either way by draws no
    value of the key reproduces: its production is no recipe of this code, and its data are refused naming the key."""
    r = recipe(**SMALL)
    old = json.loads(json.dumps(r))
    del old["sim"]["roadside"]["parked_against_traffic"], old["val_sim"]["roadside"]["parked_against_traffic"]
    folder = tmp_path / "cache" / f"production-{recipe_hash(old)}"
    folder.mkdir(parents=True)
    (folder / "recipe.json").write_text(json.dumps(old))
    (folder / "done.json").write_text("{}")
    assert cached(tmp_path / "cache", r) is None
    run = _run(tmp_path / "a")
    (run / "checkpoint.pt").write_bytes(b"weights")
    for name, n, sim in (("sim", SMALL["scenes"], old["sim"]), ("sim_val", SMALL["val_scenes"], old["val_sim"])):
        (tmp_path / "a" / "data" / name).mkdir(parents=True)
        (tmp_path / "a" / "data" / name / "dataset.json").write_text(json.dumps(
            {"sim_config": sim, "scenes": [{"name": f"scene_{i}"} for i in range(n)], "seed": 0}))
    with pytest.raises(CacheError, match="generated before the sim key 'roadside.parked_against_traffic' existed"):
        adopt(tmp_path / "cache2", r, run)


def test_a_folder_this_code_cannot_read_is_passed_over(tmp_path):
    r = recipe(**SMALL)
    bad = tmp_path / "production-0000000000000000"
    bad.mkdir()
    (bad / "recipe.json").write_text(json.dumps({**r, "experiment": {**r["experiment"], "no_such_key": 1}}))
    (bad / "done.json").write_text("{}")
    assert cached(tmp_path, r) is None
