"""Labelling backends behind one interface (`base.Backend`: send(jobs), fetch(jobs) -> labels):
oracle (the sim's exact labels, default, offline), files (COCO JSON and CVAT for images XML), and a
real Label Studio server. docs/labeling.md."""
from __future__ import annotations

from data_engine.labeling.base import Backend, FetchedLabel, Held, Job, LabelingError, Vocabulary

BACKENDS = ("oracle", "files", "label-studio")


def build_backend(name: str, *, noise=None, out=None, files=(), labeller=None, url=None, token=None, project=None,
                  accept_predictions: bool = False, ls_task: str = "frame") -> Backend:
    """The backend named `name` (one of BACKENDS; "label_studio" is accepted too) with its own options (Label Studio:
    `ls_task` "frame", every camera of a frame in one task, or "camera", a task per camera image)."""
    key = name.replace("_", "-")
    if key == "oracle":
        from data_engine.labeling.oracle import OracleBackend

        return OracleBackend(noise)
    if key == "files":
        from data_engine.labeling.files import FilesBackend

        return FilesBackend(out, files, labeller, accept_predictions=accept_predictions)
    if key == "label-studio":
        from data_engine.labeling.label_studio import LabelStudioBackend

        return LabelStudioBackend(url, token, project, task=ls_task)
    raise LabelingError(f"unknown labelling backend {name!r}; choose one of {list(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "FetchedLabel", "Held", "Job", "LabelingError", "Vocabulary", "build_backend"]
