"""Fault rows: nuScenes detection submissions through `hydranet eval-nuscenes` (each of these once
changed NDS silently or crashed). One row per case; see faultlib.py for the contract."""
from __future__ import annotations

import copy
import json

import pytest
from faultlib import Case, params, run_case


def sub_case(id, edit, words, status=2, raw=None):
    """`edit(sub, tok)` changes a deep copy of the valid submission; `tok` is the first sample with a box."""
    def build(tmp, env):
        sub = copy.deepcopy(env.results)
        tok = next(t for t, bs in sub["results"].items() if bs)
        path = tmp / "results.json"
        if raw is not None:
            path.write_text(raw)
        else:
            edit(sub, tok)
            path.write_text(json.dumps(sub))  # NaN and Infinity are written as the JS literals json reads back
        return ["eval-nuscenes", "--data", env.nuscenes, "--version", "v1.0-mini", "--split", "all",
                "--results", path, "--out", tmp / "metrics.json"]
    return Case(id, build, status, words)


def box(**kv):
    def edit(sub, tok):
        sub["results"][tok][0].update(kv)
    return edit


NAN, INF = float("nan"), float("inf")
TOKEN = "the sample token"  # stands for the real token in `words` (checked below)

NUSCENES_CASES = [
    sub_case("size-inf", box(size=[INF, 1.0, 1.0]), ("size", "finite", TOKEN)),
    sub_case("size-nan", box(size=[1.0, NAN, 1.0]), ("size", "finite", TOKEN)),
    sub_case("size-zero", box(size=[0.0, 1.0, 1.0]), ("size", "> 0", TOKEN)),
    sub_case("translation-inf", box(translation=[INF, 0.0, 0.0]), ("translation", "finite", TOKEN)),
    sub_case("translation-nan", box(translation=[NAN, 0.0, 0.0]), ("translation", "finite", TOKEN)),
    sub_case("translation-string", box(translation=["1", 0.0, 0.0]), ("translation", TOKEN)),
    sub_case("rotation-zero", box(rotation=[0.0, 0.0, 0.0, 0.0]), ("rotation", "zero quaternion", TOKEN)),
    sub_case("rotation-nan", box(rotation=[NAN, 0.0, 0.0, 1.0]), ("rotation", "finite", TOKEN)),
    sub_case("rotation-3-numbers", box(rotation=[1.0, 0.0, 0.0]), ("rotation", "4 numbers", TOKEN)),
    sub_case("velocity-inf", box(velocity=[INF, 0.0]), ("velocity", "finite", TOKEN)),
    sub_case("score-nan", box(detection_score=NAN), ("detection_score", TOKEN)),
    sub_case("score-string", box(detection_score="high"), ("detection_score", TOKEN)),
    sub_case("name-not-string", box(detection_name=None), ("detection_name", TOKEN)),
    sub_case("token-not-its-key", box(sample_token="0" * 32), ("sample_token", "filed under", TOKEN)),
    sub_case("extra-sample", lambda sub, tok: sub["results"].update({"f" * 32: []}), ("f" * 32, "not in the split")),
    sub_case("null-box", lambda sub, tok: sub["results"][tok].__setitem__(0, None), ("box object", "null", TOKEN)),
    sub_case("null-sample-list", lambda sub, tok: sub["results"].update({tok: None}), ("list of boxes", TOKEN)),
    sub_case("missing-field", lambda sub, tok: sub["results"][tok][0].pop("size"), ("missing", "size", TOKEN)),
    sub_case("meta-not-object", lambda sub, tok: sub.update(meta=[]), ("meta",)),
    sub_case("missing-sample", lambda sub, tok: sub["results"].pop(tok), ("have no entry", TOKEN)),
    sub_case("not-json", None, ("results.json", "corrupt json"), raw="{"),
    sub_case("valid", lambda sub, tok: None, (), status=0),  # control row: the submission itself is fine
]


@pytest.mark.parametrize("case", params(NUSCENES_CASES))
def test_fault(case, fault_env, tmp_path, monkeypatch, capsys):
    tok = next(t for t, bs in fault_env.results["results"].items() if bs)
    case.words = tuple(tok if w == TOKEN else w for w in case.words)
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_valid_submission_scores_perfectly(fault_env, tmp_path, capsys):
    """The control row's submission is the GT: NDS is well defined (not a silently broken figure)."""
    from hydranet.metrics import evaluate_nuscenes

    path = tmp_path / "r.json"
    path.write_text(json.dumps(fault_env.results))
    m = evaluate_nuscenes(fault_env.nuscenes, "v1.0-mini", "all", path)
    assert 0.0 < m.mean_ap <= 1.0 and 0.0 < m.nd_score <= 1.0
