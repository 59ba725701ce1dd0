"""nuScenes detection metrics (hydranet/metrics) checked figure by figure against the official nuscenes-devkit.

The dataset is a tiny sim exported in nuScenes format, then edited so every code path of the devkit is
exercised: some instances relabelled (barrier, trailer, motorcycle, bendy bus, traffic cone), bike racks
added around bicycles, some annotations with zero points, scenes renamed to two of the official
v1.0-mini names so the predefined-split path (mini_train) runs as well as the custom splits.
"""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from hydranet.cli import main
from hydranet.metrics import (DETECTION_NAMES, TP_METRICS, DetectionConfig, NuScenesEvalError, NuScenesTables,
                              category_to_detection_name, evaluate_nuscenes)
from hydranet.metrics.nuscenes_data import add_center_dist, filter_boxes
from hydranet.metrics.nuscenes_detection import yaw_of
from sim.config import SimConfig
from sim.nuscenes_export import export_nuscenes_from_sim

from devkit import HAVE_DEVKIT, needs_devkit

if HAVE_DEVKIT:
    from nuscenes.eval.detection.config import config_factory
    from nuscenes.eval.detection.evaluate import DetectionEval
    from nuscenes.nuscenes import NuScenes

VERSION = "v1.0-mini"
ATTRS = {"pedestrian": ["pedestrian.moving", "pedestrian.standing", "pedestrian.sitting_lying_down"],
         "bicycle": ["cycle.with_rider", "cycle.without_rider"], "motorcycle": ["cycle.with_rider"],
         "car": ["vehicle.moving", "vehicle.stopped", "vehicle.parked"]}


def _read(root, name):
    with open(root / VERSION / f"{name}.json") as f:
        return json.load(f)


def _write(root, name, table):
    with open(root / VERSION / f"{name}.json", "w") as f:
        json.dump(table, f)


def _edit_export(root) -> None:
    """Relabel instances, add bike racks and zero-point annotations, rename scenes to official mini names."""
    cats, inst, anns = _read(root, "category"), _read(root, "instance"), _read(root, "sample_annotation")
    tok = {c["name"]: c["token"] for c in cats}
    for i, name in enumerate(["movable_object.barrier", "vehicle.trailer", "vehicle.motorcycle", "vehicle.bus.bendy",
                              "static_object.bicycle_rack", "movable_object.trafficcone"]):
        if name not in tok:
            tok[name] = f"addedcat{i:024d}"
            cats.append({"token": tok[name], "name": name, "description": "test"})
    name_of = {c["token"]: c["name"] for c in cats}
    by_cat = {}
    for r in sorted(inst, key=lambda r: r["token"]):
        by_cat.setdefault(name_of[r["category_token"]], []).append(r)
    for r in by_cat.get("movable_object.debris", []):
        r["category_token"] = tok["movable_object.barrier"]
    relabel = [("vehicle.car", "vehicle.trailer", 2), ("vehicle.car", "vehicle.motorcycle", 2),
               ("vehicle.bus.rigid", "vehicle.bus.bendy", 1), ("human.pedestrian.adult", "movable_object.trafficcone", 3),
               ("human.pedestrian.adult", "movable_object.barrier", 3)]
    for src, dst, n in relabel:
        for _ in range(n):
            by_cat[src].pop()["category_token"] = tok[dst]
    for i, a in enumerate(anns):
        if i % 9 == 4:
            a["num_lidar_pts"] = 0
    # a bike rack around every bicycle and motorcycle annotation of every other sample that has one
    cyc = {r["token"] for r in inst if name_of[r["category_token"]] in ("vehicle.bicycle", "vehicle.motorcycle")}
    seen = []
    for k, a in enumerate(list(anns)):
        if a["instance_token"] in cyc:
            if a["sample_token"] not in seen:
                seen.append(a["sample_token"])
            if len(seen) % 2:
                continue
            rack = {"token": f"rack{k:028d}", "category_token": tok["static_object.bicycle_rack"],
                    "nbr_annotations": 1}
            t = f"rackann{k:025d}"
            rack["first_annotation_token"] = rack["last_annotation_token"] = t
            inst.append(rack)
            anns.append({"token": t, "sample_token": a["sample_token"], "instance_token": rack["token"],
                         "visibility_token": "4", "attribute_tokens": [], "translation": a["translation"],
                         "size": [2.5, 3.0, 3.0], "rotation": [0.92388, 0.0, 0.0, 0.382683], "prev": "", "next": "",
                         "num_lidar_pts": 5, "num_radar_pts": 0})
    scenes = _read(root, "scene")
    new = {"scene_0000": "scene-0061", "scene_0001": "scene-0103"}
    for s in scenes:
        s["name"] = new[s["name"]]
    for name, table in [("category", cats), ("instance", inst), ("sample_annotation", anns), ("scene", scenes)]:
        _write(root, name, table)
    _write(root, "splits", {"sim_train": list(new.values()), "sim_one": ["scene-0103"]})


@pytest.fixture(scope="module")
def dataroot(tmp_path_factory):
    root = export_nuscenes_from_sim(tmp_path_factory.mktemp("nm") / "nusc",
                                    SimConfig(image_width=160, image_height=96, frames_per_scene=4),
                                    scenes=2, seed=4, progress=False)  # a seed whose scenes show buses and cycles
    _edit_export(root)
    return root


@pytest.fixture(scope="module")
def tables(dataroot):
    return NuScenesTables(dataroot, VERSION)


@pytest.fixture(scope="module")
def nusc(dataroot):
    return NuScenes(version=VERSION, dataroot=str(dataroot), verbose=False)


def _yaw_quat(yaw: float) -> list[float]:
    return [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]


def _predictions(tables: NuScenesTables, split: str, seed: int, noise: float, p_drop=0.15, p_swap=0.1,
                 p_attr=0.2, n_fp=3, quantize=None, gt_only=False) -> dict:
    """GT boxes perturbed: noise on translation, size, yaw, velocity; dropped boxes, false positives,
    wrong attributes, class swaps, duplicates, NaN velocities, far boxes. `gt_only`: the exact GT."""
    rng = np.random.default_rng(seed)
    results = {}
    for tok in tables.sample_tokens_of_split(split):
        ego = np.array(tables.ego_of_sample[tok]["translation"])
        out = results.setdefault(tok, [])
        for a in tables.anns[tok]:
            name = category_to_detection_name(a["category_name"])
            if name is None:
                continue
            vel = tables.box_velocity(a)[:2]
            attr = a["attribute_names"][0] if a["attribute_names"] else ""
            box = {"sample_token": tok, "translation": list(a["translation"]), "size": list(a["size"]),
                   "rotation": list(a["rotation"]), "velocity": [float(v) for v in vel], "detection_name": name,
                   "detection_score": 1.0, "attribute_name": attr}
            if gt_only:
                if a["num_lidar_pts"] + a["num_radar_pts"] > 0:
                    out.append(box)
                continue
            if rng.random() < p_drop:
                continue
            box["translation"] = [a["translation"][0] + float(rng.normal(0, noise)),
                                  a["translation"][1] + float(rng.normal(0, noise)), a["translation"][2]]
            box["size"] = [float(s * math.exp(rng.normal(0, 0.3 * noise))) for s in a["size"]]
            flip = np.pi if rng.random() < 0.2 else 0.0  # a box facing backwards
            box["rotation"] = _yaw_quat(yaw_of(a["rotation"]) + flip + float(rng.normal(0, 0.5 * noise)))
            vel = np.nan_to_num(vel) + rng.normal(0, noise, 2)
            box["velocity"] = [float("nan")] * 2 if rng.random() < 0.05 else [float(v) for v in vel]
            if rng.random() < p_attr:
                box["attribute_name"] = str(rng.choice(sum(ATTRS.values(), [])))
            if rng.random() < p_swap:
                box["detection_name"] = str(rng.choice(DETECTION_NAMES))
            box["detection_score"] = float(rng.random())
            out.append(box)
            if rng.random() < 0.1:  # a duplicate: a false positive next to a true one
                out.append(dict(box, detection_score=float(rng.random()) * 0.5))
        for _ in range(0 if gt_only else n_fp):
            r, phi = rng.uniform(2, 60), rng.uniform(-np.pi, np.pi)
            out.append({"sample_token": tok, "translation": [float(ego[0] + r * math.cos(phi)),
                                                             float(ego[1] + r * math.sin(phi)), 1.0],
                        "size": [float(v) for v in rng.uniform(0.5, 4, 3)], "rotation": _yaw_quat(float(phi)),
                        "velocity": [float(v) for v in rng.normal(0, 2, 2)],
                        "detection_name": str(rng.choice(DETECTION_NAMES)),
                        "detection_score": float(rng.random()), "attribute_name": ""})
        if quantize:
            for b in out:
                b["detection_score"] = round(b["detection_score"] * quantize) / quantize
    return {"meta": {"use_camera": True, "use_lidar": False, "use_radar": False, "use_map": False,
                     "use_external": False}, "results": results}


def _write_results(tmp_path, sub) -> str:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(sub))
    return str(path)


def _devkit(nusc, split, results, out_dir) -> dict:
    ev = DetectionEval(nusc, config_factory("detection_cvpr_2019"), results, split, output_dir=str(out_dir),
                       verbose=False)
    return ev.evaluate()[0].serialize()


def _flat(s: dict) -> dict:
    """Every figure of a metrics summary, keyed by name (distance keys as floats)."""
    out = {"mean_ap": s["mean_ap"], "nd_score": s["nd_score"]}
    out.update({f"tp/{k}": v for k, v in s["tp_errors"].items()})
    for c, d in s["label_aps"].items():
        out.update({f"ap/{c}/{float(t)}": v for t, v in d.items()})
    for c, d in s["label_tp_errors"].items():
        out.update({f"tp/{c}/{m}": v for m, v in d.items()})
    return out


def _assert_same(ours: dict, theirs: dict) -> None:
    a, b = _flat(ours), _flat(theirs)
    assert set(a) == set(b)
    assert len(a) == 2 + 5 + 40 + 50
    bad = {k: (a[k], b[k]) for k in a if not (math.isnan(a[k]) and math.isnan(b[k])) and not abs(a[k] - b[k]) <= 1e-3}
    assert not bad, bad


CASES = {  # name: (split, prediction options)
    "noisy": ("sim_train", dict(seed=0, noise=0.4)),
    "hard": ("sim_train", dict(seed=1, noise=1.5, p_drop=0.3, p_swap=0.25, p_attr=0.4, n_fp=8)),
    "tied_scores": ("sim_one", dict(seed=2, noise=0.6, quantize=4)),
    "official_mini_train": ("mini_train", dict(seed=3, noise=0.8)),
    "gt": ("sim_train", dict(seed=0, noise=0.0, gt_only=True)),
}


@needs_devkit
@pytest.mark.parametrize("case", list(CASES))
def test_equal_to_devkit(case, dataroot, tables, nusc, tmp_path):
    split, opts = CASES[case]
    results = _write_results(tmp_path, _predictions(tables, split, **opts))
    ours = evaluate_nuscenes(dataroot, VERSION, split, results, tables=tables).serialize()
    theirs = _devkit(nusc, split, results, tmp_path / "devkit")
    _assert_same(ours, theirs)
    if case == "gt":  # the true boxes as predictions: a perfect mAP, NDS at most 1 (up to float rounding)
        assert abs(ours["mean_ap"] - 1.0) < 1e-9 and 0.5 < ours["nd_score"] <= 1.0 + 1e-9
    else:
        assert 0.0 < ours["mean_ap"] < 1.0 and 0.0 < ours["nd_score"] < 1.0


def test_fixture_exercises_every_path(tables):
    gt = tables.load_gt(tables.sample_tokens_of_split("sim_train"))
    names = {b.detection_name for bs in gt.values() for b in bs}
    assert {"barrier", "trailer", "motorcycle", "traffic_cone", "bicycle", "bus", "car", "pedestrian"} <= names
    assert any(tables.bike_racks(t) for t in gt)
    assert any(b.num_pts == 0 for bs in gt.values() for b in bs)


def test_ground_truth_as_predictions_is_perfect(dataroot, tables, tmp_path):
    results = _write_results(tmp_path, _predictions(tables, "sim_train", seed=0, noise=0.0, gt_only=True))
    m = evaluate_nuscenes(dataroot, VERSION, "sim_train", results, tables=tables)
    gt = tables.load_gt(tables.sample_tokens_of_split("sim_train"))
    add_center_dist(tables, gt)
    present = {b.detection_name for bs in filter_boxes(tables, gt, DetectionConfig().class_range).values() for b in bs}
    assert present
    for c in DETECTION_NAMES:
        if c in present:
            assert m.mean_dist_aps[c] == pytest.approx(1.0)
            for k, v in m.label_tp_errors[c].items():
                assert math.isnan(v) or v == pytest.approx(0.0, abs=1e-6), (c, k, v)
        elif all(b.detection_name != c for bs in gt.values() for b in bs):
            assert m.mean_dist_aps[c] == 0.0  # no GT at all: AP 0 and TP errors 1, as the devkit
    assert m.mean_ap == pytest.approx(len(present) / 10)


def test_cli_writes_metrics_json(dataroot, tables, tmp_path, capsys):
    results = _write_results(tmp_path, _predictions(tables, "sim_train", seed=5, noise=0.5))
    out = tmp_path / "m" / "metrics.json"
    assert main(["eval-nuscenes", "--data", str(dataroot), "--version", VERSION, "--split", "sim_train",
                 "--results", results, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mAP:" in text and "NDS:" in text and "mAVE:" in text and "pedestrian" in text
    s = json.loads(out.read_text())
    for key in ("label_aps", "mean_dist_aps", "mean_ap", "label_tp_errors", "tp_errors", "tp_scores", "nd_score",
                "eval_time", "cfg", "meta"):
        assert key in s
    assert set(s["label_aps"]["car"]) == {"0.5", "1.0", "2.0", "4.0"} and set(s["tp_errors"]) == set(TP_METRICS)
    assert s["cfg"] == DetectionConfig().serialize()


def test_clear_errors(dataroot, tables, tmp_path, capsys):
    sub = _predictions(tables, "sim_train", seed=6, noise=0.3)
    results = _write_results(tmp_path, sub)
    with pytest.raises(NuScenesEvalError, match="needs a v1.0-trainval dataset"):
        evaluate_nuscenes(dataroot, VERSION, "val", results, tables=tables)
    trainval = copy.copy(tables)
    trainval.version = "v1.0-trainval"
    with pytest.raises(NuScenesEvalError, match="not shipped"):
        trainval.scenes_of_split("val")
    with pytest.raises(NuScenesEvalError, match="unknown split 'nope'"):
        tables.scenes_of_split("nope")
    assert len(tables.scenes_of_split("all")) == 2
    with pytest.raises(NuScenesEvalError, match="official splits need exactly"):  # 2 scenes given, 1 in mini_train
        evaluate_nuscenes(dataroot, VERSION, "mini_train", results, tables=tables)
    first = next(iter(sub["results"]))
    bad = dict(sub, results={k: v for k, v in sub["results"].items() if k != first})
    with pytest.raises(NuScenesEvalError, match="have no entry"):
        evaluate_nuscenes(dataroot, VERSION, "sim_train", _write_results(tmp_path, bad), tables=tables)
    many = json.loads(json.dumps(sub))
    many["results"][first] = [dict(sub["results"][first][0])] * 501 if sub["results"][first] else []
    if many["results"][first]:
        with pytest.raises(NuScenesEvalError, match="at most 500"):
            evaluate_nuscenes(dataroot, VERSION, "sim_train", _write_results(tmp_path, many), tables=tables)
    wrong = json.loads(json.dumps(sub))
    next(b for bs in wrong["results"].values() for b in bs)["detection_name"] = "tram"
    with pytest.raises(NuScenesEvalError, match="unknown detection_name 'tram'"):
        evaluate_nuscenes(dataroot, VERSION, "sim_train", _write_results(tmp_path, wrong), tables=tables)
    assert main(["eval-nuscenes", "--data", str(dataroot), "--version", VERSION, "--split", "nope",
                 "--results", results, "--out", str(tmp_path / "x.json")]) == 2
    assert "unknown split 'nope'" in capsys.readouterr().err
