"""The numpy side of every head, one torch-free module per head: what the car, the dataset readers,
the training input and the data engine know of a head without torch.

A head is two files in two fixed places: `hydranet/heads/<name>.py` (its `HeadSpec`: decoder, label
keys, calibration need, engine signals, uncertainty columns, default trigger rows; no torch) and
`hydranet/tasks/<name>.py` (its torch `Task`, which names the spec as `Task.spec`). Importing this
package registers every head: the built-in ones in `BUILTIN` order (the order of the catalog's signal
columns), then every other module of this package (alphabetically), then the specs other installed packages declare under the
entry-point group `hydranet.heads` (an out-of-tree head: `sky = my_package.sky_head`, a module or a
spec class). No other registry exists: every per-head tuple of the stack is derived from `HEADS`
(`heads_where`): the sim's heads (`hydranet.data.sim_reader.SIM_HEADS`), the heads reading label
channel files (`PIXEL_HEADS`), those needing calibration (`hydranet.experiment.GEOMETRY_HEADS`), those
a person's 2D boxes supervise (`data_engine.retrain.HUMAN_HEADS`), the runtime's decoders
(`hydranet.decoding.DECODERS`, which loads this package for a kind it does not know), the engine's
per-head signal columns (`data_engine.signals.SIGNALS`), the miner's uncertainty columns, the
triggers' per-head rows (`data_engine.triggers.TABLE`) and the predictions shadow mode stores.
docs/adding_a_head.md walks through a new head.
"""
from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points
from types import ModuleType

from hydranet.heads.base import (HEADS, PEAK_MIN, PEAK_TOP_K, UNCERTAIN_BAND, DenseSignals, HeadSpec, PeakSignals,
                                 detections, entropy, heads_where, peak_scores, peak_stats, pixels, register_head,
                                 signal_columns)

BUILTIN = ("det2d", "lanes", "drivable", "depth", "normals", "signs_lights", "det3d", "bevmap")
ENTRY_POINT_GROUP = "hydranet.heads"


def specs_of(module: ModuleType) -> list[type[HeadSpec]]:
    """The head specs a module defines (not those it imports), in definition order."""
    return [v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, HeadSpec) and v.__module__ == module.__name__ and v.name]


def load_heads() -> None:
    """Register every head module of this package and every `hydranet.heads` entry point (idempotent)."""
    own = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in (*BUILTIN, "base"))
    for name in (*BUILTIN, *own):
        for spec in specs_of(importlib.import_module(f"{__name__}.{name}")):
            register_head(spec)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin names itself, not a traceback deep in importlib
            raise ImportError(f"head plugin {ep.name!r} ({ep.value}, entry point group {ENTRY_POINT_GROUP!r}) failed to "
                              f"load: {type(e).__name__}: {e}; fix or uninstall the package that declares it") from None
        specs = specs_of(obj) if isinstance(obj, ModuleType) else [obj]
        if not specs:
            raise ImportError(f"head plugin {ep.name!r} ({ep.value}) defines no HeadSpec subclass with a `name`")
        for spec in specs:
            register_head(spec)


load_heads()

from hydranet.heads.bevmap import BevMap  # noqa: E402 - registered above; the built-in specs by name
from hydranet.heads.depth import Depth  # noqa: E402
from hydranet.heads.det2d import Det2d  # noqa: E402
from hydranet.heads.det3d import Det3d  # noqa: E402
from hydranet.heads.drivable import Drivable  # noqa: E402
from hydranet.heads.lanes import Lanes  # noqa: E402
from hydranet.heads.normals import Normals  # noqa: E402
from hydranet.heads.signs_lights import SignsLights  # noqa: E402

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "HEADS", "PEAK_MIN", "PEAK_TOP_K", "UNCERTAIN_BAND", "BevMap", "DenseSignals",
           "Depth", "Det2d", "Det3d", "Drivable", "HeadSpec", "Lanes", "Normals", "PeakSignals", "SignsLights",
           "detections", "entropy", "heads_where", "load_heads", "peak_scores", "peak_stats", "pixels", "register_head",
           "signal_columns", "specs_of"]
