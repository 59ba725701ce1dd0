"""The gate and the model registry (docs/data_engine.md "Gate, suites, registry"; the frozen suites themselves
are tests/test_engine_suites.py): verdicts on constructed metric tables (drop beyond tolerance, targeted slice,
aggregate, lower-is-better, NaN), the unit-tests suite appended in versions,
promote/rollback/history with a failure inside promote, and an end-to-end
gate of two tiny trained checkpoints (and a damaged one) through the CLI."""
from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from engine_fixtures import REPO, make_fleet

from data_engine.catalog import Catalog, CatalogError
from hydranet.io import file_sha256
from data_engine.fleet import FleetConfig
from data_engine.gate import AGGREGATE, GateError, GateRule, decide, evaluate_suites, format_gate, gate, write_gate
from data_engine.registry import RegistryError, history, production, promote, rollback
from data_engine.suites import (SUITES_FILE, SliceSpec, SuiteError, SuitesConfig, add_unit_tests, generate_suites,
                                load_suites)

TINY = dict(clips=1, frames=2, image_width=96, image_height=64)


# -- verdicts on constructed tables ---------------------------------------------------------------------
def table(values: dict[str, dict[str, float]], frames: dict[str, int] | None = None, hib: dict[str, bool] | None = None):
    """{slice: {head: value}} -> suite_table's form (metric "m_<head>", higher is better unless `hib` says)."""
    hib = hib or {}
    return {s: {"frames": (frames or {}).get(s, 10),
                "heads": {h: {"metric": f"m_{h}", "value": v, "higher_is_better": hib.get(h, True)} for h, v in hv.items()}}
            for s, hv in values.items()}


PROD = {"day": {"det": 0.50, "depth": 0.30}, "night": {"det": 0.40, "depth": 0.35}, "fog": {"det": 0.45, "depth": 0.32}}
HIB = {"det": True, "depth": False}


def with_(base, **changes):
    out = json.loads(json.dumps(base))
    for key, v in changes.items():
        s, h = key.split("__")
        out[s][h] = v
    return out


def test_equal_models_promote_and_small_drop_within_tolerance_passes():
    rep = decide(table(PROD, hib=HIB), table(PROD, hib=HIB))
    assert rep["promote"] and rep["failing"] == [] and rep["verdict"] == "promote"
    assert len(rep["rows"]) == 3 * 2 + 2 and {r["slice"] for r in rep["rows"]} == {"day", "night", "fog", AGGREGATE}
    cand = with_(PROD, night__det=0.39, day__det=0.52)  # -0.01 on night, +0.02 on day: aggregate not worse
    rep = decide(table(cand, hib=HIB), table(PROD, hib=HIB), GateRule(tolerance=0.02))
    assert rep["promote"], format_gate(rep)
    assert rep["slices"] == {"day": 0.52, "night": 0.39, "fog": 0.45}  # the summary head (first: det)


def test_drop_beyond_tolerance_fails_naming_the_slice():
    cand = with_(PROD, night__det=0.37, day__det=0.60)  # night loses 0.03 > 0.02 although the aggregate improves
    rep = decide(table(cand, hib=HIB), table(PROD, hib=HIB), GateRule(tolerance=0.02))
    assert not rep["promote"] and rep["failing"] == ["night"]
    bad = [r for r in rep["rows"] if r["verdict"] == "fail"]
    assert [(r["slice"], r["head"]) for r in bad] == [("night", "det")]
    assert "worse by 0.0300 > tolerance 0.02" in bad[0]["reason"]
    md = format_gate(rep)
    assert "**verdict: REJECT** (failing: night; point estimates" in md
    assert "| night | det | m_det | 0.4000 | 0.3700 | -0.0300 | - | **FAIL**" in md
    assert decide(table(cand, hib=HIB), table(PROD, hib=HIB), GateRule(tolerance=0.05))["promote"]
    assert decide(table(cand, hib=HIB), table(PROD, hib=HIB), GateRule(head_tolerance={"det": 0.05}))["promote"]


def test_targeted_slice_must_improve_by_min_gain():
    rule = GateRule(targeted=("night",), min_gain=0.01)
    same = decide(table(PROD, hib=HIB), table(PROD, hib=HIB), rule)
    assert not same["promote"] and same["failing"] == ["night"]
    assert all("targeted: gained +0.0000 < min_gain 0.01" in r["reason"] for r in same["rows"] if r["verdict"] == "fail")
    better = with_(PROD, night__det=0.42, night__depth=0.33)  # det +0.02, depth 0.35 -> 0.33 (lower is better): +0.02
    assert decide(table(better, hib=HIB), table(PROD, hib=HIB), rule)["promote"]
    only_det = with_(PROD, night__det=0.42)
    assert not decide(table(only_det, hib=HIB), table(PROD, hib=HIB), rule)["promote"]  # depth did not improve
    assert decide(table(only_det, hib=HIB), table(PROD, hib=HIB), GateRule(targeted=("night",), targeted_heads=("det",)))["promote"]
    with pytest.raises(GateError, match="gate.targeted names slice 'dusk', not a suite here"):
        decide(table(PROD, hib=HIB), table(PROD, hib=HIB), GateRule(targeted=("dusk",)))


def test_aggregate_worse_fails_even_when_every_slice_is_within_tolerance():
    cand = with_(PROD, day__det=0.49, night__det=0.39, fog__det=0.44)  # -0.01 everywhere
    rep = decide(table(cand, hib=HIB), table(PROD, hib=HIB), GateRule(tolerance=0.02))
    assert not rep["promote"] and rep["failing"] == [AGGREGATE]
    agg = next(r for r in rep["rows"] if r["slice"] == AGGREGATE and r["head"] == "det")
    assert math.isclose(agg["delta"], -0.01) and agg["reason"].startswith("aggregate: worse by 0.0100")
    assert decide(table(cand, hib=HIB), table(PROD, hib=HIB), GateRule(aggregate_tolerance=0.02))["promote"]


def test_aggregate_is_frame_weighted():
    # night (90 frames) gains 0.01, day (10 frames) loses 0.02: the frame-weighted mean improves, the plain mean does not
    prod = {"day": {"det": 0.5}, "night": {"det": 0.4}}
    cand = {"day": {"det": 0.48}, "night": {"det": 0.41}}
    frames = {"day": 10, "night": 90}
    rep = decide(table(cand, frames), table(prod, frames), GateRule(tolerance=0.02))
    agg = next(r for r in rep["rows"] if r["slice"] == AGGREGATE)
    assert rep["promote"] and math.isclose(agg["candidate"], (10 * 0.48 + 90 * 0.41) / 100)


def test_lower_is_better_metric():
    worse = with_(PROD, fog__depth=0.36)  # abs_rel 0.32 -> 0.36: worse by 0.04
    rep = decide(table(worse, hib=HIB), table(PROD, hib=HIB))
    assert rep["failing"] == ["fog", AGGREGATE]
    row = next(r for r in rep["rows"] if r["slice"] == "fog" and r["head"] == "depth")
    assert math.isclose(row["delta"], 0.04) and math.isclose(row["gain"], -0.04) and row["verdict"] == "fail"
    better = with_(PROD, fog__depth=0.20)  # lower: better, by 0.12
    rep = decide(table(better, hib=HIB), table(PROD, hib=HIB))
    row = next(r for r in rep["rows"] if r["slice"] == "fog" and r["head"] == "depth")
    assert rep["promote"] and row["reason"].startswith("improved (point estimate") and "(lower is better)" in format_gate(rep)


def test_models_evaluated_on_other_cameras_are_not_compared():
    cand, prod = table(PROD, hib=HIB), table(PROD, hib=HIB)
    for s in cand:
        cand[s]["cameras"], prod[s]["cameras"] = ["CAM_FRONT", "CAM_BACK", "CAM_FRONT_LEFT"], ["CAM_FRONT", "CAM_BACK"]
    with pytest.raises(GateError, match="evaluated on cameras"):
        decide(cand, prod)


@pytest.mark.parametrize("value", [math.nan, None])
def test_a_metric_undefined_for_the_candidate_alone_fails_its_slice(value):
    """The candidate scores nothing where the production scores (e.g. it matches no sign): the slice
    fails and is named, the row is left out of the aggregate, the gate rejects; never a pass on NaN."""
    rep = decide(table(with_(PROD, night__det=value), hib=HIB), table(PROD, hib=HIB))
    row = next(r for r in rep["rows"] if r["slice"] == "night" and r["head"] == "det")
    assert row["verdict"] == "fail" and row["candidate"] is None and row["production"] == PROD["night"]["det"]
    assert not rep["promote"] and rep["failing"] == ["night"] and "undefined for the candidate" in format_gate(rep)
    agg = next(r for r in rep["rows"] if r["slice"] == AGGREGATE and r["head"] == "det")
    assert math.isclose(agg["production"], agg["candidate"])  # the other slices, equal for both
    json.dumps(rep, allow_nan=False)


@pytest.mark.parametrize("value", [math.nan, None])
def test_a_metric_undefined_for_the_production_alone_is_not_a_failure(value):
    rep = decide(table(PROD, hib=HIB), table(with_(PROD, night__det=value), hib=HIB))
    row = next(r for r in rep["rows"] if r["slice"] == "night" and r["head"] == "det")
    assert row["verdict"] == "pass" and row["production"] is None and rep["promote"]


@pytest.mark.parametrize("value", [math.nan, None])
def test_nothing_to_score_for_both_models_is_na_and_left_out_of_the_aggregate(value):
    """A slice without any sign scores NaN for every model: its row is n/a, not a pass or a fail, and the
    aggregate is the frame-weighted mean over the slices that scored."""
    prod, cand = with_(PROD, night__det=value), with_(PROD, night__det=value, day__det=0.40)
    rep = decide(table(cand, hib=HIB), table(prod, hib=HIB))
    row = next(r for r in rep["rows"] if r["slice"] == "night" and r["head"] == "det")
    assert row["verdict"] == "n/a" and row["candidate"] is None and "night" not in rep["slices"]
    agg = next(r for r in rep["rows"] if r["slice"] == AGGREGATE and r["head"] == "det")
    assert math.isclose(agg["production"], (0.50 + 0.45) / 2) and math.isclose(agg["candidate"], (0.40 + 0.45) / 2)
    assert rep["failing"] == ["day", AGGREGATE] and "n/a: nothing to score" in format_gate(rep)
    json.dumps(rep, allow_nan=False)  # gate.json stays strict JSON
    both = {"day": {"det": value, "depth": 0.3}}
    rep = decide(table(both, hib=HIB), table(both, hib=HIB))
    assert rep["ungated"] == ["det"] and rep["promote"] and "not gated (nothing to score on any suite): det" in format_gate(rep)
    with pytest.raises(GateError, match="no suite holds anything any head scores"):
        decide(table({"day": {"det": value}}), table({"day": {"det": value}}))


def test_models_of_other_heads_or_metrics_are_refused():
    with pytest.raises(GateError, match="candidate heads"):
        decide(table({"day": {"det": 0.5}}), table({"day": {"det": 0.5, "depth": 0.3}}))
    c, p = table({"day": {"det": 0.5}}), table({"day": {"det": 0.5}})
    c["day"]["heads"]["det"]["metric"] = "mAP"
    with pytest.raises(GateError, match="judged by mAP for the candidate"):
        decide(c, p)
    with pytest.raises(GateError, match="same suites folder"):
        decide(table({"day": {"det": 0.5}}), table({"night": {"det": 0.5}}))


def test_rule_values_are_checked():
    from hydranet.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="gate.tolerance must be a finite number >= 0"):
        GateRule(tolerance=-0.1)
    with pytest.raises(ConfigError, match="gate.head_tolerance.depth"):
        GateRule(head_tolerance={"depth": math.nan})
    from data_engine.config import EngineConfig

    cfg = load_config(EngineConfig, "engine")
    assert cfg.suites == SuitesConfig() and cfg.gate == GateRule()  # configs/engine.yaml spells out the defaults


# -- the noise-aware rule: paired bootstrap over clips ------------------------------------------------------
class MeanMetric:
    """A metric whose state per item is {"v": value} and whose value is the mean over items."""

    def merge_states(self, states):
        return list(states)

    def compute_states(self, states):
        vals = [s["v"] for s in states if s is not None]
        return {"m_det": float(np.mean(vals)) if vals else math.nan}


def clip_table(per_clip: dict[str, list[float]], frames_per_clip: int = 2):
    """{slice: per-clip values} -> a suite table with per-frame states (each frame of a clip has its value)."""
    out = {}
    for s, values in per_clip.items():
        clips = [f"{s}-clip{k}" for k, _ in enumerate(values) for _ in range(frames_per_clip)]
        states = [[{"v": v}] for v in values for _ in range(frames_per_clip)]
        out[s] = {"frames": len(clips), "clips": clips,
                  "heads": {"det": {"metric": "m_det", "value": float(np.mean(values)), "higher_is_better": True,
                                    "states": states}}}
    return out


PROD_CLIPS = {"day": [0.50, 0.62, 0.41, 0.55, 0.47, 0.58], "night": [0.40, 0.31, 0.52, 0.36, 0.45, 0.38]}


def test_a_point_drop_beyond_tolerance_within_noise_passes():
    """night drops 0.03 on average (> tolerance 0.02), but clip by clip the differences scatter around 0:
    the interval includes 0, so it is not a drop beyond tolerance with 95% confidence."""
    diffs = [+0.12, -0.17, +0.09, -0.14, +0.06, -0.14]  # mean -0.03
    cand = {"day": PROD_CLIPS["day"], "night": [p + d for p, d in zip(PROD_CLIPS["night"], diffs)]}
    point = decide(clip_table(cand), clip_table(PROD_CLIPS), GateRule(tolerance=0.02, aggregate_tolerance=1.0))
    assert not point["promote"] and point["failing"] == ["night"]  # no metric: the point estimate decides
    rep = decide(clip_table(cand), clip_table(PROD_CLIPS), GateRule(tolerance=0.02, aggregate_tolerance=1.0),
                 {"det": MeanMetric()})
    assert rep["promote"], format_gate(rep)
    night = next(r for r in rep["rows"] if r["slice"] == "night")
    assert math.isclose(night["gain"], -0.03) and night["gain_ci"][0] < -0.02 < 0 < night["gain_ci"][1]
    assert night["verdict"] == "pass" and "not beyond tolerance 0.02 with 95% confidence" in night["reason"]
    md = format_gate(rep)
    lo, hi = night["delta_ci"]
    assert f"| night | det | m_det | 0.4033 | 0.3733 | -0.0300 | [{lo:+.4f}, {hi:+.4f}] | pass" in md
    assert "PROMOTE** (no slice regressed beyond the rule with 95% confidence; paired bootstrap" in md


def test_a_consistent_large_drop_fails_with_confidence_and_the_aggregate_has_its_interval():
    diffs = [-0.05, -0.045, -0.055, -0.05, -0.048, -0.052]
    cand = {"day": PROD_CLIPS["day"], "night": [p + d for p, d in zip(PROD_CLIPS["night"], diffs)]}
    rep = decide(clip_table(cand), clip_table(PROD_CLIPS), GateRule(tolerance=0.02), {"det": MeanMetric()})
    assert not rep["promote"] and rep["failing"] == ["night", AGGREGATE]
    night = next(r for r in rep["rows"] if r["slice"] == "night")
    assert night["gain_ci"][1] < -0.02 and "with 95% confidence" in night["reason"]
    agg = next(r for r in rep["rows"] if r["slice"] == AGGREGATE)
    assert math.isclose(agg["gain"], -0.025) and agg["gain_ci"][1] < 0  # day unchanged, night -0.05, equal frames
    day = next(r for r in rep["rows"] if r["slice"] == "day")
    assert day["gain_ci"] == [0.0, 0.0] and day["verdict"] == "pass"


def test_the_bootstrap_is_seeded_and_paired():
    diffs = [+0.12, -0.17, +0.09, -0.14, +0.06, -0.14]
    cand = {"day": PROD_CLIPS["day"], "night": [p + d for p, d in zip(PROD_CLIPS["night"], diffs)]}
    runs = [decide(clip_table(cand), clip_table(PROD_CLIPS), GateRule(seed=s), {"det": MeanMetric()}) for s in (0, 0, 1)]
    assert runs[0] == runs[1]
    assert runs[0]["rows"][1]["gain_ci"] != runs[2]["rows"][1]["gain_ci"]
    # paired: a candidate equal to the production, clip for clip, has a zero-width interval
    rep = decide(clip_table(PROD_CLIPS), clip_table(PROD_CLIPS), GateRule(), {"det": MeanMetric()})
    assert all(r["gain_ci"] == [0.0, 0.0] for r in rep["rows"])
    assert json.loads(json.dumps(rep["rows"], allow_nan=False)) == rep["rows"]  # gate.json holds no arrays


def test_no_interval_falls_back_to_the_point_estimate_and_says_why():
    diffs = [+0.12, -0.17, +0.09, -0.14, +0.06, -0.14]
    cand = clip_table({"day": PROD_CLIPS["day"], "night": [p + d for p, d in zip(PROD_CLIPS["night"], diffs)]})
    for s in cand.values():
        s["heads"]["det"]["states"] = None  # a head whose metric keeps no states
    rep = decide(cand, clip_table(PROD_CLIPS), GateRule(aggregate_tolerance=1.0), {"det": MeanMetric()})
    night = next(r for r in rep["rows"] if r["slice"] == "night")
    assert night["verdict"] == "fail" and night["gain_ci"] is None
    assert "point estimate: the head's metric keeps no per-frame states" in night["reason"]
    one = decide(clip_table({"day": [0.5]}), clip_table({"day": [0.6]}), GateRule(), {"det": MeanMetric()})
    assert not one["promote"] and "one clip: nothing to resample" in one["rows"][0]["reason"]
    off = decide(clip_table(PROD_CLIPS), clip_table(PROD_CLIPS), GateRule(resamples=0), {"det": MeanMetric()})
    assert all(r["gain_ci"] is None for r in off["rows"]) and "gate.resamples is 0" in off["rows"][0]["reason"]
    for bad in ({"confidence": 1.0}, {"resamples": 10}, {"resamples": True}):
        with pytest.raises(ValueError, match="gate"):
            GateRule(**bad)


def test_write_gate_is_json_and_markdown(tmp_path):
    rep = decide(table(with_(PROD, night__det=0.3), hib=HIB), table(PROD, hib=HIB))
    out = write_gate(rep, tmp_path / "g")
    back = json.loads((out / "gate.json").read_text())
    assert back["failing"] == ["night", AGGREGATE] and back["promote"] is False
    assert "**verdict: REJECT** (failing: night, aggregate; point estimates: no row has an interval)" in (out / "gate.md").read_text()
    assert not list(out.glob("*.tmp-*"))


# -- the unit-tests suite ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    return make_fleet(tmp_path_factory.mktemp("gate_fleet") / "fleet", clips=2, frames=2, seed=5)


def oracle(frame: Path) -> dict:
    return json.loads((frame / "labels.json").read_text())


def test_unit_tests_append_in_versions_idempotently(fleet, tmp_path, monkeypatch):
    from hydranet.data.sim_reader import SimDataset

    out = generate_suites(tmp_path / "s", SuitesConfig(**TINY, slices={"day": SliceSpec()}), FleetConfig(), progress=False)
    f0, f1 = fleet / "scenes" / "clip_00000" / "000001", fleet / "scenes" / "clip_00001" / "000000"
    got = add_unit_tests(out, [(f0, oracle(f0))])
    assert (got["added"], got["frames"], got["version"]) == (1, 1, 1)
    assert add_unit_tests(out, [(f0, oracle(f0))])["added"] == 0  # the same frame and label: nothing new
    assert json.loads((out / SUITES_FILE).read_text())["unit_tests"]["version"] == 1
    # a kill between writing version 2 and committing it: version 1 stays in force, the orphan is rebuilt next time
    import data_engine.suites as suites_mod

    real = suites_mod._atomic_text
    monkeypatch.setattr(suites_mod, "_atomic_text", lambda p, t: (_ for _ in ()).throw(KeyboardInterrupt())
                        if p.name == SUITES_FILE else real(p, t))
    with pytest.raises(KeyboardInterrupt):
        add_unit_tests(out, [(f1, oracle(f1))])
    monkeypatch.undo()
    assert load_suites(out)["suites"]["unit_tests"]["path"].name == "v0001"
    got = add_unit_tests(out, [(f0, oracle(f0)), (f1, oracle(f1))])
    assert (got["added"], got["existing"], got["frames"], got["version"]) == (1, 1, 2, 2)
    suites = load_suites(out)["suites"]
    assert list(suites) == ["day", "unit_tests"] and suites["unit_tests"]["frames"] == 2
    ds = SimDataset(suites["unit_tests"]["path"])
    labels = sorted(json.dumps(ds[i]["labels"], sort_keys=True) for i in range(len(ds)))
    assert labels == sorted(json.dumps(oracle(f), sort_keys=True) for f in (f0, f1))
    assert np.array_equal(ds[0]["images"][0] if ds.scenes[0]["source"]["frame"] == str(f0.resolve()) else ds[1]["images"][0],
                          SimDataset(fleet)[1]["images"][0])
    # a changed label of the same frame is a new entry (a new version), never a silent replacement
    relabelled = oracle(f0)
    relabelled["cameras"]["CAM_FRONT"]["boxes2d"] = []
    assert add_unit_tests(out, [(f0, relabelled)])["frames"] == 3
    assert sorted(p.name for p in (out / "unit_tests").iterdir()) == ["v0002", "v0003"]  # current and the one before
    # regenerating the frozen slices keeps the unit tests
    generate_suites(out, SuitesConfig(**TINY, slices={"day": SliceSpec()}), FleetConfig(), overwrite=True, progress=False)
    assert load_suites(out)["suites"]["unit_tests"]["frames"] == 3


def test_unit_tests_refuse_partial_labels_and_foreign_folders(fleet, tmp_path):
    out = generate_suites(tmp_path / "s", SuitesConfig(**TINY, slices={"day": SliceSpec()}), FleetConfig(), progress=False)
    f0 = fleet / "scenes" / "clip_00000" / "000000"
    two_d_only = {"cameras": oracle(f0)["cameras"]}
    with pytest.raises(SuiteError, match="has no 'boxes3d'"):
        add_unit_tests(out, [(f0, two_d_only)])
    one_cam = {**oracle(f0), "cameras": {"CAM_FRONT": oracle(f0)["cameras"]["CAM_FRONT"]}}
    with pytest.raises(SuiteError, match="needs a label for every camera"):
        add_unit_tests(out, [(f0, one_cam)])
    bad = oracle(f0)
    bad["boxes3d"] = [{"class": "spaceship", "center": [1, 1, 1], "size": [1, 1, 1], "yaw": 0}]
    with pytest.raises(SuiteError, match="bad label .*spaceship"):
        add_unit_tests(out, [(f0, bad)])
    with pytest.raises(SuiteError, match="is not a frame folder of a fleet"):
        add_unit_tests(out, [(tmp_path, oracle(f0))])
    with pytest.raises(SuiteError, match="not a suites folder"):
        add_unit_tests(fleet, [(f0, oracle(f0))])
    assert json.loads((out / SUITES_FILE).read_text())["unit_tests"] is None  # nothing half-added


# -- registry ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(fleet, tmp_path_factory) -> dict[str, Path]:
    """Two engine_tiny checkpoints (2 steps, seeds 0 and 1) and a damaged copy of the first (its depth output
    shifted by e^6), plus a metadata-only HydraNet ONNX file for the registry."""
    import onnx
    import torch
    from onnx import TensorProto, helper

    from deploy.metadata import FORMAT, FORMAT_VERSION, PREFIX, REQUIRED_KEYS, set_metadata
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    root = tmp_path_factory.mktemp("gate_models")
    out = {}
    for name, seed in (("a", 0), ("b", 1)):
        cfg = load_experiment(REPO / "configs" / "engine_tiny.yaml", [f"data.root={fleet}", "steps=2", "checkpoint_every=2",
                                                                       "batch_size=1", "optim.warmup_steps=1", "device=cpu",
                                                                       f"seed={seed}"])
        train(cfg, root / name, progress=False)
        out[name] = root / name
    ckpt = torch.load(root / "a" / "checkpoint.pt", weights_only=True)
    ckpt["model"]["heads.depth.head.out.bias"] += 6.0
    (root / "damaged").mkdir()
    torch.save(ckpt, root / "damaged" / "checkpoint.pt")
    out["damaged"] = root / "damaged"
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g)
    own = {"format": {"name": FORMAT, "version": FORMAT_VERSION},  # an export of a: promote checks its source
           "source": {"checkpoint_sha256": file_sha256(root / "a" / "checkpoint.pt")}}
    set_metadata(m, {PREFIX + k: json.dumps(own.get(k, {})) for k in (*REQUIRED_KEYS, "source")})
    onnx.save(m, str(root / "a.onnx"))
    out["onnx"] = root / "a.onnx"
    return out


def test_promote_rollback_history(models, tmp_path):
    cat = tmp_path / "cat.db"
    assert production(cat, missing_ok=True) is None
    a = promote(cat, models["a"], onnx=models["onnx"], note="first")
    assert a["checkpoint"] == str((models["a"] / "checkpoint.pt").resolve()) and a["onnx"] == str(models["onnx"].resolve())
    assert production(cat)["id"] == a["id"] and production(cat)["note"] == "first"
    assert promote(cat, models["a"] / "checkpoint.pt", onnx=models["onnx"])["id"] == a["id"]  # already production: no-op
    b = promote(cat, models["b"], note="second")
    assert b["previous_id"] == a["id"] and production(cat)["sha256"] == b["sha256"] != a["sha256"]
    back = rollback(cat)
    assert back["sha256"] == a["sha256"] and back["onnx"] == a["onnx"] and back["action"] == "rollback"
    assert production(cat)["id"] == back["id"]
    with pytest.raises(RegistryError, match="has no previous production to roll back to"):
        rollback(cat)
    h = history(cat)
    assert [(r["role"], r["action"]) for r in h] == [("retired", "promote"), ("rolled_back", "promote"),
                                                      ("production", "rollback")]
    assert all(r["status"] == "ok" for r in h)
    with Catalog(cat) as c:  # exactly one production entry, enforced by the schema
        with pytest.raises(sqlite3.IntegrityError):
            c.db.execute("UPDATE registry SET role = 'production' WHERE id = 1")
    Catalog(tmp_path / "empty.db", create=True).close()
    with pytest.raises(RegistryError, match="has no production model"):
        rollback(tmp_path / "empty.db")
    with pytest.raises(RegistryError, match="has no production model; promote one"):
        production(tmp_path / "empty.db")


def test_failure_inside_promote_leaves_the_old_production(models, tmp_path, monkeypatch):
    import data_engine.registry as reg

    cat = tmp_path / "cat.db"
    a = promote(cat, models["a"])
    real = reg._insert_entry

    def crash(c, entry):
        real(c, entry)  # the new entry is written, then the process fails before COMMIT
        raise RuntimeError("crash inside the promotion (simulated)")

    monkeypatch.setattr(reg, "_insert_entry", crash)
    with pytest.raises(RuntimeError, match="simulated"):
        promote(cat, models["b"])
    monkeypatch.undo()
    assert production(cat)["id"] == a["id"] and len(history(cat)) == 1
    with Catalog(cat) as c:
        assert c.db.execute("SELECT count(*) FROM models").fetchone()[0] == 1


def test_missing_or_changed_production_is_an_error_at_use_time(models, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(models["b"], run)
    cat = tmp_path / "cat.db"
    promote(cat, models["a"])
    promote(cat, run)
    with open(run / "checkpoint.pt", "ab") as f:
        f.write(b"\0")
    with pytest.raises(RegistryError, match=r"production checkpoint .*run/checkpoint.pt .* changed since it was promoted"):
        production(cat)
    assert history(cat)[-1]["status"] == "checkpoint changed"
    (run / "checkpoint.pt").unlink()
    with pytest.raises(RegistryError, match="no longer exists"):
        production(cat)
    assert rollback(cat)["sha256"] == production(cat)["sha256"]  # rolling back to an intact model still works


def test_registry_upgrades_the_placeholder_only_when_empty(models, tmp_path):
    """A version-1 catalog's registry placeholder: upgraded by the catalog's migration when empty (then a
    promotion works), refused when it holds rows."""
    from engine_catalogs import write_v1_catalog

    empty = write_v1_catalog(tmp_path / "empty.db", registry="placeholder", rows=False)
    assert promote(empty, models["a"])["role"] == "production"
    full = write_v1_catalog(tmp_path / "full.db", registry="placeholder", rows=True)
    with pytest.raises(CatalogError, match="registry rows of an older layout"):
        promote(full, models["a"])


# -- end to end: two trained checkpoints on real suites ------------------------------------------------------
@pytest.fixture(scope="module")
def small_suites(fleet, tmp_path_factory) -> Path:
    slices = {k: SuitesConfig().slices[k] for k in ("cones_on_road",)}
    out = generate_suites(tmp_path_factory.mktemp("e2e") / "suites", SuitesConfig(**TINY, slices=slices), FleetConfig(),
                          progress=False)
    f = fleet / "scenes" / "clip_00001" / "000001"
    add_unit_tests(out, [(f, oracle(f))])
    return out


@pytest.fixture(scope="module")
def gated(models, small_suites, tmp_path_factory) -> dict:
    """One catalog in which a, b and the damaged model were gated (so their suite metrics are cached)."""
    cat = tmp_path_factory.mktemp("gated") / "cat.db"
    loose = GateRule(tolerance=1.0, aggregate_tolerance=1.0)
    return {"cat": cat, "ab": gate(models["b"], models["a"], small_suites, loose, catalog=cat),
            "bad": gate(models["damaged"], models["a"], small_suites, catalog=cat)}


def warm_catalog(gated, tmp_path) -> Path:
    cat = tmp_path / "cat.db"
    shutil.copy(gated["cat"], cat)
    return cat


def test_gate_end_to_end_with_cache(models, small_suites, gated, tmp_path, monkeypatch):
    import data_engine.gate as gate_mod

    rep = gated["ab"]
    heads = ["det2d", "lanes", "drivable", "depth", "det3d"]
    assert [(r["slice"], r["head"]) for r in rep["rows"]] == [(s, h) for s in ("cones_on_road", "unit_tests", AGGREGATE)
                                                                             for h in heads]
    assert rep["promote"] and all(math.isfinite(r["candidate"]) and math.isfinite(r["production"]) for r in rep["rows"])
    depth = next(r for r in rep["rows"] if r["slice"] == "cones_on_road" and r["head"] == "depth")
    assert depth["metric"] == "abs_rel" and depth["higher_is_better"] is False
    # the same number as a plain evaluation of the suite
    from hydranet.evaluate import evaluate_checkpoint

    direct = evaluate_checkpoint(models["a"], small_suites / "cones_on_road", None, progress=False)["model"]["depth"]["abs_rel"]
    assert math.isclose(depth["production"], direct)
    # cached by checkpoint sha256 + suite digest: no model is evaluated again
    cat = warm_catalog(gated, tmp_path)
    monkeypatch.setattr(gate_mod, "_evaluate", lambda *a: pytest.fail("evaluated again despite the cache"))
    again = gate(models["b"], models["a"], small_suites, GateRule(tolerance=1.0, aggregate_tolerance=1.0), catalog=cat)
    assert [r["candidate"] for r in again["rows"]] == [r["candidate"] for r in rep["rows"]]
    table = evaluate_suites(models["a"], small_suites, catalog=cat)
    assert table["cones_on_road"]["depth"] == depth["production"] and set(table) == {"cones_on_road", "unit_tests"}
    with Catalog(cat) as c:
        verdicts = [v for (v,) in c.db.execute("SELECT verdict FROM gate_results ORDER BY id")]
    assert verdicts.count("eval") == 6 and verdicts.count("promote") == 2 and verdicts.count("reject") == 1
    with Catalog(cat) as c:  # the cache keeps every frame's clip and metric states (what the bootstrap resamples)
        cached = [json.loads(m) for (m,) in c.db.execute("SELECT metrics FROM gate_results WHERE verdict = 'eval'")]
    assert all(len(m["clips"]) == m["frames"] == len(m["heads"][h]["states"]) for m in cached for h in heads)
    assert all("rule" in rep and "delta_ci" in r for r in rep["rows"] if r["delta"] is not None)


def test_metrics_cache_without_a_catalog_sits_next_to_the_checkpoint(models, small_suites, tmp_path, monkeypatch):
    import data_engine.gate as gate_mod

    run = tmp_path / "run"
    shutil.copytree(models["a"], run)
    calls = []

    def fake(ckpt, data):
        calls.append(Path(data).name)
        return {"frames": 2, "heads": {"depth": {"metric": "abs_rel", "value": 0.5, "higher_is_better": False}}}

    monkeypatch.setattr(gate_mod, "_evaluate", fake)
    first = evaluate_suites(run, small_suites)
    assert first == evaluate_suites(run, small_suites) and sorted(calls) == ["cones_on_road", "v0001"]
    assert json.loads((run / "checkpoint.pt.suite_metrics.json").read_text())["sha256"] == file_sha256(run / "checkpoint.pt")
    with open(run / "checkpoint.pt", "ab") as f:  # another model under the same path: evaluated afresh
        f.write(b"\0")
    evaluate_suites(run, small_suites)
    assert len(calls) == 4


def test_damaged_candidate_is_rejected_through_the_cli(models, small_suites, gated, tmp_path, capsys):
    from hydranet.cli import main

    cat = warm_catalog(gated, tmp_path)
    promote(cat, models["a"])
    with pytest.raises(SystemExit) as e:
        main(["engine", "gate", "--candidate", str(models["damaged"]), "--suites", str(small_suites), "--catalog", str(cat),
              "--out", str(tmp_path / "g"), "--promote", "--quiet"])
    assert e.value.code == 1
    out = capsys.readouterr().out
    rep = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert not rep["promote"] and {"cones_on_road", "unit_tests", AGGREGATE} <= set(rep["failing"])
    assert all(r["verdict"] == "fail" for r in rep["rows"] if r["head"] == "depth")
    assert "**verdict: REJECT**" in out and "| cones_on_road | depth | abs_rel (lower is better)" in out
    assert production(cat)["sha256"] == file_sha256(models["a"] / "checkpoint.pt")  # production unchanged
    assert gated["bad"]["failing"] == rep["failing"]


def test_passing_gate_promotes_through_the_cli(models, small_suites, gated, tmp_path, capsys):
    from hydranet.cli import main

    cat = warm_catalog(gated, tmp_path)
    promote(cat, models["a"])
    argv = ["engine", "gate", "--candidate", str(models["b"]), "--suites", str(small_suites), "--catalog", str(cat),
            "--out", str(tmp_path / "g"), "--promote", "--quiet", "--set", "gate.tolerance=1", "--set", "gate.aggregate_tolerance=1"]
    assert main(argv) == 0
    assert "**verdict: PROMOTE**" in capsys.readouterr().out
    assert production(cat)["checkpoint"] == str((models["b"] / "checkpoint.pt").resolve())
    assert main(["engine", "rollback", "--catalog", str(cat)]) == 0
    assert production(cat)["checkpoint"] == str((models["a"] / "checkpoint.pt").resolve())
    assert main(["engine", "registry", "--catalog", str(cat)]) == 0
    text = capsys.readouterr().out
    assert text.count("| promote |") == 2 and "| **production** | rollback |" in text


# -- what is resampled: clips (and time blocks), not frames (issue 34 item 2) --------------------------------
def timed_table(per_clip: dict[str, list[list[float]]], seconds: float):
    """{slice: [[frame values] per clip]} with frames `seconds` apart: a suite table with per-frame times."""
    out = {}
    for s, clips in per_clip.items():
        names = [f"{s}-clip{k}" for k, vals in enumerate(clips) for _ in vals]
        times = [i * seconds for vals in clips for i, _ in enumerate(vals)]
        states = [[{"v": v}] for vals in clips for v in vals]
        out[s] = {"frames": len(names), "clips": names, "times": times,
                  "heads": {"det": {"metric": "m_det", "value": float(np.mean([v for vals in clips for v in vals])),
                                    "higher_is_better": True, "states": states}}}
    return out


def test_frames_of_one_clip_are_one_unit_and_a_slice_of_few_units_is_undecided():
    """One 1.5 s recorded clip of 16 frames gains +0.04 on every frame: resampled as frames the interval would exclude 0
    and say "improved"; as one clip it is undecided, never improved, and says so in the verdict line."""
    rng = np.random.default_rng(0)
    prod = [[float(v) for v in rng.uniform(0.3, 0.6, 16)]]
    cand = [[v + 0.04 for v in prod[0]]]
    rep = decide(timed_table({"rec": cand}, 0.1), timed_table({"rec": prod}, 0.1), GateRule(), {"det": MeanMetric()})
    row = next(r for r in rep["rows"] if r["slice"] == "rec")
    assert row["verdict"] == "undecided" and row["reason"].startswith("undecided: 1 clip (a verdict needs 5); gain +0.0400")
    assert "improved" not in row["reason"] and rep["promote"] and rep["undecided"] == {"rec": "1 clip", AGGREGATE: "1 unit over 1 slice"}
    assert "undecided (too few independent clips): rec (1 clip)" in format_gate(rep).splitlines()[-1]
    # a clear drop on few clips still fails (the point estimate decides a one-clip slice)
    worse = decide(timed_table({"rec": [[v - 0.2 for v in prod[0]]]}, 0.1), timed_table({"rec": prod}, 0.1), GateRule(),
                   {"det": MeanMetric()})
    assert worse["failing"] == ["rec", AGGREGATE]
    # a targeted slice cannot show its gain on one clip
    tgt = decide(timed_table({"rec": cand}, 0.1), timed_table({"rec": prod}, 0.1), GateRule(targeted=("rec",)),
                 {"det": MeanMetric()})
    assert "rec" in tgt["failing"] and "targeted: undecided, 1 clip" in tgt["rows"][0]["reason"]


def test_a_long_clip_is_resampled_in_time_blocks_of_block_s():
    """A 60 s drive at 1 Hz: 6 blocks of 10 s are independent enough units; with block_s 0 it is one clip."""
    prod = [[0.4 + 0.1 * math.sin(i) for i in range(60)]]
    cand = [[v + 0.05 for v in prod[0]]]
    rep = decide(timed_table({"drive": cand}, 1.0), timed_table({"drive": prod}, 1.0), GateRule(), {"det": MeanMetric()})
    row = next(r for r in rep["rows"] if r["slice"] == "drive")
    assert row["verdict"] == "pass" and row["reason"].startswith("improved") and row["gain_ci"][0] > 0
    whole = decide(timed_table({"drive": cand}, 1.0), timed_table({"drive": prod}, 1.0), GateRule(block_s=0.0),
                   {"det": MeanMetric()})
    assert whole["rows"][0]["verdict"] == "undecided" and whole["rows"][0]["reason"].startswith("undecided: 1 clip")
    few = decide(timed_table({"drive": cand}, 1.0), timed_table({"drive": prod}, 1.0), GateRule(block_s=20.0),
                 {"det": MeanMetric()})
    assert few["rows"][0]["reason"].startswith("undecided: 1 clip in 3 blocks of 20 s")
    for bad in ({"block_s": -1.0}, {"block_s": math.inf}, {"min_units": 1}, {"min_units": True}):
        with pytest.raises(ValueError, match="gate"):
            GateRule(**bad)


def test_a_gain_whose_interval_includes_zero_is_not_called_improved():
    diffs = [+0.12, -0.05, +0.09, -0.04, +0.06, -0.02]  # mean +0.027, scattered around it
    cand = {"day": PROD_CLIPS["day"], "night": [p + d for p, d in zip(PROD_CLIPS["night"], diffs)]}
    rep = decide(clip_table(cand), clip_table(PROD_CLIPS), GateRule(), {"det": MeanMetric()})
    night = next(r for r in rep["rows"] if r["slice"] == "night")
    assert night["gain"] > 0 and night["gain_ci"][0] < 0 < night["gain_ci"][1]
    assert night["verdict"] == "pass" and night["reason"].startswith("better, but the interval includes no change")


def test_a_suite_frame_keeps_its_recorded_clip_and_time(tmp_path):
    """A suite frozen from a pose-less recording writes one scene per frame; the gate resamples the recorded clip."""
    from data_engine.gate import _frame_clocks

    fleet = make_fleet(tmp_path / "fleet", clips=2, frames=2)
    meta = json.loads((fleet / "dataset.json").read_text())
    for entry in meta["scenes"]:
        path = fleet / "scenes" / entry["name"] / "scene.json"
        scene = json.loads(path.read_text())
        path.write_text(json.dumps({**scene, "clip": {"fleet": "/rec", "name": "drive"}}))
    names = [e["name"] for e in meta["scenes"]]
    dirs = [json.loads((fleet / "scenes" / n / "scene.json").read_text())["frames"] for n in names]
    ids = [[n, f["dir"]] for n, frames in zip(names, dirs) for f in frames]
    clips, times = _frame_clocks(fleet, ids)
    assert clips == ["/rec/drive"] * 4
    assert times == [f["timestamp_us"] / 1e6 for frames in dirs for f in frames]
