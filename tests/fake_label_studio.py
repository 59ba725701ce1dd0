"""An in-memory Label Studio for the tests: the REST answers as `data_engine.labeling.label_studio.LabelStudioBackend`
reads them (projects, uploads, tasks, annotations, the JSON export), keeping what the real server checks on import.
Used by tests/test_engine_ls_frame_tasks.py and the loop's `auto+label_studio` test; tests/test_engine_labeling_ls.py
runs the real server."""
from __future__ import annotations

import json
import re

from data_engine.labeling.base import LabelingError


class FakeLS:
    """Label Studio's REST answers as the backend reads them, in memory; a project keeps the config it was made with and,
    as the server does, refuses a task whose data lacks a $variable of that config and a file upload into a project whose
config has more than one data key."""
    url = "http://label-studio.test"  # as the Client's: where the server is

    def __init__(self):
        self.configs: dict[str, str] = {}
        self.tasks_: list[dict] = []
        self.uploads: list[str] = []

    def project(self, title, config):
        self.configs.setdefault(title, config)
        return list(self.configs).index(title) + 1

    def label_config(self, project):
        return list(self.configs.values())[project - 1]

    def tasks(self, project):
        return [t for t in self.tasks_ if t["project"] == project]

    def upload(self, project, name, content):
        if len(set(re.findall(r'value="\$(\w+)"', self.label_config(project)))) > 1:  # as Label Studio 1.23 answers
            raise LabelingError("Your label config has more than one data key and direct file upload supports only one data key")
        self.uploads.append(name)
        return f"/data/upload/{project}/{name}"

    def import_tasks(self, project, tasks):
        need = set(re.findall(r'value="\$(\w+)"', self.label_config(project)))
        for t in tasks:
            missing = need - set(t["data"])
            assert not missing, f"Label Studio refuses the task: data lacks {missing}"
            self.tasks_.append({"id": len(self.tasks_) + 1, "project": project, "data": t["data"], "annotations": [], "drafts": [],
                                "predictions": t.get("predictions", [])})

    def users(self):
        return {7: "reviewer@example.com"}

    def export(self, project):
        return json.loads(json.dumps(self.tasks(project)))

    def task_of(self, job):
        return next(t for t in self.tasks_ if t["data"]["job_id"] == job)

    def annotate(self, job, results, cancelled=False, draft=False):
        t = self.task_of(job)
        if draft:
            t["drafts"].append({"id": 900 + len(t["drafts"]), "result": results})
            return
        t["annotations"].append({"id": 100 * t["id"] + len(t["annotations"]), "completed_by": 7, "was_cancelled": cancelled,
                                 "updated_at": f"2026-01-01T00:00:{len(t['annotations']):02d}", "result": results})
