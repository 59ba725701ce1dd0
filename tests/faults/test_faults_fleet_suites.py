"""Fault rows of `hydranet engine suites --from-fleet` (data_engine/fleet_suites.py): a query that does not parse, an
unknown signal, a signal query without --catalog, a query that selects nothing, a recorded slice without one labelled
frame, a missing fleet, an existing slice without --overwrite, slice names that would leave the folder, --slice
without --from-fleet. Every refused row leaves no suites folder (or the existing one as it was) and no temp."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from faultlib import Case, cat_copy, params, run_case
from recording_fixtures import sim_rig_file, write_image_sequences


def freeze(tmp: Path, env, *slices: str, fleet: Path | None = None, extra: tuple = ()) -> list:
    argv = ["engine", "suites", "--from-fleet", fleet or env.dataset, "--out", tmp / "suites", "--quiet", *extra]
    return argv + [a for s in slices for a in ("--slice", s)]


def recorded(tmp: Path, env) -> Path:
    """The fault dataset's frames as an image-sequence fleet (no catalog: nothing labelled)."""
    from hydranet.cli import main

    root = write_image_sequences(env.dataset, tmp / "imgs")
    assert main(["engine", "ingest", "--out", str(tmp / "rec"), "--source", "images", "--root", str(root), "--rig",
                 str(sim_rig_file(env.dataset, tmp / "rig.yaml")), "--quiet"]) == 0
    return tmp / "rec"


def existing_slice(tmp: Path, env) -> list:
    from hydranet.cli import main

    assert main([str(a) for a in freeze(tmp, env, "a=clip:scene_0000")]) == 0
    (tmp / "before.json").write_text((tmp / "suites" / "suites.json").read_text())
    return freeze(tmp, env, "a=clip:scene_0000", "b=clip:scene_0000")


def no_suites(tmp: Path) -> None:
    assert not (tmp / "suites").exists(), "a suites folder was written for a refused command"
    assert not list(tmp.rglob("*.tmp-*")), "a temp folder was left behind"


def unchanged(tmp: Path) -> None:
    assert (tmp / "suites" / "suites.json").read_text() == (tmp / "before.json").read_text(), "suites.json changed"
    assert not (tmp / "suites" / "b").exists() and not list(tmp.rglob("*.tmp-*"))


def control_written(tmp: Path) -> None:
    index = json.loads((tmp / "suites" / "suites.json").read_text())
    assert index["slices"]["first"]["labels"] == {"truth": 2} and (tmp / "suites" / "first" / "dataset.json").is_file()


CASES = [
    Case("fleet-suites-bad-query", lambda t, e: freeze(t, e, "a=weather:rain"),
         words=("slice a", "weather:rain", "not understood", "allowed", "tag:VALUE"), check=no_suites),
    Case("fleet-suites-bad-operator", lambda t, e: freeze(t, e, "a=signal:flicker=>1", extra=("--catalog", cat_copy(t))),
         words=("slice a", "signal:flicker=>1", "op one of"), check=no_suites),
    Case("fleet-suites-unknown-signal", lambda t, e: freeze(t, e, "a=signal:entropy>0.5", extra=("--catalog", cat_copy(t))),
         words=("slice a", "unknown signal 'entropy'", "det2d_entropy"), check=no_suites),
    Case("fleet-suites-signal-without-catalog", lambda t, e: freeze(t, e, "a=signal:det2d_entropy>0.1"),
         words=("slice a", "signal", "--catalog"), check=no_suites),
    Case("fleet-suites-selects-nothing", lambda t, e: freeze(t, e, "a=clip:scene_0000", "b=tag:no_such_tag"),
         words=("slice b", "'tag:no_such_tag'", "selects no frame"), check=no_suites),
    Case("fleet-suites-no-labelled-frame", lambda t, e: freeze(t, e, "a=clip:scene_0000", fleet=recorded(t, e)),
         words=("slice a", "none of its 2 frames", "has labels", "engine label", "import-labels"), check=no_suites),
    Case("fleet-suites-fleet-missing", lambda t, e: freeze(t, e, "a=clip:x", fleet=t / "nowhere"),
         words=("--from-fleet", "nowhere", "does not exist"), check=no_suites),
    Case("fleet-suites-slice-exists", existing_slice, words=("slice a", "already exists", "--overwrite"), check=unchanged),
    Case("fleet-suites-slice-name-slash", lambda t, e: freeze(t, e, "a/b=clip:scene_0000"),
         words=("'a/b'", "cannot be used", "rename"), check=no_suites),
    Case("fleet-suites-slice-name-dots", lambda t, e: freeze(t, e, "..=clip:scene_0000"),
         words=("'..'", "cannot be used"), check=no_suites),
    Case("fleet-suites-slice-name-dots-inside", lambda t, e: freeze(t, e, "a..b=clip:scene_0000"),
         words=("'a..b'", "cannot be used"), check=no_suites),
    Case("fleet-suites-slice-without-equals", lambda t, e: freeze(t, e, "clip:scene_0000"),
         words=("--slice", "NAME=QUERY"), check=no_suites),
    Case("fleet-suites-slice-without-from-fleet",
         lambda t, e: ["engine", "suites", "--out", t / "suites", "--slice", "a=clip:x", "--quiet"],
         words=("--slice", "--from-fleet"), check=no_suites),
    Case("fleet-suites-clips-with-from-fleet", lambda t, e: freeze(t, e, "a=clip:scene_0000", extra=("--clips", "2")),
         words=("--clips", "--from-fleet"), check=no_suites),
    Case("fleet-suites-out-not-suites", lambda t, e: (t / "suites").mkdir() or freeze(t, e, "a=clip:scene_0000"),
         words=("not a suites folder",), check=lambda t: None),
    Case("fleet-suites-control", lambda t, e: freeze(t, e, "first=clip:scene_0000"), status=0,
         stdout=("slice first: 2 frames of 1 clip(s)", "labels truth 2"), check=control_written),
]


@pytest.mark.parametrize("case", params(CASES))
def test_fleet_suites_fault(case: Case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
