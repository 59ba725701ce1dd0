"""A head added as docs/adding_a_head.md says works on the car side: its spec file, installed as an out-of-tree
head (the `hydranet.heads` entry point, read from the doc's own code block), is found by the torch-free
runtime, by `hydranet engine shadow` and by `hydranet engine triggers` (its trigger row, overridable from the engine
config) in a separate process where importing torch fails (issue 33 item 1;
in-process tests would pass even if the spec were reachable only through its torch task file)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from doc_head import doc_files, doc_head
from engine_fixtures import REPO, make_fleet
from fake_samples import make_batch

# every import of torch/torchvision fails in the child, and in the workers it starts (they read PYTHONPATH too)
BLOCK_TORCH = '''import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision"):
            raise ImportError(f"{name} is blocked: this process stands for a car without torch")
        return None


sys.meta_path.insert(0, _NoTorch())
'''

CHILD = '''import json, sqlite3, sys
from pathlib import Path

import cv2

from deploy.runtime import HydraRuntime
from hydranet.cli import main

onnx, fleet, catalog = (Path(a) for a in sys.argv[1:4])
rt = HydraRuntime(onnx)
frame = sorted((fleet / "scenes").iterdir())[0] / "000000"
images = [cv2.cvtColor(cv2.imread(str(frame / f"{c}.jpg")), cv2.COLOR_BGR2RGB) for c in rt.camera_names]
res = rt(images)
rc = main(["engine", "shadow", "--onnx", str(onnx), "--data", str(fleet), "--catalog", str(catalog), "--workers", "1",
           "--quiet"])
with sqlite3.connect(catalog) as db:
    rows = db.execute("SELECT frame_id, sky_fraction FROM signals WHERE status = 'ok' ORDER BY frame_id").fetchall()
values, frame_ids = [r[1] for r in rows], [r[0] for r in rows]
from data_engine.triggers import build_triggers  # the plugin's trigger row, with no edit in data_engine

names = [t.name for t in build_triggers()]
fired, triggers_rc = [], []
for sets in ([], ["--set", "triggers.sky_heavy.threshold=-1", "--set", "triggers.sky_heavy.quota=1"]):  # default, override
    triggers_rc.append(main(["engine", "triggers", "--catalog", str(catalog), *sets]))
    with sqlite3.connect(catalog) as db:
        fired.append([r[0] for r in db.execute("SELECT frame_id FROM trigger_hits WHERE trigger = 'sky_heavy' ORDER BY "
                                               "frame_id")])
try:
    import torch  # noqa: F401
    blocked = False
except ImportError:
    blocked = True
print(json.dumps({"masks": [r["mask"].shape for r in res["sky"]], "fractions": [float(r["mask"].mean()) for r in res["sky"]],
                  "shadow": rc, "signals": values, "frame_ids": frame_ids, "names": names, "fired": fired,
                  "triggers_rc": triggers_rc, "blocked": blocked, "torch": sorted(m for m in sys.modules if m.startswith("torch"))}))
'''


def _plugin(folder: Path) -> Path:
    """The doc's spec file as an installed out-of-tree head: module sky_head + a dist-info naming its entry point."""
    folder.mkdir()
    (folder / "sky_head.py").write_text(doc_files()[0])
    dist = folder / "skyhead-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: skyhead\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[hydranet.heads]\nsky = sky_head\n")
    (folder / "sitecustomize.py").write_text(BLOCK_TORCH)
    return folder


def test_doc_head_works_where_torch_cannot_be_imported(tmp_path):
    from deploy.export import export_model
    from hydranet.data import SimDataset
    from hydranet.experiment import DataConfig, ExperimentConfig
    from hydranet.models import ModelConfig, TaskConfig, build_model

    fleet = make_fleet(tmp_path / "fleet", clips=1, frames=2, seed=11)
    data = SimDataset(fleet, cameras=["CAM_FRONT", "CAM_BACK"])
    with doc_head():  # train the doc's head a few steps in-process, then export it
        torch.manual_seed(0)
        mcfg = ModelConfig(backbone="tiny", neck_width=16, neck_repeats=1, tasks=(TaskConfig("det2d"), TaskConfig("sky")))
        model = build_model(mcfg, data.meta)
        batch = make_batch(model.heads, [data[0], data[1]])
        opt = torch.optim.Adam(model.parameters(), lr=5e-3)
        first = None
        for _ in range(5):
            losses = model(batch, "loss")
            first = first if first is not None else losses["sky"].item()
            opt.zero_grad()
            model.backward(losses)
            opt.step()
        assert losses["sky"].item() < first
        model.eval()
        images = np.asarray(data[0]["images"])  # (N, H, W, 3) uint8
        cfg = ExperimentConfig(data=DataConfig(image_size=images.shape[1:3], cameras=("CAM_FRONT", "CAM_BACK")), model=mcfg)
        export_model(model, cfg, data.meta, tmp_path / "sky.onnx",
                     [{"images": images.transpose(0, 3, 1, 2).copy(), "scene": "s"}], simplify=False, verbose=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_plugin(tmp_path / "plug")), str(REPO)])}
    got = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "sky.onnx"), str(fleet), str(tmp_path / "cat.db")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    out = json.loads(got.stdout.strip().splitlines()[-1])
    assert out["blocked"] and out["torch"] == [], "torch was importable or imported in the child"
    assert out["masks"] == [list(images.shape[1:3])] * 2 and out["shadow"] == 0
    assert len(out["signals"]) == 2 and all(0.0 <= v <= 1.0 for v in out["signals"])  # both frames, a real fraction
    assert abs(out["signals"][0] - np.mean(out["fractions"])) < 1e-6  # frame 0's signal is its cameras' sky fraction
    # the spec's trigger row runs after the built-in heads' rows, before the cross-head ones, and fires on its column
    from data_engine.triggers import ENGINE_ROWS, TABLE

    builtin = [r[0] for r in TABLE[:len(TABLE) - len(ENGINE_ROWS)]]  # this process has no sky plugin
    assert out["names"] == [*builtin, "sky_heavy", *(r[0] for r in ENGINE_ROWS)]
    assert out["triggers_rc"] == [0, 0]
    sky = dict(zip(out["frame_ids"], out["signals"]))
    assert out["fired"][0] == sorted(f for f, v in sky.items() if v > 0.6)  # the doc's threshold
    assert out["fired"][1] == [min(sky, key=lambda f: (-sky[f], f))]  # configs' override: fires on all, quota 1


def test_a_broken_head_plugin_names_itself(tmp_path):
    """An entry point whose module fails to import is one line naming the plugin, not a traceback in importlib."""
    folder = tmp_path / "plug"
    folder.mkdir()
    (folder / "broken_head.py").write_text("raise RuntimeError('half-installed')\n")
    dist = folder / "broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[hydranet.heads]\nbroken = broken_head\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}
    got = subprocess.run([sys.executable, "-c", "import hydranet.heads"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert got.returncode != 0
    assert "head plugin 'broken' (broken_head, entry point group 'hydranet.heads') failed to load: RuntimeError: " \
           "half-installed; fix or uninstall the package that declares it" in got.stderr
