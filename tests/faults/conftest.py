"""Fixtures of the fault suite: one tiny sim dataset per session (1 scene, 2 frames, 64x48 pixels, about
a second to render) and its nuScenes export with a valid submission built from the GT."""
from __future__ import annotations

import math

import pytest
from faultlib import Env

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
