"""Test-only pauses at the kill points of a lake shadow run (tests/test_engine_lake_kill.py): a worker stopped half way
through writing its clip's part, the driver stopped inside the transaction of a clip's done marker, or half way
through writing the first block of the compaction that ends the run. Nothing in
data_engine knows of them: `python -c "import lake_kill_hook; lake_kill_hook.main()" ARGS` (tests/ on PYTHONPATH)
patches the driver, then runs `hydranet ARGS`; the pool's workers get the patch through their initializer (pickled by
reference to this module).

$LAKE_KILL_HOOK (JSON): {"dir": the folder of the signal files, "worker": clip id whose part write pauses,
"driver": clip id whose done marker pauses, "block_rows": the driver's compaction block size (lake.BLOCK_ROWS),
"compact": true to pause the first block write}. A paused process writes DIR/worker-<clip> (driver-<clip>, compact)
holding its pid, then waits for DIR/go (the test kills it first, or writes go to let it finish).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

ENV = "LAKE_KILL_HOOK"


def _conf() -> dict:
    return json.loads(os.environ.get(ENV) or "{}")


def _pause(conf: dict, what: str) -> None:
    """Say where this process stopped (DIR/WHAT holding its pid), then wait for DIR/go."""
    d = Path(conf["dir"])
    tmp = d / f".{what}.{os.getpid()}"
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, d / what)
    while not (d / "go").exists():
        time.sleep(0.02)


def _paused_atomic_path(original):
    @contextlib.contextmanager
    def atomic_path(path):
        conf = _conf()
        path = Path(path)
        if conf.get("compact") and path.name.startswith("block="):
            what = "compact"
        elif conf.get("worker") is not None and path.name == f"clip={conf['worker']}.parquet":
            what = f"worker-{conf['worker']}"
        else:
            with original(path) as tmp:
                yield tmp
            return
        from hydranet.io import temp_path

        scratch = Path(conf["dir"]) / f"scratch-{os.getpid()}"  # the whole part, outside the lake
        tmp = temp_path(path)
        try:
            yield scratch
            data = scratch.read_bytes()
            with open(tmp, "wb") as f:  # the temp half written when the kill lands
                f.write(data[: len(data) // 2])
                f.flush()
                _pause(conf, what)
                f.write(data[len(data) // 2:])
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
            scratch.unlink(missing_ok=True)

    return atomic_path


def install_worker() -> None:
    import data_engine.lake as lake

    if not getattr(lake.atomic_path, "kill_hook", False):
        lake.atomic_path = _paused_atomic_path(lake.atomic_path)
        lake.atomic_path.kill_hook = True


def init_worker(threads: int) -> None:
    """The pool's initializer in a worker: the pause, then shadow's own initializer."""
    from data_engine import shadow

    install_worker()
    getattr(shadow, "_original_init_worker", shadow._init_worker)(threads)


def install_driver() -> None:
    from data_engine import shadow
    from data_engine.catalog import Catalog

    import data_engine.lake as lake

    shadow._original_init_worker = shadow._init_worker
    shadow._init_worker = init_worker
    lake.BLOCK_ROWS = _conf().get("block_rows") or lake.BLOCK_ROWS
    install_worker()  # the in-process path (--workers 1) writes parts in the driver
    commit = Catalog.commit_clip

    def commit_clip(self, run_id: int, clip_id: int) -> dict:
        conf = _conf()
        if conf.get("driver") != clip_id:
            return commit(self, run_id, clip_id)
        self.db.execute("BEGIN IMMEDIATE")  # the marker inserted, its transaction never committed
        meta = commit(self, run_id, clip_id)
        _pause(conf, f"driver-{clip_id}")
        self.db.execute("COMMIT")
        return meta

    Catalog.commit_clip = commit_clip


def main() -> None:
    install_driver()
    from hydranet.cli import main as cli

    sys.exit(cli(sys.argv[1:]))
