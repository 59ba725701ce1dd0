"""Convex unit primitives that object parts are built from.

Every shape fits the unit cube [-0.5, 0.5]^3 of its part's frame and is convex, so a part's
unoccluded silhouette in a camera is the convex hull of its projected vertices: `sim.labels`
counts it by pixel centres exactly as the rasterizer fills the triangles drawn here.

A shape has a triangle soup (`pos`, `nrm`: (V, 3), three vertices a triangle; cylinders and the
ball have smooth side normals, caps and boxes flat ones) and its distinct corner points
(`points`: (K, 3)).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Surface materials the fragment shader textures procedurally (sim/shaders/scene.frag.glsl); a
# part's `material` is the id plus a fraction in [0, 1) for a per-instance parameter (gloss,
# wear, window pattern). 0 = plain diffuse colour (the old look).
MATERIALS = {"plain": 0, "asphalt": 1, "concrete": 2, "facade": 3, "foliage": 4, "paint_marking": 5,
             "car_paint": 6, "glass": 7, "grass": 8, "rubber": 9, "metal": 10, "cloth": 11, "bark": 12}


@dataclass(frozen=True)
class Shape:
    pos: np.ndarray  # (V, 3) triangle vertices, unit size
    nrm: np.ndarray  # (V, 3) vertex normals
    points: np.ndarray  # (K, 3) distinct vertices (the convex hull's corners)

    @property
    def triangles(self) -> np.ndarray:
        """(T, 3, 3) the triangles, for clipping at the near plane."""
        return self.pos.reshape(-1, 3, 3)


def _flat(tris: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Triangles (T, 3, 3) wound outwards -> vertices and flat face normals."""
    n = np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0])
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    return tris.reshape(-1, 3), np.repeat(n, 3, 0)


def _outward(tris: np.ndarray) -> np.ndarray:
    """Flip triangles (T, 3, 3) of a convex shape around the origin so they wind outwards."""
    n = np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0])
    flip = (n * tris.mean(1)).sum(1) < 0
    tris = tris.copy()
    tris[flip] = tris[flip][:, ::-1]
    return tris


def _hull_shape(bottom: np.ndarray, top: np.ndarray) -> Shape:
    """A convex prism-like solid between two convex rings (N, 3) of the same length."""
    n = len(bottom)
    tris = []
    for i in range(n):
        j = (i + 1) % n
        tris += [[bottom[i], bottom[j], top[j]], [bottom[i], top[j], top[i]]]
    for i in range(1, n - 1):
        tris += [[bottom[0], bottom[i], bottom[i + 1]], [top[0], top[i], top[i + 1]]]
    pos, nrm = _flat(_outward(np.asarray(tris, float)))
    return Shape(pos, nrm, np.unique(np.concatenate([bottom, top]), axis=0))


def _box() -> Shape:
    b = np.array([[-0.5, -0.5, -0.5], [0.5, -0.5, -0.5], [0.5, 0.5, -0.5], [-0.5, 0.5, -0.5]])
    return _hull_shape(b, b + [0, 0, 1.0])


def _cylinder(n: int, top_scale: float = 1.0, axis: str = "z") -> Shape:
    """Cylinder (or frustum with top radius `top_scale` x 0.5) along `axis`; smooth sides."""
    a = np.arange(n) * 2 * np.pi / n + np.pi / n
    ring = np.stack([np.cos(a), np.sin(a), np.zeros(n)], 1) * 0.5
    bottom, top = ring - [0, 0, 0.5], ring * [top_scale, top_scale, 1] + [0, 0, 0.5]
    pos, tris, nrm = [], [], []
    slope = 0.5 * (1 - top_scale)  # radial drop over the height: side normals tilt up by it
    for i in range(n):
        j = (i + 1) % n
        ni, nj = (np.append(np.array([np.cos(a[k]), np.sin(a[k])]), slope) for k in (i, j))
        tris += [[bottom[i], bottom[j], top[j]], [bottom[i], top[j], top[i]]]
        nrm += [[ni, nj, nj], [ni, nj, ni]]
    for i in range(1, n - 1):
        tris += [[bottom[0], bottom[i + 1], bottom[i]], [top[0], top[i], top[i + 1]]]
        nrm += [[[0, 0, -1.0]] * 3, [[0, 0, 1.0]] * 3]
    tris, nrm = np.asarray(tris, float), np.asarray(nrm, float)
    flip = (np.cross(tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0]) * tris.mean(1)).sum(1) < 0
    tris[flip], nrm[flip] = tris[flip][:, ::-1], nrm[flip][:, ::-1]
    nrm /= np.linalg.norm(nrm, axis=2, keepdims=True)
    pos, nrm = tris.reshape(-1, 3), nrm.reshape(-1, 3)
    points = np.unique(np.concatenate([bottom, top]), axis=0)
    if axis == "y":  # z -> y: (x, y, z) -> (x, z, -y) keeps the winding
        R = np.array([[1, 0, 0], [0, 0, -1], [0, 1, 0]], float)
        pos, nrm, points = pos @ R.T, nrm @ R.T, points @ R.T
    return Shape(pos, nrm, points)


def _ball(n: int = 8, rings: int = 4) -> Shape:
    """UV sphere of diameter 1 with smooth normals."""
    lat = np.linspace(-np.pi / 2, np.pi / 2, rings + 1)
    lon = np.arange(n) * 2 * np.pi / n
    P = np.array([[[np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)] for lo in lon] for la in lat]) * 0.5
    tris = []
    for r in range(rings):
        for i in range(n):
            j = (i + 1) % n
            a, b, c, d = P[r, i], P[r, j], P[r + 1, j], P[r + 1, i]
            if r > 0:
                tris.append([a, b, c])
            if r < rings - 1:
                tris.append([a, c, d])
    tris = _outward(np.asarray(tris, float))
    pos = tris.reshape(-1, 3)
    nrm = pos / np.linalg.norm(pos, axis=1, keepdims=True)
    return Shape(pos, nrm, np.unique(np.round(P.reshape(-1, 3), 12), axis=0))


def _cabin(front: float, back: float, narrow: float) -> Shape:
    """A car's glasshouse: the top face shorter by `front` / `back` (sloped screens) and
    narrower by `narrow` each side (tumblehome)."""
    b = np.array([[-0.5, -0.5, -0.5], [0.5, -0.5, -0.5], [0.5, 0.5, -0.5], [-0.5, 0.5, -0.5]])
    t = np.array([[-0.5 + back, -0.5 + narrow, 0.5], [0.5 - front, -0.5 + narrow, 0.5],
                  [0.5 - front, 0.5 - narrow, 0.5], [-0.5 + back, 0.5 - narrow, 0.5]])
    return _hull_shape(b, t)


SHAPES: dict[str, Shape] = {
    "box": _box(),
    "cyl_z": _cylinder(8),  # poles, limbs, posts
    "cyl_y": _cylinder(8, axis="y"),  # wheels (axle along y)
    "cyl_y6": _cylinder(6, axis="y"),  # wheel hubs
    "cone_z": _cylinder(8, top_scale=0.22),  # traffic cones
    "ball": _ball(),  # heads, helmets
    "cabin": _cabin(front=0.34, back=0.22, narrow=0.06),  # saloon glasshouse
    "cabin_hatch": _cabin(front=0.36, back=0.08, narrow=0.06),  # hatchback / SUV glasshouse
    "cabin_van": _cabin(front=0.2, back=0.0, narrow=0.03),  # van / truck cab upper body
    "hood": _cabin(front=0.0, back=0.0, narrow=0.03),  # a body with rounded shoulders
    "jersey": _cabin(front=0.0, back=0.0, narrow=0.3),  # a concrete barrier's section
}


def pitch_matrix(pitch: float) -> np.ndarray:
    """Rotation about the object's y axis (a limb swinging forward for positive pitch)."""
    c, s = np.cos(pitch), np.sin(pitch)
    return np.array([[c, 0, -s], [0, 1, 0], [s, 0, c]])


def material(name: str, param: float = 0.0) -> float:
    """The per-vertex material value: id + a parameter in [0, 1)."""
    return MATERIALS[name] + min(max(float(param), 0.0), 0.999)


@dataclass
class Part:
    """A convex solid in the object frame (origin on the ground under the centre): a unit
    `shape` scaled by `size`, pitched about y by `pitch`, centred at `center`.

    Animated parts (limbs) swing about `pivot` by `swing * sin(cycle + phase)` radians; see
    `sim.agents.animate`.
    """

    center: np.ndarray  # (3,)
    size: np.ndarray  # (3,)
    color: np.ndarray  # (3,) linear RGB
    emissive: float = 0.0
    light: str = ""  # "head" / "tail" lamps light up at night; "red"/"yellow"/"green" signal lamps
    semantic: str = ""  # overrides the object's semantic class (e.g. "pole" under a sign)
    shape: str = "box"
    pitch: float = 0.0
    material: float = 0.0
    pivot: np.ndarray | None = None  # (3,) swing pivot (hip, shoulder), object frame
    swing: float = 0.0  # amplitude, radians
    phase: float = 0.0

    def rotation(self) -> np.ndarray:
        return pitch_matrix(self.pitch) if self.pitch else np.eye(3)

    def points(self) -> np.ndarray:
        """(K, 3) corner points in the object frame (their convex hull is the part)."""
        return SHAPES[self.shape].points * self.size @ self.rotation().T + self.center

    def mesh(self) -> tuple[np.ndarray, np.ndarray]:
        """Triangle vertices and normals (V, 3) in the object frame."""
        sh = SHAPES[self.shape]
        R = self.rotation()
        n = (sh.nrm / np.maximum(self.size, 1e-6)) @ R.T  # normals transform with the inverse scale
        n /= np.linalg.norm(n, axis=1, keepdims=True)
        return sh.pos * self.size @ R.T + self.center, n

    def triangles(self) -> np.ndarray:
        """(T, 3, 3) triangles in the object frame (near-plane clipping in the labels)."""
        return self.mesh()[0].reshape(-1, 3, 3)


def box_part(c, size, color, emissive=0.0, light="", semantic="", shape="box", material=0.0) -> Part:
    """A `Part` from plain sequences: centre c (3,), size (3,), linear RGB colour (3,)."""
    return Part(np.asarray(c, float), np.asarray(size, float), np.asarray(color, float), emissive, light, semantic,
                shape=shape, material=material)
