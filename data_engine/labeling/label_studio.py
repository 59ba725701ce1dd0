"""Label Studio, a real server, through its REST API (stdlib urllib only; docs/labeling.md has the recipe and
why not the official label-studio-sdk). The config, the tasks and the annotations' conversion: ls_tasks.py.

send(jobs): one project per selection (title "hydranet <selection>", found again by its title), with a
labelling config generated from the fleet's classes (signs and lights by what they show: "sign:stop",
"light:red", "sign:back"). By default one task per frame ("frame": every camera of the frame in one task,
one Image and RectangleLabels per camera); `task="camera"` (--ls-task camera) makes one task per camera image.
The images are uploaded to the server (a frame project's into its image store "<title> (images)", a project
without tasks: Label Studio takes a direct file upload only into a project whose config has one data key);
a task's data carries its job id and frame; the deployed model's 2D
detections come as a prediction (pre-annotation) with a score per box and a task score (the mean), so
reviewers can sort. A project made with one kind is refused for the other (its config and tasks say which).
Send is idempotent: the project's tasks are listed first and a job (a job's camera) that has a task already
is not created again (kill -9 between creating tasks and recording them sent, rerun: nothing twice).

fetch(jobs): the project's tasks with their annotations, either kind, whichever the job was sent as. A frame
task is labelled by its latest submitted annotation (results split into cameras by to_name); a job of
per-camera tasks once every camera image has one, else held back saying how far it is ("3 of 6 cameras
done, camera CAM_BACK skipped"). A box outside the image, a rotated box, an unknown label, an image size that
is not the camera's quarantine that job (held back with a one-line reason naming the task, frame, camera and
annotation) and the rest of the project is imported.

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

from data_engine.labeling.base import FetchedLabel, Held, Job, LabelingError, Vocabulary
from data_engine.labeling.ls_tasks import (FROM, TO, TASK_KINDS, box_result, camera_label, camera_names, camera_task, check_kind,
                                           config_kind, frame_label, frame_task, image_store_config, label_config, result_box, task_kind)

URL_ENV, TOKEN_ENV = "HYDRANET_LABEL_STUDIO_URL", "HYDRANET_LABEL_STUDIO_TOKEN"
__all__ = ["FROM", "TO", "TASK_KINDS", "Client", "LabelStudioBackend", "box_result", "label_config", "result_box"]


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

    def label_config(self, project: int) -> str:
        return str(self.request("GET", f"/api/projects/{project}").get("label_config") or "")

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

    def __init__(self, url: str | None = None, token: str | None = None, title: str | None = None, client: Client | None = None,
                 task: str = "frame"):
        self.task = check_kind(task)
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
            cams = None
            if self.task == "frame":
                cams = js[0].cameras
                other = next((j for j in js if j.cameras != cams), None)
                if other is not None:
                    raise LabelingError(f"selection {sel!r}: job {other.id} ({other.clip}/{other.dir}) has cameras "
                                        f"{list(other.cameras)}, job {js[0].id} has {list(cams)}; one frame-task project takes one "
                                        "rig: label them in two selections, or send per-camera tasks (--ls-task camera)")
            title = self.project_title(sel)
            pid = self.client.project(title, label_config(vocab, cams))
            self._check_project(pid, title, cams)
            have = self._existing(pid, js)
            store = pid if self.task == "camera" else self._image_store(title)
            new = []
            for j in js:
                if self.task == "frame":
                    if (j.id, None) not in have:
                        new.append(frame_task(j, {cam: self._upload(store, j, cam) for cam in j.cameras}, vocab))
                    continue
                new += [camera_task(j, cam, self._upload(pid, j, cam), vocab) for cam in j.cameras if (j.id, cam) not in have]
            if new:
                self.client.import_tasks(pid, new)
            out.update({j.id: str(pid) for j in js})
        return out

    def _image_store(self, title: str) -> int:
        """The project the frame project's images are uploaded to ("<title> (images)", no task in it): Label Studio takes
        a direct file upload only into a project whose config has one data key, and a frame config has one per camera."""
        store = f"{title} (images)"
        sid = self.client.project(store, image_store_config(title))
        if config_kind(self.client.label_config(sid), f"Label Studio project {sid} ({store!r})")[0] != "camera":
            raise LabelingError(f"Label Studio project {sid} ({store!r}) is not an image store (one image per task); rename it "
                                "or give --ls-project another title")
        return sid

    def _upload(self, pid: int, j: Job, cam: str) -> str:
        data, suffix = j.image(cam)
        return self.client.upload(pid, f"j{j.id}_{j.clip}_{j.dir}_{cam}{suffix}", data)

    def _refuse(self, pid: int, title: str, theirs: str) -> LabelingError:
        kinds = {"frame": "whole-frame tasks (every camera in one task)", "camera": "per-camera tasks"}
        return LabelingError(f"Label Studio project {pid} ({title!r}) holds {kinds[theirs]}; it cannot take "
                             f"{kinds[self.task]}: send with --ls-task {theirs}, or give --ls-project another title")

    def _check_project(self, pid: int, title: str, cams: Sequence[str] | None) -> None:
        """Refuse a project made with the other task kind, or (frame tasks) for other cameras: its config says."""
        kind, images = config_kind(self.client.label_config(pid), f"Label Studio project {pid} ({title!r})")
        if kind != self.task:
            raise self._refuse(pid, title, kind)
        if cams is not None:
            want = [to for _, to in camera_names(cams).values()]
            if sorted(images) != sorted(want):
                raise LabelingError(f"Label Studio project {pid} ({title!r}) was made for images {sorted(images)}; this "
                                    f"selection's frames have cameras {list(cams)}: give --ls-project another title")

    def _existing(self, pid: int, jobs: Sequence[Job]) -> set[tuple[int, str | None]]:
        """(job id, camera) of the project's tasks, (job id, None) for a frame task; refused: a task of another frame
        under a job id (another catalog's project) or of the other kind."""
        frames = {j.id: j.frame_id for j in jobs}
        have: set[tuple[int, str | None]] = set()
        for t in self.client.tasks(pid):
            d = t.get("data") or {}
            jid = d.get("job_id")
            if jid in frames and d.get("frame_id") != frames[jid]:
                raise LabelingError(f"Label Studio project {pid} has task {t.get('id')} for job {jid} of another frame: another "
                                    "catalog used this project; give --ls-project another title")
            kind = task_kind(t)
            if kind != self.task:
                raise self._refuse(pid, self.project_title(jobs[0].selection), kind)
            have.add((jid, None if kind == "frame" else d.get("camera")))
        return have

    def fetch(self, jobs: Sequence[Job]) -> Iterator[FetchedLabel | Held]:
        by_project: dict[str, list[Job]] = {}
        for j in jobs:
            if j.external_id:
                by_project.setdefault(j.external_id, []).append(j)
        users = self.client.users() if by_project else {}
        for pid, js in by_project.items():
            frames: dict[int, dict] = {}
            cams: dict[int, dict[str, dict]] = {}
            for t in self.client.export(int(pid)):
                d = t.get("data") or {}
                if task_kind(t) == "frame":
                    frames[d.get("job_id")] = t
                else:
                    cams.setdefault(d.get("job_id"), {})[d.get("camera")] = t
            for j in js:
                try:
                    got = self._job_label(pid, j, frames.get(j.id), cams.get(j.id) or {}, users)
                except LabelingError as e:  # one bad task holds its job back, never the rest of the import
                    yield Held(j.id, str(e), quarantine=True)
                    continue
                if got is not None:
                    yield got

    def _job_label(self, pid: str, j: Job, frame: dict | None, cams: Mapping[str, dict],
                   users: Mapping[int, str]) -> FetchedLabel | Held | None:
        """The job's label from its frame task or its camera tasks, whichever it was sent as."""
        vocab = Vocabulary.from_dataset(j.root)
        if frame is not None and cams:
            raise LabelingError(f"Label Studio project {pid} holds a whole-frame task ({frame.get('id')}) and per-camera tasks "
                                f"({sorted(t.get('id') for t in cams.values())}) of job {j.id} ({j.clip}/{j.dir}); delete "
                                "one kind in Label Studio")
        if frame is not None:
            return frame_label(pid, j, frame, vocab, users)
        if not cams:
            raise LabelingError(f"Label Studio project {pid} lost the task of job {j.id} ({j.clip}/{j.dir}); requeue the job "
                                "(`hydranet engine jobs --reject/--requeue`)")
        return camera_label(pid, j, cams, vocab, users)
