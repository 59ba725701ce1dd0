"""Label consistency of the simulator: every label agrees with what the rasterizer drew.

One small scene (nuscenes6 at 160x96, 3 frames) is rendered once per module with Renderer +
simulate directly; every test reads it. Tolerances: 1 pixel for projections (rasterizer edge
rules), a few centimetres for depth (float32 z-depth from the GL target).
"""
from __future__ import annotations

import numpy as np
import pytest

from hydranet.geometry import box_corners, rot_z, transform_points, unproject
from sim.classes import OBJECT_CLASSES, SEMANTIC_ID
from sim.config import SimConfig
from sim.generate import render_frames, sim_rig
from sim.render import Renderer
from sim.scene import FRAME_DT
from sim.world import World

SEED = 1  # a clear day scene with ~30 visible objects and ~20 moving ones in the first frame
N_FRAMES = 3
ROADLIKE = [SEMANTIC_ID[n] for n in ("road", "lane_marking", "crosswalk")]


@pytest.fixture(scope="module")
def scene():
    cfg = SimConfig(rig="nuscenes6", image_width=160, image_height=96, frames_per_scene=N_FRAMES)
    return {"cfg": cfg, "rig": sim_rig(cfg), "frames": render_frames(cfg, SEED)}


def views(scene):
    """(frame index, frame, camera, images, camera labels) for every camera of every frame."""
    for f in scene["frames"]:
        for cam, img in zip(scene["rig"].cameras, f["images"]):
            yield f["index"], f, cam, img, f["labels"]["cameras"][cam.name]


def boxes3d_by_id(frame) -> dict:
    return {b["track_id"]: b for b in frame["labels"]["boxes3d"]}


def in_box_frame(points_ego: np.ndarray, box: dict) -> np.ndarray:
    """Ego points (K, 3) in the box frame (origin at the centre, x along the heading)."""
    return (points_ego - np.asarray(box["center"])) @ rot_z(box["yaw"])


def test_scene_is_interesting(scene):
    f0 = scene["frames"][0]
    n2d = sum(len(c["boxes2d"]) for c in f0["labels"]["cameras"].values())
    seen3d = [b for b in f0["labels"]["boxes3d"] if b["num_pixels"] > 0]
    assert n2d >= 10 and len(seen3d) >= 8
    assert any(b["attributes"]["moving"] for b in seen3d)


# (a) ---------------------------------------------------------------------------------------
def test_2d_box_is_instance_mask_extent(scene):
    n = 0
    for _, _, cam, img, lab in views(scene):
        ids = set(np.unique(img.instance).tolist()) - {0}
        assert {b["track_id"] for b in lab["boxes2d"]} == ids, cam.name
        for b in lab["boxes2d"]:
            m = img.instance == b["track_id"]
            rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
            assert b["bbox"] == [cols[0], rows[0], cols[-1] + 1, rows[-1] + 1], (cam.name, b)
            assert b["class"] in OBJECT_CLASSES
            n += 1
    assert n > 0


# (b) ---------------------------------------------------------------------------------------
def test_projected_3d_box_encloses_instance_pixels(scene):
    import cv2

    checked = 0
    for fi, f, cam, img, lab in views(scene):
        boxes = boxes3d_by_id(f)
        for b2 in lab["boxes2d"]:
            box = boxes.get(b2["track_id"])
            if box is None:  # signs and lights have no 3D box
                continue
            corners = transform_points(cam.ego2cam, box_corners(box["center"], box["size"], box["yaw"]))
            if (corners[:, 2] <= 0.5).any():
                continue
            uv = corners[:, :2] / corners[:, 2:3] @ cam.K[:2, :2].T + cam.K[:2, 2]
            hull = cv2.convexHull(uv.astype(np.float32))
            rows, cols = np.nonzero(img.instance == box["track_id"])
            dist = np.array([cv2.pointPolygonTest(hull, (float(c), float(r)), True) for r, c in zip(rows, cols)])
            assert dist.min() >= -1.0, (fi, cam.name, box["class"], box["track_id"], dist.min())
            checked += 1
    assert checked >= 10


# (c) ---------------------------------------------------------------------------------------
def _pixels_ego(cam, img, mask):
    rows, cols = np.nonzero(mask)
    pc = unproject(np.stack([cols, rows], 1).astype(np.float64), img.depth[rows, cols].astype(np.float64), cam.K)
    return transform_points(cam.cam2ego, pc), img.depth[rows, cols]


def test_object_depth_lies_on_its_box(scene):
    checked = 0
    for fi, f, cam, img, _lab in views(scene):
        boxes = boxes3d_by_id(f)
        for tid, box in boxes.items():
            mask = img.instance == tid
            if not mask.any():
                continue
            p, d = _pixels_ego(cam, img, mask)
            assert (d > 0).all()
            q = np.abs(in_box_frame(p, box))
            # 3 cm plus the float32 resolution of the depth and the quantisation of written labels
            tol = 0.03 + d * 1e-5
            excess = q - np.asarray(box["size"]) / 2
            assert (excess <= tol[:, None]).all(), (fi, cam.name, box["class"], tid, excess.max())
            checked += 1
    assert checked >= 10


def test_road_depth_lands_on_ground(scene):
    n = 0
    for fi, _, cam, img, _ in views(scene):
        mask = img.semantic == SEMANTIC_ID["road"]
        if not mask.any():
            continue
        p, _ = _pixels_ego(cam, img, mask)
        assert np.abs(p[:, 2]).max() < 0.03, (fi, cam.name, np.abs(p[:, 2]).max())
        n += mask.sum()
    assert n > 1000


# (d) ---------------------------------------------------------------------------------------
def test_road_normals_point_up(scene):
    zs = []
    for _, _, cam, img, _ in views(scene):
        mask = img.semantic == SEMANTIC_ID["road"]
        n_cam = img.normal[mask].astype(np.float64)
        np.testing.assert_allclose(np.linalg.norm(n_cam, axis=1), 1.0, atol=0.02)  # 8-bit target
        zs.append((n_cam @ cam.cam2ego[:3, :3].T)[:, 2])
    z = np.concatenate(zs)
    assert np.median(z) > 0.999
    assert (z > 0.99).mean() > 0.99


# (e) ---------------------------------------------------------------------------------------
def test_lanes2d_on_road_and_match_lanes3d(scene):
    """Lane points sit on road pixels at the lane's own depth, or on a road user in front of
    the lane (labels run through cars, as CULane's do); each is the projection of a 3D point."""
    from sim.classes import BOX3D_CLASSES

    road_users = [SEMANTIC_ID[n] for n in BOX3D_CLASSES]
    near_on_road, near_total, total = 0, 0, 0
    for fi, f, cam, img, lab in views(scene):
        lanes3d = {}
        for l in f["labels"]["lanes3d"]:
            lanes3d.setdefault(l["lane_id"], []).append(np.asarray(l["points"]))
        for lane in lab["lanes2d"]:
            uv = np.asarray(lane["points"])
            assert len(uv) >= 2
            assert ((uv >= 0) & (uv <= [cam.width - 1, cam.height - 1])).all()
            # each 2D point is the projection of a point of a 3D lane line with the same id
            puv, pz = cam.project_ego(np.concatenate(lanes3d[lane["lane_id"]]))
            dist = np.linalg.norm(uv[:, None] - puv[None], axis=-1)
            assert dist.min(1).max() < 0.1, (fi, cam.name, lane["lane_id"], dist.min(1).max())
            z = pz[dist.argmin(1)]
            pix = np.round(uv).astype(int)
            sem, depth = img.semantic[pix[:, 1], pix[:, 0]], img.depth[pix[:, 1], pix[:, 0]]
            road = np.isin(sem, ROADLIKE)
            assert (road | np.isin(sem, road_users)).all(), (fi, cam.name, sem)
            # on the road: the pixel shows the ground where the lane is (pixel rounding at grazing
            # angles moves the depth by a few per cent); on a road user: it stands in front, within
            # the same rounding (half a 96-pixel row spans ~3 m of road at 30 m)
            assert (np.abs(depth[road] - z[road]) < 0.2 * z[road]).all(), (fi, cam.name)
            assert (depth[~road] < 1.2 * z[~road]).all(), (fi, cam.name)
            near = z < 15
            near_on_road += road[near].sum()
            near_total += near.sum()
            total += len(uv)
    assert total > 50 and near_total > 30
    # far points often pass behind traffic near the horizon; near ones mostly show the road
    assert near_on_road / near_total > 0.85, near_on_road / near_total


# (f) ---------------------------------------------------------------------------------------
def test_bev(scene):
    cfg = scene["cfg"]
    n = int(round(2 * cfg.bev_range / cfg.bev_resolution))
    for f in scene["frames"]:
        bev = f["bev"]
        assert bev.shape == (3, n, n) and bev.dtype == np.uint8
        c = n // 2
        assert (bev[0, c - 2:c + 2, c - 1:c + 1] == 255).all()  # the car stands on the road
        assert set(np.unique(bev[0])) <= {0, 255} and set(np.unique(bev[1])) <= {0, 255}
        assert bev[1].any()
        checked = 0
        for b in f["labels"]["boxes3d"]:
            x, y = b["center"][:2]
            if max(abs(x), abs(y)) > cfg.bev_range - 1:
                continue
            row = int((cfg.bev_range - x) / cfg.bev_resolution)
            col = int((cfg.bev_range - y) / cfg.bev_resolution)
            assert bev[2, row, col] == OBJECT_CLASSES.index(b["class"]) + 1, (b["class"], b["track_id"], bev[2, row, col])
            checked += 1
        assert checked >= 5
        # every object cell lies within one cell of some box footprint
        rows, cols = np.nonzero(bev[2])
        xy = np.stack([cfg.bev_range - (rows + 0.5) * cfg.bev_resolution,
                       cfg.bev_range - (cols + 0.5) * cfg.bev_resolution], 1)
        inside = np.zeros(len(xy), bool)
        for b in f["labels"]["boxes3d"]:
            q = np.abs(in_box_frame(np.concatenate([xy, np.zeros((len(xy), 1))], 1), b))[:, :2]
            inside |= (q <= np.asarray(b["size"][:2]) / 2 + cfg.bev_resolution * 1.5).all(1)
        assert inside.all()


# (g) ---------------------------------------------------------------------------------------
def test_sky_has_no_depth_or_instance(scene):
    saw_sky = False
    for _, _, cam, img, _ in views(scene):
        sky = img.semantic == SEMANTIC_ID["sky"]
        saw_sky |= sky.any()
        assert (img.depth[sky] == 0).all() and (img.instance[sky] == 0).all()
        assert (img.normal[sky] == 0).all()
        assert (img.depth[~sky] > 0).all(), cam.name  # every other pixel is a surface
    assert saw_sky


# (h) ---------------------------------------------------------------------------------------
def test_visible_fraction_and_num_pixels(scene):
    for f in scene["frames"]:
        totals = {}
        for cam, img in zip(scene["rig"].cameras, f["images"]):
            ids, counts = np.unique(img.instance, return_counts=True)
            for i, c in zip(ids.tolist(), counts.tolist()):
                totals[i] = totals.get(i, 0) + c
            for b in f["labels"]["cameras"][cam.name]["boxes2d"]:
                assert 0 < b["visible_fraction"] <= 1
        for b in f["labels"]["boxes3d"]:
            assert b["num_pixels"] == totals.get(b["track_id"], 0), b


# (i) ---------------------------------------------------------------------------------------
def _motion(f0, f1, a, b, dt=FRAME_DT):
    """World-frame displacement speed of a box between two frames and its labelled velocities."""
    p0 = transform_points(f0["ego2world"], np.asarray(a["center"]))
    p1 = transform_points(f1["ego2world"], np.asarray(b["center"]))
    v0 = f0["ego2world"][:3, :3] @ np.asarray(a["velocity"])
    v1 = f1["ego2world"][:3, :3] @ np.asarray(b["velocity"])
    return (p1 - p0) / dt, v0, v1


def test_velocity_matches_motion(scene):
    """Box displacement between frames agrees with the labelled velocity: within 0.3 m/s of the
    mean of the two frames' velocities where the speed barely changes, and between the two
    speeds (along the heading) where it does (see test_agent_kinematics_plausible)."""
    checked = 0
    for f0, f1 in zip(scene["frames"], scene["frames"][1:]):
        b0, b1 = boxes3d_by_id(f0), boxes3d_by_id(f1)
        for tid, a in b0.items():
            if tid not in b1:
                continue
            v_motion, v0, v1 = _motion(f0, f1, a, b1[tid])
            s0, s1, s = np.linalg.norm(v0), np.linalg.norm(v1), np.linalg.norm(v_motion)
            assert abs(v_motion[2]) < 1e-6 and abs(v0[2]) < 1e-6
            if abs(s1 - s0) < 0.5:
                assert np.linalg.norm(v_motion - (v0 + v1) / 2) < 0.3, (a["class"], tid, v_motion, v0, v1)
            else:
                assert min(s0, s1) - 0.3 < s < max(s0, s1) + 0.3, (a["class"], tid, v_motion, v0, v1)
            if s > 0.5:  # moving along its labelled heading
                heading = np.array([np.cos(a["yaw"]), np.sin(a["yaw"]), 0.0])
                heading_w = f0["ego2world"][:3, :3] @ heading
                assert v_motion @ heading_w / s > 0.95, (a["class"], tid)
            checked += a["attributes"]["moving"]
        # the ego's own velocity agrees with its pose change too
        d = (f1["ego2world"][:3, 3] - f0["ego2world"][:3, 3]) / FRAME_DT
        e0 = f0["ego2world"][:3, :3] @ f0["labels"]["ego_velocity"]
        e1 = f1["ego2world"][:3, :3] @ f1["labels"]["ego_velocity"]
        assert min(np.linalg.norm(e0), np.linalg.norm(e1)) - 0.3 < np.linalg.norm(d) < max(np.linalg.norm(e0), np.linalg.norm(e1)) + 0.3
    assert checked >= 5


def test_lower_frame_rate_spaces_frames_and_moves_the_world_accordingly():
    """frame_rate_hz 2 (nuScenes keyframes): frames 0.5 s apart, and boxes move by velocity x 0.5 s."""
    cfg = SimConfig(rig="nuscenes6", image_width=64, image_height=48, frames_per_scene=3, frame_rate_hz=2.0)
    frames = render_frames(cfg, SEED)
    assert [f["timestamp_us"] for f in frames] == [0, 500_000, 1_000_000]
    errors = []
    for f0, f1 in zip(frames, frames[1:]):
        b0, b1 = boxes3d_by_id(f0), boxes3d_by_id(f1)
        for tid in b0.keys() & b1.keys():
            v_motion, v0, v1 = _motion(f0, f1, b0[tid], b1[tid], dt=0.5)
            if abs(np.linalg.norm(v1) - np.linalg.norm(v0)) < 0.5:
                errors.append(np.linalg.norm(v_motion - (v0 + v1) / 2))
    assert len(errors) >= 5 and np.median(errors) < 0.3, errors
    with pytest.raises(ValueError, match="frame_rate_hz"):
        SimConfig(frame_rate_hz=0)


def test_agent_kinematics_plausible():
    """No road user (ego included) brakes harder than 10 m/s^2 (about 1 g) between frames."""
    cfg = SimConfig(rig="nuscenes6", image_width=160, image_height=96)
    worst = []
    for seed in range(4):
        world = World(cfg, seed)
        movers = world.agents + [world.ego]
        speed = [a.speed for a in movers]
        for _ in range(10):
            world.step(FRAME_DT)
            for i, a in enumerate(movers):
                acc = (a.speed - speed[i]) / FRAME_DT
                if acc < -10:
                    worst.append((seed, a.cls, a.track_id, round(float(acc), 1)))
                speed[i] = a.speed
    assert not worst, worst


# (j) ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lone_objects():
    """One object at a time in front of / beside the ego of an emptied world (no buildings, trees,
    signs or other road users), so nothing can occlude it: [(name, labels, images)]."""
    from sim.agents import Agent, Part, make_body
    from sim.labels import frame_labels
    from sim.meshes import DynamicMesh, static_mesh
    from sim.scene import ego_pose, scene_lighting

    cfg = SimConfig(rig="nuscenes6", image_width=160, image_height=96, frames_per_scene=1)
    rig = sim_rig(cfg)
    world = World(cfg, SEED)
    world.props, world.lights, world.agents = [], [], []
    renderer = Renderer(rig)
    renderer.set_static(static_mesh(world))
    ego = ego_pose(world)
    rng = np.random.default_rng(0)
    grey = np.array([0.5, 0.5, 0.5])
    bodies = [(f"cube{s}", [Part(np.array([0, 0, s / 2]), np.full(3, s), grey)]) for s in (0.3, 0.6, 1.5)]
    bodies += [(c, make_body(c, rng)) for c in ("car", "pedestrian", "traffic_cone")]
    out = []
    for name, parts in bodies:
        # inside lanes, off the painted lines (paint lies 1.2 cm above the asphalt and hides that much);
        # the last one crosses the near plane of the side cameras
        for d, lat in ((5, 0.0), (12, 3.5), (20, 3.5), (40, 0.0), (0.0, 3.4)):
            xy = (ego @ np.array([d, lat, 0.0, 1.0]))[:2]
            agent = Agent(99, "debris", parts, None, pos=xy, heading=0.3)
            world.agents = [agent]
            images = renderer.render(DynamicMesh(world).build(), ego, scene_lighting(world, cfg), np.ones(len(rig)), 0)
            labels, _ = frame_labels(world, list(rig.cameras), images, ego, cfg.label_range, cfg.bev_range, cfg.bev_resolution)
            out.append((f"{name} at ({d}, {lat})", labels, images, agent, ego))
    renderer.ctx.release()
    return {"rig": rig, "views": out}


def test_unoccluded_objects_are_fully_visible(lone_objects):
    """An object nothing hides gets visible_fraction 1.0 at any size: the silhouette is counted
    by pixel centres, the rasterizer's rule (not cv2.fillConvexPoly's edge-inclusive fill, which
    made a 0.6 m cube at 20 m about 0.6 visible)."""
    from sim.nuscenes_export import visibility_token

    seen = 0
    for name, labels, _, _, _ in lone_objects["views"]:
        fractions = [b["visible_fraction"] for c in labels["cameras"].values() for b in c["boxes2d"]]
        if not fractions:  # too small or too low to cover a pixel centre anywhere
            continue
        assert min(fractions) >= 0.99, (name, fractions)
        assert visibility_token(max(fractions)) == "4", name  # nuScenes bin v80-100
        seen += 1
    assert seen >= 0.8 * len(lone_objects["views"])


def test_silhouette_count_equals_rendered_pixels(lone_objects):
    """Exact: the unoccluded silhouette's pixel count is the rendered instance count (both by
    pixel centres), near-plane clipping and image borders included."""
    from hydranet.geometry import invert_rigid
    from sim.labels import silhouette_pixels

    small = checked = 0
    for name, _, images, agent, ego in lone_objects["views"]:
        for cam, img in zip(lone_objects["rig"].cameras, images):
            n = int((img.instance == agent.track_id).sum())
            full = silhouette_pixels(agent.parts, agent.pose(), cam, cam.ego2cam @ invert_rigid(ego))
            assert abs(full - n) <= max(1, 0.002 * n), (name, cam.name, n, full)
            small += 0 < n < 30
            checked += n > 0
    assert small >= 5 and checked >= 30  # tiny objects are where the old fill was worst


# (k) ---------------------------------------------------------------------------------------
GROUND = [SEMANTIC_ID[n] for n in ("road", "lane_marking", "crosswalk", "sidewalk", "terrain")]


def test_agents_stand_on_the_rendered_ground(scene):
    """The bottom of every 3D box lies on the ground drawn around it: ground pixels (road,
    sidewalk, terrain) within 0.6 m of the box footprint, back-projected through the depth
    channel, are at the box bottom's height (a pedestrian on the sidewalk stands on the kerb
    height, 0.15 m, not inside the slab). Boxes with ground of two heights around them (at a
    kerb: the road's surface_z differs over the grown footprint, or the visible ground does) are
    skipped."""
    road = World(scene["cfg"], SEED).road
    grid = np.stack(np.meshgrid(np.linspace(-1, 1, 7), np.linspace(-1, 1, 7)), -1).reshape(-1, 2)
    checked, on_kerb = 0, 0
    for fi, f, cam, img, _ in views(scene):
        ground = np.isin(img.semantic, GROUND)
        if not ground.any():
            continue
        p, _ = _pixels_ego(cam, img, ground)
        for box in f["labels"]["boxes3d"]:
            q = in_box_frame(p, box)
            near = (np.abs(q[:, :2]) <= np.asarray(box["size"][:2]) / 2 + 0.6).all(1)
            if near.sum() < 3:
                continue
            half = np.asarray(box["size"][:2]) / 2 + 0.6
            local = np.concatenate([grid * half, np.zeros((len(grid), 1))], 1) @ rot_z(box["yaw"]).T + box["center"]
            if np.ptp(road.surface_z(transform_points(f["ego2world"], local)[:, :2])) > 0:
                continue
            z = p[near, 2]
            if z.max() - z.min() > 0.05:
                continue
            bottom = box["center"][2] - box["size"][2] / 2
            assert abs(np.median(z) - bottom) < 0.03, (fi, cam.name, box["class"], box["track_id"], float(np.median(z)), bottom)
            checked += 1
            on_kerb += bool(np.median(z) > 0.1)
    assert checked >= 10 and on_kerb >= 3, (checked, on_kerb)


# (l) ---------------------------------------------------------------------------------------
def test_signs_and_lights_seen_from_behind_are_back_views(scene):
    """A sign or signal head whose front faces away from the camera shows no class and no lamp:
    it is labelled view "back" without sign_class / light_state; front views keep them. Sign
    backs are painted grey (no hue), whatever the front's colours."""
    from hydranet.geometry import invert_rigid

    world = World(scene["cfg"], SEED)  # signs and lights never move
    props = {p.track_id: p for p in world.props if p.semantic in ("traffic_sign", "traffic_light")}
    counts = {"front": 0, "back": 0}
    back_chroma = []
    for fi, f, cam, img, lab in views(scene):
        cam_xy = invert_rigid(cam.ego2cam @ invert_rigid(f["ego2world"]))[:2, 3]  # camera centre, world
        for b in lab["boxes2d"]:
            if b["class"] not in ("traffic_sign", "traffic_light"):
                continue
            p = props[b["track_id"]]
            ahead = float(np.dot(cam_xy - p.pos, [np.cos(p.heading), np.sin(p.heading)]))  # along the face normal
            if abs(ahead) < 0.5:  # seen edge-on
                continue
            view = "front" if ahead > 0 else "back"
            attrs = b["attributes"]
            assert attrs.get("view") == view, (fi, cam.name, b)
            key = "sign_class" if b["class"] == "traffic_sign" else "light_state"
            assert (key in attrs) == (view == "front"), (fi, cam.name, b)
            counts[view] += 1
            if view == "back" and b["class"] == "traffic_sign":
                import cv2

                mask = img.instance == b["track_id"]
                inner = cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
                rgb = img.rgb[inner if inner.sum() >= 4 else mask].astype(np.float64)  # anti-aliased edges mix in the neighbours
                back_chroma.append(np.median((rgb.max(1) - rgb.min(1)) / np.maximum(rgb.max(1), 1.0)))
    assert counts["front"] >= 3 and counts["back"] >= 3, counts
    # grey lit by the bluish skylight alone (the plate shades its own back), through the sensor's
    # colour noise and tone curve, keeps a little hue; the fronts' red and blue have ~0.8
    assert back_chroma and max(back_chroma) < 0.3, back_chroma
