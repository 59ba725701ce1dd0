"""Roadside clutter: hedges, fences, walls and distractor blocks just beyond the sidewalk.

Structured domain randomization's distractors (Prakash et al., "Structured Domain Randomization", ICRA 2019):
things at the height and place where parked cars stand that are not cars, so a detector learns a car's look
rather than "something at the kerb by the horizon". A sim model on genuine KITTI frames boxes fences, hedges,
rails and house fronts along the road as cars (docs/benchmarks.md, "Round 10"); the sim's roadside had only
buildings set back 2-8 m and trees. Clutter is background in every label: semantic building or vegetation, no
box, no track; cars behind it are occluded as by anything else (the labels' visibility comes from the render).

`roadside.clutter` (sim.config.RoadsideConfig) is the mean number of runs per 100 m of each road edge (0: none).
A run is one kind and one style (height, depth, colour, material) along the road, in straight pieces whose ends
lie on the curve at a constant distance beyond the sidewalk. A piece is left out where it would touch a roadway
(a side street's mouth), a building, tree or pole, or come within 1 m of a static labelled object (parked
vehicles, barriers, cones, signs, lights). The runs draw from their own random stream, so a scene without
clutter is the scene it was before.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from sim.agents import body_bounds
from sim.roads import SIDEWALK_WIDTH
from sim.shapes import Part, box_part, material
from sim.traffic import footprint, polygons_overlap

KINDS = ("hedge", "fence", "wall", "block")
KIND_P = (0.35, 0.25, 0.2, 0.2)
SEGMENT = 3.0  # metres of road per piece: a run follows a curve in straight chords
LABELLED_CLEARANCE = 1.0  # metres between clutter and a static labelled object
BLOCK_MATERIALS = ("plain", "metal", "car_paint", "concrete", "cloth", "facade")
Style = Callable[[float], tuple[str, list[Part]]]  # piece length -> (semantic class, parts along its x axis)


def run_style(kind: str, rng: np.random.Generator, textures: bool) -> tuple[Style, float, float]:
    """(style, depth, run length) of one run of `kind`, drawn once: every piece of the run looks the same."""
    def tex(name: str, p: float = 0.0) -> float:
        return material(name, p) if textures else 0.0

    if kind == "hedge":
        h, d = rng.uniform(0.6, 1.9), rng.uniform(0.5, 1.2)
        green = np.array([rng.uniform(0.05, 0.2), rng.uniform(0.25, 0.5), rng.uniform(0.05, 0.15)])
        mat = tex("foliage", rng.random())
        return (lambda L: ("vegetation", [box_part((0, 0, h / 2), (L, d, h), green, material=mat)])), d, rng.uniform(3, 15)
    if kind == "fence":  # posts every 1.5 m and two or three rails, or a solid panel
        h = rng.uniform(0.8, 2.0)
        color = rng.uniform(0.15, 0.8) * np.array([1.0, rng.uniform(0.85, 1.05), rng.uniform(0.75, 1.05)])
        mat = tex("metal") if rng.random() < 0.6 else tex("bark", rng.random())
        rails = np.linspace(0.3, h - 0.05, int(rng.integers(2, 4)))
        if rng.random() < 0.4:
            return (lambda L: ("building", [box_part((0, 0, h / 2), (L, 0.06, h), color, material=mat)])), 0.1, rng.uniform(3, 15)

        def fence(L: float) -> tuple[str, list[Part]]:
            posts = [box_part((x, 0, h / 2), (0.08, 0.08, h), color, material=mat) for x in np.arange(-L / 2, L / 2, 1.5)]
            return "building", posts + [box_part((0, 0, z), (L, 0.05, 0.1), color, material=mat) for z in rails]
        return fence, 0.1, rng.uniform(3, 15)
    if kind == "wall":
        h, d = rng.uniform(0.5, 2.4), rng.uniform(0.15, 0.4)
        color = rng.uniform(0.3, 0.85) * np.array([1.0, rng.uniform(0.85, 1.0), rng.uniform(0.7, 0.95)])
        mat = tex("concrete", rng.random()) if rng.random() < 0.6 else tex("facade", rng.random())
        return (lambda L: ("building", [box_part((0, 0, h / 2), (L, d, h), color, material=mat)])), d, rng.uniform(3, 15)
    # a distractor block: a box, cylinder or ball of any colour and material, about a car's height
    h, d = rng.uniform(0.5, 2.6), rng.uniform(0.5, 2.0)
    shape, color = str(rng.choice(["box", "box", "cyl_z", "ball"])), rng.uniform(0.05, 0.95, 3)
    mat = tex(str(rng.choice(BLOCK_MATERIALS)), rng.random())
    return (lambda L: ("building", [box_part((0, 0, h / 2), (L, d, h), color, shape=shape, material=mat)])), d, \
        rng.uniform(0.6, 2.5)


def blockers(world) -> list[np.ndarray]:
    """Footprints (4, 2) clutter must not overlap: every prop placed so far, static labelled ones (signs, lights)
    and static road users (parked vehicles, barriers, cones, debris) grown by LABELLED_CLEARANCE."""
    props = [footprint(p.pos, p.heading, *body_bounds(p.parts), LABELLED_CLEARANCE if p.track_id else 0.0)
             for p in world.props]
    return props + [footprint(a.pos, a.heading, a.box_center, a.box_size, LABELLED_CLEARANCE)
                    for a in world.agents if a.path is None]


def beyond_sidewalk(road, path, width: float | None, offset: float, u: float) -> np.ndarray:
    """The point (2,) `offset` metres beyond the sidewalk (its sign: which side) at arclength `u` of the edge
    (path, half width; None: the main road's `half_width_at`)."""
    c, h = path.at(u)
    hw = road.half_width_at(u) if width is None else width
    return c + np.array([-np.sin(h), np.cos(h)]) * np.sign(offset) * (hw + SIDEWALK_WIDTH + abs(offset))


def place_runs(road, rate: float, seed: int, blocked: Sequence[np.ndarray],
               textures: bool) -> list[tuple[str, list[Part], np.ndarray, float]]:
    """(semantic, parts, position (2,), heading) of every clutter piece along the edges of `road`, `rate` runs per
    100 m of edge on average, 0.2-0.8 m beyond the sidewalk, none overlapping a `blocked` footprint."""
    if rate <= 0:
        return []
    rng = np.random.default_rng([seed, 0xC1077E])
    centres = np.array([b.mean(0) for b in blocked]).reshape(-1, 2)
    radii = np.array([np.linalg.norm(b - b.mean(0), axis=1).max() for b in blocked])
    pieces = []
    for path, width in road.edges():
        for side in (-1, 1):
            s = rng.exponential(100.0 / rate)
            while s < path.length:
                style, depth, total = run_style(str(rng.choice(KINDS, p=KIND_P)), rng, textures)
                offset = rng.uniform(0.2, 0.8) + depth / 2  # beyond the sidewalk, to the piece's centre line
                for a in np.arange(s, min(s + total, path.length) - 0.3, SEGMENT):
                    p0, p1 = (beyond_sidewalk(road, path, width, side * offset, u)
                              for u in (a, min(a + SEGMENT, s + total, path.length)))
                    chord = p1 - p0
                    length, heading = float(np.linalg.norm(chord)), float(np.arctan2(chord[1], chord[0]))
                    semantic, parts = style(length)
                    centre = (p0 + p1) / 2
                    fp = footprint(centre, heading, *body_bounds(parts), 0.0)
                    near = np.linalg.norm(centres - centre, axis=1) < radii + length / 2 + depth
                    if road.near_road(fp, SIDEWALK_WIDTH + 0.1).any() or \
                            any(polygons_overlap(fp, blocked[i]) for i in np.flatnonzero(near)):
                        continue
                    pieces.append((semantic, parts, centre, heading))
                s += total + rng.exponential(100.0 / rate)
    return pieces


def clutter_pieces(world) -> list[tuple[str, list[Part], np.ndarray, float]]:
    """`place_runs` for a `sim.world.World` whose props and road users are all placed (its config's
    roadside.clutter and look.textures, its seed)."""
    cfg = world.cfg
    if cfg.roadside.clutter <= 0:
        return []
    return place_runs(world.road, cfg.roadside.clutter, world.seed, blockers(world), cfg.look.textures)
