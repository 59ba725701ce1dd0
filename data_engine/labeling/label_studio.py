"""Label Studio, a real server, through its REST API (stdlib urllib only; docs/labeling.md has the recipe).

send(jobs): one project per selection (title "hydranet <selection>", found again by its title), with
a labelling config generated from the fleet's classes: one RectangleLabels per camera image, signs
and lights by what they show ("sign:stop", "light:red", "sign:back"). One task per camera image of a
job: the image is uploaded to the server, the task's data carries its job id, frame and camera, and
the deployed model's 2D detections come as a prediction (pre-annotation) with a score per box and a
task score (the mean), so reviewers can sort. Send is idempotent: the project's tasks are listed
first and a (job, camera) that has a task already is not created again (kill -9 between creating
tasks and recording them sent, rerun: nothing twice).

fetch(jobs): the project's tasks with their annotations (the latest not cancelled per task); a job
is labelled once every camera image of its frame has one; a job partly done is held back saying how far
it is ("3 of 6 cameras done, camera CAM_BACK skipped"). Boxes come back from Label Studio's percent
coordinates to pixels ([x0, y0, x1, y1]); a box outside the image, a rotated box, an unknown label, an
image size that is not the camera's quarantine that job (held back with a one-line reason naming the
task and annotation) and the rest of the project is imported.

Label Studio has no open polyline tool (only closed polygons), so lanes are not asked for here; use
the files backend (CVAT polylines) for lanes.

Tokens: a legacy API token ("Token" auth; start a server with LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN=true)
or a personal access token (a JWT refresh token, exchanged at /api/token/refresh for "Bearer" auth).
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from xml.sax.saxutils import quoteattr

from data_engine.labeling.base import FetchedLabel, Held, Job, LabelingError, Vocabulary, check_bbox

URL_ENV, TOKEN_ENV = "HYDRANET_LABEL_STUDIO_URL", "HYDRANET_LABEL_STUDIO_TOKEN"
FROM, TO = "label", "image"


def label_config(vocab: Vocabulary) -> str:
    """The labelling config: the camera image with one RectangleLabels of the project's label names."""
    labels = "\n".join(f"    <Label value={quoteattr(n)}/>" for n in vocab.names)
    return ("<View>\n  <Header value=\"$frame $camera\"/>\n"
            f"  <Image name=\"{TO}\" value=\"$image\" zoom=\"true\"/>\n"
            f"  <RectangleLabels name=\"{FROM}\" toName=\"{TO}\" showInline=\"true\">\n{labels}\n  </RectangleLabels>\n</View>\n")


def box_result(name: str, bbox: Sequence[float], size: tuple[int, int], score: float | None = None) -> dict[str, Any]:
    """A RectangleLabels result (percent of the image) from a pixel box [x0, y0, x1, y1]."""
    H, W = size
    x0, y0, x1, y1 = (float(v) for v in bbox)
    r: dict[str, Any] = {"id": uuid.uuid4().hex[:10], "from_name": FROM, "to_name": TO, "type": "rectanglelabels",
                         "original_width": W, "original_height": H, "image_rotation": 0,
                         "value": {"x": 100 * x0 / W, "y": 100 * y0 / H, "width": 100 * (x1 - x0) / W, "height": 100 * (y1 - y0) / H,
                                   "rotation": 0, "rectanglelabels": [name]}}
    if score is not None:
        r["score"] = float(score)
    return r


def result_box(r: Mapping[str, Any], size: tuple[int, int], where: str) -> tuple[str, list[float]] | None:
    """(label name, pixel box) of a result; None for results that are not this config's rectangles."""
    if r.get("type") != "rectanglelabels" or r.get("from_name") != FROM:
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


class Client:
    """A minimal Label Studio REST client: JSON in and out, one-line errors naming the request."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 60.0):
        self.url = (url or os.environ.get(URL_ENV) or "").rstrip("/")
        token = token or os.environ.get(TOKEN_ENV)
        if not self.url or not token:
            raise LabelingError(f"Label Studio needs a server URL and an API token: --ls-url/--ls-token or {URL_ENV}/{TOKEN_ENV} "
                                "(docs/labeling.md)")
        self.timeout = timeout
        self._token = token
        self.auth = f"Token {token}"
        if token.count(".") == 2:  # a personal access token (JWT refresh): exchange it for an access token
            self.auth = f"Bearer {self.request('POST', '/api/token/refresh', {'refresh': token}, auth=False)['access']}"

    def request(self, method: str, path: str, body: Any = None, query: Mapping[str, Any] | None = None,
                files: Sequence[tuple[str, bytes]] | None = None, auth: bool = True) -> Any:
        url = self.url + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        headers = {"Accept": "application/json"}
        if auth:
            headers["Authorization"] = self.auth
        data = None
        if files:
            boundary = uuid.uuid4().hex
            parts = []
            for name, content in files:
                parts.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
                             "Content-Type: image/jpeg\r\n\r\n".encode() + content + b"\r\n")
            data = b"".join(parts) + f"--{boundary}--\r\n".encode()
            headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace").replace("\n", " ")
            hint = "; check the token" if e.code in (401, 403) else ""
            raise LabelingError(f"Label Studio {method} {url} answered {e.code} {e.reason}: {detail}{hint}") from None
        except (urllib.error.URLError, OSError) as e:
            raise LabelingError(f"cannot reach Label Studio at {self.url} ({getattr(e, 'reason', e)}); start the server or "
                                f"set {URL_ENV}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise LabelingError(f"Label Studio {method} {url} answered something that is not JSON: {raw[:120]!r}") from None

    def paged(self, path: str, query: Mapping[str, Any], key: str) -> list[dict]:
        out, page = [], 1
        while True:
            got = self.request("GET", path, query={**query, "page": page, "page_size": 100})
            items = got if isinstance(got, list) else got.get(key) or got.get("results") or []
            out += items
            total = None if isinstance(got, list) else got.get("total", got.get("count"))
            if isinstance(got, list) or not items or total is None or len(out) >= total:
                return out
            page += 1

    # -- projects and tasks --------------------------------------------------------------------------
    def project(self, title: str, config: str) -> int:
        """The project titled `title`, created with `config` if there is none."""
        for p in self.paged("/api/projects", {}, "results"):
            if p.get("title") == title:
                return int(p["id"])
        return int(self.request("POST", "/api/projects", {"title": title, "label_config": config,
                                                           "description": "hydranet data engine relabel queue"})["id"])

    def tasks(self, project: int) -> list[dict]:
        return self.paged("/api/tasks", {"project": project, "fields": "all"}, "tasks")

    def upload(self, project: int, name: str, content: bytes) -> str:
        """Upload one image without making a task of it; its URL on the server."""
        got = self.request("POST", f"/api/projects/{project}/import", query={"commit_to_project": "false"}, files=[(name, content)])
        ids = got.get("file_upload_ids") or []
        if len(ids) != 1:
            raise LabelingError(f"Label Studio project {project}: uploading {name} gave file uploads {ids}, expected one")
        ups = self.request("GET", f"/api/projects/{project}/file-uploads", query={"ids": json.dumps(ids)})
        for u in ups if isinstance(ups, list) else []:
            if u.get("id") == ids[0]:
                f = str(u["file"])
                return f if f.startswith(("/", "http")) else "/data/" + f
        raise LabelingError(f"Label Studio project {project}: file upload {ids[0]} of {name} not found after uploading")

    def import_tasks(self, project: int, tasks: list[dict]) -> None:
        self.request("POST", f"/api/projects/{project}/import", tasks)

    def users(self) -> dict[int, str]:
        """{user id: email} (a labeller's name in the label's provenance); empty where not allowed."""
        try:
            got = self.request("GET", "/api/users")
        except LabelingError:
            return {}
        return {int(u["id"]): str(u.get("email") or u.get("username") or u["id"]) for u in got or [] if "id" in u}

    def export(self, project: int) -> list[dict]:
        got = self.request("GET", f"/api/projects/{project}/export", query={"exportType": "JSON", "download_all_tasks": "true"})
        if not isinstance(got, list):
            raise LabelingError(f"Label Studio project {project}: the JSON export is not a list of tasks")
        return got


class LabelStudioBackend:
    name = "label_studio"
    batch = 8
    wants_predictions = True

    def __init__(self, url: str | None = None, token: str | None = None, title: str | None = None, client: Client | None = None):
        self.client = client or Client(url, token)
        self.title = title

    def project_title(self, selection: str) -> str:
        return self.title or f"hydranet {selection}"

    def send(self, jobs: Sequence[Job]) -> dict[int, str]:
        out: dict[int, str] = {}
        by_sel: dict[str, list[Job]] = {}
        for j in jobs:
            by_sel.setdefault(j.selection, []).append(j)
        for sel, js in by_sel.items():
            vocab = Vocabulary.from_dataset(js[0].root)
            pid = self.client.project(self.project_title(sel), label_config(vocab))
            have = self._existing(pid, js)
            new = []
            for j in js:
                for cam, size in zip(j.cameras, j.sizes):
                    if (j.id, cam) in have:
                        continue
                    data, suffix = j.image(cam)
                    url = self.client.upload(pid, f"j{j.id}_{j.clip}_{j.dir}_{cam}{suffix}", data)
                    task: dict[str, Any] = {"data": {"image": url, "job_id": j.id, "frame_id": j.frame_id, "camera": cam,
                                                     "frame": f"{j.clip}/{j.dir}", "selection": sel}}
                    preds = [p for p in j.predictions.get(cam, []) if p["label"] in vocab.names]
                    if j.predictions:
                        score = sum(p["score"] for p in preds) / len(preds) if preds else 0.0
                        task["predictions"] = [{"model_version": j.model_version or "deployed", "score": round(score, 4),
                                                "result": [box_result(p["label"], p["bbox"], size, p["score"]) for p in preds]}]
                    new.append(task)
            if new:
                self.client.import_tasks(pid, new)
            out.update({j.id: str(pid) for j in js})
        return out

    def _existing(self, pid: int, jobs: Sequence[Job]) -> set[tuple[int, str]]:
        frames = {j.id: j.frame_id for j in jobs}
        have = set()
        for t in self.client.tasks(pid):
            d = t.get("data") or {}
            jid = d.get("job_id")
            if jid in frames and d.get("frame_id") != frames[jid]:
                raise LabelingError(f"Label Studio project {pid} has task {t.get('id')} for job {jid} of another frame: another "
                                    "catalog used this project; give --ls-project another title")
            have.add((jid, d.get("camera")))
        return have

    def fetch(self, jobs: Sequence[Job]) -> Iterator[FetchedLabel | Held]:
        by_project: dict[str, list[Job]] = {}
        for j in jobs:
            if j.external_id:
                by_project.setdefault(j.external_id, []).append(j)
        users = self.client.users() if by_project else {}
        for pid, js in by_project.items():
            tasks: dict[tuple[int, str], dict] = {}
            for t in self.client.export(int(pid)):
                d = t.get("data") or {}
                tasks[(d.get("job_id"), d.get("camera"))] = t
            for j in js:
                try:
                    got = self._job_label(pid, j, tasks, users)
                except LabelingError as e:  # one bad task holds its job back, never the rest of the import
                    yield Held(j.id, str(e), quarantine=True)
                    continue
                if got is not None:
                    yield got

    def _job_label(self, pid: str, j: Job, tasks: Mapping[tuple[int, str], dict], users: Mapping[int, str]) -> FetchedLabel | Held | None:
        """The job's label once every camera task has an annotation; else Held saying how far it is ("3 of 6 cameras
        done", "camera CAM_BACK skipped"), None when nothing was started; LabelingError for a task it cannot read."""
        vocab = Vocabulary.from_dataset(j.root)
        cams, who, skipped = {}, set(), []
        for cam, size in zip(j.cameras, j.sizes):
            t = tasks.get((j.id, cam))
            if t is None:
                raise LabelingError(f"Label Studio project {pid} lost the task of job {j.id} camera {cam}; requeue the job "
                                    f"(`hydranet engine jobs --reject/--requeue`)")
            anns = t.get("annotations") or []
            done = [a for a in anns if not a.get("was_cancelled") and a.get("result") is not None]
            if not done:
                if any(a.get("was_cancelled") for a in anns):
                    skipped.append(cam)
                continue
            a = max(done, key=lambda a: (str(a.get("updated_at") or ""), int(a.get("id") or 0)))
            where = f"Label Studio project {pid} task {t.get('id')} ({j.clip}/{j.dir} {cam}) annotation {a.get('id')}"
            boxes = []
            for k, r in enumerate(a["result"]):
                got = result_box(r, size, f"{where} result {k}")
                if got is not None:
                    boxes.append(vocab.box_of(got[0], got[1], f"{where} result {k}"))
            cams[cam] = {"boxes2d": boxes}
            by = a.get("completed_by")
            by = by.get("email") or by.get("id") if isinstance(by, dict) else by
            who.add(users.get(by, str(by)) if isinstance(by, int) else str(by))
        if len(cams) == len(j.cameras):
            return FetchedLabel(j.id, {"cameras": cams}, "label_studio", ",".join(sorted(who)))
        if not cams and not skipped:
            return None
        why = [f"{len(cams)} of {len(j.cameras)} cameras done"]
        why += [f"camera {c} skipped" for c in skipped]
        return Held(j.id, ", ".join(why))
