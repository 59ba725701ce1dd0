"""`hydranet engine autolabel` (data_engine/autolabel/, docs/autolabel.md): weighted box fusion, the offline
tracker in both directions, the RTS smoother against a known closed form, hindsight of a 3D track, the review
policy, and an end-to-end run on a tiny sim fleet with two untrained exports (one camera): 'auto' versions with
provenance in the catalog, the policy applied, a human version never touched, the same labels on a rerun and
none duplicated."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from data_engine.autolabel.fuse import fuse_3d, wbf
from hydranet.geometry import mirror_boxes
from data_engine.autolabel.policy import decide
from data_engine.autolabel.smooth import hindsight_3d, rts_smooth, to_ego
from data_engine.autolabel.track import merge_links, one_pass, to_world, track_2d, track_3d, box_iou
from data_engine.config import AutolabelConfig

REPO = Path(__file__).resolve().parents[1]


# -- fusion -------------------------------------------------------------------------------------------
def test_wbf_of_two_identical_ensembles_is_the_input():
    boxes = np.array([[10.0, 5.0, 30.0, 25.0], [50.0, 10.0, 70.0, 40.0], [12.0, 30.0, 20.0, 60.0]])
    scores, labels = np.array([0.9, 0.6, 0.3]), np.array([0, 1, 0])
    fb, fs, fl = wbf([(boxes, scores, labels), (boxes.copy(), scores.copy(), labels.copy())], (64, 96), 0.55, 0.0)
    order = np.lexsort((fb[:, 0], fl))
    want = np.lexsort((boxes[:, 0], labels))
    np.testing.assert_allclose(fb[order], boxes[want], atol=1e-4)
    np.testing.assert_allclose(fs[order], scores[want], atol=1e-6)
    np.testing.assert_array_equal(fl[order], labels[want])


def test_wbf_halves_what_one_of_two_views_sees_and_flip_is_undone():
    box = np.array([[10.0, 5.0, 30.0, 25.0]])
    one = wbf([(box, np.array([0.8]), np.array([2])), (np.zeros((0, 4)), np.zeros(0), np.zeros(0, int))], (64, 96), 0.55, 0.0)
    assert one[1][0] == pytest.approx(0.4)  # WBF "avg": seen by 1 of 2 views
    views = [(box, np.array([0.8]), np.array([2])), (np.zeros((0, 4)), np.zeros(0), np.zeros(0, int))]
    assert wbf(views, (64, 96), 0.55, 0.0, "max")[1][0] == pytest.approx(0.8)  # "max": the surest view's score
    b3 = np.array([[10.0, 2.0, 0.8, 4.5, 1.9, 1.5, 0.0, 0.0, 0.0]])
    lone = [(b3, np.array([0.8]), np.array([0])), (np.zeros((0, 9)), np.zeros(0), np.zeros(0, int))]
    assert fuse_3d(lone, 2.0, 0.0)[1][0] == pytest.approx(0.4) and fuse_3d(lone, 2.0, 0.0, "max")[1][0] == pytest.approx(0.8)
    np.testing.assert_allclose(mirror_boxes(mirror_boxes(box, 96), 96), box)
    np.testing.assert_allclose(mirror_boxes(box, 96), [[66.0, 5.0, 86.0, 25.0]])


def test_fuse_3d_of_identical_views_is_the_input():
    b = np.array([[10.0, 2.0, 0.8, 4.5, 1.9, 1.6, 0.3, 5.0, 0.0], [-20.0, 8.0, 0.9, 0.6, 0.6, 1.7, 1.0, 0.0, 1.0]])
    s, lab = np.array([0.7, 0.5]), np.array([0, 3])
    fb, fs, fl = fuse_3d([(b, s, lab), (b.copy(), s.copy(), lab.copy())], 2.0, 0.0)
    np.testing.assert_allclose(fb, b[np.argsort(lab)])
    np.testing.assert_allclose(fs, s[np.argsort(lab)])


# -- tracking -----------------------------------------------------------------------------------------
def _two_objects(T: int = 8, miss: int | None = 4, seed: int = 0):
    """Per frame (boxes, labels, truth ids) of two boxes at constant velocity (one missed at frame `miss`), shuffled."""
    rng = np.random.default_rng(seed)
    boxes, labels, truth = [], [], []
    for t in range(T):
        objs = [(0, [10 + 6 * t, 20, 30 + 6 * t, 40], 0), (1, [90 - 5 * t, 30, 110 - 5 * t, 52], 1)]
        if t == miss:
            objs = objs[:1]
        order = rng.permutation(len(objs))
        boxes.append(np.array([objs[i][1] for i in order], float))
        labels.append(np.array([objs[i][2] for i in order]))
        truth.append([objs[i][0] for i in order])
    return boxes, labels, truth


def _switches(tracks, truth) -> int:
    """Identity switches counted directly: for each track, the true identities it holds beyond one, plus the tracks
    beyond one each true object is split into."""
    ids_per_track = [{truth[t][k] for t, k in tr} for tr in tracks]
    per_object: dict[int, int] = {}
    for ids in ids_per_track:
        for i in ids:
            per_object[i] = per_object.get(i, 0) + 1
    return sum(len(ids) - 1 for ids in ids_per_track) + sum(n - 1 for n in per_object.values())


def test_tracker_links_constant_velocity_objects_with_one_id_both_directions():
    boxes, labels, truth = _two_objects()
    frames = [(b, lab) for b, lab in zip(boxes, labels)]
    T = len(frames)
    fwd = one_pass(frames, range(T), box_iou, 0.3, 2)
    bwd = one_pass(frames, range(T - 1, -1, -1), box_iou, 0.3, 2)
    assert len(fwd) == len(bwd) == 2 and _switches(fwd, truth) == 0 and _switches([sorted(t) for t in bwd], truth) == 0
    tracks = track_2d(boxes, labels, 0.3, 2)
    assert len(tracks) == 2 and _switches(tracks, truth) == 0
    assert sorted(len(t) for t in tracks) == [T - 1, T]  # the missed frame is a gap, not a new track


def test_merge_joins_what_one_direction_broke():
    fwd = [[(0, 0), (1, 0)], [(2, 0), (3, 0)]]  # the forward pass broke the object at frame 2
    bwd = [[(3, 0), (2, 0), (1, 0), (0, 0)]]
    assert merge_links(fwd, bwd) == [[(0, 0), (1, 0), (2, 0), (3, 0)]]
    clash = [[(0, 0), (1, 0)], [(0, 1), (1, 1)]]
    assert merge_links(clash, [[(0, 0), (1, 1)], [(0, 1), (1, 0)]]) == sorted(clash)  # contradiction: forward decides


def test_3d_tracks_in_the_world_frame_while_the_car_moves():
    """Two parked cars seen from a car driving at 10 m/s: in the ego frame they move, in the world they do not."""
    T = 6
    poses = []
    for t in range(T):
        P = np.eye(4)
        P[0, 3], P[1, 3] = 1.0 * t, 0.2 * t
        poses.append(P)
    world = np.array([[15.0, 3.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.0, 0.0], [25.0, -3.0, 0.8, 4.5, 1.9, 1.6, 0.0, 0.0, 0.0]])
    ego = [to_ego(world, P) for P in poses]
    back = [to_world(e, P) for e, P in zip(ego, poses)]
    np.testing.assert_allclose(back[3], world, atol=1e-9)
    tracks = track_3d(back, [np.array([0, 0])] * T, 2.0, 1)
    assert len(tracks) == 2 and all(len(t) == T for t in tracks)
    assert all(len({k for _, k in tr}) == 1 for tr in tracks)


# -- smoothing ----------------------------------------------------------------------------------------
def test_rts_equals_the_least_squares_line_without_process_noise():
    """With (almost) no process noise the RTS smoother of a constant-velocity model is the weighted least-squares
    straight line through the measurements; its prior (the first measurement, sigma r) counts that measurement
    twice. A known case filterpy's output must meet."""
    rng = np.random.default_rng(1)
    t = np.arange(12) * 0.5
    z = 2.0 + 3.0 * t + rng.normal(0, 0.4, len(t))
    pos, vel = rts_smooth(t, z[:, None], 1e-12, 0.4)
    w = np.ones(len(t))
    w[0] = np.sqrt(2)
    slope, icpt = np.polyfit(t, z, 1, w=w)
    np.testing.assert_allclose(pos[:, 0], icpt + slope * t, atol=1e-4)
    np.testing.assert_allclose(vel[:, 0], slope, atol=1e-4)


def test_rts_reduces_the_error_of_a_noisy_track_and_gives_its_velocity():
    rng = np.random.default_rng(2)
    t = np.arange(30) * 0.5
    truth = np.stack([5 + 4.0 * t, -2 + 1.5 * t], 1)  # (T, 2) m, velocity (4, 1.5) m/s
    z = truth + rng.normal(0, 0.5, truth.shape)
    z[[7, 8, 20]] = np.nan  # missed frames
    pos, vel = rts_smooth(t, z, 0.05, 0.5)
    ok = np.isfinite(z).all(1)
    raw = np.linalg.norm(z[ok] - truth[ok], axis=1).mean()
    smoothed = np.linalg.norm(pos - truth, axis=1).mean()
    assert smoothed < 0.6 * raw, (smoothed, raw)
    np.testing.assert_allclose(vel[5:-5].mean(0), [4.0, 1.5], atol=0.2)
    assert np.isfinite(pos[[7, 8, 20]]).all()  # gaps filled


def test_the_detections_velocities_measured_beside_the_positions():
    """rts_smooth with the detections' own velocities (zv, sigma rv): over 200 short noisy tracks (8 frames at
    10 Hz, positions sigma 0.5 m, velocities sigma 1.5 m/s) the fused velocity is closer to the truth than the
    trajectory's alone and than the frames' velocity estimates averaged; without rv it is the trajectory's."""
    rng = np.random.default_rng(4)
    t = np.arange(8) * 0.1
    err = {"positions": [], "fused": [], "frames": []}
    for _ in range(200):
        v = rng.uniform(-10, 10, 2)
        truth = rng.uniform(-20, 20, 2) + t[:, None] * v  # (8, 2)
        z, zv = truth + rng.normal(0, 0.5, truth.shape), v + rng.normal(0, 1.5, truth.shape)
        _, vel_p = rts_smooth(t, z, 2.0, 0.5)
        _, vel_f = rts_smooth(t, z, 2.0, 0.5, zv, 1.5)
        np.testing.assert_allclose(rts_smooth(t, z, 2.0, 0.5, zv, 0.0)[1], vel_p)  # rv 0: positions alone
        err["positions"].append(np.linalg.norm(vel_p - v, axis=1).mean())
        err["fused"].append(np.linalg.norm(vel_f - v, axis=1).mean())
        err["frames"].append(np.linalg.norm(zv.mean(0) - v))
    mean = {k: float(np.mean(e)) for k, e in err.items()}
    assert mean["fused"] < 0.8 * mean["positions"] and mean["fused"] < mean["frames"], mean


def test_hindsight_3d_one_size_yaw_from_motion_gap_filled():
    rng = np.random.default_rng(3)
    times = np.arange(8) * 0.5
    frames = [0, 1, 2, 4, 5, 6, 7]  # frame 3 missed
    world = np.zeros((len(frames), 9))
    world[:, 0] = 10 + 6.0 * times[frames] + rng.normal(0, 0.2, len(frames))
    world[:, 1] = 5 + rng.normal(0, 0.2, len(frames))
    world[:, 3:6] = [4.5, 1.9, 1.6] + rng.normal(0, 0.3, (len(frames), 3))
    world[:, 6] = np.pi  # detected headings wrong by 180 degrees
    h = hindsight_3d(times, frames, world, np.full(len(frames), 0.8), np.zeros(len(frames), int), 1.0, 0.3, 1.0)
    assert list(h["frames"]) == list(range(8)) and not h["detected"][3]
    assert np.ptp(h["boxes"][:, 3:6], axis=0).max() == 0  # one size for the whole track
    np.testing.assert_allclose(h["boxes"][0, 3:6], np.median(world[:, 3:6], axis=0))
    np.testing.assert_allclose(h["boxes"][:, 6], 0.0, atol=0.15)  # moving along +x: yaw from motion
    np.testing.assert_allclose(h["boxes"][2:6, 7], 6.0, atol=0.8)  # velocity from the smoothed trajectory
    assert h["confidence"] == pytest.approx(0.8 * 7 / 8)


def test_policy_accepts_only_when_every_box_is_sure():
    cfg = AutolabelConfig(accept={"det2d": 0.5, "det3d": 0.5}, accept_class={"pedestrian": 0.8})
    box = lambda c, p: {"bbox": [0, 0, 1, 1], "class": c, "confidence": p}  # noqa: E731
    sure = {"cameras": {"CAM_FRONT": {"boxes2d": [box("car", 0.6)]}}, "boxes3d": [{"class": "car", "confidence": 0.9}]}
    assert decide(sure, cfg)[0]
    ped = {"cameras": {"CAM_FRONT": {"boxes2d": [box("pedestrian", 0.7)]}}, "boxes3d": []}
    ok, why = decide(ped, cfg)
    assert not ok and "pedestrian" in why and "0.800" in why
    empty = {"cameras": {"CAM_FRONT": {"boxes2d": []}}, "boxes3d": [], "supervises": ["det2d"]}
    ok, why = decide(empty, cfg)  # nothing found is not "nothing there": a person looks
    assert not ok and "no det2d box found" in why and "accept_empty" in why
    assert decide(empty, AutolabelConfig(accept_empty=True))[0]
    assert decide(empty, AutolabelConfig(accept={"det3d": 0.5}))[0]  # det2d not judged
    only2d = {"cameras": {"CAM_FRONT": {"boxes2d": [box("car", 0.6)]}}, "boxes3d": [], "supervises": ["det2d"]}
    assert decide(only2d, cfg)[0]  # a camera model's label: det3d is not what it supervises


@pytest.mark.parametrize("key,value", [("min_track_score", float("nan")), ("fuse_iou", 1.5), ("track_iou", -0.1)])
def test_thresholds_outside_the_unit_interval_are_refused(key, value):
    from hydranet.config import ConfigError

    with pytest.raises(ConfigError, match=f"autolabel.{key}"):
        AutolabelConfig(**{key: value})
    with pytest.raises(ConfigError, match="autolabel.accept.det2d"):
        AutolabelConfig(accept={"det2d": float("nan")})
    with pytest.raises(ConfigError, match="autolabel.fuse_conf.*avg or max"):
        AutolabelConfig(fuse_conf="median")


# -- end to end ---------------------------------------------------------------------------------------
def _export(fleet: Path, out: Path, seed: int) -> Path:
    """An untrained configs/engine_tiny.yaml model (CAM_FRONT, det2d, dense heads, det3d, video queue) exported."""
    import torch

    from data_engine.fleet import Fleet
    from deploy.export import export_model, sim_frames
    from hydranet.checkpoint import meta_for_rig
    from hydranet.experiment import load_experiment
    from hydranet.models import build_model

    cfg = load_experiment(REPO / "configs" / "engine_tiny.yaml", [f"data.root={fleet}", "data.cameras=[CAM_FRONT]", "device=cpu"])
    meta = meta_for_rig(cfg, json.loads((fleet / "dataset.json").read_text()), Fleet(fleet).rig, str(fleet))
    torch.manual_seed(seed)
    export_model(build_model(cfg.model, meta), cfg, meta, out, sim_frames(cfg, fleet, 1), verbose=False)
    return out


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from engine_fixtures import make_fleet

    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet

    root = tmp_path_factory.mktemp("autolabel")
    fleet = make_fleet(root / "fleet", clips=2, frames=3, seed=5)
    models = [_export(fleet, root / f"m{s}.onnx", s) for s in (0, 1)]
    cat = root / "cat.db"
    with Catalog(cat, create=True) as c:
        c.add_fleet(Fleet(fleet))
    return {"root": root, "fleet": fleet, "models": models, "catalog": cat}


LOW = ["--set", "autolabel.min_score=0.05", "--set", "autolabel.min_track_score=0.05"]  # untrained models: scores ~0.1


def _autolabel(env, selection: Path, out: Path, *extra) -> int:
    from hydranet.cli import main

    return main(["engine", "autolabel", "--catalog", str(env["catalog"]), "--selection", str(selection), "--models",
                 *map(str, env["models"]), "--out", str(out), "--quiet", *LOW, *extra])


def _rows(cat: Path, sql: str, *args):
    with sqlite3.connect(cat) as db:
        return db.execute(sql, args).fetchall()


def test_autolabel_end_to_end(engine, capsys):
    """The whole command on a tiny fleet, then its rerun, then a run killed with kill -9 and rerun."""
    from data_engine.label_exchange import import_labels, send
    from data_engine.label_queue import create_jobs, load_jobs
    from data_engine.labeling import build_backend
    from data_engine.labels import open_catalog, transition
    from hydranet.io import file_sha256

    root, cat = engine["root"], engine["catalog"]
    human = root / "human.json"  # a person's (the oracle's) accepted label of clip_00000/1 first
    human.write_text(json.dumps({"name": "human", "frames": [{"clip": "clip_00000", "frame": 1}]}))
    with open_catalog(cat) as c:
        create_jobs(c, human, "oracle")
        send(c, build_backend("oracle"), "human")
        import_labels(c, build_backend("oracle"), "human")
        transition(c, [j.id for j in load_jobs(c, "human")], "accepted")
    before_human = _rows(cat, "SELECT id, version, source, digest, payload FROM labels")
    sel = root / "sel.json"
    sel.write_text(json.dumps({"name": "auto1", "frames": [{"clip": "clip_00000", "frame": 1}, {"clip": "clip_00000", "frame": 2},
                                                           {"clip": "clip_00001", "frame": 0}, {"clip": "clip_00001", "frame": 2}]}))
    assert _autolabel(engine, sel, root / "out") == 0
    printed = capsys.readouterr().out
    summary = json.loads((root / "out" / "summary.json").read_text())
    assert summary["frames_labelled"] == 4 and summary["frames_run"] == 6 and summary["clips"] == 2
    assert summary["human"] == 1 and summary["accepted"] + summary["queued"] == 3 and summary["new_versions"] == 3
    assert summary["boxes2d"] > 0 and summary["tracks2d"] > 0 and summary["tracks3d"] > 0
    assert "3 queued" in printed or f"{summary['queued']} queued" in printed
    # the human version is untouched and no auto version joined it
    assert _rows(cat, "SELECT id, version, source, digest, payload FROM labels WHERE source != 'auto'") == before_human
    fid_human = _rows(cat, "SELECT f.id FROM frames f JOIN clips c ON f.clip_id = c.id WHERE c.name = 'clip_00000' AND f.idx = 1")[0][0]
    assert not _rows(cat, "SELECT 1 FROM labels WHERE frame_id = ? AND source = 'auto'", fid_human)
    # auto versions: provenance (every model's sha256, the parameters), per-object confidence, the policy
    autos = _rows(cat, "SELECT l.payload, j.state, j.label_id, l.id, j.note, l.labeller FROM labels l JOIN label_jobs j ON "
                  "l.job_id = j.id WHERE l.source = 'auto' AND j.selection = 'auto1'")
    assert len(autos) == 3
    shas = [file_sha256(m) for m in engine["models"]]
    for payload, state, pin, lid, note, labeller in autos:
        p = json.loads(payload)
        assert p["provenance"]["models"] == shas and p["provenance"]["params"]["min_score"] == 0.05
        assert all(shas[0][:12] in labeller for _ in [0])
        boxes = [b for c in p["cameras"].values() for b in c["boxes2d"]] + p["boxes3d"]
        assert all(0 <= b["confidence"] <= 1 for b in boxes)
        accept, why = decide(p, AutolabelConfig(min_score=0.05, min_track_score=0.05))
        assert state == ("accepted" if accept else "queued")
        assert (pin == lid) if accept else (pin is None and why in note)
        assert (root / "out" / p["dense"]["file"]).is_file()
    # queued frames go to a person pre-filled with the auto-labels (what the files backend shows)
    with open_catalog(cat) as c:
        from data_engine.label_exchange import with_predictions

        queued = [j for j in load_jobs(c, "auto1", ("queued",)) if j.frame_id != fid_human]
        for j in with_predictions(c, queued):
            assert j.model_version.startswith("autolabel(") and j.predictions
    # rerun: the same labels, none duplicated; an existing --out is refused without --overwrite
    labels_before = _rows(cat, "SELECT id, frame_id, version, digest FROM labels ORDER BY id")
    jobs_before = _rows(cat, "SELECT id, state, label_id FROM label_jobs ORDER BY id")
    assert _autolabel(engine, sel, root / "out") == 2
    assert "--overwrite" in capsys.readouterr().err
    assert _autolabel(engine, sel, root / "out", "--overwrite") == 0
    again = json.loads((root / "out" / "summary.json").read_text())
    assert again["new_versions"] == 0
    assert _rows(cat, "SELECT id, frame_id, version, digest FROM labels ORDER BY id") == labels_before
    assert _rows(cat, "SELECT id, state, label_id FROM label_jobs ORDER BY id") == jobs_before
    assert [r["decision"] for r in again["frames"]] == [r["decision"] for r in summary["frames"]]
    import cv2  # preview.png: the four labelled frames drawn one under the other (test_preview_* checks what is drawn)
    sheet = cv2.imread(str(root / "out" / again["preview"]))
    assert again["preview"] == "preview.png" and sheet is not None and sheet.shape[0] > 4 * 300
    (root / "kill").mkdir()
    _killed_and_rerun(engine, root / "kill")  # in this test: the fixture's fleet and models are built once


def test_preview_draws_the_labels_where_they_are(engine):
    """preview.frame_views: the auto box in its class colour at its place, the dense mask blended where it is set
    and nowhere else (the same view without labels is the reference)."""
    from data_engine.autolabel.preview import frame_views
    from data_engine.fleet import Fleet, read_frame
    from data_engine.report import fleet_truth
    from data_engine.report_pictures import CAM_W, camera_view
    from hydranet.viz import class_color

    fleet = engine["fleet"]
    fdir = Fleet(fleet).clip("clip_00000").frames[0]["dir"]
    image = read_frame(fleet, "clip_00000", fdir, ["CAM_FRONT"])[0]  # (64, 96, 3)
    H, W = image.shape[:2]
    box = [10.0, 6.0, 40.0, 24.0]  # camera pixels, top half
    payload = {"cameras": {"CAM_FRONT": {"boxes2d": [{"bbox": box, "class": "truck", "confidence": 0.9, "track_id": 3,
                                                      "attributes": {}}]}}, "boxes3d": []}
    drivable = np.zeros((1, H // 2, W // 2), np.float16)
    drivable[:, H // 4:] = 0.9  # the bottom half of the image (a mask at the model's resolution is resized)
    classes = ["car", "truck"]
    views, drawn = frame_views(fleet, "clip_00000", fdir, ["CAM_FRONT"], payload, {"drivable": drivable}, classes)
    truth = ((fleet_truth(fleet, "clip_00000", fdir) or {}).get("cameras") or {}).get("CAM_FRONT")
    ref, _ = camera_view(image, None, "CAM_FRONT", [], (H, W), None, truth, None, classes)
    view = views[0]
    assert view.shape == ref.shape and "truck" in drawn and "drivable (model)" in drawn
    k = CAM_W / W
    x0, y0, x1, y1 = (round(v * k) for v in box)
    assert tuple(view[(y0 + y1) // 2, x0]) == class_color(1)  # the box's left edge, in truck's colour
    changed = np.any(view != ref, axis=-1)  # (h, CAM_W)
    h = view.shape[0]
    assert changed[h // 2 + 2:].mean() > 0.9  # the mask's half blended
    outside = changed[:h // 2 - 1].copy()
    outside[max(0, y0 - 16):y1 + 3, max(0, x0 - 3):x1 + 120] = False  # the box and its name above it
    assert not outside.any()


KILL_AFTER_FIRST = """
import os, signal, sys
import data_engine.labels as labels
record = labels.record_auto
def killed(*a, **k):
    out = record(*a, **k)
    os.kill(os.getpid(), signal.SIGKILL)  # kill -9 right after the first frame's transaction
    return out
labels.record_auto = killed
from hydranet.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _killed_and_rerun(engine, tmp: Path) -> None:
    """kill -9 after the first frame's label: no --out, one new label; the rerun gives exactly the labels and job
    states of an uninterrupted run on a copy of the catalog, none twice."""
    import shutil
    import subprocess
    import sys

    from hydranet.cli import main

    cat, ref = tmp / "cat.db", tmp / "ref.db"
    shutil.copy(engine["catalog"], cat)
    shutil.copy(engine["catalog"], ref)
    sel = tmp / "killed.json"
    sel.write_text(json.dumps({"name": "killed", "frames": [{"clip": "clip_00000", "frame": 0}, {"clip": "clip_00001", "frame": 1}]}))

    def argv(catalog: Path, out: Path) -> list[str]:
        return ["engine", "autolabel", "--catalog", str(catalog), "--selection", str(sel), "--models",
                *map(str, engine["models"]), "--out", str(out), "--quiet", *LOW]

    before = len(_rows(cat, "SELECT id FROM labels"))
    p = subprocess.run([sys.executable, "-c", KILL_AFTER_FIRST, *argv(cat, tmp / "out")], cwd=REPO, capture_output=True,
                       text=True)
    assert p.returncode == -9, p.stderr[-500:]
    assert not (tmp / "out").exists() and list(tmp.glob("out.tmp-*"))  # the killed run's temp folder
    assert len(_rows(cat, "SELECT id FROM labels")) == before + 1
    assert main(argv(cat, tmp / "out")) == 0
    assert not list(tmp.glob("out.tmp-*"))  # the stale temp folder is removed by the rerun
    assert main(argv(ref, tmp / "ref_out")) == 0
    q = "SELECT frame_id, version, source, digest, payload FROM labels ORDER BY frame_id, version"
    assert _rows(cat, q) == _rows(ref, q) and len(_rows(cat, q)) == before + 2
    q = "SELECT selection, frame_id, state, label_id IS NULL, note FROM label_jobs ORDER BY selection, frame_id"
    assert _rows(cat, q) == _rows(ref, q)


def test_the_detections_velocities_are_measured_only_from_video_members():
    """Ensemble.params: noise_mps kept when every member has a video queue, 0 when one is single-frame (its
    velocities are guesses); the other parameters untouched."""
    from types import SimpleNamespace

    from data_engine.autolabel.ensemble import Ensemble, Member

    def member(video: bool) -> Member:
        return Member(Path("m.onnx"), SimpleNamespace(state_spec={"input": "prev_bev"} if video else None), "0" * 64, ("det3d",))

    cfg = AutolabelConfig(noise_mps=2.0, min_speed=3.0)
    assert Ensemble([member(True), member(True)], ("det3d",)).params(cfg) is cfg
    got = Ensemble([member(True), member(False)], ("det3d",)).params(cfg)
    assert got.noise_mps == 0.0 and got.min_speed == 3.0
