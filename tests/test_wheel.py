"""A real package: the wheel built from the repo, installed (not editable) into a fresh venv, runs
`hydranet sim preview` and a 2-step `hydranet train --config tiny` from a folder outside the repo,
so nothing can come from the source tree: rig presets, shaders and configs are package data.

To stay fast the fresh venv gets no pip and no dependencies of its own: a .pth line adds this
venv's site-packages (torch, moderngl, ...) after its own, and this venv's pip installs the wheel
into it with `--python`. The package is built from a copy of the working tree, so a concurrent
run never shares setuptools' build/ folder.
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", ".venv", "out", "runs", "build", "dist", "*.egg-info", "__pycache__",
                                ".pytest_cache", "*.pyc")


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: int = 300) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_shipped_configs_are_the_repo_configs():
    """One copy of each YAML: the packaged folder is a link to configs/."""
    assert (REPO / "hydranet" / "configs").resolve() == (REPO / "configs").resolve()


def test_config_names_resolve_to_shipped_files(tmp_path, monkeypatch):
    from hydranet.config import ConfigError, resolve_config_path, shipped_config_names

    assert {"tiny", "bev", "sim"} <= set(shipped_config_names())
    assert resolve_config_path("tiny").read_text() == (REPO / "configs" / "tiny.yaml").read_text()
    with pytest.raises(ConfigError, match=r"config 'tinyy' is neither a file nor a shipped config;.*'tiny'"):
        resolve_config_path("tinyy")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").write_text("steps: 1\n")  # a file of that name wins over the shipped config
    assert resolve_config_path("tiny") == Path("tiny")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(venv, a working folder outside the repo) with the wheel installed non-editable."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    shutil.copytree(REPO, src, symlinks=True, ignore=IGNORE)
    _run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", dist], cwd=src)
    wheels = list(dist.glob("hydranet_stack-*.whl"))
    assert len(wheels) == 1, wheels
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp)
    py = venv / "bin" / "python"
    own_site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp).strip())
    deps = sysconfig.get_paths()["purelib"]  # this venv's site-packages: torch and the other dependencies
    assert deps in site.getsitepackages()
    (own_site / "_hydranet_test_deps.pth").write_text(deps + "\n")
    _run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", "-q", wheels[0]], cwd=tmp)
    work = tmp / "work"
    work.mkdir()
    return venv, work


def test_wheel_installs_and_runs(installed):
    venv, work = installed
    py, cli = venv / "bin" / "python", venv / "bin" / "hydranet"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = _run([py, "-c", "import hydranet, sim, deploy; print(hydranet.__file__, sim.__file__, deploy.__file__)"],
                 cwd=work, env=env).split()
    for f in where:  # the installed copy, not the editable source
        assert Path(f).resolve().is_relative_to(venv.resolve()), where
    small = ["--set", "image_width=96", "--set", "image_height=64", "--set", "frames_per_scene=2"]
    _run([cli, "sim", "preview", "--out", work / "p.png", "--set", "frames_per_scene=1"] + small[:4], cwd=work, env=env)
    assert (work / "p.png").stat().st_size > 0
    _run([cli, "sim", "generate", "--out", work / "ds", "--scenes", "1", "--quiet"] + small, cwd=work, env=env)
    _run([cli, "train", "--config", "tiny", "--out", work / "run", "--quiet", "--set", "data.root=ds",
          "--set", "data.cameras=[CAM_FRONT]", "--set", "data.image_size=[64,96]", "--set", "steps=2",
          "--set", "batch_size=2", "--set", "num_workers=0", "--set", "amp=false", "--set", "checkpoint_every=2",
          "--set", "log_every=1"], cwd=work, env=env)
    assert (work / "run" / "checkpoint.pt").is_file()
