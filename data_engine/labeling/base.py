"""The labelling backends' one small interface and the label vocabulary they share.

A backend takes label jobs and gives labels back:

    backend.send(jobs)  -> {job id: external id}   # idempotent: sending a job twice creates nothing twice
    backend.fetch(jobs) -> iterable of FetchedLabel | Held  # finished labels of the sent jobs, in any order; Held: a
                                                             # job with no label yet and why (quarantined, partly done)

`data_engine.label_queue` owns the jobs' states, `data_engine.labels` the versioned label store and
`data_engine.label_exchange` the calls into a backend; a backend never writes the catalog. A label's payload
is the frame's labels in the dataset format (docs/dataset_format.md, labels.json): {"cameras": {CAM: {"boxes2d":
[{"bbox": [x0, y0, x1, y1], "class", "attributes"}], "lanes2d": [...]}}, ...}; human backends fill the 2D part, the
oracle the whole labels.json.

Label names (what a person picks in a tool) are the dataset's object classes, except signs and lights,
which are picked by what they show, as the signs_lights head predicts them: "sign:stop", "light:red",
and "sign:back" / "light:back" for a sign or light seen from behind.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hydranet.io import frame_path

SIGN, LIGHT, BACK = "traffic_sign", "traffic_light", "back"


class LabelingError(ValueError):
    """A label file, server answer or job that cannot be used; one line naming it and what to do."""


@dataclass(frozen=True)
class Job:
    """One frame to label. `root` is the fleet folder; the frame's files are root/scenes/clip/dir/."""
    id: int
    selection: str
    frame_id: int
    clip: str
    frame: int
    dir: str
    root: str
    cameras: tuple[str, ...]
    sizes: tuple[tuple[int, int], ...]  # (H, W) per camera
    state: str = "queued"
    backend: str = ""
    model_id: int | None = None
    external_id: str | None = None
    predictions: Mapping[str, Any] = field(default_factory=dict)  # {camera: [{"bbox", "label", "score"}]} pre-annotations
    model_version: str = ""

    @property
    def folder(self) -> Path:
        return frame_path(self.root, self.clip, self.dir, where=f"label job {self.id}", error=LabelingError)

    def image(self, camera: str) -> tuple[bytes, str]:
        """(bytes, suffix) of the camera image as a labelling tool gets it (data_engine.fleet.frame_image: the file of
        a sim fleet or image sequence, a PNG of a video or dataset frame); LabelingError naming the job."""
        from data_engine.fleet import frame_image

        frame_path(self.root, self.clip, self.dir, where=f"label job {self.id}", error=LabelingError)
        try:
            return frame_image(self.root, self.clip, self.dir, camera)
        except ValueError as e:
            raise LabelingError(f"label job {self.id}: {e}") from None

    def image_name(self, camera: str) -> str:
        """The image's name in exported files and tools: clip/frame dir/camera.jpg|png (unique in a fleet)."""
        from data_engine.fleet import image_suffix

        return f"{self.clip}/{self.dir}/{camera}{image_suffix(self.root, self.clip, self.dir, camera)}"


@dataclass(frozen=True)
class FetchedLabel:
    job_id: int
    payload: Mapping[str, Any]
    source: str  # oracle | label_studio | file
    labeller: str


@dataclass(frozen=True)
class Held:
    """A job the backend cannot hand a label for, and why: `quarantine` for a task it cannot read (a box outside
    the image: the job waits until the task is fixed, the rest of the import goes on), else a partly done frame
    ("3 of 6 cameras done", "camera CAM_BACK skipped")."""
    job_id: int
    reason: str
    quarantine: bool = False


class Backend(Protocol):
    name: str

    def send(self, jobs: Sequence[Job]) -> dict[int, str]: ...

    def fetch(self, jobs: Sequence[Job]) -> Iterable[FetchedLabel]: ...


# -- label names ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Vocabulary:
    """What a labeller can pick: object classes (signs and lights by what they show) and lane types."""
    classes: tuple[str, ...]
    sign_classes: tuple[str, ...]
    light_states: tuple[str, ...]
    lane_types: tuple[str, ...] = ()

    @classmethod
    def from_dataset(cls, root: str | Path) -> "Vocabulary":
        path = Path(root) / "dataset.json"
        if not path.is_file() and (Path(root) / "fleet.json").is_file():  # a recorded fleet (engine ingest)
            path = Path(root) / "fleet.json"
        try:
            meta = json.loads(path.read_text())
            return cls(tuple(meta["classes"]), tuple(meta.get("sign_classes", ())), tuple(meta.get("light_states", ())),
                       tuple(meta.get("lane_types", ())))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise LabelingError(f"{path}: cannot read the label classes ({type(e).__name__}: {e}); "
                                "give a fleet or dataset folder") from None

    @property
    def names(self) -> list[str]:
        out = [c for c in self.classes if c not in (SIGN, LIGHT)]
        if SIGN in self.classes:
            out += [f"sign:{s}" for s in self.sign_classes] + [f"sign:{BACK}"]
        if LIGHT in self.classes:
            out += [f"light:{s}" for s in self.light_states] + [f"light:{BACK}"]
        return out

    def name_of(self, box: Mapping[str, Any]) -> str:
        """The label name of a labels.json box."""
        cls, att = box["class"], box.get("attributes") or {}
        if cls == SIGN:
            return f"sign:{BACK}" if att.get("view") == BACK or "sign_class" not in att else f"sign:{att['sign_class']}"
        if cls == LIGHT:
            return f"light:{BACK}" if att.get("view") == BACK or "light_state" not in att else f"light:{att['light_state']}"
        return cls

    def box_of(self, name: str, bbox: Sequence[float], where: str) -> dict[str, Any]:
        """A labels.json box from a label name; LabelingError naming `where` for an unknown name."""
        if name not in self.names:
            raise LabelingError(f"{where}: unknown label {name!r}; the project's labels are {self.names}")
        if name.startswith(("sign:", "light:")):
            kind, what = name.split(":", 1)
            cls = SIGN if kind == "sign" else LIGHT
            att = {"view": BACK} if what == BACK else {"view": "front", ("sign_class" if kind == "sign" else "light_state"): what}
            return {"bbox": [float(v) for v in bbox], "class": cls, "attributes": att}
        return {"bbox": [float(v) for v in bbox], "class": name, "attributes": {}}


# -- payload helpers -------------------------------------------------------------------------------
def check_bbox(bbox: Sequence[Any], size: tuple[int, int], where: str) -> list[float]:
    """[x0, y0, x1, y1] as floats, finite, x0 < x1, y0 < y1, inside the (H, W) image with 0.5 px slack."""
    try:
        b = [float(v) for v in bbox]
    except (TypeError, ValueError):
        raise LabelingError(f"{where}: box {bbox!r} is not four numbers") from None
    H, W = size
    if len(b) != 4 or not all(math.isfinite(v) for v in b):
        raise LabelingError(f"{where}: box {bbox!r} is not four finite numbers")
    if not (b[0] < b[2] and b[1] < b[3]):
        raise LabelingError(f"{where}: box {[round(v, 2) for v in b]} has no area (need x0 < x1 and y0 < y1)")
    if b[0] < -0.5 or b[1] < -0.5 or b[2] > W + 0.5 or b[3] > H + 0.5:
        raise LabelingError(f"{where}: box {[round(v, 2) for v in b]} lies outside the {W}x{H} image")
    return b


def canonical(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The payload with boxes rounded to 1/1000 px and sorted per camera (a stable digest: the same
    labels read back from a tool give the same version)."""
    out = json.loads(json.dumps(payload))
    for cam in (out.get("cameras") or {}).values():
        boxes = cam.get("boxes2d") or []
        for b in boxes:
            b["bbox"] = [round(float(v), 3) for v in b["bbox"]]
        cam["boxes2d"] = sorted(boxes, key=lambda b: (b["class"], b["bbox"], json.dumps(b.get("attributes") or {}, sort_keys=True)))
        for ln in cam.get("lanes2d") or []:
            ln["points"] = [[round(float(v), 3) for v in p] for p in ln["points"]]
    return out


def digest(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(canonical(payload), sort_keys=True).encode()).hexdigest()


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def compare(a: Mapping[str, Any], b: Mapping[str, Any], vocab_name=None, tol_px: float = 0.5) -> dict[str, Any]:
    """How two payloads' 2D boxes differ: per camera greedy IoU matching; {"agree": bool, "boxes": (na, nb),
    "unmatched": n, "class_changes": n, "max_px": largest corner deviation of a matched pair, "changes": [{"camera",
    "box" (a's box, or b's for one only in b), "what": "class", "corners" or "missing", "a", "b"}] box by box}."""
    name = vocab_name or (lambda box: (box["class"], json.dumps(box.get("attributes") or {}, sort_keys=True)))
    ca, cb = a.get("cameras") or {}, b.get("cameras") or {}
    na = nb = unmatched = changes = 0
    max_px = 0.0
    detail: list[dict[str, Any]] = []
    for cam in sorted(set(ca) | set(cb)):
        ba = list((ca.get(cam) or {}).get("boxes2d") or [])
        bb = list((cb.get(cam) or {}).get("boxes2d") or [])
        na, nb = na + len(ba), nb + len(bb)
        pairs = sorted(((iou(x["bbox"], y["bbox"]), i, j) for i, x in enumerate(ba) for j, y in enumerate(bb)), reverse=True)
        used_a, used_b = set(), set()
        for v, i, j in pairs:
            if v <= 0.3 or i in used_a or j in used_b:
                continue
            used_a.add(i)
            used_b.add(j)
            changes += name(ba[i]) != name(bb[j])
            px = max(abs(p - q) for p, q in zip(ba[i]["bbox"], bb[j]["bbox"]))
            max_px = max(max_px, px)
            if name(ba[i]) != name(bb[j]):
                detail.append({"camera": cam, "box": _r(ba[i]["bbox"]), "what": "class", "a": _label(ba[i]), "b": _label(bb[j])})
            if px > tol_px:
                detail.append({"camera": cam, "box": _r(ba[i]["bbox"]), "what": "corners", "a": _r(ba[i]["bbox"]),
                               "b": _r(bb[j]["bbox"]), "px": round(px, 3)})
        detail += [{"camera": cam, "box": _r(ba[i]["bbox"]), "what": "missing", "a": _label(ba[i]), "b": None}
                   for i in range(len(ba)) if i not in used_a]
        detail += [{"camera": cam, "box": _r(bb[j]["bbox"]), "what": "missing", "a": None, "b": _label(bb[j])}
                   for j in range(len(bb)) if j not in used_b]
        unmatched += (len(ba) - len(used_a)) + (len(bb) - len(used_b))
    return {"agree": unmatched == 0 and changes == 0 and max_px <= tol_px, "boxes": (na, nb), "unmatched": unmatched,
            "class_changes": changes, "max_px": round(max_px, 3), "changes": detail}


def _r(bbox: Sequence[float]) -> list[float]:
    return [round(float(v), 1) for v in bbox]


def _label(box: Mapping[str, Any]) -> str:
    att = box.get("attributes") or {}
    extra = att.get("sign_class") or att.get("light_state") or ("back" if att.get("view") == BACK else None)
    return f"{box['class']}:{extra}" if extra else str(box["class"])


def describe_changes(c: Mapping[str, Any], a: str = "the first", b: str = "the second", limit: int = 4) -> str:
    """The changes of `compare` box by box, e.g. "CAM_FRONT box [10.0, 12.0, 40.0, 30.0]: class car -> truck;
    CAM_BACK box [...]: missing in v2 (pedestrian)"; the first `limit`, then how many more."""
    out = []
    for d in c.get("changes") or []:
        head = f"{d['camera']} box {d['box']}"
        if d["what"] == "class":
            out.append(f"{head}: class {d['a']} -> {d['b']}")
        elif d["what"] == "corners":
            out.append(f"{head}: corners moved {d['px']} px to {d['b']}")
        else:
            out.append(f"{head}: missing in {b if d['b'] is None else a} ({d['a'] or d['b']})")
    more = f"; and {len(out) - limit} more" if len(out) > limit else ""
    return "; ".join(out[:limit]) + more if out else "no box-level change"


def edit_record(prefill: Mapping[str, Any], label: Mapping[str, Any], tol_px: float = 0.5) -> dict[str, Any]:
    """What a person changed against the auto-labels they were shown (docs/autolabel.md): `compare(prefill, label)`, boxes
    named by class and sign class / light state / back (a pre-fill's own attributes, e.g. `filled`, are not the
    person's), counted per frame: boxes "added" (only in the label), "deleted" (only in the pre-fill), "moved" (a
    matched pair's corners more than `tol_px` apart), "class_changed"; lanes "lanes_added" / "lanes_deleted" per camera
    (a lane is kept when its type and points to 0.1 px are unchanged: a reshaped lane is one deleted and one added);
    "boxes" (pre-fill, label) and "changes" box by box as `compare` gives them (`describe_changes` words them)."""
    c = compare(prefill, label, _label, tol_px)
    what = [(d["what"], d["a"] is None) for d in c["changes"]]

    def lanes(p: Mapping[str, Any]) -> Counter:
        return Counter((cam, ln.get("type"), json.dumps([[round(float(u), 1), round(float(v), 1)] for u, v in ln["points"]]))
                       for cam, cc in (p.get("cameras") or {}).items() for ln in (cc or {}).get("lanes2d") or [])

    la, lb = lanes(prefill), lanes(label)
    return {"boxes": list(c["boxes"]), "added": what.count(("missing", True)), "deleted": what.count(("missing", False)),
            "moved": sum(w == "corners" for w, _ in what), "class_changed": c["class_changes"],
            "lanes_added": sum((lb - la).values()), "lanes_deleted": sum((la - lb).values()), "changes": c["changes"]}


def as_shown(auto: Mapping[str, Any]) -> dict[str, Any]:
    """An auto version as a labelling tool pre-fills it: its 2D boxes less signs and lights (the auto-labeller gives them
    no sign class or light state, so they have no label name in any tool: `with_predictions` offers them by class, the
    tools skip them), and no lanes (`with_predictions` pre-fills boxes only). The person's edits are counted against
    this: what they could not see, they did not delete."""
    return {"cameras": {cam: {"boxes2d": [b for b in (c or {}).get("boxes2d") or [] if b["class"] not in (SIGN, LIGHT)]}
                        for cam, c in (auto.get("cameras") or {}).items()}}


EDIT_COUNTS = ("added", "deleted", "moved", "class_changed", "lanes_added", "lanes_deleted")


def edit_totals(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """{"frames", "unchanged" (frames without an edit), *EDIT_COUNTS summed} over edit records."""
    tot = {k: sum(int(r[k]) for r in records) for k in EDIT_COUNTS}
    return {"frames": len(records), "unchanged": sum(not any(r[k] for k in EDIT_COUNTS) for r in records), **tot}


def describe_edits(counts: Mapping[str, Any]) -> str:
    """"2 added, 1 deleted, 3 moved, 1 class changed" (lanes only when there are any); "no edit" for none."""
    words = {"added": "added", "deleted": "deleted", "moved": "moved", "class_changed": "class changed",
             "lanes_added": "lanes added", "lanes_deleted": "lanes deleted"}
    shown = [f"{counts[k]} {w}" for k, w in words.items() if not k.startswith("lanes") or counts[k]]
    return ", ".join(shown) if any(counts[k] for k in EDIT_COUNTS) else "no edit"


def two_d(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The 2D part a person labels: per camera boxes2d (bbox, class, attributes) and lanes2d (points, type)."""
    cams = {}
    for cam, c in (payload.get("cameras") or {}).items():
        cams[cam] = {"boxes2d": [{"bbox": [float(v) for v in b["bbox"]], "class": b["class"],
                                  "attributes": {k: v for k, v in (b.get("attributes") or {}).items()
                                                 if k in ("sign_class", "light_state", "view")}}
                                 for b in c.get("boxes2d") or []],
                     "lanes2d": [{"points": [[float(u), float(v)] for u, v in ln["points"]], "type": ln.get("type")}
                                 for ln in c.get("lanes2d") or []]}
    return {"cameras": cams}
