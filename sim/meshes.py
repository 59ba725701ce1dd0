"""Triangle soups of the world for the rasterizer.

Every vertex carries 13 floats: position (3, world), normal (3, world), linear RGB colour (3),
emissive (1), semantic class id (1), instance (track) id (1), material (1: `sim.shapes.MATERIALS`
id + a per-instance parameter; the shader textures by it). Triangles are not indexed
(flat-shaded faces need their own normals anyway).
"""
from __future__ import annotations

import numpy as np

from sim.agents import Part
from sim.classes import SEMANTIC_ID
from sim.roads import CURB_HEIGHT, MARKING_WIDTH, SIDEWALK_WIDTH, TERRAIN_Z, RoadNetwork, chord_samples, marking_pieces
from sim.shapes import material
from sim.world import World, light_parts

VERTEX_FLOATS = 13
GROUND_Z = TERRAIN_Z  # off-road terrain sits just under the road surface
MARKING_Z = 0.012

def vertices(pos, nrm, color, emissive, semantic, instance, material: float = 0.0) -> np.ndarray:
    """Pack per-vertex arrays (V, 3) and scalars/broadcastables into (V, 13) float32."""
    V = len(pos)
    out = np.empty((V, VERTEX_FLOATS), np.float32)
    out[:, 0:3] = pos
    out[:, 3:6] = nrm
    out[:, 6:9] = color
    out[:, 9] = emissive
    out[:, 10] = semantic
    out[:, 11] = instance
    out[:, 12] = material
    return out


def parts_local(parts: list[Part], semantic: str, instance: int, lit: bool) -> np.ndarray:
    """Parts in their object frame -> (V, 13) vertices (object frame)."""
    out = []
    for p in parts:
        sem = p.semantic or semantic
        inst = 0 if p.semantic == "pole" else instance
        emissive = p.emissive if p.light in ("", "red", "yellow", "green") else (1.0 if lit else 0.0)
        pos, nrm = p.mesh()
        out.append(vertices(pos, nrm, p.color, emissive, SEMANTIC_ID[sem], inst, p.material))
    return np.concatenate(out)


def transform_local(v: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """Object-frame vertices -> world with a 4x4 pose (rotation about z plus translation)."""
    out = v.copy()
    R = pose[:3, :3]
    out[:, 0:3] = v[:, 0:3] @ R.T + pose[:3, 3]
    out[:, 3:6] = v[:, 3:6] @ R.T
    return out


def _strip(left: np.ndarray, right: np.ndarray, z0: float, z1: float, color, sem: str, mat: float = 0.0) -> np.ndarray:
    """Quads between two polylines (M, 2) at heights z0 (left) and z1 (right), one quad per
    ~2 m (the paths are sampled every 0.5 m; a 2 m chord on a 50 m arc is off by 1 cm)."""
    left, right = chord_samples(left), chord_samples(right)
    l3 = np.concatenate([left, np.full((len(left), 1), z0)], 1)
    r3 = np.concatenate([right, np.full((len(right), 1), z1)], 1)
    a, b, c, d = l3[:-1], r3[:-1], r3[1:], l3[1:]
    tris = np.stack([a, b, c, a, c, d], 1).reshape(-1, 3)
    n = np.cross(b - a, d - a)
    n /= np.linalg.norm(n, axis=1, keepdims=True) + 1e-12
    n *= np.sign(n[:, 2:3] + 1e-9) if z0 == z1 else 1.0
    return vertices(tris, np.repeat(n, 6, 0), color, 0.0, SEMANTIC_ID[sem], 0, mat)


def _quad(poly: np.ndarray, z: float, color, sem: str, mat: float = 0.0) -> np.ndarray:
    p = np.concatenate([poly, np.full((4, 1), z)], 1)
    tris = p[[0, 1, 2, 0, 2, 3]]
    return vertices(tris, np.array([0.0, 0.0, 1.0]), color, 0.0, SEMANTIC_ID[sem], 0, mat)


def road_mesh(road: RoadNetwork, rng: np.random.Generator, textures: bool = True) -> np.ndarray:
    """Road, markings, crosswalks and sidewalks; with `textures` their materials carry a
    per-scene wear level (asphalt patches and cracks, faded paint, paving joints)."""
    asphalt = np.array([0.16, 0.16, 0.17]) * rng.uniform(0.85, 1.2)
    paving = np.array([0.5, 0.48, 0.45]) * rng.uniform(0.85, 1.1)
    wear = rng.uniform(0.0, 1.0)
    m_road, m_paint, m_walk = ((material("asphalt", wear), material("paint_marking", wear), material("concrete", rng.uniform()))
                               if textures else (0.0, 0.0, 0.0))
    out = []
    for left, right in road.strips():  # the main road (its taper included), then every street
        out.append(_strip(left, right, 0.0, 0.0, asphalt, "road", m_road))
    colors = {"solid_white": (0.85, 0.85, 0.85), "dashed_white": (0.85, 0.85, 0.85), "solid_yellow": (0.85, 0.65, 0.1)}
    for m in road.markings:
        for piece in marking_pieces(m):
            w = MARKING_WIDTH / 2
            out.append(_strip(piece.offset(w).points, piece.offset(-w).points, MARKING_Z, MARKING_Z, colors[m.type],
                              "lane_marking", m_paint))
    for poly in road.stripes:
        out.append(_quad(poly, MARKING_Z, (0.85, 0.85, 0.85), "crosswalk", m_paint))
    for inner, side in road.sidewalks:
        outer = inner.offset(side * SIDEWALK_WIDTH)
        out.append(_strip(inner.points, outer.points, CURB_HEIGHT, CURB_HEIGHT, paving, "sidewalk", m_walk))
        out.append(_curb(inner.points, paving * 0.8, m_walk))
    return np.concatenate(out)


def _curb(edge: np.ndarray, color, mat: float = 0.0) -> np.ndarray:
    """Vertical kerb face along `edge` (M, 2) from the road up to the sidewalk."""
    edge = chord_samples(edge)
    lo = np.concatenate([edge, np.zeros((len(edge), 1))], 1)
    hi = lo + [0, 0, CURB_HEIGHT]
    a, b, c, d = lo[:-1], lo[1:], hi[1:], hi[:-1]
    tris = np.stack([a, b, c, a, c, d], 1).reshape(-1, 3)
    t = b - a
    n = np.stack([-t[:, 1], t[:, 0], np.zeros(len(t))], 1)
    n /= np.linalg.norm(n, axis=1, keepdims=True) + 1e-12
    return vertices(tris, np.repeat(n, 6, 0), color, 0.0, SEMANTIC_ID["curb"], 0, mat)


def ground_mesh(world: World, textures: bool = True) -> np.ndarray:
    pts = world.road.main.points
    lo, hi = pts.min(0) - 150, pts.max(0) + 150
    poly = np.array([[lo[0], lo[1]], [hi[0], lo[1]], [hi[0], hi[1]], [lo[0], hi[1]]])
    color = np.array([0.22, 0.3, 0.12]) * world.rng.uniform(0.8, 1.2)
    return _quad(poly, GROUND_Z, color, "terrain", material("grass", 0.5) if textures else 0.0)


def static_mesh(world: World) -> np.ndarray:
    """Everything that never moves or changes colour: ground, roads, buildings, signs, poles."""
    lit = world.conditions.time_of_day != "day"
    rng = np.random.default_rng(world.rng.integers(1 << 31))
    textures = world.cfg.look.textures
    out = [ground_mesh(world, textures), road_mesh(world.road, rng, textures)]
    for p in world.props:
        if p.semantic != "traffic_light":
            out.append(transform_local(parts_local(p.parts, p.semantic, p.track_id, lit), p.pose()))
    return np.concatenate(out)


class DynamicMesh:
    """Agents and traffic lights: object-frame vertices built once, posed every frame."""

    def __init__(self, world: World):
        self.world = world
        lit = world.conditions.time_of_day != "day"
        self.lit = [lit and not a.attributes.get("parked") for a in world.agents]
        self.local = [parts_local(a.parts, a.cls, a.track_id, on) for a, on in zip(world.agents, self.lit)]
        self._posed: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(agent) -> (pose, world vertices)

    def _world_vertices(self, v: np.ndarray, a, on: bool, tau: float) -> np.ndarray:
        if a.animated:
            return transform_local(parts_local(a.parts, a.cls, a.track_id, on), a.pose_at(tau))
        pose = a.pose_at(tau)
        hit = self._posed.get(id(a))
        if hit is None or not np.array_equal(hit[0], pose):  # parked objects pose once per scene
            hit = self._posed[id(a)] = (pose, transform_local(v, pose))
        return hit[1]

    def build(self, tau: float = 0.0) -> np.ndarray:
        """World vertices (V, 13) of the agents and lights now, or `tau` seconds from now at the
        agents' current speeds (motion blur's sub-frames)."""
        w = self.world
        out = [self._world_vertices(v, a, on, tau) for v, a, on in zip(self.local, w.agents, self.lit)]
        for prop, k, approach in w.lights:
            state = w.signal(k, approach)
            prop.parts = light_parts(state)
            prop.attributes["light_state"] = state
            out.append(transform_local(parts_local(prop.parts, "traffic_light", prop.track_id, True), prop.pose()))
        return np.concatenate(out) if out else np.zeros((0, VERTEX_FLOATS), np.float32)


def scene_lights(world: World, max_lights: int = 16) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Point and spot lights (position, colour, spot direction or zeros) nearest to the ego:
    street lamps and vehicle headlights; none by day."""
    if world.conditions.time_of_day == "day":
        return []
    lights = []
    for p in world.props:
        for part in p.parts:
            if part.light == "street":
                pos = (p.pose() @ np.append(part.center - [0, 0, 0.2], 1.0))[:3]
                lights.append((pos, np.array([1.0, 0.85, 0.6]) * 1.2, np.zeros(3)))
    for a in world.agents + [world.ego]:
        if a.cls in ("car", "truck", "bus", "construction_vehicle", "motorcycle") and not a.attributes.get("parked"):
            d = np.array([np.cos(a.heading), np.sin(a.heading), 0.0])
            pos = np.array([a.pos[0], a.pos[1], 0.7]) + d * (a.box_size[0] / 2 + 0.3)
            lights.append((pos, np.array([1.0, 1.0, 0.9]) * 3.0, d - [0, 0, 0.08]))
    ego = np.array([world.ego.pos[0], world.ego.pos[1], 1.0])
    lights.sort(key=lambda l: float(np.linalg.norm(l[0] - ego)))
    return lights[:max_lights]
