"""Fixtures of the fault suite: one tiny sim dataset per session (1 scene, 2 frames, 64x48 pixels, about
a second to render) and its nuScenes export with a valid submission built from the GT."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from faultlib import ENGINE, RUNS, Env

from hydranet.cli import main


@pytest.fixture(scope="session")
def fault_env(tmp_path_factory) -> Env:
    from hydranet.metrics import NuScenesTables, category_to_detection_name
    from sim.nuscenes_export import export_nuscenes

    root = tmp_path_factory.mktemp("faults")
    ds = root / "sim"
    assert main(["sim", "generate", "--out", str(ds), "--scenes", "1", "--seed", "0", "--quiet",
                 "--set", "frames_per_scene=2", "--set", "image_width=64", "--set", "image_height=48"]) == 0
    nus = export_nuscenes(ds, root / "nusc", progress=False)
    tables = NuScenesTables(nus, "v1.0-mini")
    results = {}
    for tok in tables.sample_tokens_of_split("all"):
        boxes = results.setdefault(tok, [])
        for a in tables.anns[tok]:
            name = category_to_detection_name(a["category_name"])
            if name is not None:
                boxes.append({"sample_token": tok, "translation": list(a["translation"]), "size": list(a["size"]),
                              "rotation": list(a["rotation"]), "velocity": [0.0, 0.0], "detection_name": name,
                              "detection_score": 0.9, "attribute_name": ""})
    assert sum(len(b) for b in results.values()) > 0 and all(math.isfinite(x) for b in results.values()
                                                             for d in b for x in d["size"])
    sub = {"meta": {"use_camera": True, "use_lidar": False, "use_radar": False, "use_map": False,
                    "use_external": False}, "results": results}
    return Env(dataset=ds, nuscenes=nus, results=sub)


@pytest.fixture(scope="session")
def engine_env(fault_env: Env, tmp_path_factory) -> dict:
    """An untrained tiny model (CAM_FRONT, 64x64) exported from the fault dataset, shadowed over it."""
    import onnx

    from deploy.export import export_model, sim_frames
    from deploy.metadata import PREFIX, read_metadata, set_metadata
    from data_engine.shadow import run_shadow
    from hydranet.experiment import load_experiment
    from hydranet.models import build_model

    root = tmp_path_factory.mktemp("engine_faults")
    tiny = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    cfg = load_experiment(tiny, [f"data.root={fault_env.dataset}", "data.cameras=[CAM_FRONT]", "data.image_size=[64,64]",
                                 "device=cpu"])
    meta = json.loads((fault_env.dataset / "dataset.json").read_text())
    model = build_model(cfg.model, meta)
    export_model(model, cfg, meta, root / "model.onnx", sim_frames(cfg, fault_env.dataset, 1), verbose=False)
    m = onnx.load(str(root / "model.onnx"))  # the same model without its embedding output (an older export)
    md = read_metadata(m)
    keep = [o for o in m.graph.output if o.name != "embedding"]
    del m.graph.output[:]
    m.graph.output.extend(keep)
    md["outputs"].pop("embedding")
    md["embedding"] = None
    set_metadata(m, {PREFIX + k: json.dumps(v) for k, v in md.items()})
    onnx.save(m, str(root / "noemb.onnx"))
    run_shadow(root / "model.onnx", fault_env.dataset, root / "cat.db", workers=1, progress=False)
    ENGINE.update(model=root / "model.onnx", noemb=root / "noemb.onnx", catalog=root / "cat.db")
    return ENGINE


ENV: dict = {}


@pytest.fixture(autouse=True)
def _engine(engine_env):
    ENV.update(engine_env)


@pytest.fixture(scope="session")
def two_runs(fault_env: Env, tmp_path_factory) -> dict:
    """Two real 1-step checkpoints (seeds 0 and 1, CAM_FRONT at 64x64) and the ONNX export of the first."""
    from deploy.export import export_checkpoint
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    repo = Path(__file__).resolve().parents[2]
    root = tmp_path_factory.mktemp("two_runs")
    for name, seed in (("a", 0), ("b", 1)):
        train(load_experiment(repo / "configs" / "tiny.yaml", [f"data.root={fault_env.dataset}", "data.cameras=[CAM_FRONT]",
                                                              "data.image_size=[64,64]", "device=cpu", "steps=1", f"seed={seed}",
                                                              "checkpoint_every=1", "batch_size=1", "optim.warmup_steps=1"]),
              root / name, progress=False)
        RUNS[name] = root / name
    export_checkpoint(root / "a", root / "a.onnx", fault_env.dataset, frames=1, verbose=False)
    RUNS["a.onnx"] = root / "a.onnx"
    return RUNS
