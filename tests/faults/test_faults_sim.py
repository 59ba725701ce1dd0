"""Fault rows of `hydranet sim stats --data DIR` and the sim's density and motion-blur knobs (`hydranet sim
generate --set ...`). One row per case; see faultlib.py for the contract."""
from __future__ import annotations

import pytest
from faultlib import Case, copy_dataset, edit_json, frame_dir, params, run_case


def stats(path_of):
    def build(tmp, env):
        return ["sim", "stats", "--data", path_of(tmp, env), "--quiet"]
    return build


def broken(edit):
    """A copy of the fault dataset changed by `edit(root)`."""
    def path_of(tmp, env):
        root = copy_dataset(tmp, env)
        edit(root)
        return root
    return path_of


def gen(*sets):
    def build(tmp, env):
        argv = ["sim", "generate", "--out", tmp / "out", "--scenes", "1", "--quiet", "--set", "image_width=64",
                "--set", "image_height=48", "--set", "frames_per_scene=1"]
        for s in sets:
            argv += ["--set", s]
        return argv
    return build


def gen_workers(workers, *sets):
    """`sim generate` of 2 one-frame scenes with --workers."""
    def build(tmp, env):
        argv = gen(*sets)(tmp, env)
        argv[argv.index("--scenes") + 1] = "2"
        return argv + ["--workers", workers]
    return build


def fleet_workers(workers):
    def build(tmp, env):
        return ["engine", "fleet", "--out", tmp / "out", "--clips", "2", "--quiet", "--workers", workers, "--set",
                "sim.image_width=64", "--set", "sim.image_height=48", "--set", "sim.frames_per_scene=1"]
    return build


def nothing_written(tmp):
    assert not (tmp / "out").exists() and not list(tmp.glob("out.tmp-*"))


SIM_CASES = [
    Case("stats-missing-folder", stats(lambda tmp, env: tmp / "nope"), 2, ("nope", "not a hydranet-sim dataset")),
    Case("stats-not-a-dataset", stats(lambda tmp, env: tmp), 2, ("no dataset.json",)),
    Case("stats-labels-not-json", stats(broken(lambda r: (frame_dir(r) / "labels.json").write_text("{"))), 2,
         ("labels.json",)),
    Case("stats-labels-missing", stats(broken(lambda r: (frame_dir(r) / "labels.json").unlink())), 2, ("labels.json",)),
    Case("stats-box-center-nan", stats(broken(lambda r: edit_json(
        frame_dir(r) / "labels.json", lambda d: d["boxes3d"][0].update(center=[float("nan"), 0, 0])))), 2,
        ("boxes3d[0].center",)),
    Case("stats-scene-missing", stats(broken(lambda r: (r / "scenes" / "scene_0000" / "scene.json").unlink())), 2,
         ("scene.json",)),
    Case("stats-foreign-format", stats(broken(lambda r: edit_json(r / "dataset.json", lambda d: d.update(format="kitti")))),
         2, ("dataset.json", "format")),
    Case("stats-valid", stats(lambda tmp, env: env.dataset), 0, stdout=("share car", "nuScenes", "boxes per keyframe")),
    Case("density-negative", gen("density=-1"), 2, ("density", "0 to 10"), check=nothing_written),
    Case("density-not-a-number", gen("density=many"), 2, ("density",), check=nothing_written),
    Case("truck-and-bus-shares-above-1", gen("traffic.truck_share=0.7", "traffic.bus_share=0.5"), 2,
         ("traffic.bus_share", "must not exceed 1"), check=nothing_written),
    Case("parked-row-0", gen("roadside.parked_row=0"), 2, ("roadside.parked_row",), check=nothing_written),
    Case("clutter-negative", gen("roadside.clutter=-1"), 2, ("roadside.clutter", "0 to 100"), check=nothing_written),
    Case("standing-share-above-1", gen("traffic.standing_share=2"), 2, ("traffic.standing_share", "[0, 1]"),
         check=nothing_written),
    Case("density-0-renders-empty-roads", gen("density=0"), 0, stdout=("wrote",)),  # control: a valid, empty street
    Case("shutter-negative", gen("look.shutter_ms=-5"), 2, ("look.shutter_ms", "0 (no motion blur) to 100"),
         check=nothing_written),
    Case("shutter-samples-even", gen("look.shutter_ms=20", "look.shutter_samples=4"), 2, ("look.shutter_samples", "odd"),
         check=nothing_written),
    Case("shutter-not-a-number", gen("look.shutter_ms=fast"), 2, ("look.shutter_ms",), check=nothing_written),
    Case("motion-blur-renders", gen("look.shutter_ms=20", "look.shutter_samples=3"), 0, stdout=("wrote",)),  # control
    # --workers: processes rendering whole scenes (sim/generate.py render_scenes)
    Case("workers-0", gen_workers("0"), 2, ("--workers", "at least 1", "0"), check=nothing_written),
    Case("workers-negative", gen_workers("-2"), 2, ("--workers", "at least 1"), check=nothing_written),
    Case("workers-error-in-a-worker", gen_workers("2", "image_width=4000"), 2, ("atlas", "over this gl driver"),
         check=nothing_written),  # the one-process error line, raised in a worker; the partial output removed
    Case("workers-2-renders", gen_workers("2"), 0, stdout=("wrote",)),  # control
    Case("fleet-workers-0", fleet_workers("0"), 2, ("--workers", "at least 1"), check=nothing_written),
    Case("fleet-workers-2-renders", fleet_workers("2"), 0, stdout=("wrote",)),  # control
]


@pytest.mark.parametrize("case", params(SIM_CASES))
def test_sim_fault(case, tmp_path, fault_env, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)
