"""Roadside clutter: hedges, fences, walls and distractor blocks just beyond the sidewalk.

Structured domain randomization's distractors (Prakash et al., "Structured Domain Randomization", ICRA 2019):
things at the height and place where parked cars stand that are not cars, so a detector learns a car's look
rather than "something at the kerb by the horizon". A sim model on genuine KITTI frames boxes fences, hedges,
rails and house fronts along the road as cars (docs/benchmarks.md, "Round 10"); the sim's roadside had only
buildings set back 2-8 m and trees. Clutter is background in every label: semantic building or vegetation, no
box, no track; cars behind it are occluded as by anything else (the labels' visibility comes from the render).

`roadside.clutter` (sim.config.RoadsideConfig) is the mean number of runs per 100 m of each road edge (0: none).
The runs draw from their own random stream, so a scene without clutter is the scene it was before.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sim.roads import SIDEWALK_WIDTH
from sim.shapes import Part, material

KINDS = ("hedge", "fence", "wall", "block")
KIND_P = (0.35, 0.25, 0.2, 0.2)
SEGMENT = 3.0  # metres: a run follows a curved road in straight pieces at most this long
BLOCK_MATERIALS = ("plain", "metal", "car_paint", "concrete", "cloth", "facade")


def _part(center, size, color, mat: float, shape: str = "box") -> Part:
    return Part(np.asarray(center, float), np.asarray(size, float), np.asarray(color, float), shape=shape,
                material=mat)


def run_parts(kind: str, length: float, rng: np.random.Generator, textures: bool) -> tuple[str, list[Part]]:
    """(semantic class, parts) of one straight piece `length` metres long along its x axis, origin on the ground."""
    tex = (lambda name, p=0.0: material(name, p)) if textures else (lambda name, p=0.0: 0.0)
    if kind == "hedge":
        h, d = rng.uniform(0.6, 1.9), rng.uniform(0.5, 1.2)
        green = np.array([rng.uniform(0.05, 0.2), rng.uniform(0.25, 0.5), rng.uniform(0.05, 0.15)])
        return "vegetation", [_part((0, 0, h / 2), (length, d, h), green, tex("foliage", rng.random()))]
    if kind == "fence":  # posts and two or three rails, or a solid panel
        h = rng.uniform(0.8, 2.0)
        color = rng.uniform(0.15, 0.8) * np.array([1.0, rng.uniform(0.85, 1.05), rng.uniform(0.75, 1.05)])
        mat = tex("metal") if rng.random() < 0.6 else tex("bark", rng.random())
        if rng.random() < 0.4:
            return "building", [_part((0, 0, h / 2), (length, 0.06, h), color, mat)]
        posts = [_part((x, 0, h / 2), (0.08, 0.08, h), color, mat) for x in np.arange(-length / 2, length / 2, 1.5)]
        rails = [_part((0, 0, z), (length, 0.05, 0.1), color, mat) for z in np.linspace(0.3, h - 0.05, int(rng.integers(2, 4)))]
        return "building", posts + rails
    if kind == "wall":
        h, d = rng.uniform(0.5, 2.4), rng.uniform(0.15, 0.4)
        color = rng.uniform(0.3, 0.85) * np.array([1.0, rng.uniform(0.85, 1.0), rng.uniform(0.7, 0.95)])
        mat = tex("concrete", rng.random()) if rng.random() < 0.6 else tex("facade", rng.random())
        return "building", [_part((0, 0, h / 2), (length, d, h), color, mat)]
    # a distractor block: a box, cylinder or ball of any colour and material, as tall as a car or so
    h, d = rng.uniform(0.5, 2.6), rng.uniform(0.5, 2.0)
    shape = str(rng.choice(["box", "box", "cyl_z", "ball"]))
    mat = tex(str(rng.choice(BLOCK_MATERIALS)), rng.random())
    return "building", [_part((0, 0, h / 2), (length, d, h), rng.uniform(0.05, 0.95, 3), mat, shape)]


def clutter_props(road, rate: float, seed: int, occupied: Sequence[np.ndarray], textures: bool,
                  prop_type) -> list:
    """Props (`prop_type`, sim.world.Prop) of roadside clutter along every road edge of `road`, `rate` runs per
    100 m on average, 0.2-0.8 m beyond the sidewalk; a piece is dropped where it would touch a roadway (a side
    street's mouth) or lie within 1.5 m of an `occupied` point (labelled objects: signs, lights, parked things)."""
    if rate <= 0:
        return []
    rng = np.random.default_rng([seed, 0xC1077E])
    occ = np.asarray(occupied, float).reshape(-1, 2)
    edges = [(road.main, None)] + [(it.street, it.cross_half_width) for it in road.intersections]
    props = []
    for path, width in edges:
        for side in (-1, 1):
            s = rng.exponential(100.0 / rate)
            while s < path.length:
                kind = str(rng.choice(KINDS, p=KIND_P))
                total = rng.uniform(0.6, 2.5) if kind == "block" else rng.uniform(3.0, 15.0)
                offset = rng.uniform(0.2, 0.8)
                for a in np.arange(0.0, total, SEGMENT):
                    piece = min(SEGMENT, total - a)
                    c, h = path.at(min(s + a + piece / 2, path.length))
                    hw = road.half_width_at(s + a) if width is None else width
                    n = np.array([-np.sin(h), np.cos(h)]) * side
                    semantic, parts = run_parts(kind, piece, rng, textures)
                    depth = max(p.size[1] for p in parts)
                    p = c + n * (hw + SIDEWALK_WIDTH + offset + depth / 2)
                    ends = p + np.outer([-piece / 2, 0, piece / 2], [np.cos(h), np.sin(h)])
                    if road.near_road(ends, SIDEWALK_WIDTH + 0.1).any() or \
                            (len(occ) and np.min(np.linalg.norm(occ[:, None] - ends[None], axis=-1)) < 1.5):
                        continue
                    props.append(prop_type(semantic, parts, p, h))
                s += total + rng.exponential(100.0 / rate)
    return props
