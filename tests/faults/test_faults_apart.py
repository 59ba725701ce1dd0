"""Fault rows: no output destroys an input (docs/reliability.md, "No output destroys an input"). Every
command checks, before it writes or deletes anything, that no output is, contains or sits inside an input
it reads (symlinks resolved; `hydranet.io.check_apart`), and that a file it replaces is of its own kind
(`check_replaceable`); `train` checks its data roots, read through the config, itself. One line naming
both paths; the input is left as it was. See faultlib.py for the contract."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from faultlib import RUNS, Case, cat_copy, copy_dataset, params, run_case

from hydranet.cli import main
from hydranet.io import file_kind


def _digest(path: Path) -> str:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


def run_copy(tmp: Path) -> Path:
    """A copy of the 1-step run RUNS["a"] at tmp/run, its digest kept in tmp/run.sha."""
    shutil.copytree(RUNS["a"], tmp / "run")
    (tmp / "run.sha").write_text(_digest(tmp / "run" / "checkpoint.pt"))
    return tmp / "run"


def checkpoint_kept(tmp: Path) -> None:
    assert _digest(tmp / "run" / "checkpoint.pt") == (tmp / "run.sha").read_text(), "the checkpoint was changed"


def catalog_kept(tmp: Path) -> None:
    assert file_kind(tmp / "c.db").startswith("SQLite"), "the catalog was replaced"


def dataset_kept(tmp: Path) -> None:
    assert (tmp / "ds" / "dataset.json").is_file() and not (tmp / "ds" / "checkpoint.pt").exists(), \
        "the run was written into the dataset"


def videos_kept(tmp: Path) -> None:
    assert (tmp / "videos" / "keep.txt").read_text() == "mine", "the input folder was deleted"


def videos(tmp: Path) -> Path:
    (tmp / "videos").mkdir()
    (tmp / "videos" / "keep.txt").write_text("mine")
    return tmp / "videos"


def own_catalog(tmp: Path, fleet: Path, backend: str | None = None) -> Path:
    """tmp/own.db naming `fleet` (a copy in tmp: the row must not touch the shared fixtures); with `backend`, a
    catalog folder tmp/own of that backend (`engine catalog create`)."""
    from data_engine.catalog import Catalog
    from data_engine.fleet import Fleet
    from data_engine.lake import create

    path = create(tmp / "own", backend) if backend else tmp / "own.db"
    with Catalog(path, create=True) as c:
        c.add_fleet(Fleet(fleet))
    return path


def recorded_fleet_of_videos(tmp: Path, env) -> Path:
    """The fault dataset as camera videos (tmp/rec_videos, keep.txt beside them) ingested as tmp/rec_fleet."""
    assert main(["sim", "export-videos", "--data", str(env.dataset), "--out", str(tmp / "rec_videos")]) == 0
    (tmp / "rec_videos" / "keep.txt").write_text("mine")
    assert main(["engine", "ingest", "--out", str(tmp / "rec_fleet"), "--source", "video", "--videos",
                 str(tmp / "rec_videos"), "--rig", str(tmp / "rec_videos" / "rig.yaml"), "--quiet"]) == 0
    return tmp / "rec_fleet"


def train_into_data(tmp, env):
    ds = copy_dataset(tmp, env)
    return ["train", "--config", "tiny", "--out", ds, "--overwrite", "--quiet", "--set", f"data.root={ds}",
            "--set", "steps=1", "--set", "device=cpu", "--set", "num_workers=0"]


CASES = [
    Case("eval-out-is-the-checkpoint", lambda t, e: ["eval", "--checkpoint", run_copy(t), "--data", e.dataset,
                                                      "--out", t / "run" / "checkpoint.pt", "--quiet"],
         words=("--out", "checkpoint.pt", "--checkpoint", "destroy"), check=checkpoint_kept),
    Case("export-out-is-the-checkpoint-with-overwrite", lambda t, e: ["export", run_copy(t), "--out",
                                                                       t / "run" / "checkpoint.pt", "--overwrite"],
         words=("--out", "checkpoint.pt", "destroy"), check=checkpoint_kept),
    Case("eval-out-replaces-a-png", lambda t, e: [
        "eval", "--checkpoint", run_copy(t), "--data", e.dataset, "--out",
        (t / "p.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 32) and t / "p.png", "--quiet"],
         words=("--out", "p.png", "PNG image", "never replaced")),
    Case("mine-out-is-the-catalog", lambda t, e: ["engine", "mine", "--catalog", cat_copy(t), "--budget", "1",
                                                   "--out", t / "c.db"],
         words=("--out", "c.db", "--catalog", "destroy"), check=catalog_kept),
    Case("report-out-holds-the-catalog", lambda t, e: ["engine", "report", "--catalog", cat_copy(t), "--out", t,
                                                        "--overwrite"],
         words=("--out", "contains", "--catalog"), check=catalog_kept),
    Case("retrain-out-is-the-production", lambda t, e: ["engine", "retrain", "--production", run_copy(t), "--catalog",
                                                         cat_copy(t), "--out", t / "run", "--quiet"],
         words=("--out", "--production", "destroy"), check=checkpoint_kept),
    Case("ingest-out-is-the-videos", lambda t, e: ["engine", "ingest", "--out", videos(t), "--source", "video",
                                                    "--videos", t / "videos", "--overwrite", "--quiet"],
         words=("--out", "--videos", "destroy"), check=videos_kept),
    Case("ingest-out-inside-the-videos", lambda t, e: ["engine", "ingest", "--out", videos(t) / "fleet", "--source",
                                                        "video", "--videos", t / "videos", "--quiet"],
         words=("--out", "sits inside", "--videos"), check=videos_kept),
    Case("ingest-out-links-to-the-videos", lambda t, e: [
        "engine", "ingest", "--out", (t / "link").symlink_to(videos(t)) or t / "link", "--source", "video",
        "--videos", t / "videos", "--overwrite", "--quiet"],
         words=("--out", "resolves to", "--videos"), check=videos_kept),
    Case("train-out-is-the-data-root", train_into_data, words=("--out", "data.root", "destroy"), check=dataset_kept),
    # inputs read through the catalog: its fleets and a recorded fleet's recording (campaign: export-fiftyone --out the
    # fleet's source videos --overwrite deleted them)
    Case("report-out-is-the-catalogs-fleet", lambda t, e: ["engine", "report", "--catalog",
                                                            own_catalog(t, copy_dataset(t, e)), "--out", t / "ds",
                                                            "--overwrite"],
         words=("--out", "ds", "a fleet or recording of --catalog", "destroy"),
         check=lambda t: (t / "ds" / "dataset.json").is_file() or pytest.fail("the catalog's fleet was deleted")),
    Case("report-out-is-the-lake-catalogs-fleet", lambda t, e: ["engine", "report", "--catalog",
                                                                 own_catalog(t, copy_dataset(t, e), "lake"), "--out",
                                                                 t / "ds", "--overwrite"],
         words=("--out", "ds", "a fleet or recording of --catalog", "destroy"),
         check=lambda t: (t / "ds" / "dataset.json").is_file() or pytest.fail("the catalog's fleet was deleted")),
    Case("fiftyone-out-is-the-recorded-fleets-videos", lambda t, e: [
        "engine", "export-fiftyone", "--catalog", own_catalog(t, recorded_fleet_of_videos(t, e)), "--out",
        t / "rec_videos", "--overwrite"],
         words=("--out", "rec_videos", "a fleet or recording of --catalog", "destroy"),
         check=lambda t: (t / "rec_videos" / "keep.txt").read_text() == "mine" or pytest.fail("the videos were deleted")),
]


@pytest.mark.parametrize("case", params(CASES))
def test_apart_fault(case: Case, tmp_path, fault_env, engine_env, two_runs, monkeypatch, capsys):
    run_case(case, tmp_path, fault_env, monkeypatch, capsys)


def test_eval_beside_the_checkpoint_is_fine(tmp_path, fault_env, two_runs):
    """RUN/metrics.json beside RUN/checkpoint.pt: a run folder's other files are not its inputs."""
    run = run_copy(tmp_path)
    assert main(["eval", "--checkpoint", str(run), "--data", str(fault_env.dataset), "--out", str(run / "metrics.json"),
                 "--quiet"]) == 0
    assert file_kind(run / "metrics.json") == "json"
    checkpoint_kept(tmp_path)


def test_train_beside_its_data_is_fine(tmp_path, fault_env):
    """A run folder that holds its dataset (out/ with out/sim) only gains its own files."""
    ds = shutil.copytree(fault_env.dataset, tmp_path / "sim")
    assert main(["train", "--config", "tiny", "--out", str(tmp_path), "--quiet", "--set", f"data.root={ds}",
                 "--set", "steps=1", "--set", "device=cpu", "--set", "num_workers=0", "--set", "batch_size=1",
                 "--set", "data.image_size=[32,64]", "--set", "data.cameras=[CAM_FRONT]"]) == 0
    assert (tmp_path / "checkpoint.pt").is_file() and (ds / "dataset.json").is_file()
