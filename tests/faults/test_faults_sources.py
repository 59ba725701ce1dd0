"""Fault rows: the dataset keys of an experiment config (data.format, split, data.sources) and heads a
dataset cannot feed, through `hydranet train` (issue 13). One row per case; see faultlib.py."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import yaml
from faultlib import Case, params, run_case

TINY = {"image_size": [64, 96]}


def tiny_bdd(tmp) -> str:
    """A one-image BDD100K val split (no calibration)."""
    root = tmp / "bdd"
    (root / "images" / "100k" / "val").mkdir(parents=True)
    cv2.imwrite(str(root / "images" / "100k" / "val" / "a.jpg"), np.full((48, 64, 3), 90, np.uint8))
    (root / "labels" / "det_20").mkdir(parents=True)
    (root / "labels" / "det_20" / "det_val.json").write_text(json.dumps([{"name": "a.jpg", "labels": []}]))
    return str(root)


def train_case(id, words, data, tasks=("det2d",), status=2):
    def build(tmp, env):
        d = data(tmp, env)
        cfg = {"data": {**TINY, **d}, "model": {"tasks": [{"name": t} for t in tasks]}, "steps": 1, "batch_size": 1,
               "num_workers": 0}
        (tmp / "exp.yaml").write_text(yaml.safe_dump(cfg))
        return ["train", "--config", tmp / "exp.yaml", "--out", tmp / "run", "--quiet"]
    return Case(id, build, status, words)


def sim(env):
    return {"root": str(env.dataset)}


CASES = [
    train_case("format-bdd100k-with-det3d", ("model.tasks", "det3d", "calibration", "bdd100k"),
               lambda tmp, env: {"root": tiny_bdd(tmp), "format": "bdd100k", "split": "val"}, ("det2d", "det3d")),
    train_case("format-auto-bdd100k-with-depth", ("model.tasks", "depth", "calibration", "bdd100k", "detected"),
               lambda tmp, env: {"root": tiny_bdd(tmp), "split": "val"}, ("depth",)),
    train_case("sources-bev-head-with-bdd100k", ("det3d", "calibration", "bdd100k"),
               lambda tmp, env: {"sources": [sim(env), {"root": tiny_bdd(tmp), "format": "bdd100k", "split": "val"}]},
               ("det2d", "det3d")),
    train_case("sources-and-top-level-split", ("data.split", "data.sources"),
               lambda tmp, env: {"split": "val", "sources": [sim(env)]}),
    train_case("source-weight-zero", ("data.sources[1].weight", "> 0"),
               lambda tmp, env: {"sources": [sim(env), {**sim(env), "weight": 0.0, "name": "b"}]}),
    train_case("source-names-repeat", ("data.sources", "'same'", "distinct"),
               lambda tmp, env: {"sources": [{**sim(env), "name": "same"}, {**sim(env), "name": "same"}]}),
    train_case("source-format-unknown", ("data.sources[0].format", "'coco'", "choose one of"),
               lambda tmp, env: {"sources": [{**sim(env), "format": "coco"}]}),
    train_case("source-root-missing", ("data.sources[0]", "no such folder"),
               lambda tmp, env: {"sources": [{"root": str(tmp / "nowhere")}]}),
    train_case("source-key-unknown", ("data.sources[0].wieght", "allowed keys"),
               lambda tmp, env: {"sources": [{**sim(env), "wieght": 2.0}]}),
    train_case("format-unknown", ("data.format", "'kitty'", "choose one of"), lambda tmp, env: {**sim(env), "format": "kitty"}),
    train_case("head-without-labels-on-nuscenes", ("model.tasks", "lanes", "no dataset", "labels"),
               lambda tmp, env: {"root": str(env.nuscenes)}, ("det2d", "lanes")),
    train_case("sim-with-a-split", ("sim dataset has no split",), lambda tmp, env: {**sim(env), "split": "val"}),
]


@pytest.mark.parametrize("case", params(CASES))
def test_dataset_config_fault(case, fault_env, tmp_path, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
