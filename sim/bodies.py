"""Detailed bodies: road users and roadside objects built from recognizable convex parts.

Cars (saloon, hatchback, SUV, van) have a body, a glasshouse, a roof, wheels with hubs, head
and tail lamps, grille and plate; trucks a cab with a windscreen, a cargo box and 2-3 axles;
buses a window band and a windscreen; bicycles and motorcycles a frame, wheels and a rider;
pedestrians (adults and children) legs, arms, torso, head and hair that swing in a walking
cycle (`sim.agents.animate`). Colours and gloss are drawn per instance (domain randomization,
Tremblay et al., CVPR-W 2018). Every part is convex (`sim.shapes`), so the labels' silhouettes
stay exact.

All sizes follow `sim.agents.CLASS_SIZES`-style draws made by the caller: `detailed_body(cls,
L, W, H, rng)` gets the dimensions and a generator for everything else.
"""
from __future__ import annotations

import numpy as np

from sim.shapes import Part, material

BLACK = np.array([0.03, 0.03, 0.035])
GLASS = np.array([0.035, 0.045, 0.055])
HEAD = np.array([1.0, 1.0, 0.85])
TAIL = np.array([0.7, 0.02, 0.02])
# car paint colours roughly as they are seen on roads: white, black, silver, grey, blue, red, other
_PAINTS = np.array([[0.8, 0.8, 0.8], [0.03, 0.03, 0.035], [0.55, 0.56, 0.58], [0.25, 0.26, 0.27],
                    [0.06, 0.14, 0.45], [0.55, 0.04, 0.03], [0.12, 0.3, 0.15], [0.6, 0.45, 0.2], [0.35, 0.2, 0.12]])
_PAINT_P = np.array([0.24, 0.2, 0.16, 0.14, 0.09, 0.08, 0.03, 0.03, 0.03])
_SKIN = np.array([[0.85, 0.64, 0.5], [0.72, 0.5, 0.36], [0.55, 0.37, 0.25], [0.35, 0.22, 0.14], [0.2, 0.13, 0.09]])
_HAIR = np.array([[0.03, 0.02, 0.02], [0.15, 0.08, 0.04], [0.45, 0.3, 0.12], [0.5, 0.5, 0.5], [0.3, 0.1, 0.03]])


def P(shape: str, c, size, color, mat: float = 0.0, pitch: float = 0.0, **kw) -> Part:
    return Part(np.asarray(c, float), np.asarray(size, float), np.clip(np.asarray(color, float), 0, 1),
                shape=shape, material=mat, pitch=pitch, **kw)


def paint(rng: np.random.Generator) -> np.ndarray:
    base = _PAINTS[rng.choice(len(_PAINTS), p=_PAINT_P)]
    return base * rng.uniform(0.85, 1.12) + rng.normal(0, 0.015, 3)


def cloth(rng: np.random.Generator) -> np.ndarray:
    if rng.random() < 0.45:  # black, grey, navy, denim: most clothes are dull
        return np.array([[0.03, 0.03, 0.035], [0.2, 0.2, 0.21], [0.05, 0.07, 0.16], [0.12, 0.18, 0.3]])[rng.integers(4)]
    return rng.uniform(0.05, 0.85, 3) * rng.uniform(0.5, 1.0)


def _pitch_between(a, b) -> tuple[np.ndarray, float, float]:
    """Centre, length and pitch of a part whose z axis runs from a to b (x-z plane)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = b - a
    length = float(np.hypot(d[0], d[2]))
    return (a + b) / 2, length, float(np.arctan2(-d[0], d[2]))


def rod(a, b, thick, color, mat=0.0, y=0.0, width=None, shape="cyl_z", **kw) -> Part:
    """A limb / tube from a to b ((x, z) pairs) at lateral offset y."""
    c, length, pitch = _pitch_between((a[0], y, a[1]), (b[0], y, b[1]))
    return P(shape, c, (thick, width or thick, length), color, mat, pitch, **kw)


def wheels(xs, half_track, r, width, mat_hub=True) -> list[Part]:
    out = []
    for x in xs:
        for side in (-1, 1):
            y = side * (half_track - width / 2)
            out.append(P("cyl_y", (x, y, r), (2 * r, width, 2 * r), BLACK * 1.2, material("rubber")))
            if mat_hub:
                out.append(P("cyl_y6", (x, y + side * 0.01, r), (1.15 * r, width, 1.15 * r), (0.5, 0.5, 0.52), material("metal")))
    return out


def lamps(L, W, z, inset=0.0, size=(0.05, 0.26, 0.1)) -> list[Part]:
    out = []
    for y in (-(W / 2 - size[1] / 2 - 0.08 - inset), W / 2 - size[1] / 2 - 0.08 - inset):
        out.append(P("box", (L / 2 - 0.02, y, z), size, HEAD, emissive=0.0, light="head"))
        out.append(P("box", (-L / 2 + 0.02, y, z), size, TAIL, emissive=0.0, light="tail"))
    return out


def windscreen(x_front, z0, z1, slope_dx, width, color=GLASS) -> Part:
    """A thin glass panel on a sloped front face from (x_front, z0) back to (x_front - slope_dx, z1)."""
    c, length, pitch = _pitch_between((x_front, 0, z0), (x_front - slope_dx, 0, z1))
    n = np.array([np.cos(pitch), 0.0, np.sin(pitch)])  # the panel's outward x axis
    return P("box", c + 0.012 * n, (0.02, width, length * 0.92), color, material("glass"), pitch)


def car(rng, L, W, H) -> list[Part]:
    kind = rng.choice(["saloon", "hatch", "suv", "van"], p=[0.45, 0.2, 0.25, 0.1])
    col, gloss = paint(rng), rng.uniform(0.3, 0.95)
    pm = material("car_paint", gloss)
    clear, r = 0.2, rng.uniform(0.3, 0.34)
    if kind == "suv":
        H, clear, r = max(H, rng.uniform(1.65, 1.85)), 0.28, rng.uniform(0.34, 0.38)
    if kind == "van":
        H, L, clear, r = rng.uniform(1.85, 2.05), max(L, rng.uniform(4.6, 5.0)), 0.22, 0.33
    belt = clear + (0.42 if kind == "van" else 0.5) * (H - clear)
    parts = [P("hood", (0, 0, (clear + belt) / 2), (L, W, belt - clear), col, pm),
             P("box", (0, 0, clear + 0.06), (L + 0.03, W - 0.06, 0.12), BLACK * 2, material("rubber"))]  # bumpers, sills
    if kind == "van":
        Lc, xc = 0.86 * L, -0.07 * L
        parts.append(P("cabin_van", (xc, 0, (belt + H) / 2), (Lc, W * 0.98, H - belt), col, pm))
        parts.append(windscreen(xc + Lc / 2, belt, H, 0.2 * Lc, W * 0.84))
    else:
        shape, Lc, xc = {"saloon": ("cabin", 0.56 * L, -0.05 * L), "hatch": ("cabin_hatch", 0.62 * L, -0.12 * L),
                         "suv": ("cabin_hatch", 0.66 * L, -0.1 * L)}[kind]
        front, back = (0.34, 0.22) if shape == "cabin" else (0.36, 0.08)
        top = Lc * (1 - front - back)
        parts.append(P(shape, (xc, 0, (belt + H - 0.03) / 2), (Lc, W * 0.94, H - 0.03 - belt), GLASS, material("glass")))
        parts.append(P("box", (xc + Lc * (back - front) / 2, 0, H - 0.03), (top + 0.06, W * 0.94 * 0.88, 0.06), col, pm))  # roof
    xf, xr = L / 2 - 0.8, -L / 2 + 0.85
    parts += wheels((xf, xr), W / 2 - 0.02, r, 0.22)
    parts += lamps(L, W, belt - 0.1)
    parts.append(P("box", (L / 2 - 0.01, 0, belt - 0.22), (0.04, 0.42 * W, 0.14), BLACK, material("metal")))  # grille
    parts.append(P("box", (-L / 2 - 0.0, 0, clear + 0.3), (0.03, 0.5, 0.12), (0.85, 0.85, 0.8)))  # number plate
    return parts


def truck(rng, L, W, H, construction=False) -> list[Part]:
    col = np.array([0.95, 0.68, 0.08]) * rng.uniform(0.85, 1.05) if construction else paint(rng)
    pm = material("car_paint", rng.uniform(0.2, 0.7))
    cab, r = 2.0, rng.uniform(0.48, 0.53)
    frame_z = 2 * r + 0.05
    parts = [P("box", (0, 0, r + 0.1), (L - 0.2, 0.9 * W, 0.3), BLACK, material("metal"))]  # chassis
    cab_top = min(H, 2.9) if not construction else 0.8 * H
    parts.append(P("box", (L / 2 - cab / 2, 0, (0.45 + frame_z + 0.35) / 2), (cab, W, frame_z + 0.35 - 0.45), col, pm))
    parts.append(P("cabin_van", (L / 2 - cab / 2, 0, (frame_z + 0.35 + cab_top) / 2), (cab, W, cab_top - frame_z - 0.35), col, pm))
    parts.append(windscreen(L / 2, frame_z + 0.45, cab_top - 0.1, 0.2 * cab * 0.9, W * 0.86))
    if construction:  # a tipper body and a raised arm: the unusual silhouette
        parts.append(P("jersey", (-cab / 2, 0, frame_z + 0.5), (L - cab - 0.2, W, 1.0), col * 0.8, pm))
        parts.append(rod((-0.8, frame_z + 0.6), (0.6, H - 0.1), 0.35, col, pm, shape="box"))
        parts.append(P("box", (0.65, 0, H - 0.35), (0.6, 0.5, 0.5), col * 0.7, pm))
    else:
        box_col = np.array([0.85, 0.85, 0.85]) * rng.uniform(0.8, 1.1) if rng.random() < 0.6 else paint(rng)
        parts.append(P("box", (-cab / 2 - 0.1, 0, (frame_z + H) / 2), (L - cab - 0.2, W, H - frame_z), box_col, material("metal")))
    axles = [L / 2 - 1.1, -L / 2 + 1.3] + ([-L / 2 + 2.7] if L > 8.0 else [])
    parts += wheels(axles, W / 2 - 0.02, r, 0.3)
    parts += lamps(L, W, 0.85, size=(0.05, 0.25, 0.12))
    return parts


def bus(rng, L, W, H) -> list[Part]:
    col, pm = paint(rng) * 0.6 + 0.3 * rng.uniform(0.2, 1, 3), material("car_paint", rng.uniform(0.3, 0.8))
    r = 0.5
    parts = [P("hood", (0, 0, 0.35 + (H - 0.35) / 2), (L, W, H - 0.35), col, pm),
             P("box", (-0.1, 0, 0.38 + 0.62 * (H - 0.38)), (L - 1.2, W + 0.02, 0.36 * (H - 0.38)), GLASS, material("glass")),
             P("box", (L / 2 + 0.005, 0, 0.35 + 0.55 * (H - 0.35)), (0.02, 0.9 * W, 0.6 * (H - 0.35)), GLASS, material("glass")),
             P("box", (L / 2 + 0.01, 0, H - 0.22), (0.02, 0.7 * W, 0.2), (1.0, 0.6, 0.1), light="sign"),  # destination sign
             P("box", (0, 0, 0.32), (L + 0.02, W - 0.04, 0.18), BLACK * 2, material("rubber"))]
    parts += wheels((L / 2 - 2.5, -L / 2 + 3.0), W / 2 - 0.02, r, 0.3)
    parts += lamps(L, W, 0.75, size=(0.05, 0.25, 0.14))
    return parts


def trailer(rng, L, W, H) -> list[Part]:
    c = paint(rng) * 0.5 + 0.4
    bar = 1.2
    parts = [P("box", (-bar / 2, 0, 0.75 + (H - 0.75) / 2), (L - bar, W, H - 0.75), c, material("metal")),
             P("box", (-bar / 2, 0, 0.6), (L - bar - 0.4, W * 0.9, 0.3), BLACK, material("metal")),
             P("box", (L / 2 - bar / 2, 0, 0.55), (bar, 0.12, 0.1), BLACK, material("metal"))]
    parts += wheels((-bar / 2 - 0.5,), W / 2 - 0.03, 0.4, 0.25)
    parts.append(P("box", (-L / 2 + 0.01, 0.35 * W, 0.75), (0.03, 0.2, 0.1), TAIL, light="tail"))
    parts.append(P("box", (-L / 2 + 0.01, -0.35 * W, 0.75), (0.03, 0.2, 0.1), TAIL, light="tail"))
    return parts


def _rider(rng, hip, shoulder, hands, knee, foot, head_z, s) -> list[Part]:
    """A seated rider: torso, arms to the bars, thighs and shins (mirrored), head with a helmet."""
    jacket, trousers = cloth(rng), cloth(rng)
    cm = material("cloth")
    parts = [rod(hip, shoulder, 0.22 * s, jacket, cm, width=0.36 * s, shape="hood")]
    for side in (-1, 1):
        parts.append(rod(shoulder, hands, 0.08 * s, jacket, cm, y=side * 0.2 * s))
        parts.append(rod(hip, knee, 0.12 * s, trousers, cm, y=side * 0.11 * s))
        parts.append(rod(knee, foot, 0.1 * s, trousers, cm, y=side * 0.12 * s))
    helmet = paint(rng)
    parts.append(P("ball", (shoulder[0] + 0.03 * s, 0, head_z), (0.22 * s, 0.2 * s, 0.24 * s), _SKIN[rng.integers(len(_SKIN))]))
    parts.append(P("ball", (shoulder[0] + 0.0, 0, head_z + 0.04 * s), (0.28 * s, 0.25 * s, 0.22 * s), helmet, material("car_paint", 0.8)))
    return parts


def cyclist(rng, L, W, H) -> list[Part]:
    s = H / 1.75
    frame = paint(rng)
    mm = material("metal")
    r = 0.34 * s
    parts = [P("cyl_y", (x * s, 0, r), (2 * r, 0.05, 2 * r), BLACK, material("rubber")) for x in (0.52, -0.52)]
    bb, seat, head_tube = (0.0, 0.3 * s), (-0.17 * s, 0.88 * s), (0.38 * s, 0.86 * s)
    parts += [rod(bb, seat, 0.04, frame, mm), rod(bb, head_tube, 0.045, frame, mm), rod(seat, head_tube, 0.04, frame, mm),
              rod(head_tube, (0.52 * s, r), 0.04, frame, mm), rod(bb, (-0.52 * s, r), 0.035, frame, mm),
              P("box", (0.42 * s, 0, 1.0 * s), (0.05, 0.56 * s, 0.04), BLACK, mm)]
    hip, shoulder = (-0.17 * s, 0.95 * s), (0.1 * s, 1.42 * s)
    jacket, trousers, cm = cloth(rng), cloth(rng), material("cloth")
    parts.append(rod(hip, shoulder, 0.22 * s, jacket, cm, width=0.36 * s, shape="hood"))
    for side in (-1, 1):
        parts.append(rod(shoulder, (0.42 * s, 1.0 * s), 0.08 * s, jacket, cm, y=side * 0.2 * s))
    leg = np.hypot(0.17, 0.65) * s  # hip to the crank: legs swing as the pedals turn
    base = float(np.arctan2(0.17, 0.65))
    for side, ph in ((-1, 0.0), (1, np.pi)):
        c = np.array([hip[0], side * 0.1 * s, hip[1]]) + np.array([np.sin(base), 0, -np.cos(base)]) * leg / 2
        parts.append(P("cyl_z", c, (0.12 * s, 0.12 * s, leg), trousers, cm, base,
                       pivot=np.array([hip[0], side * 0.1 * s, hip[1]]), swing=0.3, phase=ph))
    helmet = paint(rng)
    hz = H - 0.15 * s
    parts.append(P("ball", (shoulder[0] + 0.05 * s, 0, hz), (0.22 * s, 0.19 * s, 0.24 * s), _SKIN[rng.integers(len(_SKIN))]))
    parts.append(P("ball", (shoulder[0] + 0.02 * s, 0, hz + 0.05 * s), (0.3 * s, 0.24 * s, 0.2 * s), helmet, material("car_paint", 0.8)))
    return parts


def motorcycle(rng, L, W, H) -> list[Part]:
    s = H / 1.5
    col, pm, mm = paint(rng), material("car_paint", rng.uniform(0.5, 0.95)), material("metal")
    r, x = 0.31, L / 2 - 0.33
    parts = [P("cyl_y", (x, 0, r), (2 * r, 0.13, 2 * r), BLACK, material("rubber")),
             P("cyl_y", (-x, 0, r), (2 * r, 0.15, 2 * r), BLACK, material("rubber")),
             P("box", (0.0, 0, 0.5), (0.6, 0.3, 0.35), (0.25, 0.25, 0.27), mm),  # engine
             P("hood", (0.15, 0, 0.8), (0.5, 0.32, 0.22), col, pm),  # tank
             P("box", (-0.35, 0, 0.82), (0.55, 0.26, 0.1), BLACK),  # seat
             rod((x, r), (x - 0.2, 1.0), 0.06, (0.6, 0.6, 0.62), mm, y=0.0, width=0.2),  # fork
             P("box", (x - 0.2, 0, 1.0), (0.05, W, 0.04), BLACK, mm),  # handlebar
             P("box", (x - 0.1, 0, 0.92), (0.1, 0.16, 0.12), HEAD, light="head"),
             P("box", (-x - 0.05, 0, 0.75), (0.08, 0.14, 0.08), TAIL, light="tail")]
    hip, shoulder = (-0.3, 0.95), (-0.02, 0.95 + 0.5 * s)
    parts += _rider(rng, hip, shoulder, (x - 0.25, 1.02), (0.15, 0.78), (-0.05, 0.38), H - 0.14 * s, s)
    return parts


def pedestrian(rng, H: float, child: bool) -> list[Part]:
    """Legs and arms swing about hips and shoulders (phase: left leg 0, right leg pi, arms
    opposite); sizes follow the height, a child's head is relatively larger."""
    k = H / 1.75
    head = (0.17 if child else 0.13) * H
    hip_z, shoulder_z = 0.5 * H, H - head - 0.05 * H
    skin, shirt, trousers = _SKIN[rng.integers(len(_SKIN))], cloth(rng), cloth(rng)
    cm = material("cloth")
    leg, arm, swing = hip_z, 0.4 * H, rng.uniform(0.3, 0.45)
    parts = []
    for side, ph in ((1, 0.0), (-1, np.pi)):
        pivot = np.array([0.0, side * 0.09 * k, hip_z])
        parts.append(P("cyl_z", pivot - [0, 0, leg / 2], (0.14 * k, 0.14 * k, leg), trousers, cm,
                       pivot=pivot, swing=swing, phase=ph))
        shoulder = np.array([0.0, side * 0.23 * k, shoulder_z - 0.03 * H])
        parts.append(P("cyl_z", shoulder - [0, 0, arm / 2], (0.085 * k, 0.085 * k, arm), shirt, cm,
                       pivot=shoulder, swing=0.8 * swing, phase=ph + np.pi))
    parts.append(P("hood", (0, 0, (hip_z - 0.04 * H + shoulder_z) / 2), (0.24 * k, 0.38 * k, shoulder_z - hip_z + 0.04 * H), shirt, cm))
    parts.append(P("ball", (0.01 * k, 0, H - head / 2 - 0.015 * H), (0.8 * head, 0.75 * head, head), skin))
    hair = _HAIR[rng.integers(len(_HAIR))]
    parts.append(P("ball", (-0.02 * k, 0, H - head / 2 + 0.005 * H), (0.85 * head, 0.8 * head, 0.85 * head), hair))
    if rng.random() < 0.2:  # a backpack
        parts.append(P("box", (-0.17 * k, 0, shoulder_z - 0.18 * H), (0.14 * k, 0.3 * k, 0.3 * H), cloth(rng), cm))
    return parts


def traffic_cone(rng, L, W, H) -> list[Part]:
    orange = np.array([0.95, 0.35, 0.04]) * rng.uniform(0.85, 1.05)
    return [P("box", (0, 0, 0.025), (L, W, 0.05), orange * 0.8),
            P("cone_z", (0, 0, 0.05 + (H - 0.05) / 2), (0.62 * L, 0.62 * W, H - 0.05), orange),
            P("cyl_z", (0, 0, 0.55 * H), (0.41 * L, 0.41 * W, 0.12), (0.95, 0.95, 0.95))]


def barrier(rng, L, W, H) -> list[Part]:
    if rng.random() < 0.5:  # a concrete jersey barrier
        c = np.array([0.62, 0.61, 0.58]) * rng.uniform(0.8, 1.1)
        return [P("box", (0, 0, 0.1 * H), (L, W, 0.2 * H), c, material("concrete")),
                P("jersey", (0, 0, 0.2 * H + 0.4 * H), (L, W, 0.8 * H), c, material("concrete"))]
    c = np.array([0.9, 0.35, 0.05]) if rng.random() < 0.6 else np.array([0.85, 0.1, 0.08])
    return [P("box", (0, 0, 0.15 * H), (L, W, 0.3 * H), c),
            P("hood", (0, 0, 0.3 * H + 0.35 * H), (L, 0.45 * W, 0.7 * H), c),
            P("box", (0, 0, 0.75 * H), (L + 0.01, 0.45 * W + 0.01, 0.12 * H), (0.95, 0.95, 0.95))]


def detailed_body(cls: str, L: float, W: float, H: float, rng: np.random.Generator) -> list[Part] | None:
    """Parts of one object of `cls` with the drawn dimensions; None for classes kept as boxes."""
    if cls == "car":
        return car(rng, L, W, H)
    if cls in ("truck", "construction_vehicle"):
        return truck(rng, L, W, H, construction=cls == "construction_vehicle")
    if cls == "bus":
        return bus(rng, L, W, H)
    if cls == "trailer":
        return trailer(rng, L, W, H)
    if cls == "cyclist":
        return cyclist(rng, L, W, H)
    if cls == "motorcycle":
        return motorcycle(rng, L, W, H)
    if cls == "traffic_cone":
        return traffic_cone(rng, L, W, H)
    if cls == "barrier":
        return barrier(rng, L, W, H)
    return None
