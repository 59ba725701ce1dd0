"""Label Studio's side of a label job, without the server: the labelling config, the tasks sent, and the
annotations read back as labels (data_engine/labeling/label_studio.py talks to the server; docs/labeling.md).

Two kinds of task (TASK_KINDS):

- "frame" (the default): one task per frame holding every camera of it. The config has one <Image> per
  camera (name "image_<camera>", value "$image_<camera>") with its own <RectangleLabels> ("label_<camera>",
  toName the camera's image); the task's data holds one image URL per camera ("image_<camera>") and the
  camera list ("cameras"); the images are uploaded to an image-store project (image_store_config). A
  labeller sees the cameras of one moment together, and a submitted annotation is
  the whole frame (a camera with no box has no object); its results are split into cameras by to_name.
- "camera": one task per camera image (config: one <Image name="image"> with <RectangleLabels name="label">;
  data: "image", "camera"), as projects made before the frame kind.

Camera names become Label Studio names with every character outside [A-Za-z0-9_] replaced by "_" (two
cameras that then collide are refused). Boxes travel in Label Studio's percent of the image; each result
carries the image size, checked against the camera's.
"""
from __future__ import annotations

import re
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import quoteattr

from data_engine.labeling.base import FetchedLabel, Held, Job, LabelingError, Vocabulary, check_bbox

FROM, TO = "label", "image"  # the per-camera task's control and image names
TASK_KINDS = ("frame", "camera")


def check_kind(kind: str) -> str:
    if kind not in TASK_KINDS:
        raise LabelingError(f"unknown Label Studio task kind {kind!r}; choose one of {list(TASK_KINDS)} (--ls-task)")
    return kind


def camera_names(cameras: Sequence[str]) -> dict[str, tuple[str, str]]:
    """{camera: (from_name, to_name)} of a frame task: ("label_<key>", "image_<key>"); the image URL's data key is
    the to_name. LabelingError when two cameras give the same key."""
    out: dict[str, tuple[str, str]] = {}
    seen: dict[str, str] = {}
    for cam in cameras:
        key = re.sub(r"[^A-Za-z0-9_]", "_", str(cam))
        if key in seen:
            raise LabelingError(f"cameras {seen[key]!r} and {cam!r} both become {key!r} in a Label Studio config; "
                                "send per-camera tasks (--ls-task camera)")
        seen[key] = cam
        out[cam] = (f"label_{key}", f"image_{key}")
    return out


def label_config(vocab: Vocabulary, cameras: Sequence[str] | None = None) -> str:
    """The labelling config: for a frame task (`cameras` given) one Image with its own RectangleLabels per camera,
    in a wrapping row; for a per-camera task (None) the camera image with one RectangleLabels."""
    labels = "\n".join(f"      <Label value={quoteattr(n)}/>" for n in vocab.names)
    if cameras is None:
        return ("<View>\n  <Header value=\"$frame $camera\"/>\n"
                f"  <Image name=\"{TO}\" value=\"$image\" zoom=\"true\"/>\n"
                f"  <RectangleLabels name=\"{FROM}\" toName=\"{TO}\" showInline=\"true\">\n{labels}\n  </RectangleLabels>\n</View>\n")
    views = []
    for cam, (frm, to) in camera_names(cameras).items():
        views.append(f"    <View style=\"flex: 1 1 30%; min-width: 320px\">\n      <Header value={quoteattr(cam)}/>\n"
                     f"      <Image name=\"{to}\" value=\"${to}\" zoom=\"true\"/>\n"
                     f"      <RectangleLabels name=\"{frm}\" toName=\"{to}\" showInline=\"true\">\n{labels}\n"
                     "      </RectangleLabels>\n    </View>")
    return ("<View>\n  <Header value=\"$frame\"/>\n  <View style=\"display: flex; flex-wrap: wrap; gap: 8px\">\n"
            + "\n".join(views) + "\n  </View>\n</View>\n")


def image_store_config(title: str) -> str:
    """The config of a frame project's image store ("<title> (images)"): Label Studio uploads a file only into a project
    whose config has one data key, so a frame project's camera images live there (no task is made in it)."""
    return (f"<View>\n  <Header value={quoteattr(f'images of the project {title!r}: label there, not here')}/>\n"
            f"  <Image name=\"{TO}\" value=\"$image\"/>\n</View>\n")


def config_kind(config: str, where: str) -> tuple[str, tuple[str, ...]]:
    """("camera", ()) or ("frame", its image names) of a project's labelling config; LabelingError for a config this
    project did not make."""
    try:
        images = [e.get("name") or "" for e in ET.fromstring(config).iter("Image")]
    except ET.ParseError as e:
        raise LabelingError(f"{where}: its labelling config is not XML ({e})") from None
    if images == [TO]:
        return "camera", ()
    if images and all(n.startswith(TO + "_") for n in images):
        return "frame", tuple(images)
    raise LabelingError(f"{where}: its labelling config (images {images}) was not made by hydranet; give --ls-project "
                        "another title")


def box_result(name: str, bbox: Sequence[float], size: tuple[int, int], score: float | None = None,
               from_name: str = FROM, to_name: str = TO) -> dict[str, Any]:
    """A RectangleLabels result (percent of the image) from a pixel box [x0, y0, x1, y1]."""
    H, W = size
    x0, y0, x1, y1 = (float(v) for v in bbox)
    r: dict[str, Any] = {"id": uuid.uuid4().hex[:10], "from_name": from_name, "to_name": to_name, "type": "rectanglelabels",
                         "original_width": W, "original_height": H, "image_rotation": 0,
                         "value": {"x": 100 * x0 / W, "y": 100 * y0 / H, "width": 100 * (x1 - x0) / W, "height": 100 * (y1 - y0) / H,
                                   "rotation": 0, "rectanglelabels": [name]}}
    if score is not None:
        r["score"] = float(score)
    return r


def result_box(r: Mapping[str, Any], size: tuple[int, int], where: str, from_name: str = FROM) -> tuple[str, list[float]] | None:
    """(label name, pixel box) of a result; None for results that are not this config's rectangles."""
    if r.get("type") != "rectanglelabels" or r.get("from_name") != from_name:
        return None
    H, W = size
    v = r.get("value") or {}
    ow, oh = r.get("original_width"), r.get("original_height")
    if (ow is not None and ow != W) or (oh is not None and oh != H):
        raise LabelingError(f"{where}: the image is {ow}x{oh} in Label Studio, the camera's images are {W}x{H}")
    if abs(float(v.get("rotation") or 0)) > 1e-6:
        raise LabelingError(f"{where}: a rotated box ({v.get('rotation')} deg); this project reads axis-aligned boxes only")
    names = v.get("rectanglelabels") or []
    if len(names) != 1:
        raise LabelingError(f"{where}: a box with {len(names)} labels {names}; give each box exactly one")
    try:
        x, y, w, h = (float(v[k]) for k in ("x", "y", "width", "height"))
    except (KeyError, TypeError, ValueError):
        raise LabelingError(f"{where}: box value {v!r} lacks numeric x, y, width, height") from None
    box = [x * W / 100, y * H / 100, (x + w) * W / 100, (y + h) * H / 100]
    return names[0], check_bbox(box, size, where)


# -- tasks ---------------------------------------------------------------------------------------------------
def _prediction(job: Job, results: list[dict[str, Any]], scores: list[float]) -> list[dict[str, Any]]:
    """The model's detections as one prediction (task score: the mean box score, so reviewers can sort)."""
    if not job.predictions:
        return []
    return [{"model_version": job.model_version or "deployed", "score": round(sum(scores) / len(scores), 4) if scores else 0.0,
             "result": results}]


def camera_task(job: Job, camera: str, url: str, vocab: Vocabulary) -> dict[str, Any]:
    size = job.sizes[job.cameras.index(camera)]
    preds = [p for p in job.predictions.get(camera, []) if p["label"] in vocab.names]
    task: dict[str, Any] = {"data": {"image": url, "job_id": job.id, "frame_id": job.frame_id, "camera": camera,
                                     "frame": f"{job.clip}/{job.dir}", "selection": job.selection}}
    pred = _prediction(job, [box_result(p["label"], p["bbox"], size, p["score"]) for p in preds], [p["score"] for p in preds])
    if pred:
        task["predictions"] = pred
    return task


def frame_task(job: Job, urls: Mapping[str, str], vocab: Vocabulary) -> dict[str, Any]:
    """One task for the whole frame: an image URL per camera, the model's boxes per camera in one prediction."""
    names = camera_names(job.cameras)
    data: dict[str, Any] = {"job_id": job.id, "frame_id": job.frame_id, "frame": f"{job.clip}/{job.dir}",
                            "selection": job.selection, "cameras": list(job.cameras)}
    results, scores = [], []
    for cam, size in zip(job.cameras, job.sizes):
        frm, to = names[cam]
        data[to] = urls[cam]
        for p in job.predictions.get(cam, []):
            if p["label"] in vocab.names:
                results.append(box_result(p["label"], p["bbox"], size, p["score"], frm, to))
                scores.append(p["score"])
    task: dict[str, Any] = {"data": data}
    pred = _prediction(job, results, scores)
    if pred:
        task["predictions"] = pred
    return task


def task_kind(task: Mapping[str, Any]) -> str:
    return "frame" if "cameras" in (task.get("data") or {}) else "camera"


# -- annotations back to labels -------------------------------------------------------------------------------
def _latest(task: Mapping[str, Any]) -> tuple[dict | None, bool]:
    """(the latest annotation that is neither cancelled nor empty, whether the task was skipped)."""
    anns = task.get("annotations") or []
    done = [a for a in anns if not a.get("was_cancelled") and a.get("result") is not None]
    if not done:
        return None, any(a.get("was_cancelled") for a in anns)
    return max(done, key=lambda a: (str(a.get("updated_at") or ""), int(a.get("id") or 0))), False


def _who(a: Mapping[str, Any], users: Mapping[int, str]) -> str:
    by = a.get("completed_by")
    by = by.get("email") or by.get("id") if isinstance(by, dict) else by
    return users.get(by, str(by)) if isinstance(by, int) else str(by)


def camera_label(pid: str, job: Job, tasks: Mapping[str, dict], vocab: Vocabulary,
                 users: Mapping[int, str]) -> FetchedLabel | Held | None:
    """A job sent as per-camera tasks ({camera: task}): its label once every camera task has an annotation; else Held
    saying how far it is ("3 of 6 cameras done", "camera CAM_BACK skipped"), None when nothing was started;
    LabelingError for a task it cannot read."""
    cams, who, skipped = {}, set(), []
    for cam, size in zip(job.cameras, job.sizes):
        t = tasks.get(cam)
        if t is None:
            raise LabelingError(f"Label Studio project {pid} lost the task of job {job.id} camera {cam}; requeue the job "
                                f"(`hydranet engine jobs --reject/--requeue`)")
        a, skip = _latest(t)
        if a is None:
            if skip:
                skipped.append(cam)
            continue
        where = f"Label Studio project {pid} task {t.get('id')} ({job.clip}/{job.dir} {cam}) annotation {a.get('id')}"
        boxes = []
        for k, r in enumerate(a["result"]):
            got = result_box(r, size, f"{where} result {k}")
            if got is not None:
                boxes.append(vocab.box_of(got[0], got[1], f"{where} result {k}"))
        cams[cam] = {"boxes2d": boxes}
        who.add(_who(a, users))
    if len(cams) == len(job.cameras):
        return FetchedLabel(job.id, {"cameras": cams}, "label_studio", ",".join(sorted(who)))
    if not cams and not skipped:
        return None
    why = [f"{len(cams)} of {len(job.cameras)} cameras done"]
    why += [f"camera {c} skipped" for c in skipped]
    return Held(job.id, ", ".join(why))


def frame_label(pid: str, job: Job, task: Mapping[str, Any], vocab: Vocabulary,
                users: Mapping[int, str]) -> FetchedLabel | Held | None:
    """A job sent as one frame task: the latest submitted annotation is the whole frame, its results split into cameras
    by to_name (a camera without a box has no object). Held for a skipped frame or a draft not yet submitted, None when
    nothing was started; LabelingError (naming task, frame, camera, annotation, result) for what it cannot read."""
    tid = task.get("id")
    names = camera_names(job.cameras)
    got_cams = list((task.get("data") or {}).get("cameras") or [])
    if got_cams != list(job.cameras):
        raise LabelingError(f"Label Studio project {pid} task {tid} ({job.clip}/{job.dir}) holds cameras {got_cams}, the "
                            f"fleet's frame has {list(job.cameras)}; requeue the job (`hydranet engine jobs --reject/--requeue`)")
    a, skipped = _latest(task)
    if a is None:
        if skipped:
            return Held(job.id, f"frame skipped in Label Studio task {tid}")
        drafts = [d for d in task.get("drafts") or [] if d.get("result")]
        if drafts:
            tos = {r.get("to_name") for d in drafts for r in d["result"] if r.get("type") == "rectanglelabels"}
            n = sum(to in tos for _, to in names.values())
            return Held(job.id, f"a draft in Label Studio task {tid} (boxes on {n} of {len(job.cameras)} cameras), not submitted")
        return None
    camera_of = {to: cam for cam, (_, to) in names.items()}
    cams: dict[str, dict[str, list]] = {cam: {"boxes2d": []} for cam in job.cameras}
    head = f"Label Studio project {pid} task {tid} ({job.clip}/{job.dir}"
    for k, r in enumerate(a["result"]):
        if r.get("type") != "rectanglelabels":
            continue
        cam = camera_of.get(r.get("to_name"))
        if cam is None:
            raise LabelingError(f"{head}) annotation {a.get('id')} result {k}: a box on {r.get('to_name')!r}, which is none of "
                                f"the frame's images {sorted(camera_of)}; fix or delete it in Label Studio")
        where = f"{head} {cam}) annotation {a.get('id')} result {k}"
        if r.get("from_name") != names[cam][0]:
            raise LabelingError(f"{where}: a box from control {r.get('from_name')!r} on camera {cam}'s image; expected "
                                f"{names[cam][0]!r}")
        name, box = result_box(r, job.sizes[job.cameras.index(cam)], where, names[cam][0])
        cams[cam]["boxes2d"].append(vocab.box_of(name, box, where))
    return FetchedLabel(job.id, {"cameras": cams}, "label_studio", _who(a, users))
