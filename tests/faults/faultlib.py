"""The fault suite's machinery: a case is one row (how to build the bad input, the command, the expected
exit status, the words the message must hold), run through the real CLI in-process (`hydranet.cli.main`,
as `hydranet ...` runs it, without a new interpreter per row: CI has 2 cores).

Every row asserts the same contract (docs/reliability.md):
- the exit status is the expected one (2 for a user error, 0 where the input is fine, 3 where `engine run`
  waits for a labelling team: then no error line at all, and `stdout` words);
- the error is one line starting with "error:", and holds every expected word (case-insensitive);
- no exception escapes `main` (a raw traceback fails the row, naming the exception);
- optional `check(tmp)`: what must (not) exist afterwards (no write outside the output folder, no temp
  folder left behind).
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


ENGINE: dict = {}  # conftest's engine_env: {"model", "noemb", "catalog"} (an untrained export, shadowed over the dataset)
RUNS: dict = {}  # conftest's two_runs: {"a", "b"} 1-step run folders (seeds 0, 1), "a.onnx" the export of a


@dataclass
class Env:
    """What the rows build on: a tiny sim dataset and its nuScenes export with a valid submission."""
    dataset: Path
    nuscenes: Path | None = None
    results: dict | None = None  # a valid submission {"meta", "results"} for `nuscenes` (split "all")


@dataclass
class Case:
    id: str
    build: Callable[[Path, Env], list[str]]  # writes the bad input under tmp, returns the CLI argv
    status: int = 2
    words: tuple[str, ...] = ()  # all must appear in the error line (case-insensitive)
    absent: tuple[str, ...] = ()  # none may appear in stderr
    stdout: tuple[str, ...] = ()  # all must appear in stdout (case-insensitive): what a run with status 0 reports
    warns: tuple[str, ...] = ()  # all must appear in stderr (case-insensitive): a warning line the run reports
    patch: Callable[[pytest.MonkeyPatch, Path], None] | None = None  # simulate what root cannot (EACCES, ENOSPC)
    check: Callable[[Path], None] | None = None  # post-condition on the tmp folder
    marks: tuple = field(default_factory=tuple)


def params(cases: list[Case]) -> list:
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "duplicate fault case ids"
    return [pytest.param(c, id=c.id, marks=c.marks) for c in cases]


def run_case(case: Case, tmp: Path, env: Env, monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[int, str, str]:
    from hydranet.cli import main

    argv = [str(a) for a in case.build(tmp, env)]
    if case.patch is not None:
        case.patch(monkeypatch, tmp)
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException as e:  # noqa: BLE001 - the point of the suite: no raw traceback for a user error
        pytest.fail(f"raw traceback for `hydranet {' '.join(argv)}`: {type(e).__name__}: {e}")
    finally:
        monkeypatch.undo()
    out, err = capsys.readouterr()
    assert rc == case.status, f"exit status {rc}, expected {case.status}\nstdout: {out[-800:]}\nstderr: {err[-800:]}"
    if case.status == 130:  # Ctrl-C / KeyboardInterrupt: one line, no traceback
        assert err.strip().splitlines()[-1:] == ["interrupted"], f"not a one-line interruption, stderr: {err[-800:]}"
    elif case.status == 3:  # `engine run` stopped to wait for a labelling team: a plain line on stdout, not an error
        assert "error:" not in err, f"a waiting stop printed as an error, stderr: {err[-800:]}"
    elif case.status != 0:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("error:"), f"no one-line error, stderr: {err[-800:]}"
        msg = lines[-1].lower()
        missing = [w for w in case.words if w.lower() not in msg]
        assert not missing, f"error line lacks {missing}: {lines[-1]}"
    missing_out = [w for w in case.stdout if w.lower() not in out.lower()]
    assert not missing_out, f"stdout lacks {missing_out}: {out[-800:]}"
    missing_warn = [w for w in case.warns if w.lower() not in err.lower()]
    assert not missing_warn, f"stderr lacks {missing_warn}: {err[-800:]}"
    for w in case.absent:
        assert w.lower() not in err.lower(), f"stderr holds {w!r}: {err[-800:]}"
    if case.check is not None:
        case.check(tmp)
    return rc, out, err


# -- helpers to build bad inputs ---------------------------------------------------------------
def copy_dataset(tmp: Path, env: Env, name: str = "ds") -> Path:
    dst = tmp / name
    shutil.copytree(env.dataset, dst)
    return dst


def edit_json(path: Path, fn: Callable, replace: bool = False) -> None:
    """path's JSON edited in place by fn (or, with `replace`, replaced by what fn returns)."""
    data = json.loads(path.read_text())
    new = fn(data)
    path.write_text(json.dumps(new if replace else data))


def frame_dir(root: Path) -> Path:
    return root / "scenes" / "scene_0000" / "000000"


def no_file_named(pattern: str, where_up: int = 0) -> Callable[[Path], None]:
    """check: nothing matching `pattern` anywhere under tmp (or `where_up` folders above it)."""
    def check(tmp: Path) -> None:
        top = tmp
        for _ in range(where_up):
            top = top.parent
        found = [str(p) for p in top.rglob(pattern)]
        assert not found, f"written outside the output folder: {found[:3]}"
    return check


def no_temp_left(tmp: Path) -> None:
    left = [str(p) for p in tmp.rglob("*.tmp-*")]
    assert not left, f"temp files or folders left behind: {left[:3]}"


def junk(tmp: Path, name: str, data: bytes = b"garbage " * 64) -> Path:
    """A file of garbage named `name` (a model, catalog or image that is not one)."""
    (tmp / name).write_bytes(data)
    return tmp / name


def foreign_sqlite(tmp: Path) -> Path:
    """A valid SQLite file that is not a catalog."""
    db = sqlite3.connect(str(tmp / "foreign.db"))
    db.execute("CREATE TABLE t (x)")
    db.close()
    return tmp / "foreign.db"


def cat_copy(tmp: Path) -> Path:
    """A copy of the engine_env catalog (one shadow run over the fault dataset) at tmp/c.db."""
    shutil.copy(ENGINE["catalog"], tmp / "c.db")
    return tmp / "c.db"


def mine(tmp: Path, catalog: Path, *extra) -> list:
    return ["engine", "mine", "--catalog", catalog, "--out", tmp / "sel.json", *extra]


def with_metadata(src: Path, dst: Path, edit) -> Path:
    """A copy of the exported model `src` whose hydranet metadata (decoded) is changed by `edit(md)`."""
    import onnx

    from deploy.metadata import PREFIX, read_metadata, set_metadata

    m = onnx.load(str(src))
    md = read_metadata(m)
    edit(md)
    set_metadata(m, {PREFIX + k: json.dumps(v) for k, v in md.items()})
    onnx.save(m, str(dst))
    return dst


def export_untrained(ds: Path, out: Path, config: str, seed: int, cameras: tuple[str, ...] | None = ("CAM_FRONT",),
                     overrides: tuple[str, ...] = (), dynamic_batch: bool = False) -> Path:
    """An untrained model of configs/`config` (seeded) on dataset `ds`'s `cameras` (None: every camera) at 32x64,
    exported to `out` (`dynamic_batch`: a free batch axis)."""
    import torch

    from data_engine.fleet import Fleet
    from deploy.export import export_model, sim_frames
    from hydranet.checkpoint import meta_for_rig
    from hydranet.experiment import load_experiment
    from hydranet.models import build_model

    picked = [f"data.cameras=[{','.join(cameras)}]"] if cameras else []
    cfg = load_experiment(REPO / "configs" / config, [f"data.root={ds}", *picked, "data.image_size=[32,64]", "device=cpu",
                                                       *overrides])
    meta = meta_for_rig(cfg, json.loads((ds / "dataset.json").read_text()), Fleet(ds).rig, str(ds))
    torch.manual_seed(seed)
    export_model(build_model(cfg.model, meta), cfg, meta, out, sim_frames(cfg, ds, 1), dynamic_batch=dynamic_batch,
                 verbose=False)
    return out
