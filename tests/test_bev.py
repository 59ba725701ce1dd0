"""BEV fusion: projection tables against an independent projection, the video warp, the BEV heads
(det3d, bevmap) on preset and custom rigs, and the ONNX export of the fused model."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fake_samples import BEV_H as H, BEV_META as META, BEV_W as W, TINY_BEV as TINY, TINY_BEV_CONFIG as BEV
from fake_samples import bev_sample as _sample
from hydranet.bevgrid import BevGrid, resample_raster
from hydranet.geometry import make_transform, rot_z, transform_points, unproject
from hydranet.models import build_model
from hydranet.models.depth_lift import depth_bin_targets, depth_bins, frustum_table, splat_features
from hydranet.models.video import VideoQueue
from hydranet.stream import relative_motion
from hydranet.models.view_transform import lift_features, projection_lut
from hydranet.rig import load_rig, rig_from_dict
from hydranet.tasks import BEV_TASKS, build_task

STRIDE = 8
GRID = BevGrid((-32.0, 32.0), (-32.0, 32.0), 2.0)  # META's raster with 4x coarser cells: 32 x 32

CUSTOM5 = {"name": "custom5", "cameras": [
    {"name": "FRONT_TELE", "width": 192, "height": 128, "hfov_deg": 40.0, "translation": [2.0, 0.0, 1.4], "ypr_deg": [0, 0, 0]},
    {"name": "FRONT_WIDE", "width": 96, "height": 64, "hfov_deg": 110.0, "translation": [2.0, 0.1, 1.4], "ypr_deg": [0, 3, 0]},
    {"name": "LEFT", "width": 144, "height": 96, "hfov_deg": 100.0, "translation": [1.0, 0.9, 1.2], "ypr_deg": [95, 5, 0]},
    {"name": "RIGHT", "width": 144, "height": 96, "hfov_deg": 100.0, "translation": [1.0, -0.9, 1.2], "ypr_deg": [-95, 5, 0]},
    {"name": "REAR", "width": 48, "height": 32, "intrinsics": {"fx": 30.0, "fy": 30.0, "cx": 23.5, "cy": 15.5},
     "translation": [-1.0, 0.0, 1.3], "ypr_deg": [180, 8, 0]},
]}


def _rig(name: str):
    return rig_from_dict(CUSTOM5, "custom5") if name == "custom5" else load_rig(name)


def motion_t(prev_pose, cur_pose) -> torch.Tensor:
    """hydranet.stream.relative_motion (numpy) on torch poses: (..., 4, 4) float32 tensor."""
    return torch.from_numpy(relative_motion(np.asarray(prev_pose), np.asarray(cur_pose)))


def _no_grad_params(module: torch.nn.Module) -> list[str]:
    return [n for n, p in module.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]


def _batch(model, frames: list[dict]) -> dict:
    """A clip batch (B=1, T frames); the last frame's targets."""
    t = lambda key, dtype=torch.float32: torch.from_numpy(np.stack([f[key] for f in frames])[None]).to(dtype)  # noqa: E731
    images = torch.from_numpy(np.stack([f["images"] for f in frames])[None]).permute(0, 1, 2, 5, 3, 4).float() / 255
    lens = {"distortion": t("distortion")} if "distortion" in frames[0] else {}
    return {"images": images, "intrinsics": t("intrinsics"), "cam2ego": t("cam2ego"), **lens, "ego2world": t("ego2world", torch.float64),
            "targets": {n: task.collate([task.build_targets(frames[-1])]) for n, task in model.heads.items()}}


# -- view transform -----------------------------------------------------------------------------
@pytest.mark.parametrize("rig_name", ["nuscenes6", "tesla8"])
def test_lut_matches_brute_force_projection(rig_name):
    """Every (cell, height, camera) projected by hand with Camera.project_ego (through the lens model
    of tesla8's fisheye and barrel cameras): the table holds exactly the feature pixels that see
    the cell, each weighted 1 / #pairs."""
    rig = _rig(rig_name).resized(W, H)
    heights = (0.0, 1.0)
    K, T, names = rig.calibration()
    lut = projection_lut(GRID, heights, K, T, (H, W), STRIDE, names, rig.distortion())  # tesla8: lenses
    h, w = H // STRIDE, W // STRIDE
    centers = GRID.cell_centers().reshape(-1, 2)
    expected: dict[int, list[int]] = {}
    for n, cam in enumerate(rig.cameras):
        for z in heights:
            pts = np.concatenate([centers, np.full((len(centers), 1), z)], 1)
            uv, depth = cam.project_ego(pts)
            for cell in range(len(centers)):
                u, v = uv[cell]
                if depth[cell] > 0.1 and -0.5 <= u < W - 0.5 and -0.5 <= v < H - 0.5:
                    i, j = int((v + 0.5) // STRIDE), int((u + 0.5) // STRIDE)
                    expected.setdefault(cell, []).append(n * h * w + i * w + j)
    for cell in range(len(centers)):
        got = sorted(lut.index[cell][lut.weight[cell] > 0].tolist())
        assert got == sorted(expected.get(cell, [])), cell
        if got:
            np.testing.assert_allclose(lut.weight[cell][lut.weight[cell] > 0], 1 / len(got), rtol=1e-6)
    assert lut.seen.reshape(-1).tolist() == [c in expected for c in range(len(centers))]
    assert 0.2 < lut.seen.mean() <= 1.0 and all(v > 0 for v in lut.cells_per_camera.values())


def test_feature_at_a_known_ego_point_lands_in_its_cell():
    rig = load_rig("nuscenes6").resized(W, H)
    K, T, names = rig.calibration()
    lut = projection_lut(GRID, (1.0,), K, T, (H, W), STRIDE, names)
    point = np.array([[13.0, 5.0, 1.0]])  # ego, in CAM_FRONT's view, cell centre (13, 5)
    uv, _ = rig.cameras[0].project_ego(point)
    feats = torch.zeros(1, len(rig), 1, H // STRIDE, W // STRIDE)  # (F, N, C, h, w)
    feats[0, 0, 0, int((uv[0, 1] + 0.5) // STRIDE), int((uv[0, 0] + 0.5) // STRIDE)] = 1.0
    bev = lift_features(feats, torch.from_numpy(lut.index), torch.from_numpy(lut.weight), GRID.shape)[0, 0]  # (X, Y)
    r, c = np.floor(GRID.to_cell(point[0, :2]) + 0.5).astype(int)
    assert bev[r, c] > 0
    # every lit cell lies on the same camera ray (bearing of the point from the camera within a cell pitch)
    cam_xy = rig.cameras[0].cam2ego[:2, 3]
    lit = GRID.cell_centers()[bev.numpy() > 0] - cam_xy
    bearing = np.arctan2(point[0, 1] - cam_xy[1], point[0, 0] - cam_xy[0])
    assert np.all(np.abs(np.arctan2(lit[:, 1], lit[:, 0]) - bearing) < 0.25)


@pytest.mark.parametrize("rig_name", ["nuscenes6", "custom5", "tesla8"])
def test_frustum_table_matches_brute_force_unprojection(rig_name):
    """Every (camera, depth bin, feature pixel) unprojected by hand with geometry.unproject (through
    tesla8's lens models) and cam2ego: the table holds its cell, or the dump index X*Y when it is off
    the grid or z range."""
    rig = _rig(rig_name).resized(W, H)
    depths, z_range = depth_bins((1.0, 40.0, 3.0)), (-1.0, 3.0)
    K, T, names = rig.calibration()
    table = frustum_table(GRID, depths, z_range, K, T, (H, W), STRIDE, names, rig.distortion())
    h, w = H // STRIDE, W // STRIDE
    X, Y = GRID.shape
    expected = []
    for cam in rig.cameras:
        for d in depths:
            for i in range(h):
                for j in range(w):
                    uv = np.array([[(j + 0.5) * STRIDE - 0.5, (i + 0.5) * STRIDE - 0.5]])
                    x, y, z = transform_points(cam.cam2ego, unproject(uv, np.array([d]), cam.K, cam.distortion))[0]
                    r = int(np.floor((GRID.x_range[1] - x) / GRID.resolution))
                    c = int(np.floor((GRID.y_range[1] - y) / GRID.resolution))
                    inside = 0 <= r < X and 0 <= c < Y and z_range[0] <= z <= z_range[1]
                    expected.append(r * Y + c if inside else X * Y)
    assert table.index.tolist() == expected
    seen = np.zeros(X * Y, bool)
    seen[[e for e in expected if e < X * Y]] = True
    assert table.seen.reshape(-1).tolist() == seen.tolist() and 0.1 < table.seen.mean() < 1.0
    assert all(v > 0 for v in table.cells_per_camera.values())


def test_splat_sums_depth_weighted_context_per_cell():
    """splat_features against a loop over every frustum point."""
    rng = np.random.default_rng(0)
    F_, N, D, C, h, w = 2, 3, 4, 5, 2, 3
    X, Y = 3, 4
    index = rng.integers(0, X * Y + 1, N * D * h * w)  # X*Y = dump
    depth = torch.softmax(torch.from_numpy(rng.normal(size=(F_, N, D, h, w))).float(), 2)
    context = torch.from_numpy(rng.normal(size=(F_, N, C, h, w))).float()
    got = splat_features(depth, context, torch.from_numpy(index), (X, Y))
    ref = torch.zeros(F_, C, X * Y + 1)
    for f in range(F_):
        for k, (n, d, i, j) in enumerate(np.ndindex(N, D, h, w)):
            ref[f, :, index[k]] += depth[f, n, d, i, j] * context[f, n, :, i, j]
    torch.testing.assert_close(got, ref[:, :, :-1].reshape(F_, C, X, Y), atol=1e-5, rtol=1e-5)


def test_depth_lift_puts_a_feature_at_its_depth_not_along_the_whole_ray():
    """A feature pixel whose depth distribution is one-hot at the distance of a known point lights
    exactly that point's cell (the LUT lift would light every cell on the ray)."""
    rig = load_rig("nuscenes6").resized(W, H)
    K, T, names = rig.calibration()
    depths = depth_bins((1.0, 40.0, 1.0))
    table = frustum_table(GRID, depths, (-1.0, 3.0), K, T, (H, W), STRIDE, names)
    h, w = H // STRIDE, W // STRIDE
    i, j, b = 5, 6, 16  # a feature pixel of CAM_FRONT below the horizon, depth bin 16 (17 m)
    uv = np.array([[(j + 0.5) * STRIDE - 0.5, (i + 0.5) * STRIDE - 0.5]])
    point = transform_points(rig.cameras[0].cam2ego, unproject(uv, depths[b:b + 1], rig.cameras[0].K))[0]
    depth = torch.zeros(1, len(rig), len(depths), h, w)
    depth[0, 0, b, i, j] = 1.0
    context = torch.zeros(1, len(rig), 1, h, w)
    context[0, 0, 0, i, j] = 2.0
    bev = splat_features(depth, context, torch.from_numpy(table.index), GRID.shape)[0, 0]  # (X, Y)
    r, c = np.floor(GRID.to_cell(point[:2]) + 0.5).astype(int)
    assert bev[r, c] == 2.0 and int((bev != 0).sum()) == 1


def test_depth_targets_take_the_nearest_surface_of_each_patch():
    depths = depth_bins((1.0, 10.0, 1.0))  # centres 1..9
    depth = np.zeros((1, 16, 16), np.float32)  # 2 x 2 patches of 8 x 8
    depth[0, :8, :8] = 6.2
    depth[0, 3, 5] = 2.6  # the nearest surface of patch (0, 0): bin of 3 m
    depth[0, :8, 8:] = 40.0  # beyond the last bin: ignored
    depth[0, 8:, :8] = 1.4  # bin of 1 m
    # patch (1, 1) has no depth (sky): ignored
    assert depth_bin_targets(depth, depths, 8).tolist() == [[[2, -1], [0, -1]]]


def test_depth_supervision_trains_the_depth_distributions():
    """A few steps on the view_depth objective alone move every pixel's distribution to the bin of
    its true depth (a wall at 12 m in front of every camera)."""
    torch.manual_seed(0)
    rig = load_rig("nuscenes6").resized(W, H)
    cfg = dataclasses.replace(TINY, bev=dataclasses.replace(BEV, method="lss", depth_bins=(2.0, 20.0, 2.0), depth_weight=1.0))
    model = build_model(cfg, {**META, "rig": rig.resized(W, H).to_dict()})
    assert model.objectives == ["det3d", "bevmap", "view_depth"] and model.balancer.weights["view_depth"] == 1.0
    frame = {**_sample(rig), "depth": np.full((len(rig), H, W), 12.0, np.float32)}
    batch = _batch(model, [frame])
    batch["targets"]["view_depth"] = model.auxiliary["view_depth"].collate([model.auxiliary["view_depth"].build_targets(frame)])
    assert batch["targets"]["view_depth"]["bins"].shape == (1, len(rig), H // STRIDE, W // STRIDE)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    first = None
    for _ in range(15):
        losses = model(batch, "loss")
        first = first if first is not None else float(losses["view_depth.ce"].detach())
        opt.zero_grad()
        losses["view_depth"].backward()
        opt.step()
    assert float(losses["view_depth.ce"]) < 0.5 * first
    with torch.no_grad():
        logits = model.eval()(batch, "tensor")["view_depth"]  # (B, N, D, h, w), also in mode "tensor"
    assert (logits.argmax(2) == 5).float().mean() > 0.9  # bin 5: centre 12 m


@pytest.mark.parametrize("bad, match", [({"depth_bins": (5.0, 1.0, 1.0)}, "depth_bins"), ({"z_range": (2.0, 1.0)}, "z_range"),
                                        ({"depth_weight": 1.0, "method": "lut"}, "depth_weight"),
                                        ({"depth_weight": -1.0}, "depth_weight")])
def test_bad_depth_lift_config_is_an_error(bad, match):
    cfg = dataclasses.replace(TINY, bev=dataclasses.replace(BEV, **{"method": "lss", **bad}))
    with pytest.raises(ValueError, match=match):
        build_model(cfg, {**META, "rig": load_rig("nuscenes6").resized(W, H).to_dict()})


def test_rig_that_sees_none_of_the_grid_is_an_error():
    far = {"name": "far", "cameras": [
        {"name": "CAM_A", "width": W, "height": H, "hfov_deg": 60.0, "translation": [200.0, 0.0, 1.5], "ypr_deg": [0, 5, 0]},
        {"name": "CAM_B", "width": W, "height": H, "hfov_deg": 60.0, "translation": [-200.0, 0.0, 1.5], "ypr_deg": [180, 5, 0]}]}
    with pytest.raises(ValueError, match="no camera of the rig \\(CAM_A, CAM_B\\) sees any cell"):
        build_model(TINY, {**META, "rig": far})


def test_cameras_of_different_resolutions_need_a_model_size():
    with pytest.raises(ValueError, match="different resolutions.*FRONT_TELE 192x128.*data.image_size"):
        build_model(TINY, {**META, "rig": CUSTOM5})


# -- video module -------------------------------------------------------------------------------
def test_video_warp_keeps_static_objects_put_in_the_world():
    torch.manual_seed(0)
    video = VideoQueue(1, GRID, frames=2)
    prev_pose = torch.from_numpy(make_transform(rot_z(0.3), [50.0, -20.0, 0.0]))
    prev = torch.zeros(1, 1, 1, *GRID.shape)  # (B, T-1, C, X, Y)
    r0, c0 = np.floor(GRID.to_cell(np.array([9.0, 5.0])) + 0.5).astype(int)  # a static object at ego (9, 5)
    prev[0, 0, 0, r0, c0] = 1.0
    # 1) the car drives 2 m (one cell) forward: the object is one row further behind
    cur_pose = prev_pose @ torch.from_numpy(make_transform(np.eye(3), [2.0, 0.0, 0.0]))
    out = video.warp(prev, motion_t(prev_pose[None], cur_pose[None]))[0, 0, 0]
    assert out[r0 + 1, c0] == pytest.approx(1.0, abs=1e-5) and out.sum() == pytest.approx(1.0, abs=1e-5)
    # 2) the car turns 90 deg left in place: the object at (9, 5) is now at (5, -9) (ahead-right)
    cur_pose = prev_pose @ torch.from_numpy(make_transform(rot_z(np.pi / 2), [0.0, 0.0, 0.0]))
    out = video.warp(prev, motion_t(prev_pose[None], cur_pose[None]))[0, 0, 0]
    r1, c1 = np.floor(GRID.to_cell(np.array([5.0, -9.0])) + 0.5).astype(int)
    assert out[r1, c1] == pytest.approx(1.0, abs=1e-4) and out.sum() == pytest.approx(1.0, abs=1e-4)


# -- BEV heads ----------------------------------------------------------------------------------
def test_det3d_targets_decode_back_to_ground_truth():
    task = build_task("det3d", {**META, "bev_grid": GRID.as_dict()}, 16, {"score_threshold": 0.5})
    sample = _sample(load_rig("nuscenes6").resized(W, H))
    t = task.collate([task.build_targets(sample)])
    gt = t["gt_boxes"][0].numpy()
    assert len(gt) == 5 and t["heatmap"].shape == (1, len(task.classes), 32, 32)
    p = t["heatmap"].clamp(1e-6, 1 - 1e-6)
    outputs = {"heatmap": torch.log(p / (1 - p)), **{k: t[k] for k in ("offset", "height", "size", "rot", "vel")}}
    det = task.decode(outputs)[0]
    boxes = det["boxes"].numpy()
    assert len(boxes) == len(gt)
    order_p, order_g = np.argsort(boxes[:, 0]), np.argsort(gt[:, 0])
    boxes, gt = boxes[order_p], gt[order_g]
    np.testing.assert_allclose(boxes[:, :6], gt[:, :6], atol=1e-4)  # centre, size
    np.testing.assert_allclose(np.cos(boxes[:, 6] - gt[:, 6]), 1.0, atol=1e-5)  # yaw
    np.testing.assert_allclose(boxes[:, 7:], gt[:, 7:], atol=1e-5)  # velocity
    assert det["labels"].numpy()[order_p].tolist() == t["gt_labels"][0].numpy()[order_g].tolist()
    metric = task.metric()
    metric.update([det], t)
    assert metric.compute()["mAP"] == pytest.approx(1.0) and metric.compute()["mATE"] < 1e-3


def test_bevmap_targets_resample_and_score_perfectly():
    task = build_task("bevmap", {**META, "bev_grid": GRID.as_dict()}, 16)
    t = task.collate([task.build_targets(_sample(load_rig("nuscenes6").resized(W, H)))])
    mask = t["mask"][0]  # (3, 32, 32) drivable, lanes, objects
    assert mask.shape == (3, 32, 32) and t["valid"].all()
    assert mask[0, :, 10:22].all() and not mask[0, :, :9].any()  # raster cols 40..89 -> cells 10..22
    assert mask[1, :, 16].all() and mask[1].sum() == 32  # a 1-pixel lane survives 2 m cells
    assert mask[2, 12:15, 15:17].all() and mask[2].sum() == 6
    metric = task.metric()
    metric.update(task.decode({"logits": (t["mask"] * 2 - 1) * 10}), t)
    assert metric.compute()["mIoU"] == 1.0
    frac, covered = resample_raster(np.ones((1, 4, 4), np.uint8), BevGrid((0, 2), (0, 2), 0.5), BevGrid((0, 4), (0, 4), 1.0))
    assert covered.sum() == 4 and frac[0][covered].min() == 1.0


@pytest.mark.parametrize("rig_name, method", [("nuscenes6", "lut"), ("tesla8", "lut"), ("custom5", "lut"),
                                             ("nuscenes6", "lss"), ("custom5", "lss")])
def test_fused_model_forward_backward_on_any_rig(rig_name, method):
    """det3d + bevmap with a 2-frame video queue on a clip, same code for every rig and view transform."""
    torch.manual_seed(0)
    rig = _rig(rig_name)
    cfg = dataclasses.replace(TINY, bev=dataclasses.replace(BEV, video_frames=2, method=method))
    model = build_model(cfg, {**META, "rig": rig.resized(W, H).to_dict()})
    assert sorted(model.heads) == sorted(BEV_TASKS) and 0.2 < model.fusion.view.coverage <= 1
    batch = _batch(model, [_sample(rig, seed=s) for s in range(2)])  # images (1, 2, N, 3, 64, 96)
    raw = model(batch, "tensor")
    assert raw["det3d"]["heatmap"].shape == (1, len(model.heads["det3d"].classes), 32, 32)
    assert raw["bevmap"]["logits"].shape == (1, 3, 32, 32)
    assert raw["bev_state"]["bev_queue"].shape == (1, 1, 16, 32, 32)
    losses = model(batch, "loss")
    assert all(torch.isfinite(v) for v in losses.values()) and {"det3d.heatmap", "det3d.vel", "bevmap.bce"} <= set(losses)
    model.backward(losses)
    assert _no_grad_params(model) == []
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    preds = model(batch, "predict")
    assert len(preds["det3d"]) == 1 and preds["bevmap"][0]["mask"].shape == (3, 32, 32)


def test_streaming_state_equals_the_clip():
    """Feeding frames one by one with prev_bev/ego_motion gives the clip's result (eval mode)."""
    torch.manual_seed(0)
    rig = load_rig("nuscenes6")
    model = build_model(dataclasses.replace(TINY, bev=dataclasses.replace(BEV, video_frames=3)),
                        {**META, "rig": rig.resized(W, H).to_dict()}).eval()
    frames = [_sample(rig.resized(W, H), seed=s) for s in range(3)]
    clip = _batch(model, frames)
    with torch.no_grad():
        ref = model(clip, "tensor")
        state, prev_pose = None, None
        for k in range(3):
            step = {key: clip[key][:, k] for key in ("images", "intrinsics", "cam2ego")}
            if state is not None:
                step["prev_bev"], step["ego_motion"] = state, motion_t(prev_pose, clip["ego2world"][:, k])
            out = model(step, "tensor")
            state, prev_pose = out["bev_state"]["bev_queue"], clip["ego2world"][:, k]
    torch.testing.assert_close(out["det3d"]["heatmap"], ref["det3d"]["heatmap"], atol=1e-4, rtol=1e-4)


def test_stream_start_sees_a_standing_scene():
    """An all-zero queue (no history) is replaced by the current map: the first frame fed alone
    equals the frame fed with itself as history (identity motion), and a clip padded with its
    first frame (the loader's stream starts) equals streaming from that frame."""
    torch.manual_seed(0)
    rig = load_rig("nuscenes6")
    model = build_model(dataclasses.replace(TINY, bev=dataclasses.replace(BEV, video_frames=3)),
                        {**META, "rig": rig.resized(W, H).to_dict()}).eval()
    f0, f1 = (_sample(rig.resized(W, H), seed=s) for s in range(2))
    with torch.no_grad():
        alone = model({k: v[:, 0] for k, v in _batch(model, [f0]).items() if k != "targets"}, "tensor")
        own = alone["bev_state"]["bev_queue"][:, :1].expand(-1, 2, -1, -1, -1)  # (1, 2, C, X, Y): itself as history
        again = model({**{k: v[:, 0] for k, v in _batch(model, [f0]).items() if k != "targets"},
                       "prev_bev": own, "ego_motion": torch.eye(4)[None]}, "tensor")
        torch.testing.assert_close(alone["det3d"]["heatmap"], again["det3d"]["heatmap"])
        padded = model(_batch(model, [f0, f0, f1]), "tensor")
        step = {k: v[:, 1] for k, v in _batch(model, [f0, f1]).items() if k in ("images", "intrinsics", "cam2ego")}
        streamed = model({**step, "prev_bev": alone["bev_state"]["bev_queue"],
                          "ego_motion": motion_t(torch.from_numpy(f0["ego2world"])[None],
                                                        torch.from_numpy(f1["ego2world"])[None])}, "tensor")
    torch.testing.assert_close(padded["det3d"]["heatmap"], streamed["det3d"]["heatmap"], atol=1e-4, rtol=1e-4)


# -- export ---------------------------------------------------------------------------------------
class _Exported(torch.nn.Module):
    """Flat tensors in and out: images (B, N, 3, H, W), prev_bev, ego_motion -> head outputs + queue."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images, prev_bev, ego_motion):
        out = self.model({"images": images, "prev_bev": prev_bev, "ego_motion": ego_motion}, "tensor")
        return (*out["det3d"].values(), out["bevmap"]["logits"], out["bev_state"]["bev_queue"])


@pytest.mark.parametrize("method, lift_op", [("lut", "Gather"), ("lss", "ScatterElements")])
def test_onnx_export_of_the_fused_model_equals_eager(tmp_path, method, lift_op):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    rig = load_rig("nuscenes6")
    model = build_model(dataclasses.replace(TINY, bev=dataclasses.replace(BEV, video_frames=2, method=method)),
                        {**META, "rig": rig.resized(W, H).to_dict()}).eval()
    wrapped = _Exported(model).eval()
    images = torch.rand(1, len(rig), 3, H, W)
    prev = torch.randn(1, 1, 16, 32, 32)
    motion = motion_t(torch.eye(4, dtype=torch.float64)[None],
                             torch.from_numpy(make_transform(rot_z(0.05), [1.3, 0.2, 0.0]))[None])
    path = tmp_path / "bev.onnx"
    torch.onnx.export(wrapped, (images, prev, motion), str(path), dynamo=False, opset_version=17,
                      input_names=["images", "prev_bev", "ego_motion"])
    graph = onnx.load(str(path)).graph
    assert {n.domain for n in graph.node} <= {"", "ai.onnx"}  # standard operators only
    assert {"GridSample", lift_op} <= {n.op_type for n in graph.node}
    from deploy.trt_check import check_tensorrt

    rep = check_tensorrt(str(path))  # operators TensorRT parses; the LSS splat needs TensorRT's bundled plugin
    assert rep.ok, rep.format()
    assert any("scatterElements plugin" in w for w in rep.warnings) == (method == "lss")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"images": images.numpy(), "prev_bev": prev.numpy(), "ego_motion": motion.numpy()})
    with torch.no_grad():
        ref = wrapped(images, prev, motion)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r.numpy(), atol=1e-4, rtol=1e-4)
    zeros = torch.zeros_like(prev)  # a stream start: the graph fills the queue with the current map
    got = sess.run(None, {"images": images.numpy(), "prev_bev": zeros.numpy(), "ego_motion": motion.numpy()})
    with torch.no_grad():
        ref = wrapped(images, zeros, motion)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r.numpy(), atol=1e-4, rtol=1e-4)


def test_a_lens_model_takes_the_lens_rows_of_the_batch_and_refuses_a_batch_without_them():
    """tesla8 (fisheyes and barrel lenses): a batch with its own calibration and lens rows gives the
    build-time table's result exactly; intrinsics without lens rows would be a silent pinhole table."""
    torch.manual_seed(0)
    rig = _rig("tesla8")
    model = build_model(dataclasses.replace(TINY, bev=BEV), {**META, "rig": rig.resized(W, H).to_dict()}).eval()
    batch = _batch(model, [_sample(rig, seed=0)])
    assert batch["distortion"][0, 0, 2, 0] == 2  # CAM_WIDE_FORWARD is a fisheye
    with torch.no_grad():
        own = model(batch, "tensor")["bevmap"]["logits"]
        default = model({k: v for k, v in batch.items() if k not in ("intrinsics", "cam2ego", "distortion")},
                        "tensor")["bevmap"]["logits"]
        torch.testing.assert_close(own, default)
        with pytest.raises(ValueError, match=r"batch\['distortion'\]"):
            model({k: v for k, v in batch.items() if k != "distortion"}, "tensor")
