"""Exact object silhouettes: the pixel centres (a pinhole) or lens rays (a distorted camera) an
object's parts cover, and the exact label channels of a distorted camera.

Every part is convex (`sim.shapes`), so an object's unoccluded silhouette in a pinhole is the
union of convex image polygons (`silhouette_polygons`): `_coverage` counts the pixel centres
inside them as the rasterizer fills them. A distorted camera is drawn through a source pinhole
and resampled (`sim.lens`); its pixel's ray meets the source image at a non-integer point q, so
the silhouette is tested at q itself (`lens_coverage`), not at the nearest source pixel.

`exact_lens_channels` makes the resampled label channels exact for the objects: each pixel
takes its labels from the source pixel nearest to q (within the 5x5 around it) covered by exactly
the same set of object silhouettes as q. So a pixel shows an object iff its own ray meets the object's
silhouette (and the object is in front there), as a pinhole's pixel does; ground and background
around an object keep their look-up. Only where a static occluder (a pole, a tree) crosses an
object, or where an object is thinner than a source pixel, does the label come from a sample up
to a source pixel away (see docs/sim_look.md "Lens distortion"). Depth at q is extrapolated on the
sample's surface plane (its normal), so depth stays on the surface the pixel's ray meets; on the
road's surface (road, markings, crosswalks) it is the ray's own hit on the flat world's plane.
"""
from __future__ import annotations

import cv2
import numpy as np

from hydranet.geometry import Camera
from sim.classes import SEMANTIC_ID
from sim.lens import LensView, lens_view
from sim.meshes import MARKING_Z
from sim.render import NEAR, CameraImages


def _clip_near(poly: np.ndarray, near: float) -> np.ndarray:
    """Sutherland-Hodgman clip of a camera-frame polygon (K, 3) to z >= near."""
    out = []
    for i in range(len(poly)):
        a, b = poly[i], poly[(i + 1) % len(poly)]
        ina, inb = a[2] >= near, b[2] >= near
        if ina:
            out.append(a)
        if ina != inb:
            t = (near - a[2]) / (b[2] - a[2])
            out.append(a + t * (b - a))
    return np.asarray(out)


def silhouette_polygons(parts, pose: np.ndarray, cam: Camera, world2cam: np.ndarray) -> list[np.ndarray]:
    """The object's silhouette as convex image polygons (`part_polygons` without the part indices)."""
    return [poly for _, poly in part_polygons(parts, pose, cam, world2cam)]


def part_polygons(parts, pose: np.ndarray, cam: Camera, world2cam: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(part index, convex image polygon (K, 2)) whose union is the object's unoccluded silhouette in the
    pinhole `cam` (a distorted camera's source pinhole, `sim.lens`; parts clipped to the near
    plane as the rasterizer clips them; poles are not the object).
    Every part is convex (`sim.shapes`): wholly in front of the near plane its silhouette is the
    hull of its projected corners; across it, each triangle is clipped."""
    T = world2cam @ pose
    K2, c2 = cam.K[:2, :2].T, cam.K[:2, 2]
    out = []
    for i, p in enumerate(parts):
        if p.semantic == "pole":
            continue
        corners = p.points() @ T[:3, :3].T + T[:3, 3]  # (K, 3) camera frame
        f = corners[:, 2] >= NEAR
        if not f.any():
            continue
        if f.all():
            uv = corners[:, :2] / corners[:, 2:3] @ K2 + c2
            out.append((i, cv2.convexHull(uv.astype(np.float32))[:, 0].astype(np.float64)))
            continue
        for tri in p.triangles() @ T[:3, :3].T + T[:3, 3]:
            poly = _clip_near(tri, NEAR)
            if len(poly) >= 3:
                out.append((i, np.clip(poly[:, :2] / poly[:, 2:3] @ K2 + c2, -1e5, 1e5)))
    return out


def _coverage(polys: list[np.ndarray], width: int, height: int) -> tuple[np.ndarray, int, int] | None:
    """Pixel centres of a width x height image inside any of `polys`, as the rasterizer counts
    them (scanline spans of each polygon, united): (window mask (R, C) bool, x0, y0) or None."""
    allp = np.concatenate(polys)
    x0, y0 = max(int(np.ceil(allp[:, 0].min())), 0), max(int(np.ceil(allp[:, 1].min())), 0)
    x1, y1 = min(int(np.floor(allp[:, 0].max())), width - 1), min(int(np.floor(allp[:, 1].max())), height - 1)
    if x1 < x0 or y1 < y0:
        return None
    k = max(len(p) for p in polys)
    A = np.stack([np.concatenate([p, np.repeat(p[-1:], k - len(p), 0)]) for p in polys])  # (P, K, 2), padded
    B = np.roll(A, -1, 1)
    dy = B[..., 1] - A[..., 1]  # (P, K); 0 for horizontal and padding edges, which add nothing
    dy = np.where(dy == 0, np.nan, dy)
    rows = np.arange(y0, y1 + 1, dtype=np.float64)[None, :, None]  # (1, R, 1)
    t = (rows - A[:, None, :, 1]) / dy[:, None, :]  # (P, R, K) position of each row along each edge
    xs = A[:, None, :, 0] + t * (B - A)[:, None, :, 0]
    ok = (t >= 0) & (t <= 1)
    lo = np.ceil(np.where(ok, xs, np.inf).min(2))[..., None]  # (P, R, 1) first covered column
    hi = np.floor(np.where(ok, xs, -np.inf).max(2))[..., None]
    cols = np.arange(x0, x1 + 1, dtype=np.float64)
    return ((cols >= lo) & (cols <= hi)).any(0), x0, y0


def _inside(polys: list[np.ndarray], pts: np.ndarray) -> np.ndarray:
    """(K,) bool: points (K, 2) inside any of the convex polygons (either winding)."""
    out = np.zeros(len(pts), bool)
    for P in polys:
        lo, hi = P.min(0), P.max(0)
        sel = np.flatnonzero(~out & (pts[:, 0] >= lo[0]) & (pts[:, 0] <= hi[0]) & (pts[:, 1] >= lo[1]) & (pts[:, 1] <= hi[1]))
        if not len(sel):
            continue
        e = np.roll(P, -1, 0) - P  # (K, 2) edges
        d = pts[sel, None, :] - P[None]  # (S, K, 2)
        c = e[None, :, 0] * d[..., 1] - e[None, :, 1] * d[..., 0]
        out[sel] = (c >= 0).all(1) | (c <= 0).all(1)
    return out


def lens_coverage(polys: list[np.ndarray], lens: LensView) -> np.ndarray:
    """Flat indices of a distorted camera's pixels whose ray (its exact source point q) lies in
    the silhouette `polys` (source pinhole coordinates)."""
    if not polys:
        return np.zeros(0, np.intp)
    allp = np.concatenate(polys)
    lo, hi = allp.min(0), allp.max(0)
    order, qx_sorted = lens.by_x
    a, b = np.searchsorted(qx_sorted, [lo[0], hi[0]], side="left"), np.searchsorted(qx_sorted, hi[0], side="right")
    cand = order[a[0]:b]
    q = lens.q[cand]
    cand = cand[(q[:, 1] >= lo[1]) & (q[:, 1] <= hi[1])]
    return np.sort(cand[_inside(polys, lens.q[cand])])


def silhouette_pixels(parts, pose: np.ndarray, cam: Camera, world2cam: np.ndarray) -> int:
    """Pixels the object's parts would cover in `cam` with nothing in front of them: pixel
    centres as the rasterizer counts them, or in a distorted camera the pixels whose own ray
    meets the silhouette (`lens_coverage`)."""
    lens = lens_view(cam)
    polys = silhouette_polygons(parts, pose, lens.source, world2cam)
    if not polys:
        return 0
    if lens.distorted:
        return len(lens_coverage(polys, lens))
    cover = _coverage(polys, lens.source.width, lens.source.height)
    return 0 if cover is None else int(cover[0].sum())


def _ray_hits(parts, T: np.ndarray, rays: np.ndarray, pixels: np.ndarray | None = None,
              polys: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """z-depth (K,) (inf: a miss) and face normal (K, 3) where camera-frame rays (K, 3) with z = 1
    first meet the object's parts (not its poles) posed by object-to-camera `T` (Moller-Trumbore).
    With `polys` (`part_polygons`) and the rays' source points `pixels` (K, 2), each part is cast
    only with the rays inside its own silhouette."""
    if polys is not None:
        best, nrm = np.full(len(rays), np.inf), np.zeros((len(rays), 3))
        for i in sorted({k for k, _ in polys}):
            sel = np.flatnonzero(_inside([poly for k, poly in polys if k == i], pixels))
            if len(sel):
                z, n = _ray_hits([parts[i]], T, rays[sel])
                win = z < best[sel]
                best[sel[win]], nrm[sel[win]] = z[win], n[win]
        return best, nrm
    tris = np.concatenate([p.triangles() for p in parts if p.semantic != "pole"]) @ T[:3, :3].T + T[:3, 3]
    v0, e1, e2 = tris[:, 0], tris[:, 1] - tris[:, 0], tris[:, 2] - tris[:, 0]  # (T, 3)
    p = np.cross(rays[:, None], e2[None])  # (K, T, 3)
    det = (p * e1[None]).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / det
        s = -v0[None]  # the rays start at the camera centre
        u = (s * p).sum(-1) * inv
        q = np.cross(s, e1[None])
        v = (rays[:, None] * q).sum(-1) * inv
        t = (e2[None] * q).sum(-1) * inv
    hit = (np.abs(det) > 1e-12) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t >= NEAR)
    t = np.where(hit, t, np.inf)
    j = t.argmin(1)
    n = np.cross(e1, e2)[j]
    return t[np.arange(len(rays)), j], n / np.linalg.norm(n, axis=1, keepdims=True)


_GROUND = np.isin(np.arange(256), [SEMANTIC_ID[c] for c in ("sky", "road", "lane_marking", "crosswalk", "sidewalk",
                                                             "curb", "terrain")])


def _thin(img_lab: np.ndarray, pick: np.ndarray, still: np.ndarray, covers: dict, objects: dict, lens: LensView,
          world2cam: np.ndarray, depth: np.ndarray, only: np.ndarray | None = None, polys: dict | None = None
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pixels `still` (flat) whose ray meets an object no source pixel around it shows (thinner
    than a source pixel there): the frontmost object its ray meets, by a ray cast, unless the
    nearest source pixel shows something standing in front of it (not the ground). `only`: the
    object (track id) each pixel is known to show, cast alone.
    Returns the pixels, their labels (uint32), z-depths and normals."""
    rays = np.concatenate([lens.q[still], np.ones((len(still), 1))], 1) @ np.linalg.inv(lens.source.K).T
    best = np.full(len(still), np.inf)
    lab = np.zeros(len(still), np.uint32)
    nrm = np.zeros((len(still), 3))
    for tid, idx in covers.items():
        sel = np.flatnonzero(np.isin(still, idx) if only is None else only == tid)
        if not len(sel):
            continue
        cls, parts, pose, _ = objects[tid]
        z, n = _ray_hits(parts, world2cam @ pose, rays[sel], lens.q[still[sel]], polys[tid] if polys else None)
        win = z < best[sel]
        best[sel[win]], nrm[sel[win]] = z[win], n[win]
        lab[sel[win]] = (SEMANTIC_ID[cls] << 16) | tid
    near = img_lab[pick[still]]
    d_near = depth[pick[still]]
    if only is not None:
        ok = np.isfinite(best)
        return still[ok], lab[ok], best[ok], nrm[ok]
    keep = ~np.isfinite(best) | (~_GROUND[near >> 16] & ((near & 0xFFFF) == 0) & (d_near > 0) & (d_near < best - 0.1))
    ok = ~keep
    return still[ok], lab[ok], best[ok], nrm[ok]


def _depth_at_q(label: np.ndarray, depth: np.ndarray, ws: int, hs: int, pick: np.ndarray, q: np.ndarray) -> np.ndarray:
    """z-depth at the points q (K, 2) from their source pixels `pick` (flat): 1/z is affine in the
    image over a plane, so it is carried from the pixel to q along its gradient, taken towards q
    from the next pixel with the same label (else from the other side; else none)."""
    z = depth[pick].astype(np.float64)
    inv = np.where(z > 0, 1.0 / np.maximum(z, 1e-9), 0.0)
    px, py = pick % ws, pick // ws
    out = inv.copy()
    for axis, (pos, size, step) in enumerate(((px, ws, 1), (py, hs, ws))):
        off = q[:, axis] - pos
        sgn = np.where(off >= 0, 1, -1)
        grad = np.zeros(len(pick))
        have = np.zeros(len(pick), bool)
        for side in (1, -1):  # towards q first, then away from it
            nb_pos = pos + side * sgn
            ok = ~have & (z > 0) & (nb_pos >= 0) & (nb_pos < size)
            nb = np.where(ok, pick + side * sgn * step, pick)
            ok &= (label[nb] == label[pick]) & (depth[nb] > 0)
            grad = np.where(ok, side * sgn * (1.0 / np.maximum(depth[nb], 1e-9) - inv), grad)
            have |= ok
        out += grad * off * sgn * sgn
    keep = (z <= 0) | (out <= 0) | (out < 0.5 * inv) | (out > 2.0 * inv)
    return np.where(keep, z, 1.0 / np.where(keep, 1.0, out))


_ROAD_Z = np.full(256, np.nan)  # world height of the road surface's classes (the world is flat, `sim.roads`)
_ROAD_Z[[SEMANTIC_ID["road"], SEMANTIC_ID["lane_marking"], SEMANTIC_ID["crosswalk"]]] = [0.0, MARKING_Z, MARKING_Z]


def _plane_depth(lens: LensView, world2cam: np.ndarray, pixels: np.ndarray, height: np.ndarray) -> np.ndarray:
    """z-depth (K,) where the rays of camera pixels `pixels` (flat) meet the world plane z = `height`
    (K,), in front of the camera (else inf)."""
    cam2world = np.linalg.inv(world2cam)
    rays = np.concatenate([lens.q[pixels], np.ones((len(pixels), 1))], 1) @ np.linalg.inv(lens.source.K).T
    up = rays @ cam2world[2, :3]  # world height gained per unit of z-depth
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (height - cam2world[2, 3]) / up
    return np.where(np.isfinite(t) & (t >= NEAR), t, np.inf)


def _key(tid: int) -> np.uint64:
    """A pseudo-random 64-bit key of a track id (splitmix64): sums of keys name sets of objects."""
    z = (int(tid) * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & (2 ** 64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2 ** 64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2 ** 64 - 1)
    return np.uint64(z ^ (z >> 31))


def exact_lens_channels(img: CameraImages, cam: Camera, world2cam: np.ndarray, objects: dict) -> dict[int, int]:
    """Rewrite the label channels of a distorted camera's `img` (in place) from its source
    pinhole's channels (`img.source`) so that object masks are exact at every pixel's own ray;
    returns {track id: pixels of its unoccluded silhouette} of the objects the source shows."""
    lens = lens_view(cam)
    label, depth, normal = img.source  # (Hs, Ws) uint32, (Hs, Ws) float32, (Hs, Ws, 3) uint8
    hs, ws = label.shape
    inst = (label & 0xFFFF).ravel()
    shown = np.flatnonzero(np.bincount(inst, minlength=1))
    h_src = np.zeros(hs * ws, np.uint64)  # sum of the keys of the objects covering each source pixel
    h_lens = np.zeros(cam.width * cam.height, np.uint64)  # ... each camera pixel's ray
    full, covers, polygons = {}, {}, {}
    for tid in shown.tolist():
        if tid == 0 or tid not in objects:
            continue
        _, parts, pose, _ = objects[tid]
        polygons[tid] = part_polygons(parts, pose, lens.source, world2cam)
        polys = [poly for _, poly in polygons[tid]]
        if not polys:
            continue
        key = _key(tid)
        cover = _coverage(polys, ws, hs)
        if cover is not None:
            mask, x0, y0 = cover
            win = h_src.reshape(hs, ws)[y0:y0 + mask.shape[0], x0:x0 + mask.shape[1]]
            win += mask.astype(np.uint64) * key
        idx = lens_coverage(polys, lens)
        h_lens[idx] += key
        full[tid], covers[tid] = len(idx), idx
    near = lens.neighbours  # (H*W, 9) source pixels around each q, nearest first
    pick = near[:, 0].copy()
    look = np.flatnonzero(h_src[pick] != h_lens)  # the nearest source pixel is not covered as q is
    # the nearest sample covered as q is, over the 5x5: a 3x3 corner (up to 2.1 px from q) is not
    # taken over a nearer 5x5 one (from 1.5 px): a pixel in a gap between objects just above the
    # horizon took a road sample below it (its own ray never meets the road: no depth on its ray)
    wide = lens.neighbours_at(look, 2)  # (K, 25) nearest first; the 3x3 in the same order among them
    m = h_src[wide] == h_lens[look, None]
    pick[look] = np.where(m.any(1), wide[np.arange(len(look)), m.argmax(1)], near[look, 0])
    lost = look[~m.any(1) & (h_lens[look] != 0)]  # no sample has q's objects: keep the nearest
    lab = label.ravel()[pick]
    img.semantic = (lab >> 16).astype(np.uint8).reshape(cam.height, cam.width)
    img.instance = (lab & 0xFFFF).astype(np.int32).reshape(cam.height, cam.width)
    n = normal.reshape(-1, 3)[pick] * np.float32(2.0 / 255.0) - np.float32(1.0)  # (H*W, 3) camera frame
    d = depth.ravel()[pick].astype(np.float64)
    moved = np.flatnonzero(pick != near[:, 0])  # pixels whose labels now come from another than the nearest source pixel
    obj = np.isin(lab[moved] & 0xFFFF, list(covers))
    if obj.any():  # an object: where the pixel's own ray meets it (a ray cast)
        px, lab_t, z_t, n_t = _thin(label.ravel(), pick, moved[obj], covers, objects, lens, world2cam, depth.ravel(),
                                    only=lab[moved[obj]] & 0xFFFF, polys=polygons)
        d[px], n[px] = z_t, n_t
    bg = moved[~obj]  # the background: along its surface's plane
    d[bg] = _depth_at_q(label.ravel(), depth.ravel(), ws, hs, pick[bg], lens.q[bg])
    flat = bg[~np.isnan(_ROAD_Z[lab[bg] >> 16])]  # the road's surface: exact on the flat world's plane
    if len(flat):
        z = _plane_depth(lens, world2cam, flat, _ROAD_Z[lab[flat] >> 16])
        ok = np.isfinite(z)  # a ray above the horizon keeps the extrapolated depth
        d[flat[ok]] = z[ok]
    if len(lost):
        px, lab_t, z_t, n_t = _thin(label.ravel(), pick, lost, covers, objects, lens, world2cam, depth.ravel(),
                                    polys=polygons)
        lab[px], d[px], n[px] = lab_t, z_t, n_t
        img.semantic = (lab >> 16).astype(np.uint8).reshape(cam.height, cam.width)
        img.instance = (lab & 0xFFFF).astype(np.int32).reshape(cam.height, cam.width)
    img.depth = d.astype(np.float32).reshape(cam.height, cam.width)
    img.normal = (n * (d > 0)[:, None]).astype(np.float32).reshape(cam.height, cam.width, 3)
    return full
