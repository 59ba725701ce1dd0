"""Label files for teams on other tools: COCO JSON and CVAT for images 1.1 XML, out and back in.

send(jobs) writes, per selection, OUT/<selection>.coco.json and OUT/<selection>.cvat.xml with one
image per camera of every job (named clip/frame dir/camera.jpg, copied under OUT/images/) and the
deployed model's 2D detections as pre-annotations (COCO: annotations with a "score"; CVAT: boxes with
source="auto" and a "score" attribute). A team labels the images in its tool, exports COCO or CVAT for
images, and fetch() reads the files back: images are matched to jobs by the last three parts of their
name, labels by name (categories' ids may change in a tool), boxes are [x0, y0, x1, y1] in pixels
(COCO [x, y, w, h]; CVAT xtl/ytl/xbr/ybr). CVAT polylines labelled "lane:<type>" become lanes2d;
COCO has no polylines. A job is read only when the file holds every camera of its frame (else it waits,
saying which cameras are missing); a bad box (outside the image, no area) or an image size that is not
the camera's quarantines that image's job and the others are imported. An image or label the selection
does not know, or a malformed element is a one-line LabelingError naming the file and the element:
never a skip. Boxes that carry a score (COCO "score", CVAT source="auto") are the model's pre-annotations
exported back untouched: refused unless the import says --accept-predictions.
"""
from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hydranet.io import atomic_write_text, path_inside, read_json
from data_engine.labeling.base import FetchedLabel, Held, Job, LabelingError, Vocabulary, check_bbox

LANE = "lane:"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def image_entries(jobs: Sequence[Job], payloads: Mapping[int, Mapping] | None = None) -> list[dict[str, Any]]:
    """One entry per camera image of the jobs: {"job", "camera", "name", "size", "boxes": [{"name", "bbox", "score"?}],
    "lanes": [{"type", "points"}]}; boxes from `payloads` (labels) when given, else the jobs' predictions."""
    out = []
    for j in jobs:
        vocab = Vocabulary.from_dataset(j.root)
        names = set(vocab.names)
        for cam, size in zip(j.cameras, j.sizes):
            if payloads is not None:
                c = ((payloads.get(j.id) or {}).get("cameras") or {}).get(cam) or {}
                boxes = [{"name": vocab.name_of(b), "bbox": list(b["bbox"])} for b in c.get("boxes2d") or []]
                lanes = [{"type": ln.get("type"), "points": ln["points"]} for ln in c.get("lanes2d") or []]
            else:
                boxes = [{"name": p["label"], "bbox": list(p["bbox"]), "score": p["score"]} for p in j.predictions.get(cam, [])
                         if p["label"] in names]
                lanes = []
            out.append({"job": j, "camera": cam, "name": j.image_name(cam), "size": size, "boxes": boxes, "lanes": lanes})
    return out


# -- COCO ----------------------------------------------------------------------------------------------
def coco_dict(entries: Sequence[Mapping], vocab: Vocabulary, title: str) -> dict[str, Any]:
    cats = {n: k + 1 for k, n in enumerate(vocab.names)}
    images, anns = [], []
    for i, e in enumerate(entries, start=1):
        H, W = e["size"]
        images.append({"id": i, "file_name": e["name"], "width": W, "height": H,
                       "hydranet": {"job_id": e["job"].id, "frame_id": e["job"].frame_id, "camera": e["camera"]}})
        for b in e["boxes"]:
            x0, y0, x1, y1 = b["bbox"]
            a = {"id": len(anns) + 1, "image_id": i, "category_id": cats[b["name"]], "bbox": [x0, y0, x1 - x0, y1 - y0],
                 "area": (x1 - x0) * (y1 - y0), "iscrowd": 0, "segmentation": []}
            if "score" in b:
                a["score"] = b["score"]
            anns.append(a)
    return {"info": {"description": title, "version": "1.0"}, "licenses": [], "images": images, "annotations": anns,
            "categories": [{"id": k, "name": n, "supercategory": n.split(":")[0] if ":" in n else "object"} for n, k in cats.items()]}


def write_coco(path: str | Path, entries: Sequence[Mapping], vocab: Vocabulary, title: str) -> Path:
    path = Path(path)
    _atomic_write(path, json.dumps(coco_dict(entries, vocab, title), indent=1))
    return path


def read_coco(path: str | Path, vocab: Vocabulary) -> list[dict[str, Any]]:
    """[{"name", "size", "boxes": [{"name", "bbox"}], "lanes": []}] per image of a COCO file."""
    path = Path(path)
    d = read_json(path, "COCO file", LabelingError, "export it again from the labelling tool (COCO JSON)")
    if not isinstance(d, dict):
        raise LabelingError(f"{path} is not a COCO file: the top level is not an object")
    for key in ("images", "annotations", "categories"):
        if not isinstance(d.get(key), list):
            raise LabelingError(f"{path} is not a COCO file: '{key}' is missing or not a list")
    cats = {}
    for k, c in enumerate(d["categories"]):
        if not isinstance(c, dict) or not isinstance(c.get("id"), int) or not isinstance(c.get("name"), str):
            raise LabelingError(f"{path}: categories[{k}] needs an integer 'id' and a 'name'")
        if c["id"] in cats:
            raise LabelingError(f"{path}: categories[{k}]: category id {c['id']} appears twice; give each category its own id")
        cats[c["id"]] = c["name"]
    images: dict[int, dict[str, Any]] = {}
    for k, im in enumerate(d["images"]):
        where = f"{path}: images[{k}]"
        if not isinstance(im, dict) or not isinstance(im.get("id"), int) or not isinstance(im.get("file_name"), str):
            raise LabelingError(f"{where} needs an integer 'id' and a 'file_name'")
        if not all(isinstance(im.get(s), int) and im[s] > 0 for s in ("width", "height")):
            raise LabelingError(f"{where} ({im['file_name']}) needs positive integer 'width' and 'height'")
        if im["id"] in images:
            raise LabelingError(f"{where}: image id {im['id']} appears twice")
        images[im["id"]] = {"name": im["file_name"], "size": (im["height"], im["width"]), "boxes": [], "lanes": []}
    ann_ids: set[int] = set()
    for k, a in enumerate(d["annotations"]):
        where = f"{path}: annotations[{k}]" + (f" (id {a.get('id')})" if isinstance(a, dict) and "id" in a else "")
        if not isinstance(a, dict):
            raise LabelingError(f"{where} is not an object")
        if isinstance(a.get("id"), bool) or not isinstance(a.get("id"), int):
            raise LabelingError(f"{where}: needs an integer 'id' (COCO annotation ids are unique integers)")
        if a["id"] in ann_ids:  # a duplicated id is a merge or export bug: the same box twice, or two boxes confused
            raise LabelingError(f"{where}: annotation id {a['id']} appears twice; fix the export (each box once, with its "
                                "own id)")
        ann_ids.add(a["id"])
        if a.get("image_id") not in images:
            raise LabelingError(f"{where}: image_id {a.get('image_id')!r} is not an image of the file")
        if a.get("category_id") not in cats:
            raise LabelingError(f"{where}: category_id {a.get('category_id')!r} is not a category of the file")
        name = cats[a["category_id"]]
        if name not in vocab.names:
            raise LabelingError(f"{where}: unknown label {name!r}; the project's labels are {vocab.names}")
        bb = a.get("bbox")
        if not (isinstance(bb, list) and len(bb) == 4 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bb)):
            raise LabelingError(f"{where}: bbox {bb!r} is not [x, y, width, height]")
        if not all(math.isfinite(v) for v in bb) or bb[2] <= 0 or bb[3] <= 0:
            raise LabelingError(f"{where}: bbox {bb!r} needs finite values and a positive width and height")
        im = images[a["image_id"]]
        box = [float(bb[0]), float(bb[1]), float(bb[0]) + float(bb[2]), float(bb[1]) + float(bb[3])]
        try:
            check_bbox(box, im["size"], f"{where} ({im['name']})")
        except LabelingError as e:  # one bad box quarantines its image's job, not the file
            im.setdefault("bad", str(e))
            continue
        b = {"name": name, "bbox": box}
        if "score" in a:  # a model's pre-annotation exported back untouched
            b["score"] = a["score"]
        im["boxes"].append(b)
    return list(images.values())


# -- CVAT for images 1.1 --------------------------------------------------------------------------------
def cvat_xml(entries: Sequence[Mapping], vocab: Vocabulary, title: str) -> str:
    root = ET.Element("annotations")
    ET.SubElement(root, "version").text = "1.1"
    task = ET.SubElement(ET.SubElement(root, "meta"), "task")
    ET.SubElement(task, "name").text = title
    ET.SubElement(task, "size").text = str(len(entries))
    ET.SubElement(task, "mode").text = "annotation"
    labels = ET.SubElement(task, "labels")
    for n, kind in [(n, "rectangle") for n in vocab.names] + [(f"{LANE}{t}", "polyline") for t in vocab.lane_types]:
        lab = ET.SubElement(labels, "label")
        ET.SubElement(lab, "name").text = n
        ET.SubElement(lab, "type").text = kind
        atts = ET.SubElement(lab, "attributes")
        if kind == "rectangle":
            att = ET.SubElement(atts, "attribute")
            for k, v in (("name", "score"), ("mutable", "False"), ("input_type", "number"), ("default_value", "1"),
                         ("values", "0;1;0.001")):
                ET.SubElement(att, k).text = v
    for i, e in enumerate(entries):
        H, W = e["size"]
        im = ET.SubElement(root, "image", id=str(i), name=e["name"], width=str(W), height=str(H))
        for b in e["boxes"]:
            x0, y0, x1, y1 = b["bbox"]
            box = ET.SubElement(im, "box", label=b["name"], source="auto" if "score" in b else "manual", occluded="0",
                                xtl=f"{x0:.2f}", ytl=f"{y0:.2f}", xbr=f"{x1:.2f}", ybr=f"{y1:.2f}", z_order="0")
            if "score" in b:
                ET.SubElement(box, "attribute", name="score").text = f"{b['score']:.3f}"
        for ln in e["lanes"]:
            ET.SubElement(im, "polyline", label=f"{LANE}{ln['type']}", source="manual", occluded="0",
                          points=";".join(f"{u:.2f},{v:.2f}" for u, v in ln["points"]), z_order="0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_cvat(path: str | Path, entries: Sequence[Mapping], vocab: Vocabulary, title: str) -> Path:
    path = Path(path)
    _atomic_write(path, cvat_xml(entries, vocab, title))
    return path


def _num(el: ET.Element, key: str, where: str) -> float:
    v = el.get(key)
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise LabelingError(f"{where}: attribute {key}={v!r} is not a number") from None
    if not math.isfinite(x):
        raise LabelingError(f"{where}: attribute {key}={v!r} is not finite")
    return x


def read_cvat(path: str | Path, vocab: Vocabulary) -> list[dict[str, Any]]:
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except OSError as e:
        raise LabelingError(f"{path}: {e.strerror or e}") from None
    except ET.ParseError as e:
        raise LabelingError(f"{path} is not valid XML ({e})") from None
    if root.tag != "annotations":
        raise LabelingError(f"{path} is not CVAT for images XML: the root element is <{root.tag}>, not <annotations>")
    version = root.findtext("version")
    if version is not None and version.strip() != "1.1":
        raise LabelingError(f"{path}: CVAT format version {version.strip()!r}; export 'CVAT for images 1.1'")
    if root.find("track") is not None:
        raise LabelingError(f"{path}: <track> elements are CVAT for video; export 'CVAT for images 1.1'")
    lanes = {f"{LANE}{t}" for t in vocab.lane_types}
    out = []
    for k, im in enumerate(root.iter("image")):
        where = f"{path}: <image> #{k} (name {im.get('name')!r})"
        if not im.get("name"):
            raise LabelingError(f"{path}: <image> #{k} has no name")
        W, H = _num(im, "width", where), _num(im, "height", where)
        if W <= 0 or H <= 0 or W != int(W) or H != int(H):
            raise LabelingError(f"{where}: width and height must be positive integers")
        entry: dict[str, Any] = {"name": im.get("name"), "size": (int(H), int(W)), "boxes": [], "lanes": []}
        for n, el in enumerate(im):
            ew = f"{where} <{el.tag}> #{n}"
            label = el.get("label")
            if el.tag == "box":
                if label not in vocab.names:
                    raise LabelingError(f"{ew}: unknown label {label!r}; the project's labels are {vocab.names}")
                box = [_num(el, a, ew) for a in ("xtl", "ytl", "xbr", "ybr")]
                try:
                    b = {"name": label, "bbox": check_bbox(box, entry["size"], ew)}
                except LabelingError as e:  # one bad box quarantines its image's job, not the file
                    entry.setdefault("bad", str(e))
                    continue
                if el.get("source") == "auto":  # a model's pre-annotation no person touched (CVAT: "semi-auto" once edited)
                    b["score"] = next((float(x.text) for x in el.iter("attribute") if x.get("name") == "score" and x.text),
                                      None)
                entry["boxes"].append(b)
            elif el.tag == "polyline":
                if label not in lanes:
                    raise LabelingError(f"{ew}: polyline label {label!r} is not a lane type ({sorted(lanes)})")
                try:
                    pts = [[float(v) for v in p.split(",")] for p in (el.get("points") or "").split(";")]
                except ValueError:
                    raise LabelingError(f"{ew}: points {el.get('points')!r} are not 'x,y;x,y;...'") from None
                if len(pts) < 2 or any(len(p) != 2 or not all(math.isfinite(v) for v in p) for p in pts):
                    raise LabelingError(f"{ew}: points {el.get('points')!r} are not at least two finite 'x,y' pairs")
                entry["lanes"].append({"type": label[len(LANE):], "points": pts})
            elif el.tag in ("polygon", "points", "mask", "cuboid", "ellipse", "skeleton", "tag"):
                raise LabelingError(f"{ew}: a {el.tag} is not a label this project reads (boxes and lane polylines only)")
        out.append(entry)
    return out


# -- the backend ------------------------------------------------------------------------------------------
def payloads_from_entries(entries: Sequence[Mapping], jobs: Sequence[Job], where: str,
                          predictions: bool = False) -> tuple[dict[int, dict[str, Any]], dict[int, Held]]:
    """({job id: payload} of the jobs whose every camera is in the entries, {job id: Held} of the others the file
    names). LabelingError for what spoils the whole file: an image no job knows, an image twice, model
    pre-annotations (boxes with a score, CVAT source="auto") unless `predictions`. A job is held back, the
    others imported, for a bad box in one of its images or an image size that is not the camera's (quarantined),
    or cameras the file lacks (waiting)."""
    index = {}
    for j in jobs:
        for cam, size in zip(j.cameras, j.sizes):
            index[j.image_name(cam)] = (j, cam, size)
    seen: dict[int, dict[str, Any]] = {}
    bad: dict[int, str] = {}
    preds = sum(1 for e in entries for b in e["boxes"] if "score" in b)
    if preds and not predictions:
        total = sum(len(e["boxes"]) for e in entries)
        marker = "source=\"auto\"" if str(where).lower().endswith(".xml") else "a 'score'"
        raise LabelingError(f"{where}: {preds} of {total} boxes are the model's pre-annotations ({marker}), not labels a "
                            "person made; label them in the tool, or import them as labels with --accept-predictions")
    for e in entries:
        key = "/".join(Path(e["name"]).parts[-3:])
        if key not in index:
            raise LabelingError(f"{where}: image {e['name']!r} is not a camera image of a sent job; was the file exported "
                                "from another selection?")
        j, cam, size = index[key]
        cams = seen.setdefault(j.id, {})
        if cam in cams:
            raise LabelingError(f"{where}: image {e['name']!r} appears twice")
        cams[cam] = None
        if tuple(e["size"]) != tuple(size):
            bad.setdefault(j.id, f"{where}: image {e['name']!r} is {e['size'][1]}x{e['size'][0]}, the camera's images are "
                                 f"{size[1]}x{size[0]}")
            continue
        if e.get("bad"):
            bad.setdefault(j.id, e["bad"])
            continue
        vocab = Vocabulary.from_dataset(j.root)
        cams[cam] = {"boxes2d": [vocab.box_of(b["name"], b["bbox"], f"{where} image {e['name']!r}") for b in e["boxes"]],
                     "lanes2d": [{"points": ln["points"], "type": ln["type"]} for ln in e["lanes"]]}
    out: dict[int, dict[str, Any]] = {}
    held: dict[int, Held] = {}
    jobs_by_id = {j.id: j for j in jobs}
    for jid, cams in seen.items():
        j = jobs_by_id[jid]
        if jid in bad:
            held[jid] = Held(jid, bad[jid], quarantine=True)
            continue
        missing = [c for c in j.cameras if c not in cams]
        if missing:
            held[jid] = Held(jid, f"{len(j.cameras) - len(missing)} of {len(j.cameras)} cameras in {Path(where).name}, "
                                  f"camera {', '.join(missing)} missing (export every camera of a frame)")
            continue
        out[jid] = {"cameras": {c: cams[c] for c in j.cameras}}
    return out, held


class FilesBackend:
    """send: COCO + CVAT exports of the jobs into `out`; fetch: labels from the `files` a team sends back."""
    name = "files"
    batch = 0  # one export per selection: all queued jobs in one call
    wants_predictions = True

    def __init__(self, out: str | Path | None = None, files: Sequence[str | Path] = (), labeller: str | None = None,
                 copy_images: bool = True, accept_predictions: bool = False):
        self.out = None if out is None else Path(out)
        self.files = [Path(f) for f in files]
        self.labeller = labeller
        self.copy_images = copy_images
        self.accept_predictions = accept_predictions

    def send(self, jobs: Sequence[Job]) -> dict[int, str]:
        if self.out is None:
            raise LabelingError("the files backend needs --out DIR to write the exports into")
        by_sel: dict[str, list[Job]] = {}
        for j in jobs:
            by_sel.setdefault(j.selection, []).append(j)
        ext = {}
        for sel, js in by_sel.items():
            vocab = Vocabulary.from_dataset(js[0].root)
            entries = image_entries(js)
            if self.copy_images:
                for e in entries:
                    dst = path_inside(self.out / "images", e["name"], f"label job {e['job'].id}", LabelingError)
                    if not dst.exists():
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        tmp = dst.with_name(f"{dst.name}.tmp-{os.getpid()}")
                        tmp.write_bytes(e["job"].image(e["camera"])[0])
                        tmp.replace(dst)
            stem = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in sel)
            write_coco(self.out / f"{stem}.coco.json", entries, vocab, f"hydranet selection {sel}")
            cvat = write_cvat(self.out / f"{stem}.cvat.xml", entries, vocab, f"hydranet selection {sel}")
            ext.update({j.id: str(cvat.with_suffix("")) for j in js})
        return ext

    def fetch(self, jobs: Sequence[Job]) -> Iterator[FetchedLabel | Held]:
        if not self.files:
            raise LabelingError("the files backend needs --file F (COCO .json or CVAT .xml) to import")
        if not jobs:
            return
        vocab = Vocabulary.from_dataset(jobs[0].root)
        read = []  # every file is read and checked before any label is handed over: a spoiled file records nothing
        for f in self.files:
            entries = read_cvat(f, vocab) if f.suffix.lower() == ".xml" else read_coco(f, vocab)
            read.append((f, *payloads_from_entries(entries, jobs, str(f), self.accept_predictions)))
        for f, payloads, held in read:
            yield from held.values()
            for jid, payload in payloads.items():
                who = self.labeller or f"file:{f.name}"
                yield FetchedLabel(jid, payload, "file", who + ("+predictions" if self.accept_predictions else ""))
