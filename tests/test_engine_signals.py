"""data_engine.signals on constructed model outputs, every trigger on a constructed case and its
negative, k-center greedy, and the catalog's refusals (foreign, corrupt, newer schema)."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from data_engine.catalog import Catalog
from data_engine.catalog_schema import CatalogError
from data_engine.mining import k_center_greedy, percentile_rank
from data_engine.signals import ClipState, ModelInfo, entropy, frame_signals, project
from hydranet.geometry import boxes_corners
from data_engine.triggers import build_triggers, registry

K = np.array([[50.0, 0, 48], [0, 50.0, 32], [0, 0, 1]])
CAM2EGO = np.array([[0, 0, 1, 0], [-1, 0, 0, 0], [0, -1, 0, 1.5], [0, 0, 0, 1]], float)  # camera looks along ego +x


def info(n: int = 1) -> ModelInfo:
    return ModelInfo([f"C{i}" for i in range(n)], (64, 96), np.stack([K] * n), np.stack([CAM2EGO] * n),
                     {"det2d": {}, "det3d": {"classes": ["car", "pedestrian"]}, "depth": {}}, ["car", "pedestrian"])


def det2d(*boxes, score=0.9):
    b = np.asarray(boxes, np.float32).reshape(-1, 4)
    return {"boxes": b, "scores": np.full(len(b), score, np.float32), "labels": np.zeros(len(b), np.int64)}


def det3d(*boxes):
    b = np.asarray(boxes, np.float32).reshape(-1, 9)
    return {"boxes": b, "scores": np.full(len(b), 0.9, np.float32), "labels": np.zeros(len(b), np.int64)}


def run(frames, n_cams=1, ego=None):
    state, out = ClipState(), []
    for t, dec in enumerate(frames):
        out.append(frame_signals(info(n_cams), {}, dec, np.eye(4) if ego is None else ego[t], t * 500_000, state)[0])
    return out


def test_entropy_peaks_at_one_half():
    assert entropy(np.array([0.5]))[0] == pytest.approx(np.log(2)) and entropy(np.array([0.999]))[0] < 0.01


def test_flicker_counts_a_one_frame_blink_and_a_gap():
    a, b = [10, 10, 30, 30], [60, 10, 80, 30]
    steady = run([{"det2d": [det2d(a)]}] * 4)
    assert [s["flicker"] for s in steady][2:] == [0.0, 0.0]
    blink = run([{"det2d": [det2d(a)]}, {"det2d": [det2d(a, b)]}, {"det2d": [det2d(a)]}])
    assert blink[2]["flicker"] == 1.0  # b lived one frame
    gap = run([{"det2d": [det2d(a)]}, {"det2d": [det2d()]}, {"det2d": [det2d(a)]}])
    assert gap[2]["flicker"] == 1.0  # a vanished for one frame and reappeared: one gap
    assert np.isnan(steady[0]["flicker"]) and np.isnan(steady[1]["flicker"])  # no history yet


def test_jitter_is_zero_for_smooth_motion_and_high_for_shaking_boxes():
    smooth = run([{"det2d": [det2d([10 + 5 * t, 10, 30 + 5 * t, 30])]} for t in range(3)])
    shaky = run([{"det2d": [det2d([10 + 6 * (t % 2), 10, 30 + 6 * (t % 2), 30])]} for t in range(3)])
    assert smooth[2]["jitter"] == pytest.approx(0.0) and shaky[2]["jitter"] == pytest.approx(0.3)  # 12 px on x0, x1 over 4 coords, size 20


def test_box2d_vs_3d_agrees_on_the_exact_projection():
    box = [10.0, 0.0, 1.5, 4.0, 2.0, 1.5, 0.0, 0.0, 0.0]  # a car 10 m ahead
    uv, z = project(boxes_corners(np.array([box])), K, CAM2EGO)
    proj = [*uv[0].min(0), *uv[0].max(0)]
    depth = np.full((64, 96), 10.0, np.float32)
    agree = run([{"det2d": [det2d(proj)], "det3d": [det3d(box)], "depth": [{"depth": depth}]}])[0]
    assert agree["box2d_vs_3d"] == pytest.approx(0.0, abs=1e-3) and agree["depth_vs_3d"] == pytest.approx(0.0, abs=1e-3)
    lost = run([{"det2d": [det2d()], "det3d": [det3d(box)], "depth": [{"depth": depth * 3}]}])[0]
    assert lost["box2d_vs_3d"] == 1.0 and lost["depth_vs_3d"] == pytest.approx(2.0, abs=1e-3)


def test_cross_camera_disagreement_in_the_overlap():
    box = [10.0, 0.0, 1.5, 4.0, 2.0, 1.5, 0.0, 0.0, 0.0]  # two cameras with the same view: a full overlap
    uv, _ = project(boxes_corners(np.array([box])), K, CAM2EGO)
    proj = [*uv[0].min(0), *uv[0].max(0)]
    both = run([{"det2d": [det2d(proj), det2d(proj)], "det3d": [det3d(box)]}], n_cams=2)[0]
    one = run([{"det2d": [det2d(proj), det2d()], "det3d": [det3d(box)]}], n_cams=2)[0]
    assert both["cross_camera"] == 0.0 and one["cross_camera"] == 1.0


def test_implausible_speed_and_acceleration():
    walker = [10.0, 0.0, 1.0, 0.5, 0.5, 1.7, 0.0, 1.0, 0.0]
    fast = list(walker)
    fast[7] = 20.0
    fine = run([{"det3d": [{**det3d(walker), "labels": np.array([1])}]}] * 2)
    wild = run([{"det3d": [{**det3d(walker), "labels": np.array([1])}]}, {"det3d": [{**det3d(fast), "labels": np.array([1])}]}])
    assert fine[1]["speed_excess"] == pytest.approx(0.25) and fine[1]["accel"] == 0.0
    assert wild[1]["speed_excess"] == pytest.approx(5.0) and wild[1]["accel"] == pytest.approx(38.0)  # 19 m/s in 0.5 s


def test_candidate_disagreement():
    a = det2d([10, 10, 30, 30])
    sig = frame_signals(info(), {}, {"det2d": [a]}, np.eye(4), 0, ClipState(), {"raw": {}, "decoded": {"det2d": [a]}})[0]
    other = frame_signals(info(), {}, {"det2d": [a]}, np.eye(4), 0, ClipState(), {"raw": {}, "decoded": {"det2d": [det2d()]}})[0]
    assert sig["disagree_det2d"] == 0.0 and other["disagree_det2d"] == 1.0


# -- triggers -------------------------------------------------------------------------------------
CASES = {  # trigger -> (signal column, firing value, quiet value)
    "det2d_uncertain": ("det2d_uncertain", 8, 0), "det3d_uncertain": ("det3d_uncertain", 6, 0),
    "signs_uncertain": ("signs_lights_entropy", 0.6, 0.1), "dense_entropy": ("drivable_entropy_p95", 0.69, 0.2),
    "flicker": ("flicker", 3, 0), "jitter": ("jitter", 0.5, 0.0), "cross_camera": ("cross_camera", 1.0, 0.0),
    "box2d_vs_3d": ("box2d_vs_3d", 0.95, 0.1), "depth_vs_3d": ("depth_vs_3d", 1.5, 0.05), "speed": ("speed_excess", 5.0, 0.5),
    "accel": ("accel", 40.0, 2.0), "model_disagreement": ("disagree_det2d", 0.9, 0.0),
}


def test_every_trigger_has_a_case_and_metadata():
    assert set(registry()) == set(CASES) | {"novelty"} and len(registry()) >= 10
    for t in registry().values():
        assert t.version >= 1 and t.description and t.quota >= 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_trigger_fires_on_its_case_and_not_on_the_negative(name):
    col, hot, cold = CASES[name]
    table = {"frame_id": np.array([1, 2, 3]), "clip": np.array(["a", "b", "c"], object), col: np.array([cold, hot, np.nan])}
    (t,) = [t for t in build_triggers({name: {}}) if t.name == name]
    assert t.fire(table) == [(2, pytest.approx(hot))]
    (t1,) = [t for t in build_triggers({name: {"quota": 1, "threshold": cold - 1}}) if t.name == name]
    assert len(t1.fire(table)) == 1  # the quota caps it


def test_novelty_fires_on_an_unseen_scene():
    e = np.array([[1, 0, 0], [0.99, 0.14, 0], [0, 0, 1.0], [0.995, 0.1, 0]])
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    table = {"frame_id": np.arange(4), "clip": np.array(["a", "b", "c", "d"], object), "embedding": e}
    assert [f for f, _ in registry()["novelty"].fire(table)] == [2]


def test_unknown_trigger_and_bad_parameters():
    with pytest.raises(ValueError, match="unknown trigger 'nope'; known triggers"):
        build_triggers({"nope": {}})
    with pytest.raises(ValueError, match="quota must be at least 1"):
        build_triggers({"flicker": {"quota": 0}})


# -- mining pieces and the catalog ------------------------------------------------------------------
def test_k_center_greedy_covers_the_clusters_first():
    rng = np.random.default_rng(0)
    centres = np.eye(4)
    X = np.concatenate([c + 0.01 * rng.normal(size=(10, 4)) for c in centres])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    picks, _ = k_center_greedy(X, 4)
    assert sorted(p // 10 for p in picks) == [0, 1, 2, 3]
    assert percentile_rank(np.array([3.0, np.nan, 1.0, 2.0])).tolist()[::2] == [1.0, 0.0]


def test_catalog_refuses_foreign_corrupt_and_newer_files(tmp_path):
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(CatalogError, match="not a readable catalog"):
        Catalog(tmp_path / "junk.db")
    db = sqlite3.connect(str(tmp_path / "other.db"))
    db.execute("CREATE TABLE t (x)")
    db.close()
    with pytest.raises(CatalogError, match="not a hydranet catalog"):
        Catalog(tmp_path / "other.db")
    Catalog(tmp_path / "new.db", create=True).close()
    db = sqlite3.connect(str(tmp_path / "new.db"))
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(CatalogError, match="newer than this package"):
        Catalog(tmp_path / "new.db")
    with pytest.raises(CatalogError, match="does not exist"):
        Catalog(tmp_path / "missing.db")
