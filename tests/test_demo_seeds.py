"""benchmarks/demo_seeds.py: the aggregation over seeds and the --out refusal (no training)."""
from __future__ import annotations

import math

import pytest
from benchmark_scripts import load


@pytest.fixture(scope="module")
def ds():
    return load("demo_seeds")


def _results(map50: float, iou: float, acc: float = math.nan) -> dict:
    """An evaluate_checkpoint result of the shape the demo prints (NaN: the demo's n/a)."""
    return {"model": {"det2d": {"mAP50": map50}, "lanes": {"pixel_iou": iou}, "signs_lights": {"accuracy": acc}},
            "baseline": {"det2d": {"mAP50": 0.0}, "lanes": {"pixel_iou": 0.0}, "signs_lights": {"accuracy": 0.5}},
            "primary": {"det2d": "mAP50", "lanes": "pixel_iou", "signs_lights": "accuracy"},
            "beats_baseline": {"det2d": map50 > 0.01, "lanes": True, "signs_lights": False}}


def test_aggregate_median_min_max(ds):
    per_seed = {0: ds.collect("camera", _results(0.058, 0.362)),
                1: ds.collect("camera", _results(0.080, 0.345, acc=0.7)),
                2: ds.collect("camera", _results(0.005, 0.350))}
    agg = ds.aggregate(per_seed)
    m = agg["camera/det2d/mAP50"]
    assert m["model"] == {"median": 0.058, "min": 0.005, "max": 0.080, "defined": 3, "seeds": 3}
    assert m["primary"] and m["beats"] == 2
    assert agg["camera/lanes/pixel_iou"]["model"]["median"] == 0.350
    # the demo's n/a (NaN: nothing to score) is undefined in that seed, not a number
    acc = agg["camera/signs_lights/accuracy"]["model"]
    assert acc == {"median": 0.7, "min": 0.7, "max": 0.7, "defined": 1, "seeds": 3}
    table = ds.format_table(agg, {s: {"train_eval": 3.0, "wall": 3.5} for s in per_seed})
    assert "0.0580 [0.0050, 0.0800]" in table
    assert "0.7000 (1 of 3 seeds defined)" in table
    assert "beats baseline in 2 of 3 seeds" in table
    assert "3.5" in table.splitlines()[-1]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_aggregate_refuses_non_finite(ds, bad):
    rows = {0: ds.collect("bev", _results(0.05, 0.3)), 1: ds.collect("bev", _results(0.06, 0.3))}
    rows[1]["bev/lanes/pixel_iou"]["model"] = bad
    with pytest.raises(ValueError, match=r"bev/lanes/pixel_iou is .* for seed 1: a non-finite value"):
        ds.aggregate(rows)


def test_aggregate_refuses_differing_metrics(ds):
    a, b = ds.collect("camera", _results(0.05, 0.3)), ds.collect("camera", _results(0.06, 0.3))
    del b["camera/lanes/pixel_iou"]
    with pytest.raises(ValueError, match="seed 1 reports other metrics"):
        ds.aggregate({0: a, 1: b})


def test_existing_out_refused(ds, tmp_path):
    out = tmp_path / "bench"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit, match="exists: pass --overwrite"):
        ds.main(["--seeds", "1", "--out", str(out)])
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench"]


def test_a_negative_first_seed_is_refused_before_anything_is_written(ds, tmp_path, capsys):
    with pytest.raises(SystemExit):
        ds.main(["--seeds", "2", "--first-seed", "-1", "--out", str(tmp_path / "bench")])
    assert "--first-seed >= 0" in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()


@pytest.mark.parametrize("args, says", [
    (["--config", "no_such_recipe"], "is neither a file nor a shipped config"),
    (["--set", "batch_size=0"], "batch_size"),
    (["--rig", "no_such_rig"], "unknown rig preset 'no_such_rig'"),
    (["--config", "dashcam", "--rig", "dashcam"], "camera 'CAM_BACK' is not in rig 'dashcam'"),  # the trunk stage's
    (["--config", "dashcam", "--rig", "dashcam", "--trunk-steps", "0", "--sim-set", "rig=nuscenes6"], "give --rig alone")])
def test_a_recipe_that_cannot_train_is_refused_before_anything_is_written(ds, tmp_path, capsys, args, says):
    with pytest.raises(SystemExit):
        ds.main(["--seeds", "1", "--out", str(tmp_path / "bench"), *args])
    assert says in capsys.readouterr().err
    assert not (tmp_path / "bench").exists()


def test_the_seed_processes_train_the_config_named(ds, tmp_path, monkeypatch):
    """run_seeds -> the worker's command line -> recipe_experiment(config=...): a seed trains --config, not the demo's."""
    import hydranet.curriculum as curriculum
    import hydranet.evaluate as evaluate

    trained = []

    class InProcess:  # subprocess.Popen, the seed run here and now
        returncode = 0

        def __init__(self, cmd, **_):
            ds.main(cmd[2:])

        def poll(self):
            return 0

    monkeypatch.setattr(ds.subprocess, "Popen", InProcess)
    monkeypatch.setattr("torch.set_num_threads", lambda n: None)
    monkeypatch.setattr(curriculum, "train_two_stage", lambda cfg, out, steps, **_: trained.append((cfg, steps)))
    monkeypatch.setattr(evaluate, "evaluate_checkpoint", lambda *a, **k: _results(0.2, 0.5))
    done = ds.run_seeds(tmp_path, [3], 1, tmp_path / "data", tmp_path / "val", 0, 0, ["steps=7"], config="dashcam")
    (cfg, trunk_steps), = trained
    assert cfg.data.cameras == ("CAM_FRONT",) and cfg.seed == 3 and cfg.steps == 7 and trunk_steps == 0
    assert {t.name for t in cfg.model.tasks} == {"det2d", "signs_lights", "lanes", "drivable", "depth", "normals"}
    assert done[3]["metrics"]["hydranet/det2d/mAP50"]["model"] == 0.2
