"""The gate's decision on constructed metric tables (docs/data_engine.md "Gate, suites, registry"): drop beyond
tolerance, targeted slice, aggregate, lower-is-better, NaN, the paired bootstrap over clips and time blocks, and the
gate's files. The suites, registry and end-to-end gate: tests/test_engine_gate.py."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from engine_fixtures import make_fleet

from data_engine.gate import AGGREGATE, GateError, GateRule, decide, format_gate, write_gate
from data_engine.suites import SuitesConfig


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
