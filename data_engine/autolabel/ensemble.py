"""The ensemble: exported models (ONNX, the torch-free `deploy.runtime.HydraRuntime`) run over every frame of a
clip, each also on the horizontally flipped images (test-time augmentation of the camera heads).

`load_ensemble` checks the members against the fleet before anything runs, as shadow mode does (`Fleet.check_rig`):
each model's cameras must be the fleet's, and a BEV model's calibration the fleet's once scaled to its input size; a
camera-only model takes any image size (resized to its input, its boxes scaled back to the camera's pixels: a
1280x720 dashcam through a 160x96 model). The members must share their cameras and their classes. Heads that not every member has are
dropped from the fusion (a warning naming them); `run_clip` returns per frame what the fusion needs.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.autolabel.dense import DENSE_HEADS, flip_back, head_maps
from hydranet.geometry import mirror_boxes

BOX_HEADS = ("det2d", "det3d")  # the box heads labelled (signs_lights' sign classes are not: docs/autolabel.md)


class AutolabelError(ValueError):
    """Models, a selection or a fleet the auto-labeller cannot use; one line naming the file and the fix."""


@dataclass
class Member:
    path: Path
    rt: Any  # deploy.runtime.HydraRuntime
    sha256: str
    heads: tuple[str, ...]


@dataclass
class Ensemble:
    members: list[Member]
    heads: tuple[str, ...]  # the heads every member has (fused)
    dropped: dict[str, list[str]] = field(default_factory=dict)  # model path -> its heads left out
    cameras: tuple[str, ...] = ()
    classes: dict[str, list[str]] = field(default_factory=dict)  # box head -> class names

    @property
    def posed_heads(self) -> bool:
        return "det3d" in self.heads

    def params(self, cfg):
        """The `autolabel:` parameters this ensemble labels with: `noise_mps` 0 unless every member has a video
        queue (a single-frame model's velocities are guesses, not measurements for the smoother)."""
        import dataclasses

        video = all(m.rt.state_spec for m in self.members)
        return cfg if video or not cfg.noise_mps else dataclasses.replace(cfg, noise_mps=0.0)


def _classes(md: Mapping[str, Any], head: str) -> list[str]:
    return list((md["heads"][head].get("classes") or md.get("classes") or []))


def load_ensemble(models: Sequence[str | Path], fleet) -> tuple[Ensemble, list[str]]:
    """(the checked ensemble, warnings) for `models` over `fleet` (a data_engine.fleet.Fleet)."""
    from data_engine.fleet import FleetError
    from data_engine.shadow import runtime_for_fleet
    from deploy.runtime import DeployError, HydraRuntime
    from hydranet.io import file_sha256

    if not models:
        raise AutolabelError("--models is empty; give one or more ONNX files written by `hydranet export`")
    members: list[Member] = []
    notes: list[str] = []
    for m in models:
        path = Path(m)
        try:  # a fleet with some of a model's cameras: its camera heads there (its BEV heads not run, said so)
            rt, _ = runtime_for_fleet(path, fleet, load=lambda p, t, c: HydraRuntime(p, threads=t, cameras=c))
        except DeployError as e:
            raise AutolabelError(str(e)) from None
        except FleetError as e:
            raise AutolabelError(str(e)) from None  # names the model and the fleet
        if rt.subset_line():
            notes.append(rt.subset_line())
        if members and rt.camera_names != members[0].rt.camera_names:
            raise AutolabelError(f"model {path} sees cameras {rt.camera_names}, model {members[0].path} sees "
                                 f"{members[0].rt.camera_names}: an ensemble needs models of one rig")
        members.append(Member(path, rt, file_sha256(path), tuple(rt.heads)))
    shas = [mb.sha256 for mb in members]
    if len(set(shas)) < len(shas):
        twice = next(mb.path for mb in members if shas.count(mb.sha256) > 1)
        raise AutolabelError(f"model {twice} is given twice (the same SHA-256); an ensemble needs different models")
    shared = tuple(h for h in members[0].heads if all(h in mb.heads for mb in members))
    dropped = {str(mb.path): [h for h in mb.heads if h not in shared] for mb in members}
    dropped = {k: v for k, v in dropped.items() if v}
    warnings = notes + (["heads not shared by every model are dropped from the fusion: "
                         + "; ".join(f"{k}: {', '.join(v)}" for k, v in dropped.items())] if dropped else [])
    classes = {}
    for h in (h for h in BOX_HEADS if h in shared):
        classes[h] = _classes(members[0].rt.meta, h)
        for mb in members[1:]:
            if _classes(mb.rt.meta, h) != classes[h]:
                raise AutolabelError(f"model {mb.path}'s {h} classes {_classes(mb.rt.meta, h)} differ from model "
                                     f"{members[0].path}'s {classes[h]}: an ensemble needs one class list")
    if not any(h in shared for h in (*BOX_HEADS, *DENSE_HEADS)):
        raise AutolabelError(f"the models share no head the auto-labeller labels ({', '.join((*BOX_HEADS, *DENSE_HEADS))});"
                             f" shared: {', '.join(shared) or 'none'}")
    return Ensemble(members, shared, dropped, tuple(members[0].rt.camera_names), classes), warnings


def _forward(rt, images: list[np.ndarray], pose: np.ndarray | None, video: bool) -> tuple[dict, dict]:
    """One frame through one runtime: (raw outputs, decoded results), the BEV queue carried when `video`."""
    x = rt.preprocess(images)  # (1, N, 3, H, W)
    prev, motion = rt.video.inputs(pose) if (rt.state_spec and video) else (None, None)
    raw = rt.run(rt.feeds(x, prev, motion))
    if rt.state_spec and video:
        rt.video.update(rt.state_output(raw), pose)
    return raw, rt.decode(raw, checked=True)


def _boxes_2d(decoded: Mapping[str, list], n: int, scale: tuple[float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Camera n's det2d boxes scaled to the camera's pixels: (boxes (K, 4), scores (K,), labels (K,))."""
    r = decoded["det2d"][n]
    sx, sy = scale
    return np.asarray(r["boxes"], np.float64) * [sx, sy, sx, sy], np.asarray(r["scores"], np.float64), np.asarray(r["labels"])


def run_member(member: Member, ens: Ensemble, frames: Sequence[dict], sizes: Mapping[str, tuple[int, int]], tta: bool,
               posed: bool) -> list[dict]:
    """One model over a clip's frames (each {"images": N x (H, W, 3), "ego2world" (4, 4) or None}) in order -> per
    frame {"det2d": [views per camera: [(boxes, scores, labels)]], "det3d": (boxes (K, 9), scores, labels), "dense":
    [maps of each view]}. NonFiniteOutput (a broken model) is an AutolabelError naming the model."""
    from deploy.runtime import DeployError

    rt, out = member.rt, []
    H, W = rt.image_size
    rt.reset()
    dense = [h for h in ens.heads if h in DENSE_HEADS]
    for f in frames:
        if f["images"] is None:  # an unreadable frame: no detections, and the queue starts again after it
            out.append(None)
            rt.reset()
            continue
        try:
            if not posed:
                rt.reset()  # no poses: every frame from an empty queue (as shadow mode)
            raw, dec = _forward(rt, f["images"], f["ego2world"], posed)
            views = [(raw, dec, False)]
            if tta:
                flipped = [np.ascontiguousarray(im[:, ::-1]) for im in f["images"]]
                fraw = rt.run(rt.feeds(rt.preprocess(flipped)))  # camera heads only: no queue, BEV outputs unused
                views.append((fraw, rt.decode(fraw, checked=True), True))
        except DeployError as e:
            raise AutolabelError(f"{e} (model {member.path})" if str(member.path) not in str(e) else str(e)) from None
        item: dict[str, Any] = {"det2d": [[] for _ in ens.cameras], "dense": []}
        for vraw, vdec, flip in views:
            if "det2d" in ens.heads:
                for n, cam in enumerate(ens.cameras):
                    h, w = sizes[cam]
                    b, s, lab = _boxes_2d(vdec, n, (w / W, h / H))
                    item["det2d"][n].append((mirror_boxes(b, w) if flip else b, s, lab))
            maps = head_maps(vraw, vdec, dense)
            item["dense"].append(flip_back(maps) if flip else maps)
        if "det3d" in ens.heads:
            r = dec["det3d"][0]
            item["det3d"] = (np.asarray(r["boxes"], np.float64), np.asarray(r["scores"], np.float64), np.asarray(r["labels"]))
        out.append(item)
    return out
