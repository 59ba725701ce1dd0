"""benchmarks/realism_gap.py: the per-frame bootstrap and the table on synthetic values, and one small run end to end
on fixtures written in the official formats (a sim, KITTI, Cityscapes, TuSimple and CULane folder) with a tiny
model."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from benchmark_scripts import load

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def rg():
    return load("realism_gap")


def mean(v):
    return float(np.mean(v))


def test_bootstrap_over_frames_is_seeded_and_covers_the_mean(rg):
    values = list(np.linspace(0.0, 1.0, 21))
    a = rg.bootstrap(values, mean, resamples=500, seed=3)
    b = rg.bootstrap(values, mean, resamples=500, seed=3)
    c = rg.bootstrap(values, mean, resamples=500, seed=4)
    assert a["value"] == pytest.approx(0.5) and a["frames"] == 21
    assert a["low"] < 0.5 < a["high"] and (a["low"], a["high"]) == (b["low"], b["high"])
    assert np.array_equal(a["draws"], b["draws"]) and not np.array_equal(a["draws"], c["draws"])
    # the interval is the percentile interval of the draws (the gate's rule), here of the resampled means
    idx = rg.frame_draws(21, 500, 3)
    means = np.asarray(values)[idx].mean(1)
    assert a["low"] == pytest.approx(np.quantile(means, 0.025)) and a["high"] == pytest.approx(np.quantile(means, 0.975))
    # the standard error of a mean: about sd / sqrt(n), so the 95% interval is about 4 of them wide
    se = np.std(values) / math.sqrt(21)
    assert 3.0 * se < a["high"] - a["low"] < 5.0 * se
    one = rg.bootstrap([0.7], mean, resamples=50)
    assert one["value"] == 0.7 and one["low"] is None and one["frames"] == 1
    none = rg.bootstrap([], mean, resamples=50)
    assert math.isnan(none["value"]) and none["frames"] == 0


def test_a_statistic_of_the_resampled_frames_not_a_mean_of_frame_values(rg):
    """AP-like metrics are recomputed on each draw of frames: a pooled ratio, not the mean of per-frame ratios."""
    frames = [(1, 1), (0, 9), (3, 4)]  # (hits, items) per frame
    pooled = rg.bootstrap(frames, lambda fs: sum(h for h, _ in fs) / sum(n for _, n in fs), resamples=200)
    assert pooled["value"] == pytest.approx(4 / 14)
    assert pooled["value"] != pytest.approx(np.mean([1 / 1, 0 / 9, 3 / 4]))


def test_gap_table_ratios_and_markdown(rg):
    sim = {("det2d", "mAP50"): rg.bootstrap([0.4, 0.6, 0.5, 0.5], mean, 300),
           ("depth", "abs_rel"): rg.bootstrap([0.2, 0.3], mean, 300)}
    real = {("det2d", "mAP50"): rg.bootstrap([0.0, 0.1, 0.05], mean, 300),
            ("depth", "abs_rel"): {"note": "no labels"}}
    table = rg.gap_table({"sim": sim, "sim CAM_FRONT": sim, "kitti": real}, "sim CAM_FRONT")
    assert table["rows"] == [["det2d", "mAP50"], ["depth", "abs_rel"]]
    assert list(table["ratios"]) == ["kitti"]
    r = table["ratios"]["kitti"]["det2d/mAP50"]
    assert r["value"] == pytest.approx(0.05 / 0.5) and r["low"] <= r["value"] <= r["high"]
    assert "depth/abs_rel" not in table["ratios"]["kitti"]  # nothing to divide
    text = rg.markdown(table, {"sim CAM_FRONT": "sim, front"})
    assert "| det2d | mAP50 | 0.500 [" in text and "(4 fr.)" in text and "| no labels |" in text
    assert "real / sim (sim, front)" in text and "| det2d | mAP50 | 0.10 [" in text
    js = rg.plain(table)
    assert "draws" not in json.dumps(js) and js["cells"]["kitti"]["depth/abs_rel"] == {"note": "no labels"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from dataset_fixtures import make_sim, train_tiny_bev, write_kitti
    from lane_road_fixtures import city_frame, write_culane, write_cityscapes, write_tusimple

    base = tmp_path_factory.mktemp("gap")
    sim = make_sim(base / "sim")
    train_tiny_bev(sim, base / "run")
    return {"base": base, "run": base / "run", "sim": sim, "kitti": write_kitti(sim, base / "kitti"),
            "cityscapes": write_cityscapes(base / "cityscapes", [city_frame(0), city_frame(1)]),
            "tusimple": write_tusimple(base / "tusimple"), "culane": write_culane(base / "culane")}


def _tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def test_end_to_end_on_official_layouts(rg, folders, tmp_path, capsys):
    out = tmp_path / "gap"
    before = {k: _tree(folders[k]) for k in ("run", "sim", "kitti", "cityscapes", "tusimple", "culane")}
    rg.main(["--checkpoint", str(folders["run"]), "--out", str(out), "--sim-val", str(folders["sim"]),
             "--kitti", str(folders["kitti"]), "--cityscapes", str(folders["cityscapes"]),
             "--tusimple", str(folders["tusimple"]), "--culane", str(folders["culane"]), "--resamples", "50"])
    printed = capsys.readouterr().out
    assert ("| head | metric | sim held-out, all cameras | sim held-out, CAM_FRONT | kitti | cityscapes | tusimple | "
            "culane |") in printed
    assert {k: _tree(folders[k]) for k in before} == before  # nothing written beside --out
    assert _tree(out) == {"realism_gap.json", "realism_gap.md", "sim", "sim_CAM_FRONT", "kitti", "cityscapes",
                          "tusimple", "culane", "sim/metrics.json", "sim_CAM_FRONT/metrics.json", "kitti/metrics.json",
                          "cityscapes/metrics.json", "tusimple/metrics.json", "culane/metrics.json"}
    table = json.loads((out / "realism_gap.json").read_text())
    cells = table["cells"]
    assert table["sources"] == ["sim", "sim CAM_FRONT", "kitti", "cityscapes", "tusimple", "culane"]
    # each cell's value is what the project's evaluation printed for that source (recomputed from the frames' states)
    for src, folder in (("sim", "sim"), ("kitti", "kitti"), ("cityscapes", "cityscapes")):
        metrics = json.loads((out / folder / "metrics.json").read_text())
        assert cells[src]["det2d/mAP50"]["value"] == pytest.approx(metrics["model"]["det2d"]["mAP50"])
    n_sim = json.loads((out / "sim" / "metrics.json").read_text())["frames"]
    assert cells["sim"]["det2d/mAP50"]["frames"] == n_sim == cells["sim CAM_FRONT"]["lanes/pixel_iou"]["frames"]
    assert cells["kitti"]["det2d/mAP50"]["frames"] == len(list((folders["kitti"] / "training" / "image_2").iterdir()))
    assert cells["kitti"]["lanes/pixel_iou"] == {"note": "no labels"}
    for d in ("easy", "moderate", "hard"):  # the KITTI benchmark's own 2D car AP, at its IoU 0.7 and at 0.5
        strict, loose = cells["kitti"][f"det2d/KITTI car AP|R40 {d} @0.7"], cells["kitti"][f"det2d/KITTI car AP|R40 {d} @0.5"]
        assert 0.0 <= strict["value"] <= loose["value"] <= 1.0 and strict["frames"] == cells["kitti"]["det2d/mAP50"]["frames"]
        assert f"det2d/KITTI car AP|R40 {d} @0.7" not in cells["sim"]
    assert cells["cityscapes"]["drivable/iou"]["frames"] == 2 and "value" in cells["cityscapes"]["det2d/car AP50"]
    assert cells["tusimple"]["det2d/mAP50"] == {"note": "no labels"} and cells["tusimple"]["lanes/pixel_iou"]["frames"] == 3
    # the BEV head on the sim's whole rig only; a one-camera source (and the sim's front camera) cannot score it
    assert "value" in cells["sim"]["bevmap/mIoU"]
    assert cells["kitti"]["bevmap/mIoU"]["note"].startswith("BEV head")
    # TuSimple's own accuracy, FP and FN per frame, means over frames
    for m in ("TuSimple accuracy", "TuSimple FP", "TuSimple FN"):
        c = cells["tusimple"][f"lanes/{m}"]
        assert c["frames"] == 3 and 0.0 <= c["value"] <= 1.0
    assert "lanes/TuSimple accuracy" not in cells["sim"]
    # CULane: its 3 annotated frames (one without lanes) score the lanes head, pixel IoU and lane F1, as eval prints
    culane = json.loads((out / "culane" / "metrics.json").read_text())["model"]["lanes"]
    for m in ("pixel_iou", "f1"):
        assert cells["culane"][f"lanes/{m}"]["frames"] == 3
        assert cells["culane"][f"lanes/{m}"]["value"] == pytest.approx(culane[m], nan_ok=True)
    assert cells["culane"]["det2d/mAP50"] == {"note": "no labels"}
    assert set(table["ratios"]) == {"kitti", "cityscapes", "tusimple", "culane"}
    with pytest.raises(SystemExit, match="exists: pass --overwrite"):
        rg.main(["--checkpoint", str(folders["run"]), "--out", str(out), "--kitti", str(folders["kitti"])])
    rg.main(["--checkpoint", str(folders["run"]), "--out", str(out), "--kitti", str(folders["kitti"]),
             "--resamples", "20", "--overwrite"])
    assert json.loads((out / "realism_gap.json").read_text())["sources"] == ["kitti"]


def test_tusimple_scores_read_the_decoded_mask_at_the_label_rows(rg, folders):
    """A decoded mask that draws each labelled lane (its runs of points) as one instance scores what the benchmark's
    rule gives those lanes' own points as the prediction (`tusimple_accuracy` on the label's x values)."""
    from lane_road_fixtures import TUSIMPLE_RECORDS

    from hydranet.metrics.tusimple import tusimple_accuracy
    from hydranet.tasks.lanes import draw_lanes

    recs = [r for rs in TUSIMPLE_RECORDS.values() for r in rs]
    ids, maps, expected = [], [], []
    for r in recs:
        lanes, pred = [], []
        for lane in r["lanes"]:
            xs = np.asarray(lane, np.float64)
            if not (xs >= 0).any():
                continue
            edges = np.flatnonzero(np.diff(np.concatenate([[0], (xs >= 0).astype(int), [0]])))
            runs = [np.stack([xs[a:b], np.asarray(r["h_samples"], np.float64)[a:b]], 1)
                    for a, b in zip(edges[::2], edges[1::2])]
            lanes.append(runs)
            pred.append(list(xs))
        inst = np.zeros((72, 128), np.int32)
        for k, m in enumerate(draw_lanes(lanes, (72, 128), 1)):
            inst[m] = k + 1
        ids.append([r["raw_file"].split("/")[1], r["raw_file"]])
        maps.append(inst)
        expected.append(tusimple_accuracy(pred, r["lanes"], r["h_samples"]))
    scores = rg.tusimple_scores(folders["tusimple"], None, ids, maps)
    assert scores == [pytest.approx(e) for e in expected]
    assert expected[1] == (1.0, 0.0, 0.0) and expected[0][0] < 1.0  # an all-missing labelled lane is never found
    with pytest.raises(ValueError, match="decoded lane maps"):
        rg.tusimple_scores(folders["tusimple"], None, ids, maps[:1])


def test_fit_camera_where_a_source_has_intrinsics_crop_or_stretch_where_not(rg, folders):
    """--fit camera resamples KITTI's frames to the model's camera; Cityscapes without camera.json falls back to crop,
    TuSimple to the stretch its own score reads back through; each source's fit is in its results."""
    import shutil

    from hydranet.checkpoint import config_from_checkpoint, load_model

    _, _, ckpt = load_model(folders["run"])
    m, c = rg.front_model(ckpt, config_from_checkpoint(ckpt), "run")
    fits = {s: rg.evaluate_source(m, c, ckpt, folders[s], s, None, fit="camera")["fit"]
            for s in ("kitti", "cityscapes", "tusimple")}
    assert fits == {"kitti": "camera", "cityscapes": "camera", "tusimple": "stretch"}  # the fixture has camera.json
    bare = shutil.copytree(folders["cityscapes"], folders["base"] / "cityscapes_bare")
    shutil.rmtree(bare / "camera")
    assert rg.evaluate_source(m, c, ckpt, bare, "cityscapes", None, fit="camera")["fit"] == "crop"
    assert rg.evaluate_source(m, c, ckpt, folders["kitti"], "kitti", None)["fit"] == "stretch"  # the run's data.fit
