"""Per-source evaluation in one command (issue 13, docs/datasets.md): `hydranet eval` on a run with
data.sources (or --data naming several folders) evaluates every dataset on its own, with the metrics
that dataset can supervise; a head it has no labels for is not scored there (listed as n/a, never a
0 or NaN metric), and each source's metrics equal an eval on that source alone."""
from __future__ import annotations

import json

import pytest

from dataset_fixtures import make_sim, write_bdd100k, write_nuscenes
from hydranet.cli import main
from hydranet.evaluate import evaluate_checkpoint, format_sources_table, plain_json
from hydranet.experiment import load_experiment

TASKS = ("det2d", "drivable", "depth")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from hydranet.train import train

    base = tmp_path_factory.mktemp("eval_sources")
    sim = make_sim(base / "sim")
    roots = {"sim": sim, "bdd100k": write_bdd100k(sim, base / "bdd"), "nuscenes": write_nuscenes(sim, base / "nusc")}
    src = [{"root": str(roots["sim"]), "cameras": ["CAM_FRONT"]},
           {"root": str(roots["bdd100k"]), "split": "val", "name": "bdd"},
           {"root": str(roots["nuscenes"]), "cameras": ["CAM_FRONT"], "weight": 0.5}]
    cfg = load_experiment(None, [f"data.sources={json.dumps(src)}", "data.image_size=[64,96]", "model.backbone=tiny",
                                 "model.neck_width=16", "model.neck_repeats=1",
                                 f"model.tasks={json.dumps([{'name': t} for t in TASKS])}", "batch_size=2",
                                 "num_workers=0", "augment.photometric=false", "augment.geometric=false", "steps=2",
                                 "checkpoint_every=2", "log_every=1"])
    train(cfg, base / "run", progress=False)
    return base / "run", roots


def test_one_eval_scores_every_source_as_eval_on_it_alone(run, tmp_path):
    ckpt, roots = run
    res = evaluate_checkpoint(ckpt, None, tmp_path / "metrics.json", progress=False)
    assert list(res["sources"]) == ["sim0", "bdd", "nuscenes2"]  # data.sources names, else <format><index>
    for name, root in zip(res["sources"], roots.values()):
        per = res["sources"][name]
        alone = evaluate_checkpoint(ckpt, root, progress=False, save_predictions=tmp_path / "alone" / name)
        assert per["format"] == alone["format"] and per["frames"] == alone["frames"] > 0
        assert plain_json(per["model"]) == {h: m for h, m in plain_json(alone["model"]).items() if h in per["model"]}
        assert plain_json(per["baseline"]) == {h: m for h, m in plain_json(alone["baseline"]).items()
                                               if h in per["model"]}
        assert set(per["model"]) | set(per["not_scored"]) == set(TASKS)
        assert per["not_scored"] == [h for h in TASKS if alone["labelled_frames"][h] == 0]
    sim, bdd, nus = (res["sources"][n] for n in ("sim0", "bdd", "nuscenes2"))
    assert sim["not_scored"] == [] and bdd["not_scored"] == ["depth"] and nus["not_scored"] == ["drivable", "depth"]
    assert "depth" not in bdd["model"] and "depth" not in bdd["baseline"] and "depth" not in bdd["beats_baseline"]
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert set(written["sources"]) == {"sim0", "bdd", "nuscenes2"}
    assert "depth" not in written["sources"]["bdd"]["model"] and written["sources"]["bdd"]["not_scored"] == ["depth"]
    assert res["predictions"] and all(f"/{n}/" in p for n in res["sources"] for p in res["sources"][n]["predictions"])
    table = format_sources_table(res)
    assert table.count("== source ") == 3 and "nan" not in table.lower().replace("n/a", "")
    assert table.count("not scored") == 3  # bdd: depth; nuscenes2: drivable, depth


def test_cli_eval_without_data_prints_one_table_per_source(run, tmp_path, capsys):
    ckpt, roots = run
    assert main(["eval", "--checkpoint", str(ckpt), "--out", str(tmp_path / "m.json"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert [ln.split()[2] for ln in out.splitlines() if ln.startswith("== source ")] == ["sim0", "bdd", "nuscenes2"]
    bdd = out[out.index("== source bdd"):out.index("== source nuscenes2")]
    assert any(ln.split()[:1] == ["depth"] and "not scored" in ln and "n/a" in ln for ln in bdd.splitlines())
    assert "nan" not in out.replace("n/a", "").lower().split("wrote")[0]
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert list(metrics["sources"]) == ["sim0", "bdd", "nuscenes2"]


def test_cli_eval_of_several_folders_and_its_errors(run, tmp_path, capsys):
    ckpt, roots = run
    assert main(["eval", "--checkpoint", str(ckpt), "--data", str(roots["nuscenes"]), str(roots["sim"]),
                 "--out", str(tmp_path / "m.json"), "--quiet"]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert list(metrics["sources"]) == ["nuscenes2", "sim0"]
    one = json.loads(json.dumps(plain_json(evaluate_checkpoint(ckpt, roots["sim"], progress=False))))
    assert metrics["sources"]["sim0"]["model"] == one["model"]
    capsys.readouterr()
    assert main(["eval", "--checkpoint", str(ckpt), "--data", str(roots["sim"]), str(roots["nuscenes"]),
                 "--split", "all", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--split" in err[0] and "one dataset" in err[0]


def test_a_source_is_read_through_its_class_map_as_training_saw_it(run):
    from hydranet.data.formats import open_dataset
    from hydranet.data.sources import open_data

    _, roots = run
    cfg = load_experiment(None, [f"data.sources=[{{root: {roots['sim']}, class_map: {{car: null, truck: lorry}}}}]"])
    plain, mapped = open_dataset(roots["sim"]), open_data(cfg.data, roots["sim"])
    classes = [b["class"] for i in range(len(plain)) for b in plain[i]["labels"]["boxes3d"]]
    got = [b["class"] for i in range(len(mapped)) for b in mapped[i]["labels"]["boxes3d"]]
    assert "car" in classes and "car" not in got and got.count("lorry") == classes.count("truck")
    assert "car" not in mapped.classes and len(mapped) == len(plain) and mapped.rig.names == plain.rig.names
    assert all("car" not in {b["class"] for b in s["labels"]["boxes3d"]} for s in mapped.clip(3, 2))
