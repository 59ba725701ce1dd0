"""The worked example of docs/adding_a_head.md, read from the doc itself (so doc and tests cannot drift):
its two files (`hydranet/heads/sky.py`, the numpy side; `hydranet/tasks/sky.py`, the torch side)
loaded as modules, and registered with the doc's one line, every registry restored afterwards."""
from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

DOC = Path(__file__).resolve().parents[1] / "docs" / "adding_a_head.md"
SPEC_MODULE = "hydranet.heads.sky"  # the doc's first file; the task file imports its spec from here


def doc_files() -> tuple[str, str]:
    """(the spec file's code, the task file's code): the doc's python blocks defining them."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    spec = next(b for b in blocks if "class Sky(HeadSpec)" in b)
    task = next(b for b in blocks if "class SkyTask(Task)" in b)
    return spec, task


def _module(name: str, code: str) -> ModuleType:
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    sys.modules[name] = module
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


@contextlib.contextmanager
def doc_head() -> Iterator[ModuleType]:
    """The doc's task module (its spec module as hydranet.heads.sky), registered with the doc's line
    `register_task("sky", SkyTask.from_meta)`; TASKS, HEADS, DECODERS and sys.modules restored after."""
    from hydranet import decoding, heads
    from hydranet.tasks import TASKS, register_task

    saved = [(d, dict(d)) for d in (TASKS, heads.HEADS, decoding.DECODERS)]
    try:
        spec_code, task_code = doc_files()
        _module(SPEC_MODULE, spec_code)
        task = _module("hydranet_doc_sky_task", task_code)
        register_task("sky", task.SkyTask.from_meta)
        yield task
    finally:
        for d, before in saved:
            d.clear()
            d.update(before)
        for name in (SPEC_MODULE, "hydranet_doc_sky_task"):
            sys.modules.pop(name, None)
