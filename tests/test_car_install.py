"""The car side installs without torch (../shared/DESIGN.md, "Layering"; README "Installing").

`pip install .` with no extras, into a fresh venv, is what a car (a Jetson, whose torch comes from
JetPack, never from the package index) gets: numpy, onnxruntime, OpenCV, PyYAML, tqdm and the
packages. The test installs it for real, checks torch is not installed there (not merely blocked),
runs deploy.runtime on a model exported here (this venv, torch) and compares its outputs with this
venv's runtime. It also checks what a `hydranet` command prints when its extra is missing.

Speed: the venv is made without pip (this venv's pip installs into it with `--python`, reusing
pip's cache), the package is built from a copy of the working tree (a concurrent run never shares
setuptools' build/ folder, and nothing is written into the checkout), and the install runs while
the model exports. pip builds the package with build isolation, as a user's `pip install .` does,
so setuptools comes from the configured index like the dependencies.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(".git", ".venv", ".venv-*", "out", "runs", "build", "dist", "*.egg-info", "__pycache__",
                                ".pytest_cache", "*.pyc")
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

# run in either venv: two frames of a video model through HydraRuntime.step, and the raw outputs of one
RUNTIME_SCRIPT = """
import pickle, sys
import numpy as np
import deploy.runtime
from deploy.runtime import HydraRuntime

frames = np.load(sys.argv[2])
rt = HydraRuntime(sys.argv[1], threads=1)
out = {"steps": [rt.step(list(img), ego2world=pose) for img, pose in zip(frames["images"], frames["ego2world"])],
       "raw": rt.run(rt.feeds(rt.preprocess(list(frames["images"][0])))),
       "torch_loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision")),
       "runtime_file": deploy.runtime.__file__}
with open(sys.argv[3], "wb") as f:
    pickle.dump(out, f)
"""

PROBE = ("import importlib.metadata as md, importlib.util, json, sys\n"
         "def dist(n):\n"
         "    try:\n"
         "        return md.version(n)\n"
         "    except md.PackageNotFoundError:\n"
         "        return None\n"
         "print(json.dumps({'spec': {m: importlib.util.find_spec(m) is not None for m in ('torch', 'torchvision', 'moderngl')},"
         " 'dist': {n: dist(n) for n in ('torch', 'torchvision', 'moderngl', 'onnxruntime', 'numpy', 'hydranet-stack')},"
         " 'prefix': sys.prefix}))")


def _run(cmd: list, cwd: Path, timeout: int = 300, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _export_video_model(out: Path) -> dict:
    """A random-weight model with camera heads (det2d, lanes, drivable, depth) and BEV heads with the
    video module (det3d, bevmap) on a 6-camera 96x64 rig, exported as `hydranet export` does (less
    onnxslim, which only costs time here); two frames of inputs for it."""
    import torch
    from fake_samples import BEV_META, TINY_BEV, TINY_BEV_CONFIG, bev_sample

    from deploy.export import export_model
    from hydranet.experiment import DataConfig, ExperimentConfig
    from hydranet.models import build_model
    from hydranet.models.config import TaskConfig
    from hydranet.rig import load_rig

    torch.manual_seed(0)
    rig = load_rig("nuscenes6").resized(96, 64)
    tasks = tuple(TaskConfig(n, options={"width": 16}) for n in ("det2d", "lanes", "drivable", "depth")) + TINY_BEV.tasks
    mcfg = dataclasses.replace(TINY_BEV, bev=dataclasses.replace(TINY_BEV_CONFIG, video_frames=2), tasks=tasks)
    meta = {**BEV_META, "rig": rig.to_dict()}
    model = build_model(mcfg, meta).eval()
    cfg = ExperimentConfig(data=DataConfig(image_size=(64, 96)), model=mcfg)
    samples = [bev_sample(rig, seed=s) for s in range(2)]
    frames = [{"images": np.ascontiguousarray(s["images"].transpose(0, 3, 1, 2)), "ego2world": s["ego2world"], "scene": "s0"}
              for s in samples]
    export_model(model, cfg, meta, out, frames, simplify=False, verbose=False)
    return {"images": np.stack([s["images"] for s in samples]), "ego2world": np.stack([s["ego2world"] for s in samples])}


@pytest.fixture(scope="module")
def car(tmp_path_factory) -> dict:
    """A fresh venv with `pip install <copy of the repo>` (no extras), a model and its frames."""
    tmp = tmp_path_factory.mktemp("car")
    src, venv, work = tmp / "src", tmp / "venv", tmp / "work"
    work.mkdir()
    shutil.copytree(REPO, src, symlinks=True, ignore=IGNORE)
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp)
    py = venv / "bin" / "python"
    install = subprocess.Popen([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-input", str(src)],
                               cwd=work, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        frames = _export_video_model(work / "model.onnx")
    finally:
        out, err = install.communicate(timeout=600)
    assert install.returncode == 0, f"pip install {src} (no extras) exited {install.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    np.savez(work / "frames.npz", **frames)
    (work / "run_runtime.py").write_text(RUNTIME_SCRIPT)
    return {"venv": venv, "py": py, "work": work}


def _same(a, b, where: str = "") -> None:
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=where)
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


@pytest.mark.slow
def test_plain_install_is_the_car_side_without_torch(car):
    import json

    py, work = car["py"], car["work"]
    probe = json.loads(_run([py, "-c", PROBE], cwd=work).stdout)
    assert Path(probe["prefix"]).resolve() == car["venv"].resolve()
    assert probe["spec"] == {"torch": False, "torchvision": False, "moderngl": False}, probe  # not installed at all
    assert probe["dist"]["torch"] is None and probe["dist"]["torchvision"] is None, probe
    assert probe["dist"]["onnxruntime"] and probe["dist"]["numpy"] and probe["dist"]["hydranet-stack"] == "0.1.0", probe

    _run([py, work / "run_runtime.py", work / "model.onnx", work / "frames.npz", work / "car.pkl"], cwd=work)
    _run([sys.executable, work / "run_runtime.py", work / "model.onnx", work / "frames.npz", work / "here.pkl"], cwd=work)
    got, want = (pickle.loads((work / f"{n}.pkl").read_bytes()) for n in ("car", "here"))
    assert Path(got["runtime_file"]).resolve().is_relative_to(car["venv"].resolve()), got["runtime_file"]  # the installed copy
    assert got["torch_loaded"] == [] and want["torch_loaded"] == []
    assert {"det2d", "lanes", "drivable", "depth", "det3d", "bevmap"} <= set(got["steps"][0])
    _same(got["steps"], want["steps"], "steps")
    _same(got["raw"], want["raw"], "raw")

    # the `hydranet` command is there; one that needs torch says which extra, in one line
    res = _run([car["venv"] / "bin" / "hydranet", "train", "--config", "tiny", "--out", work / "run"], cwd=work, ok=False)
    assert res.returncode == 2, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: `hydranet train` needs the train extra (torch is not installed): "
                                                   "pip install 'hydranet-stack[train]'"), res.stderr[-3000:]


# -- what a command prints when its extra is missing -----------------------------------------------------
def _cli_without(modules: tuple[str, ...], argv: list, cwd: Path) -> subprocess.CompletedProcess:
    """`hydranet *argv` in this venv with `modules` made unimportable (sys.modules[name] = None)."""
    code = (f"import sys\nfor m in {modules!r}: sys.modules[m] = None\n"
            "from hydranet.cli import main\nsys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("blocked, argv, line", [
    (("torch", "torchvision"), ["train", "--config", "tiny", "--out", "run"],
     "error: `hydranet train` needs the train extra (torch is not installed): pip install 'hydranet-stack[train]' "
     "(from a checkout: pip install '.[train]'); on a Jetson install JetPack's torch and torchvision first"),
    (("moderngl",), ["sim", "generate", "--out", "ds", "--scenes", "1", "--quiet", "--set", "frames_per_scene=1",
                     "--set", "image_width=64", "--set", "image_height=32"],
     "error: `hydranet sim generate` needs the sim extra (moderngl is not installed): pip install 'hydranet-stack[sim]' "
     "(from a checkout: pip install '.[sim]')"),
])
def test_missing_extra_is_one_line_naming_it(tmp_path, blocked, argv, line):
    res = _cli_without(blocked, argv, tmp_path)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-3000:]
    assert res.stderr.strip().splitlines() == [line], res.stderr[-3000:]


def test_missing_extra_mapping():
    from hydranet.cli.main import missing_extra

    def err(name):
        return ModuleNotFoundError(f"No module named '{name}'", name=name)

    assert "needs the all extra (torch is not installed): pip install 'hydranet-stack[all]'" in missing_extra(err("torch"), "demo")
    assert "needs the engine extra (moderngl" in missing_extra(err("moderngl"), "engine fleet")
    assert "needs the ray extra (pyarrow" in missing_extra(err("pyarrow"), "engine shadow")
    assert "`hydranet export` needs the train extra (onnxslim" in missing_extra(err("onnxslim"), "export")
    try:  # an error of ours raised while handling the import, as sim.render does for moderngl
        try:
            raise err("moderngl")
        except ImportError:
            raise RuntimeError("moderngl is not installed") from None
    except RuntimeError as e:
        assert "`hydranet sim preview` needs the sim extra (moderngl" in missing_extra(e, "sim preview")
    assert missing_extra(err("numpy_helpers_nobody_ships"), "train") is None  # no extra brings it: a bug, traceback
    assert missing_extra(err("torch._no_such_part"), "train") is None  # torch is there but broken: traceback
    assert missing_extra(ImportError("cannot import name 'x'", name="torch"), "train") is None
    assert missing_extra(ValueError("x"), "train") is None
