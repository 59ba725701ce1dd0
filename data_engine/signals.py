"""Per-frame signals of a deployed model, from its outputs alone (no labels): numpy only.

Every signal is a float per frame (NaN where it does not apply: a model without that head, a
frame without the history or the objects it needs). p = a sigmoid score, H(p) = -p ln p - (1-p)
ln(1-p) its binary entropy (nats, at most ln 2 = 0.693). Columns (`SIGNALS`):

Per head (declared by each head's spec, `hydranet.heads.HeadSpec.signal_columns`, and computed by
its `signals`; a new head brings its own):

- `<head>_entropy` (det2d, signs_lights, det3d): mean H(p) over the top-K (K=20) 3x3 heatmap peaks
  above 0.05 of every camera (det3d: of the BEV heatmap); high when peaks sit near p = 0.5.
- `<head>_uncertain`: number of those peaks in the uncertain band 0.3 <= p < 0.6.
- `<head>_margin`: mean over the same peaks of 1 - |2p - 1| (1 = a coin flip, 0 = certain).
- `lanes_entropy`, `drivable_entropy`: mean H(p) over all pixels of every camera;
  `lanes_entropy_p95`, `drivable_entropy_p95`: the 95th percentile (the uncertain tail).

Across heads (`ENGINE_SIGNALS`, computed here):

- `flicker`: per camera, a simple tracker links confident det2d boxes (score >= 0.3) of consecutive
  frames by greedy IoU >= 0.3 (same class). Events at frame t: a box of t-1 linked to neither t-2
  nor t (lived one frame), plus a box of t linked to t-2 but not to t-1 (a one-frame gap);
  summed over cameras. Needs 3 frames of history.
- `jitter`: over tracks linked t-2 -> t-1 -> t, mean |b_t - 2 b_{t-1} + b_{t-2}| / sqrt(area_{t-1})
  over the 4 box coordinates (the second difference: smooth motion scores ~0, shaking boxes high).
- `cross_camera`: det3d boxes whose centre projects into two cameras (their overlap); for each
  such (box, camera pair), disagreement = exactly one of the two cameras has a det2d box
  containing the projected centre. Value = disagreeing pairs / pairs.
- `box2d_vs_3d`: each det3d box (score >= 0.3) projected into each camera (corners' extent, in
  front, at least partly inside) against the det2d boxes: 1 - mean best IoU, over the projected
  boxes and the confident 2D boxes (2D detections with no 3D box behind them count too).
- `depth_vs_3d`: for each det3d box centre inside a camera, |d - z| / z with z the centre's depth
  in that camera and d the depth head's median in a 5x5 window there; mean.
- `speed_excess`: max over det3d boxes (score >= 0.3) of |v| / vmax(class) (vmax: pedestrian
  4 m/s, cyclist 15, static objects 1, vehicles 45); > 1 is physically implausible.
- `accel`: det3d boxes matched to the previous frame's (same class, nearest centre within 3 m in
  world coordinates): max |v_t - v_{t-1}| / dt in m/s^2 (world frame; > 10 is implausible).
- `disagree_det2d`, `disagree_det3d`: with a candidate model: 1 - F1 of the matching between the
  production and candidate confident boxes (2D: IoU >= 0.5 same class; 3D: centre within 2 m
  same class); 0 when both see nothing. `disagree_dense`: mean |p_prod - p_cand| of drivable.
- `num_det2d`, `num_det3d`: confident detections (context for the above).

The embedding (the model's `embedding` output, (N, C) per frame) is stored next to the signals.

Outputs holding NaN or Inf have no signals: a NaN heatmap has no peaks, so its entropy, uncertain
count and margin would read 0.0, "certain". `frame_signals` raises `NonFiniteError` naming the output
(the runtime's `run` refuses them first; shadow mode marks the clip bad).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hydranet.decoding import NonFiniteError, box_iou, first_non_finite, sigmoid
from hydranet.heads import HEADS, PEAK_TOP_K, UNCERTAIN_BAND, signal_columns
from hydranet.heads import entropy  # noqa: F401 (data_engine.signals.entropy: H(p) of the docstring)
from hydranet.geometry import Distortion, boxes_corners
from hydranet.geometry import project as project_camera

# signals across heads (temporal, geometric, model disagreement), computed here, each with the detection heads it is
# built from (where one of them never detects, the signal is stuck: data_engine.triggers.degenerate); every head's own
# columns come from its spec (`HeadSpec.signal_columns` / `signals`, hydranet/heads/<name>.py)
ENGINE_SIGNALS = {"flicker": ("det2d",), "jitter": ("det2d",), "cross_camera": ("det3d", "det2d"),
                  "box2d_vs_3d": ("det3d", "det2d"), "depth_vs_3d": ("det3d",), "speed_excess": ("det3d",),
                  "accel": ("det3d",), "disagree_det2d": ("det2d",), "disagree_det3d": ("det3d",), "disagree_dense": (),
                  "num_det2d": ("det2d",), "num_det3d": ("det3d",)}
SIGNALS = (*signal_columns(), *ENGINE_SIGNALS)  # the catalog's signal columns (data_engine/catalog_schema.py)
# what the miner's uncertainty strategy ranks frames by: each head's `uncertainty_columns` (its spec), then the
# cross-head disagreements (temporal, 2D vs 3D, depth vs 3D, ensemble)
UNCERTAINTY_COLUMNS = (*(c for spec in HEADS.values() for c in spec.uncertainty_columns), "flicker", "jitter",
                       "cross_camera", "box2d_vs_3d", "depth_vs_3d", "disagree_det2d", "disagree_det3d", "disagree_dense")
CONFIDENT = 0.3
BAND = UNCERTAIN_BAND
TOP_K = PEAK_TOP_K
VMAX = {"pedestrian": 4.0, "cyclist": 15.0, "bicycle": 15.0, "traffic_cone": 1.0, "barrier": 1.0, "debris": 1.0}
VMAX_DEFAULT = 45.0


@dataclass
class ModelInfo:
    """What the signals need from a model's metadata."""
    cameras: list[str]
    image_size: tuple[int, int]  # (H, W) model size
    K: np.ndarray  # (N, 3, 3) at the model size
    cam2ego: np.ndarray  # (N, 4, 4)
    heads: dict[str, dict]
    det3d_classes: list[str] = field(default_factory=list)
    lenses: list[Distortion | None] | None = None  # per camera (None: all pinholes)

    @classmethod
    def from_runtime(cls, rt) -> "ModelInfo":
        """Of a `deploy.runtime.HydraRuntime`: its rig (`rt.rig`, deploy.metadata.ModelRig) and heads."""
        rig, heads = rt.rig, dict(rt.heads)
        lenses = list(rig.lenses) if any(lens is not None for lens in rig.lenses) else None
        return cls(list(rig.names), rig.image_size, rig.K, rig.cam2ego, heads,
                   list(heads.get("det3d", {}).get("classes", [])), lenses)

    def lens(self, n: int) -> Distortion | None:
        return None if self.lenses is None else self.lenses[n]


@dataclass
class ClipState:
    """History of one clip for the temporal signals (reset at a clip start or after a corrupt frame)."""
    det2d: list[list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=list)  # last 2 frames: per camera (boxes, labels)
    det3d_world: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (centres (M, 2), vel (M, 2), labels) world
    t_us: int | None = None

    def reset(self) -> None:
        self.det2d, self.det3d_world, self.t_us = [], None, None


# -- building blocks ---------------------------------------------------------------------------------
def match(a: np.ndarray, la: np.ndarray, b: np.ndarray, lb: np.ndarray, thr: float) -> list[tuple[int, int]]:
    """Greedy one-to-one matching of boxes a (M, 4) to b (K, 4), same label, IoU >= thr, best first."""
    if len(a) == 0 or len(b) == 0:
        return []
    iou = box_iou(np.asarray(a, np.float64), np.asarray(b, np.float64))
    iou[np.asarray(la)[:, None] != np.asarray(lb)[None, :]] = 0.0
    pairs = []
    for flat in np.argsort(-iou, axis=None):
        i, j = divmod(int(flat), iou.shape[1])
        if iou[i, j] < thr:
            break
        if all(i != p and j != q for p, q in pairs):
            pairs.append((i, j))
    return pairs


def f1_disagreement(n_a: int, n_b: int, matched: int) -> float:
    return 0.0 if n_a + n_b == 0 else 1.0 - 2.0 * matched / (n_a + n_b)


def project(points_ego: np.ndarray, K: np.ndarray, cam2ego: np.ndarray,
            lens: Distortion | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(..., 3) ego points -> ((..., 2) pixels, (...,) depth along the optical axis); through the
    camera's `lens` where it has one (NaN pixels for rays it cannot see)."""
    ego2cam = np.linalg.inv(cam2ego)
    p = points_ego @ ego2cam[:3, :3].T + ego2cam[:3, 3]
    return project_camera(p, K, lens)  # a point at z = 0 gets an infinite or NaN pixel, never inside an image


# -- the signals of one frame ----------------------------------------------------------------------
def frame_signals(info: ModelInfo, raw: Mapping[str, np.ndarray], decoded: Mapping[str, list], ego2world: np.ndarray | None,
                  t_us: int, state: ClipState, candidate: Mapping[str, Any] | None = None) -> tuple[dict, dict]:
    """(signals {name: float}, per-camera {name: [float per camera]}) of one frame; updates `state`.
    `candidate`: {"raw", "decoded"} of a candidate model on the same frame. NonFiniteError when an
    output the signals read holds NaN or Inf (never signals of 0 for it)."""
    _check_finite(raw, "")
    if candidate is not None:
        _check_finite(candidate["raw"], "candidate ")
    N = len(info.cameras)
    H, W = info.image_size
    sig = {name: float("nan") for name in (*signal_columns(), *ENGINE_SIGNALS)}
    per_cam: dict[str, list[float]] = {}
    for spec in HEADS.values():  # each head's own signals, from its spec (hydranet/heads/<name>.py)
        if not spec.signal_columns:
            continue
        prefix = spec.name + "."
        outputs = {k[len(prefix):]: v for k, v in raw.items() if k.startswith(prefix)}
        if outputs:
            head_sig, head_cam = spec.signals(outputs, decoded.get(spec.name), N)
            sig.update({k: float(v) for k, v in head_sig.items() if k in spec.signal_columns})
            per_cam.update(head_cam)

    dets2d = None
    if "det2d" in decoded:
        dets2d = []
        for r in decoded["det2d"][:N]:
            keep = np.asarray(r["scores"]) >= CONFIDENT
            dets2d.append((np.asarray(r["boxes"], np.float64)[keep], np.asarray(r["labels"])[keep]))
        sig["num_det2d"] = float(sum(len(b) for b, _ in dets2d))
        _temporal_2d(dets2d, state, sig, per_cam)

    dets3d = None
    if "det3d" in decoded:
        r = decoded["det3d"][0]
        keep = np.asarray(r["scores"]) >= CONFIDENT
        dets3d = (np.asarray(r["boxes"], np.float64)[keep], np.asarray(r["labels"])[keep])
        sig["num_det3d"] = float(len(dets3d[0]))
        _motion_3d(info, dets3d, ego2world, t_us, state, sig)
        if dets2d is not None:
            _geometry(info, dets2d, dets3d, decoded, sig, H, W)
    state.t_us = t_us

    if candidate is not None:
        cd = candidate["decoded"]
        if dets2d is not None and "det2d" in cd:
            na = nb = m = 0
            for (b, lab), rc in zip(dets2d, cd["det2d"][:N]):
                keep = np.asarray(rc["scores"]) >= CONFIDENT
                cb, cl = np.asarray(rc["boxes"], np.float64)[keep], np.asarray(rc["labels"])[keep]
                na, nb, m = na + len(b), nb + len(cb), m + len(match(b, lab, cb, cl, 0.5))
            sig["disagree_det2d"] = f1_disagreement(na, nb, m)
        if dets3d is not None and "det3d" in cd:
            rc = cd["det3d"][0]
            keep = np.asarray(rc["scores"]) >= CONFIDENT
            cb, cl = np.asarray(rc["boxes"], np.float64)[keep], np.asarray(rc["labels"])[keep]
            sig["disagree_det3d"] = f1_disagreement(len(dets3d[0]), len(cb), len(_match_centres(dets3d[0][:, :2], dets3d[1],
                                                                                                cb[:, :2], cl, 2.0)))
        if "drivable.logits" in raw and "drivable.logits" in candidate["raw"]:
            sig["disagree_dense"] = float(np.abs(sigmoid(raw["drivable.logits"]) - sigmoid(candidate["raw"]["drivable.logits"])).mean())
    return sig, per_cam


def read_outputs() -> tuple[str, ...]:
    """The raw outputs the signals read: every registered head's `signal_outputs`."""
    return tuple(f"{s.name}.{o}" for s in HEADS.values() for o in s.signal_outputs)


def _check_finite(raw: Mapping[str, np.ndarray], role: str) -> None:
    bad = first_non_finite({k: raw[k] for k in read_outputs() if k in raw})
    if bad is not None:
        name, what, item = bad
        raise NonFiniteError(f"{role}output {name} holds {what} (item {item}): no signals for it (they would read 0); "
                             "the model is broken: export it again from a good checkpoint")


def _temporal_2d(dets: list[tuple[np.ndarray, np.ndarray]], state: ClipState, sig: dict, per_cam: dict) -> None:
    hist = state.det2d  # [t-2, t-1] (fewer at a clip start)
    flick = []
    jit: list[float] = []
    for n, (b, lab) in enumerate(dets):
        if len(hist) < 2:
            flick.append(float("nan"))
            continue
        (b2, l2), (b1, l1) = hist[0][n], hist[1][n]
        m21 = dict(match(b1, l1, b2, l2, 0.3))  # t-1 -> t-2
        m10 = dict(match(b1, l1, b, lab, 0.3))  # t-1 -> t
        m20 = {j: i for i, j in match(b, lab, b2, l2, 0.3)}  # t-2 -> t
        blinks = sum(1 for i in range(len(b1)) if i not in m21 and i not in m10)
        linked_to_1 = set(m10.values())
        gaps = sum(1 for i in m20.values() if i not in linked_to_1)
        flick.append(float(blinks + gaps))
        for i1, i0 in m10.items():
            if i1 in m21:
                a, b_, c = b2[m21[i1]], b1[i1], b[i0]
                size = np.sqrt(max((b_[2] - b_[0]) * (b_[3] - b_[1]), 1.0))
                jit.append(float(np.abs(c - 2 * b_ + a).mean() / size))
    if flick and not np.isnan(flick).all():
        sig["flicker"] = float(np.nansum(flick))
        per_cam["flicker"] = flick
    if jit:
        sig["jitter"] = float(np.mean(jit))
    elif len(hist) >= 2:
        sig["jitter"] = 0.0
    state.det2d = (hist + [dets])[-2:]


def _match_centres(a: np.ndarray, la: np.ndarray, b: np.ndarray, lb: np.ndarray, radius: float) -> list[tuple[int, int]]:
    if len(a) == 0 or len(b) == 0:
        return []
    d = np.linalg.norm(a[:, None, :2] - b[None, :, :2], axis=-1)
    d[np.asarray(la)[:, None] != np.asarray(lb)[None, :]] = np.inf
    pairs = []
    for flat in np.argsort(d, axis=None):
        i, j = divmod(int(flat), d.shape[1])
        if d[i, j] > radius:
            break
        if all(i != p and j != q for p, q in pairs):
            pairs.append((i, j))
    return pairs


def _motion_3d(info: ModelInfo, dets3d, ego2world, t_us: int, state: ClipState, sig: dict) -> None:
    boxes, labels = dets3d
    if len(boxes):
        vmax = np.array([VMAX.get(info.det3d_classes[int(c)] if int(c) < len(info.det3d_classes) else "", VMAX_DEFAULT)
                         for c in labels])
        sig["speed_excess"] = float((np.linalg.norm(boxes[:, 7:9], axis=1) / vmax).max())
    else:
        sig["speed_excess"] = 0.0
    if ego2world is None:
        state.det3d_world = None
        return
    E = np.asarray(ego2world, np.float64)
    centres = boxes[:, :2] @ E[:2, :2].T + E[:2, 3] if len(boxes) else np.zeros((0, 2))
    vel = boxes[:, 7:9] @ E[:2, :2].T if len(boxes) else np.zeros((0, 2))
    prev = state.det3d_world
    if prev is not None and state.t_us is not None and t_us > state.t_us:
        dt = (t_us - state.t_us) * 1e-6
        pairs = _match_centres(prev[0], prev[2], centres, labels, 3.0)
        sig["accel"] = max((float(np.linalg.norm(vel[j] - prev[1][i]) / dt) for i, j in pairs), default=0.0)
    state.det3d_world = (centres, vel, labels)


def _geometry(info: ModelInfo, dets2d, dets3d, decoded, sig: dict, H: int, W: int) -> None:
    boxes3d = dets3d[0]
    if len(boxes3d) == 0:
        confident = sum(len(b) for b, _ in dets2d)
        sig["box2d_vs_3d"] = 1.0 if confident else 0.0
        return
    corners = boxes_corners(boxes3d)  # (M, 8, 3)
    ious, depth_err = [], []
    inside = np.zeros((len(boxes3d), len(info.cameras)), bool)
    centre_px = np.zeros((len(boxes3d), len(info.cameras), 2))
    depth_maps = decoded.get("depth")
    for n in range(len(info.cameras)):
        K, T = info.K[n], info.cam2ego[n]
        uv, z = project(corners, K, T, info.lens(n))  # (M, 8, 2), (M, 8)
        cuv, cz = project(boxes3d[:, :3], K, T, info.lens(n))
        centre_px[:, n] = cuv
        inside[:, n] = (cz > 0.5) & (cuv[:, 0] >= 0) & (cuv[:, 0] < W) & (cuv[:, 1] >= 0) & (cuv[:, 1] < H)
        b2, _ = dets2d[n]
        used2d = np.zeros(len(b2), bool)
        for m in range(len(boxes3d)):
            if (z[m] <= 0.1).any() or not np.isfinite(uv[m]).all():
                continue
            x0, y0 = np.clip(uv[m].min(0), 0, [W, H])
            x1, y1 = np.clip(uv[m].max(0), 0, [W, H])
            if (x1 - x0) * (y1 - y0) < 4.0:
                continue
            if len(b2):
                iou = box_iou(np.array([[x0, y0, x1, y1]]), b2)[0]
                ious.append(float(iou.max()))
                used2d[iou > 0.1] = True
            else:
                ious.append(0.0)
        ious.extend([0.0] * int((~used2d).sum()))
        if depth_maps is not None:
            d = np.asarray(depth_maps[n]["depth"], np.float64)
            dh, dw = d.shape
            for m in np.flatnonzero(inside[:, n]):
                u, v = centre_px[m, n] * [dw / W, dh / H]
                win = d[max(int(v) - 2, 0):int(v) + 3, max(int(u) - 2, 0):int(u) + 3]
                if win.size:
                    zc = project(boxes3d[m:m + 1, :3], K, T)[1][0]
                    depth_err.append(abs(float(np.median(win)) - zc) / zc)
    if ious:
        sig["box2d_vs_3d"] = 1.0 - float(np.mean(ious))
    if depth_err:
        sig["depth_vs_3d"] = float(np.mean(depth_err))
    pairs = dis = 0
    for m in range(len(boxes3d)):
        cams = np.flatnonzero(inside[m])
        for a_i in range(len(cams)):
            for b_i in range(a_i + 1, len(cams)):
                seen = []
                for n in (cams[a_i], cams[b_i]):
                    b2 = dets2d[n][0]
                    u, v = centre_px[m, n]
                    seen.append(bool(len(b2) and ((b2[:, 0] <= u) & (u <= b2[:, 2]) & (b2[:, 1] <= v) & (v <= b2[:, 3])).any()))
                pairs += 1
                dis += int(seen[0] != seen[1])
    if pairs:
        sig["cross_camera"] = dis / pairs
