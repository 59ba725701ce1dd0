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


# -- cross-dataset evaluation (issue 21, item 5; docs/datasets.md "Cross-dataset class maps") ----------
def test_class_tables_cover_every_reader_and_agree():
    from hydranet.data import bdd100k, kitti, nuscenes
    from hydranet.data.formats import SIM_CLASSES
    from hydranet.data.sources import SIM_COUNTERPART, cross_class_map
    from sim.classes import OBJECT_CLASSES

    assert SIM_CLASSES == OBJECT_CLASSES  # hydranet may not import sim: the copy is kept equal here
    for fmt, module in (("nuscenes", nuscenes), ("kitti", kitti), ("bdd100k", bdd100k)):
        assert set(SIM_COUNTERPART[fmt]) == set(module.CLASSES), fmt  # every class a reader gives has its row
        assert set(SIM_COUNTERPART[fmt].values()) <= set(SIM_CLASSES) | {None}, fmt
    rows = [(name, sim) for table in SIM_COUNTERPART.values() for name, sim in table.items()]
    assert all(sim == dict(rows)[name] for name, sim in rows)  # a class name means one thing in every table
    # both directions: a sim model on BDD100K, a BDD100K model on the sim, a KITTI model on nuScenes
    assert cross_class_map(bdd100k.CLASSES, SIM_CLASSES) == {"rider": None, "bicycle": "cyclist", "train": None}
    assert cross_class_map(SIM_CLASSES, bdd100k.CLASSES) == {"cyclist": "bicycle", "traffic_cone": None, "debris": None,
                                                            "construction_vehicle": None, "barrier": None}
    assert cross_class_map(nuscenes.CLASSES, kitti.CLASSES) == {c: None for c in nuscenes.CLASSES
                                                                if c not in kitti.CLASSES}
    assert cross_class_map(SIM_CLASSES, SIM_CLASSES) == {}


def _train(out, data: list[str]):
    from hydranet.train import train

    cfg = load_experiment(None, [*data, "data.image_size=[64,96]", "model.backbone=tiny", "model.neck_width=16",
                                 "model.neck_repeats=1", "model.tasks=[{name: det2d}, {name: signs_lights}]",
                                 "batch_size=2", "num_workers=0", "augment.photometric=false",
                                 "augment.geometric=false", "steps=2", "checkpoint_every=2", "log_every=1"])
    train(cfg, out, progress=False)
    return out


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """A sim-trained and a BDD100K-trained tiny model (det2d + signs_lights), and both datasets."""
    base = tmp_path_factory.mktemp("cross")
    sim = make_sim(base / "sim")
    bdd = write_bdd100k(sim, base / "bdd")
    path = bdd / "labels" / "det_20" / "det_val.json"  # a rider and a train too (no counterpart in the sim)
    frames = json.loads(path.read_text())
    for k, cat in enumerate(("rider", "train")):
        frames[0]["labels"].append({"id": f"x{k}", "category": cat, "attributes": {},
                                    "box2d": {"x1": 10.0 + 40 * k, "y1": 20.0, "x2": 40.0 + 40 * k, "y2": 80.0}})
    path.write_text(json.dumps(frames))
    return {"sim": sim, "bdd": bdd,
            "sim_run": _train(base / "sim_run", [f"data.root={sim}", "data.cameras=[CAM_FRONT]"]),
            "bdd_run": _train(base / "bdd_run", [f"data.root={bdd}", "data.split=train"])}


def _gt_categories(folder) -> dict[str, int]:
    gt = json.loads((folder / "det2d_gt.json").read_text())
    names = {c["id"]: c["name"] for c in gt["categories"]}
    out: dict[str, int] = {}
    for a in gt["annotations"]:
        out[names[a["category_id"]]] = out.get(names[a["category_id"]], 0) + 1
    return out


def test_a_sim_model_is_scored_on_bdd100k_through_the_class_map(single, tmp_path, capsys):
    import math

    res = evaluate_checkpoint(single["sim_run"], single["bdd"], tmp_path / "m.json", progress=False)
    assert math.isfinite(res["model"]["det2d"]["mAP50"])  # a number, not a refusal naming 'bicycle'
    labels = [lab["category"] for fr in json.loads((single["bdd"] / "labels" / "det_20" / "det_val.json").read_text())
              for lab in fr["labels"]]
    gt = _gt_categories(tmp_path)  # what the metric scored: BDD100K's bicycles as the model's cyclists
    assert labels.count("bicycle") > 0 and gt.get("cyclist", 0) == labels.count("bicycle")
    assert "bicycle" not in gt and "rider" not in gt and "train" not in gt and "traffic_cone" not in gt
    assert gt["car"] == labels.count("car") and gt["traffic_sign"] == labels.count("traffic sign")
    cm = res["class_map"]
    assert cm["renamed"] == {"bicycle": "cyclist"} and cm["dropped"] == ["rider", "train"]
    assert cm["model_only"] == ["traffic_cone", "debris", "construction_vehicle", "barrier"]
    # BDD100K's signs are unnamed ('unknown'): no counterpart among the sim's sign classes -> n/a, not scored
    assert res["not_scored"] == ["signs_lights"] and "signs_lights" not in res["model"]
    assert main(["eval", "--checkpoint", str(single["sim_run"]), "--data", str(single["bdd"]),
                 "--out", str(tmp_path / "cli.json"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "renamed bicycle -> cyclist" in out and "dataset rider, train" in out
    assert any(ln.split()[:1] == ["signs_lights"] and "n/a" in ln and "not scored" in ln for ln in out.splitlines())


def test_a_bdd100k_model_is_scored_on_sim_data_through_the_class_map(single, tmp_path):
    import math

    from hydranet.data.sim_reader import SimDataset

    res = evaluate_checkpoint(single["bdd_run"], single["sim"], tmp_path / "m.json", progress=False)
    assert math.isfinite(res["model"]["det2d"]["mAP50"])
    sim = SimDataset(single["sim"], channels=())  # the BDD100K run names no cameras: every camera is scored
    assert res["cameras"] == sim.rig.names
    truth = [b["class"] for i in range(len(sim)) for cam in sim[i]["labels"]["cameras"].values()
             for b in cam["boxes2d"] if b["bbox"][2] > b["bbox"][0] and b["bbox"][3] > b["bbox"][1]]
    gt = _gt_categories(tmp_path)
    assert truth.count("cyclist") > 0 and gt.get("bicycle", 0) == truth.count("cyclist") and "cyclist" not in gt
    assert gt["car"] == truth.count("car") and "traffic_cone" not in gt and "barrier" not in gt
    assert res["class_map"]["renamed"] == {"cyclist": "bicycle"}
    assert set(res["class_map"]["dropped"]) == {"traffic_cone", "debris", "construction_vehicle", "barrier"}
    assert res["not_scored"] == ["signs_lights"]  # the sim's named signs have no counterpart in BDD100K's 'unknown'
