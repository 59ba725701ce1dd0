"""The demo `make demo` runs: a small sim dataset and its preview picture (later issues add
training, evaluation and export to the same job)."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from hydranet.data import SimDataset
from hydranet.viz import sample_preview, write_png
from sim.config import SimConfig
from sim.generate import generate_dataset


def run_demo(out: Path, scenes: int = 4, seed: int = 0) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = out / "sim"
    if data.exists():
        shutil.rmtree(data)
    t0 = time.perf_counter()
    generate_dataset(data, SimConfig(frames_per_scene=10), scenes, seed)
    ds = SimDataset(data)
    print(f"generated {len(ds)} frames x {len(ds.rig)} cameras in {time.perf_counter() - t0:.1f} s -> {data}")
    preview = out / "preview.png"
    write_png(preview, sample_preview(ds[5], ds.meta))
    print(f"wrote {preview}")
