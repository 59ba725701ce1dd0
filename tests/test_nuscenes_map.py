"""nuScenes map expansion (hydranet/data/nuscenes_map.py): sim worlds written as map JSON v1.3
(tests/dataset_fixtures.py) give back the sim's BEV raster and camera drivable area, agree with the
official devkit's `NuScenesMap.get_map_mask`, project exactly as a ray cast on a hand-made map, and
supervise drivable, lanes and bevmap in a short training run."""
from __future__ import annotations

import json
import math
import shutil

import cv2
import numpy as np
import pytest

from dataset_fixtures import make_sim, write_map_json, write_nuscenes, write_nuscenes_map
from devkit import HAVE_DEVKIT, needs_devkit
from hydranet.bevgrid import BevGrid
from hydranet.data.reader import DatasetError
from hydranet.data.sim_reader import SimDataset
from hydranet.data.nuscenes import CLASSES, NuScenesDataset
from hydranet.data.nuscenes_map import NEAR, LocalMap, MapExpansion, bev_raster, camera_drivable, camera_lanes
from hydranet.geometry import box_corners, invert_rigid, make_transform, rot_z

if HAVE_DEVKIT:
    from nuscenes.map_expansion.map_api import NuScenesMap

MAP_HEADS = {"drivable", "lanes", "bevmap"}
OCCLUDERS = ("curb", "sidewalk", "building", "vegetation", "pole")  # stand above the road and hide it


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    root = tmp_path_factory.mktemp("nusc_map")
    sim = make_sim(root / "sim")
    nusc = write_nuscenes(sim, root / "nusc")
    where = write_nuscenes_map(sim, nusc)
    return SimDataset(sim, channels=("images", "semantic", "instance", "bev")), nusc, where


@pytest.fixture(scope="module")
def ds(fixture):
    return NuScenesDataset(fixture[1])


def _dilate(mask: np.ndarray, r: int = 1) -> np.ndarray:
    return cv2.dilate(mask.astype(np.uint8), np.ones((2 * r + 1, 2 * r + 1), np.uint8)).astype(bool)


def test_samples_supervise_the_map_heads_and_notes_say_so(fixture, ds):
    _, _, where = fixture
    assert sorted(ds.maps) == sorted(set(where.values())) and {s["location"] for s in ds.scenes} == set(where.values())
    assert ds.supervises == {"det2d", "det3d"} | MAP_HEADS
    assert ds.meta["lane_types"] == ["lane_divider", "road_divider"]
    assert "rasterized" in ds.notes[0] and len(ds.notes) == 1
    s = ds[0]
    assert s["supervises"] == {"det2d", "det3d"} | MAP_HEADS
    assert s["bev"].shape == (3, 200, 200) and s["bev"].dtype == np.uint8
    assert s["drivable"].shape == (len(ds.camera_names), 96, 160) and s["drivable"].dtype == bool
    assert s["labels"]["lanes3d"] and all(np.abs(np.array(ln["points"])[:, :2]).max() <= 50 + 1e-6
                                          for ln in s["labels"]["lanes3d"])


def test_a_location_without_its_map_supervises_no_map_head(fixture, tmp_path):
    _, nusc, where = fixture
    root = shutil.copytree(nusc, tmp_path / "nusc")
    gone = where["scene_0001"]
    (root / "maps" / "expansion" / f"{gone}.json").unlink()
    ds = NuScenesDataset(root)
    assert ds.supervises == {"det2d", "det3d"} | MAP_HEADS  # scene_0000 still has its map
    assert any("not installed" in n and gone in n for n in ds.notes)
    by_scene = {ds.scenes[s]["name"]: i for i, (s, _) in reversed(list(enumerate(ds._frames)))}
    lost = ds[by_scene["scene_0001"]]
    assert lost["supervises"] == {"det2d", "det3d"} and "bev" not in lost and "drivable" not in lost
    assert ds[by_scene["scene_0000"]]["supervises"] == {"det2d", "det3d"} | MAP_HEADS


def test_bev_raster_gives_back_the_sims_bev(fixture, ds):
    sim = fixture[0]
    grid = BevGrid.from_meta(sim.meta)
    near = np.linalg.norm(grid.cell_centers(), axis=-1) < 55  # the sim draws lane lines within 60 m
    for i in range(len(ds)):
        got, truth = ds[i]["bev"] > 0, sim.load(i)["bev"] > 0
        np.testing.assert_array_equal(got[0], truth[0])  # drivable: the same polygons, drawn the same way
        assert (truth[1] & near <= _dilate(got[1])).all() and (got[1] & near <= _dilate(truth[1])).all()
        assert got[2].any() and (got[2] <= _dilate(truth[2])).all()  # exported boxes' footprints (sim: all boxes)


def test_camera_drivable_is_the_sims_road_plus_what_stands_on_it(fixture, ds):
    """The map laid on the ground holds every road pixel the sim rendered; the pixels it adds are
    where something stands on or beside the road and hides it (the projection is not occlusion-aware)."""
    sim = fixture[0]
    occluder = np.zeros(256, bool)
    occluder[[sim.meta["semantic_classes"].index(c) for c in OCCLUDERS]] = True
    recall, hidden, extra = [], 0, 0
    for i in range(len(ds)):
        got, truth = ds[i]["drivable"], sim.load(i)
        road = truth["drivable"]
        recall.append((got & road).sum() / road.sum())
        add = got & ~road
        extra += add.sum()
        hidden += (add & ((truth["instance"] > 0) | occluder[truth["semantic"]])).sum()
    assert min(recall) > 0.999, recall
    assert hidden / extra > 0.9, (hidden, extra)


def _distance_to_polylines(pts: np.ndarray, lines: list[np.ndarray]) -> np.ndarray:
    """Distance (P,) of each point (P, 2) to the nearest segment of any polyline."""
    A = np.concatenate([ln[:-1] for ln in lines])  # (S, 2)
    B = np.concatenate([ln[1:] for ln in lines])
    AB, AP = B - A, pts[:, None] - A  # (S, 2), (P, S, 2)
    t = np.clip((AP * AB).sum(-1) / np.maximum((AB * AB).sum(-1), 1e-12), 0, 1)  # (P, S)
    return np.linalg.norm(AP - t[..., None] * AB, axis=-1).min(1)


def test_camera_lanes_hold_the_sims_lane_points(fixture, ds):
    sim = fixture[0]
    checked = 0
    for i in range(len(ds)):
        got, truth = ds[i]["labels"]["cameras"], sim.load(i)["labels"]["cameras"]
        for cam, labels in truth.items():
            ours = []
            for ln in got[cam]["lanes2d"]:
                assert ln["type"] in ("lane_divider", "road_divider") and len(ln["points"]) >= 2
                pts = np.asarray(ln["points"])
                assert (pts >= -1e-6).all() and (pts[:, 0] <= 159 + 1e-6).all() and (pts[:, 1] <= 95 + 1e-6).all()
                ours.append(pts)
            for ln in labels["lanes2d"]:  # the sim's points lie 1.2 cm above the ground: ~1 px off close by
                d = _distance_to_polylines(np.asarray(ln["points"]), ours)
                assert d.max() < 1.5 and np.median(d) < 0.5, (i, cam, ln["type"], d)
                checked += len(d)
    assert checked > 100


def _hand_map(tmp_path):
    """A 20 x 20 m drivable square reaching behind the camera, a 4 x 4 m hole, and lines: one running
    past the camera, one wholly behind it, one that leaves the image and comes back."""
    ego2world = make_transform(rot_z(0.3), [500.0, 200.0, 0.0])
    to_world = lambda p: (np.c_[p, np.zeros(len(p)), np.ones(len(p))] @ ego2world.T)[:, :2]  # noqa: E731
    square = to_world(np.array([[-5.0, -10], [15, -10], [15, 10], [-5, 10]]))
    hole = to_world(np.array([[6.0, -2], [10, -2], [10, 2], [6, 2]]))
    lines = {"lane_divider": [to_world(np.array([[-5.0, 3], [40, 3]])), to_world(np.array([[-20.0, 0], [-10, 0]]))],
             "road_divider": [to_world(np.array([[10.0, 0], [10, 30], [30, 30], [30, 0]]))]}
    path = write_map_json(tmp_path / "maps" / "expansion" / "boston-seaport.json", [(square, [hole])], lines)
    K = np.array([[100.0, 0, 79.5], [0, 100, 47.5], [0, 0, 1]])
    cam2ego = make_transform(np.array([[0.0, 0, 1], [-1, 0, 0], [0, -1, 0]]), [0.0, 0.0, 1.5])  # looks along +x
    return MapExpansion(path, "boston-seaport"), ego2world, cam2ego, K, (square, hole)


def _inside(poly, pts):
    x, y = poly[:, 0], poly[:, 1]
    x2, y2 = np.roll(x, -1), np.roll(y, -1)
    px, py = pts[:, :1], pts[:, 1:]
    cross = (y > py) != (y2 > py)
    with np.errstate(divide="ignore", invalid="ignore"):
        xi = x + (py - y) * (x2 - x) / (y2 - y)
    return (cross & (px < xi)).sum(1) % 2 == 1


def test_camera_drivable_equals_a_ray_cast_on_a_hand_made_map(tmp_path):
    m, ego2world, cam2ego, K, (square, hole) = _hand_map(tmp_path)
    W, H = 160, 96
    got = camera_drivable(LocalMap(m, ego2world), invert_rigid(cam2ego), K, W, H)
    u, v = np.meshgrid(np.arange(W), np.arange(H))
    rays = np.stack([u, v, np.ones_like(u)], -1).reshape(-1, 3) @ np.linalg.inv(K).T  # camera z = 1
    d = rays @ (ego2world @ cam2ego)[:3, :3].T  # world directions
    o = (ego2world @ cam2ego)[:3, 3]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -o[2] / d[:, 2]  # = depth along the camera's z
    hit = o[:2] + t[:, None] * d[:, :2]
    ref = (d[:, 2] < 0) & (t >= NEAR) & _inside(square, hit) & ~_inside(hole, hit)
    ref = ref.reshape(H, W)
    assert ref.sum() > 2000 and (~ref).sum() > 2000
    wrong = got ^ ref
    edge = _dilate(ref) & ~cv2.erode(ref.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
    assert (wrong <= edge).all() and wrong.sum() < 0.2 * edge.sum(), (wrong.sum(), edge.sum())  # boundary pixels only


def test_camera_lanes_are_the_exact_projection_cut_to_the_image(tmp_path):
    m, ego2world, cam2ego, K, _ = _hand_map(tmp_path)
    W, H = 160, 96
    lanes = camera_lanes(LocalMap(m, ego2world), invert_rigid(cam2ego), K, W, H)
    ego2cam = invert_rigid(cam2ego)

    def px(x, y):
        c = ego2cam[:3, :3] @ [x, y, 0.0] + ego2cam[:3, 3]
        return (K @ c)[:2] / c[2]

    past = [ln for ln in lanes if ln["type"] == "lane_divider"]
    assert len(past) == 1  # the line behind the camera gives nothing
    pts = np.asarray(past[0]["points"])
    a, b = px(0.5, 3), px(40, 3)
    normal = np.array([a[1] - b[1], b[0] - a[0]]) / np.linalg.norm(b - a)
    np.testing.assert_allclose((pts - a) @ normal, 0, atol=1e-3)  # on the projected line (nodes: 0.1 mm)
    np.testing.assert_allclose(pts[-1], b, atol=1e-3)  # the far end, inside the image
    assert math.isclose(pts[0][0], 0, abs_tol=1e-6) or math.isclose(pts[0][1], H - 1, abs_tol=1e-6)  # cut at the border
    back = [ln for ln in lanes if ln["type"] == "road_divider"]
    assert len(back) == 2 and back[0]["lane_id"] == back[1]["lane_id"]  # left the image and came back
    np.testing.assert_allclose(back[0]["points"][0], px(10, 0), atol=1e-3)
    np.testing.assert_allclose(back[1]["points"][-1], px(30, 0), atol=1e-3)
    assert math.isclose(back[0]["points"][-1][0], 0, abs_tol=1e-6) and math.isclose(back[1]["points"][0][0], 0, abs_tol=1e-6)


def test_bev_objects_channel_holds_each_boxes_class(tmp_path):
    m, ego2world, _, _, _ = _hand_map(tmp_path)
    grid = BevGrid((-50.0, 50.0), (-50.0, 50.0), 0.5)
    boxes = [{"center": [20.25, -7.75, 0.8], "size": [4.0, 2.0, 1.6], "yaw": 0.4, "class": "truck"}]
    bev = bev_raster(LocalMap(m, ego2world), grid, boxes, list(CLASSES))
    foot = box_corners(boxes[0]["center"], boxes[0]["size"], boxes[0]["yaw"])[:4, :2]
    inside = _inside(foot, grid.cell_centers().reshape(-1, 2)).reshape(grid.shape)  # cell centres in the footprint
    assert inside.sum() > 20 and set(np.unique(bev[2])) == {0, CLASSES.index("truck") + 1}
    assert (inside <= (bev[2] > 0)).all() and ((bev[2] > 0) <= _dilate(inside)).all()
    r, c = np.round(grid.to_cell(np.array([8.0, 0.0]))).astype(int)  # in the hole
    assert bev[0, r, c] == 0 and bev[0, r + 8, c] == 255  # 4 m behind: on the square


@needs_devkit
def test_bev_raster_agrees_with_the_devkits_get_map_mask(fixture, ds):
    """NuScenesMap.get_map_mask on a patch centred half a cell off the ego (its pixel centres sit on
    our cell centres), rotated by the ego yaw: the drivable masks differ only on boundary cells; its
    lines are drawn 2 px thick from truncated coordinates, so each lies within 2.5 cells of ours."""
    nusc, maps = fixture[1], {}
    for i in range(len(ds)):
        s = ds[i]
        loc = ds.scenes[ds._frames[i][0]]["location"]
        dk = maps.setdefault(loc, NuScenesMap(str(nusc), loc))
        E = s["ego2world"]
        c = E[:2, 3] + E[:2, :2] @ np.array([0.25, 0.25])
        mask = dk.get_map_mask((c[0], c[1], 100.0, 100.0), math.degrees(math.atan2(E[1, 0], E[0, 0])),
                               ["drivable_area", "lane_divider", "road_divider"], (200, 200))
        ref = mask[:, ::-1, ::-1].transpose(0, 2, 1) > 0  # (row: +y, col: +x) -> (row: -x, col: -y)
        got = s["bev"] > 0
        edge = _dilate(ref[0]) & ~cv2.erode(ref[0].astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
        assert ref[0].sum() > 5000 and ((got[0] ^ ref[0]) <= edge).all()
        lines = ref[1] | ref[2]
        assert (got[1] <= _dilate(lines)).all()
        dist = cv2.distanceTransform((~got[1]).astype(np.uint8), cv2.DIST_L2, 5)
        assert lines.any() and dist[lines].max() <= 2.5


def test_nuscenes_with_its_map_trains_drivable_lanes_and_bevmap(fixture, tmp_path):
    from hydranet.experiment import load_experiment
    from hydranet.train import train

    tasks = [{"name": "drivable"}, {"name": "lanes"}, {"name": "bevmap"}]
    cfg = load_experiment(None, [f"data.root={fixture[1]}", "data.cameras=[CAM_FRONT]",
                                 "data.image_size=[64,96]", "model.backbone=tiny", "model.neck_width=16",
                                 "model.neck_repeats=1", f"model.tasks={json.dumps(tasks)}", "batch_size=2",
                                 "num_workers=0", "steps=1", "log_every=1", "augment.photometric=false",
                                 "augment.geometric=false"])
    seen = []
    train(cfg, tmp_path / "run", progress=False, on_step=lambda step, losses: seen.append(losses))
    assert seen and all(math.isfinite(v) for v in seen[0].values())
    for head in ("drivable", "lanes", "bevmap"):
        assert seen[0][head] > 0 and seen[0].get(f"{head}.samples", 2.0) == 2.0


def test_a_map_of_another_place_is_refused(fixture, tmp_path):
    _, nusc, where = fixture
    root = shutil.copytree(nusc, tmp_path / "nusc")
    path = root / "maps" / "expansion" / f"{where['scene_0000']}.json"
    js = json.loads(path.read_text())
    for n in js["node"]:
        n["x"] += 1000.0
    path.write_text(json.dumps(js))
    with pytest.raises(DatasetError, match="another location"):
        NuScenesDataset(root)
