"""A production model for the engine's benchmarks, trained once by the 60-CPU-minute recipe
(benchmarks/time_to_accuracy.py `--targets 60min`: `hydranet.curriculum` two-stage training on the demo's kind
of sim data) and cached under the hash of its recipe, so engine_mining, label_efficiency and gate_discrimination
start from a model worth mining with without paying its hour each time.

    python benchmarks/production_cache.py --cache out/production_cache [--scenes 48] [--steps 1000]
        [--trunk-steps 3000] [--seed 0] [--adopt RUN_DIR]

The recipe is everything that decides the weights: the experiment config `recipe_experiment` builds (data
roots and checkpoint_every aside: they do not change the training), the trunk steps, the sim config, the number
of training and held-out scenes and the sim seed. Its SHA-256 names the folder (CACHE/production-<hash>/ with
recipe.json, data/, run/, snapshot.pt, model.onnx and done.json, written last). snapshot.pt is the run's checkpoint at
60% of its full steps: with the final one it is a two-member snapshot ensemble (Huang et al., 2017), the only
second member one run gives, for the engine's `ensemble` signal. A folder is used only when its done.json
exists and its recipe.json is the recipe asked for: a changed config, sim or step count gives another hash and
trains anew, never reuses. A folder without done.json (a killed run) is refused naming it. A complete folder whose
recipe.json was written before a config key existed holds the recipe when, read with that key at its default, it
is the one asked for; a folder this code cannot read is passed over. What the hash does not cover: the code. After
a change to the model or training code, delete the cache (or pass another --cache).

`--adopt RUN_DIR` registers a run already trained by this recipe (time_to_accuracy's seedS/run beside its
data/): its config.json must equal the recipe's (roots and checkpoint_every aside), its trunk stage the
recipe's steps and its data the recipe's sim config, scene count and seed; anything else is refused naming the
key that differs. The run and its data are copied, the ONNX export written.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

from data_engine.loop import differing_paths
from hydranet.curriculum import TRUNK_STEPS

ROOT_KEYS = ("root", "val_root")  # where the data lies, not what it is
# 1000 full steps since the 1 m grid and the stride-4 pyramid (a step 1.7x the 2 m recipe's): the 60-CPU-minute command
# of docs/benchmarks.md, "The 60-CPU-minute run on the current recipe"
RECIPE_60MIN = {"scenes": 48, "val_scenes": 4, "steps": 1000, "trunk_steps": 3000, "seed": 0}
SNAPSHOT_AT = 0.6  # the second ensemble member: the run's checkpoint at 60% of its steps (a snapshot ensemble)


class CacheError(ValueError):
    """The cache cannot serve or register this recipe; one line naming the folder or key."""


def recipe(scenes: int, val_scenes: int, steps: int, trunk_steps: int = TRUNK_STEPS, seed: int = 0) -> dict:
    """The recipe as a JSON-able dict: {"experiment", "trunk_steps", "sim", "val_sim", "scenes", "val_scenes",
    "sim_seed"}: the demo's training scenes (DEMO_TRAIN_SIM) and held-out ones (DEMO_SIM), as time_to_accuracy.py."""
    from hydranet.config import to_dict
    from hydranet.curriculum import recipe_experiment
    from sim.config import DEMO_SIM, DEMO_TRAIN_SIM

    return {"experiment": training_config(to_dict(recipe_experiment("DATA", "VAL", seed, steps))),
            "trunk_steps": trunk_steps, "sim": to_dict(DEMO_TRAIN_SIM), "val_sim": to_dict(DEMO_SIM), "scenes": scenes,
            "val_scenes": val_scenes, "sim_seed": 0}


def training_config(cfg: dict) -> dict:
    """An experiment config dict less where things lie, how often they are saved and how many processes load them
    (data roots, checkpoint_every, init_from: the two-stage recipe's own trunk folder; num_workers: the loader gives
    the same items in any number of processes, tests/test_production_cache.py)."""
    cfg = json.loads(json.dumps(cfg))
    for key in ROOT_KEYS:
        cfg["data"].pop(key, None)
    for key in ("checkpoint_every", "init_from", "num_workers"):
        cfg.pop(key, None)
    return cfg


def current(r: dict, where: Path | str) -> dict:
    """Recipe `r` as this code reads it: keys added to the experiment or sim config since it was written at their
    defaults (a key that did not exist then is its default's behaviour: `norm_eval` false is training before it)."""
    return {**r, "experiment": current_experiment(r["experiment"], where), "sim": sim_config_of({"sim_config": r["sim"]}, where),
            "val_sim": sim_config_of({"sim_config": r["val_sim"]}, where)}


def current_experiment(cfg: dict, where: Path | str) -> dict:
    """`training_config` of an experiment config dict with the keys added since it was written at their defaults."""
    from hydranet.config import ConfigError, to_dict
    from hydranet.experiment import experiment_from_json

    try:
        return training_config(to_dict(experiment_from_json(json.dumps(cfg))))
    except (ConfigError, TypeError, ValueError) as e:
        raise CacheError(f"{where}: not an experiment config this code reads ({e})") from None


def recipe_hash(r: dict) -> str:
    return hashlib.sha256(json.dumps(r, sort_keys=True).encode()).hexdigest()[:16]


def snapshot_step(steps: int) -> int:
    return max(1, round(SNAPSHOT_AT * steps))


def folder_of(cache: Path, r: dict) -> Path:
    return Path(cache) / f"production-{recipe_hash(r)}"


def cached(cache: Path, r: dict) -> Path | None:
    """The production folder of recipe `r` when it is complete, None when absent; CacheError for a folder a killed
    run left (no done.json) or whose recipe.json is not `r` (edited by hand). A complete folder written before a
    config key existed holds `r` when its recipe, read with that key at its default (`current`), is `r`."""
    folder = folder_of(cache, r)
    if not folder.exists():
        return next((f for f in sorted(Path(cache).glob("production-*")) if (f / "done.json").is_file()
                     and _holds(f, r)), None)
    if not (folder / "done.json").is_file():
        raise CacheError(f"{folder} has no done.json: a production run stopped before it finished; delete the folder "
                         "and run again")
    got = json.loads((folder / "recipe.json").read_text())
    if got != r:
        raise CacheError(f"{folder}/recipe.json is not the recipe its name hashes (edited?); delete the folder")
    return folder


def _holds(folder: Path, r: dict) -> bool:
    """Whether complete `folder`'s recipe, read by this code (`current`), is `r`; a recipe it cannot read is not."""
    try:
        return current(_read(folder / "recipe.json"), folder / "recipe.json") == r
    except (CacheError, KeyError, TypeError):
        return False


def production(cache: Path, r: dict, threads: int = 2, progress: bool = True) -> Path:
    """The folder of recipe `r`'s production (run/, model.onnx, data/): the cached one, else trained now."""
    folder = cached(cache, r)
    if folder is not None:
        older = "" if folder == folder_of(cache, r) else ", its recipe.json written before a config key it reads at its default"
        print(f"[production] reusing {folder} (recipe {recipe_hash(r)}{older})", file=sys.stderr)
        return folder
    import torch

    from hydranet.config import from_dict
    from hydranet.curriculum import recipe_experiment, train_two_stage
    from sim.config import SimConfig
    from sim.generate import generate_split

    folder = folder_of(cache, r)
    folder.mkdir(parents=True)
    (folder / "recipe.json").write_text(json.dumps(r, indent=1, sort_keys=True))
    torch.set_num_threads(threads)
    data, val = generate_split(folder / "data", from_dict(SimConfig, r["sim"]), r["scenes"], r["val_scenes"], seed=r["sim_seed"],
                               progress=progress, val_cfg=from_dict(SimConfig, r["val_sim"]))
    steps = r["experiment"]["steps"]
    snap = snapshot_step(steps)
    cfg = dataclasses.replace(recipe_experiment(data, val, r["experiment"]["seed"], steps),
                              checkpoint_every=math.gcd(snap, steps))

    def on_step(step: int, losses: dict) -> None:  # before step's checkpoint is written: step - 1's is on disk
        if step == snap + 1:
            shutil.copy(folder / "run" / "checkpoint.pt", folder / "snapshot.pt")

    t0 = time.perf_counter()
    train_two_stage(cfg, folder / "run", r["trunk_steps"], progress=progress, on_step=on_step)
    return _finish(folder, r, {"train_seconds": round(time.perf_counter() - t0, 1), "threads": threads})


def adopt(cache: Path, r: dict, run: Path) -> Path:
    """Register `run` (trained by recipe `r`, its data where its config.json says, its snapshot beside it) in the
    cache; CacheError naming the file and key where it differs. Everything is checked before the cache is written;
    an unfinished folder of the recipe (no done.json: a killed run or adoption) is replaced."""
    run = Path(run)
    folder = folder_of(cache, r)
    if (folder / "done.json").is_file():
        raise CacheError(f"{folder} already holds recipe {recipe_hash(r)}; nothing to adopt")
    cfg = _read(run / "config.json")
    try:
        data_root, val_root = Path(cfg["data"]["root"]), Path(cfg["data"]["val_root"])
    except (KeyError, TypeError):
        raise CacheError(f"{run / 'config.json'} has no data.root and data.val_root: not a run folder") from None
    _same(current_experiment(cfg, run / "config.json"), r["experiment"], f"{run / 'config.json'}")
    trunk = _read(run / "trunk" / "config.json")
    if trunk.get("steps") != r["trunk_steps"]:
        raise CacheError(f"{run / 'trunk' / 'config.json'}: key 'steps' is {trunk.get('steps')}, the recipe's trunk stage "
                         f"{r['trunk_steps']}: not this recipe's run")
    for root, scenes, sim in ((data_root, r["scenes"], r["sim"]), (val_root, r["val_scenes"], r["val_sim"])):
        meta = _read(root / "dataset.json")
        stored = sim_config_of(meta, root / "dataset.json")
        _same({k: stored.get(k) for k in sim}, sim, f"{root / 'dataset.json'} sim_config")
        if len(meta.get("scenes") or []) != scenes:
            raise CacheError(f"{root / 'dataset.json'}: {len(meta.get('scenes') or [])} scenes, the recipe's {scenes}")
    if _read(data_root / "dataset.json").get("seed") != r["sim_seed"]:
        raise CacheError(f"{data_root / 'dataset.json'}: key 'seed' is not the recipe's sim seed {r['sim_seed']}")
    snap = run.parent / f"step{snapshot_step(r['experiment']['steps'])}.pt"
    if not snap.is_file() or not (run / "checkpoint.pt").is_file():
        raise CacheError(f"{snap if not snap.is_file() else run / 'checkpoint.pt'} is missing: the production needs the "
                         f"run's checkpoint and its snapshot at {SNAPSHOT_AT:.0%} of the steps (time_to_accuracy writes it "
                         "with --snapshots 5), its second ensemble member")
    if folder.exists():
        shutil.rmtree(folder)  # unfinished: nothing in it is valid
    folder.mkdir(parents=True)
    (folder / "recipe.json").write_text(json.dumps(r, indent=1, sort_keys=True))
    shutil.copytree(data_root, folder / "data" / "sim")
    shutil.copytree(val_root, folder / "data" / "sim_val")
    shutil.copytree(run, folder / "run", ignore=shutil.ignore_patterns("tb"))
    shutil.copy(snap, folder / "snapshot.pt")
    moved = json.loads((folder / "run" / "config.json").read_text())
    moved["data"].update(root=str(folder / "data" / "sim"), val_root=str(folder / "data" / "sim_val"))
    (folder / "run" / "config.json").write_text(json.dumps(moved, indent=1))
    return _finish(folder, r, {"adopted_from": str(run.resolve())})


def _read(path: Path) -> dict:
    try:
        got = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise CacheError(f"{path} cannot be read ({type(e).__name__}): not this recipe's run or its data") from None
    if not isinstance(got, dict):
        raise CacheError(f"{path} is not a JSON object: not this recipe's run or its data")
    return got


def sim_config_of(meta: dict, where: Path) -> dict:
    """A dataset.json's sim_config with the keys added since it was written at their defaults (a key that did not
    exist then is its default's behaviour: `roadside.clutter` 0 is the sim before clutter) or, where the default is
    new behaviour, at the old one (`sim.config.BEFORE_KEY`); CacheError where no value reproduces the old scenes."""
    from hydranet.config import ConfigError, from_dict, to_dict, with_defaults
    from sim.config import BEFORE_KEY, SimConfig

    stored = with_defaults(meta.get("sim_config") or {}, BEFORE_KEY)
    for section, keys in BEFORE_KEY.items():
        for key, value in keys.items():
            if value is None and isinstance(stored.get(section), dict) and stored[section].get(key) is None:
                raise CacheError(f"{where}: generated before the sim key '{section}.{key}' existed, by code whose scenes "
                                 "no value of it reproduces: not this recipe's data; generate it again")
    try:
        return to_dict(from_dict(SimConfig, stored))
    except (ConfigError, TypeError, ValueError) as e:
        raise CacheError(f"{where}: its sim_config is not a sim config this code reads ({e})") from None


def _same(got: dict, want: dict, where: str) -> None:
    """Refuse the first key whose value differs between `got` and the recipe's `want`, naming both values."""
    diff = differing_paths(got, want)
    if diff:
        a, b = got, want
        for key in diff[0]:
            a, b = (a.get(key) if isinstance(a, dict) else None), (b.get(key) if isinstance(b, dict) else None)
        name = ".".join(map(str, diff[0]))
        raise CacheError(f"{where}: key '{name}' is {a!r}, the recipe's {b!r}: not this recipe's run")


def _finish(folder: Path, r: dict, info: dict) -> Path:
    """Export run/ to model.onnx (parity checked), then done.json: the folder is complete."""
    from deploy.export import export_checkpoint

    export_checkpoint(folder / "run", folder / "model.onnx", folder / "data" / "sim", frames=2, verbose=False)
    (folder / "done.json").write_text(json.dumps({"recipe": recipe_hash(r), **info, "finished": time.time()}, indent=1))
    return folder


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, required=True)
    for key, value in RECIPE_60MIN.items():
        ap.add_argument(f"--{key.replace('_', '-')}", type=int, default=value)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--adopt", type=Path, default=None, help="a run this recipe trained (time_to_accuracy's seedS/run)")
    args = ap.parse_args(argv)
    r = recipe(args.scenes, args.val_scenes, args.steps, args.trunk_steps, args.seed)
    try:
        folder = adopt(args.cache, r, args.adopt) if args.adopt else production(args.cache, r, args.threads)
    except CacheError as e:
        raise SystemExit(f"error: {e}") from None
    print(f"production of recipe {recipe_hash(r)}: {folder} (model.onnx, run/, data/)")
    return folder


if __name__ == "__main__":
    main()

