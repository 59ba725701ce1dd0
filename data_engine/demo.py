"""The demo's engine round (`make demo`, after the camera model is trained and exported): one round of
the loop with the demo's tiny model as production, on a small fleet rendered at the demo's image size.

fleet (6 clips x 4 frames, six cameras) -> shadow mode with the exported model -> the trigger table ->
mine 8 frames (hybrid) and their contact sheet -> oracle labels -> retrain 60 steps on the demo set plus
the labels -> export -> gate on the frozen suites (8 slices) -> promote or reject."""
from __future__ import annotations

import json
import time
from pathlib import Path

from data_engine.config import EngineConfig
from data_engine.loop import Loop

DEMO_SETS = ("loop.fleet_clips=6", "loop.budget=8", "loop.fleet_set=[sim.image_width=320,sim.image_height=192]",
             "retrain.steps=60", "suites.clips=1", "suites.frames=2")


def engine_round(out: Path, production: Path) -> dict:
    """Run the round into out (a fresh folder); print the trigger table, the mined selection and the gate table."""
    from data_engine.gate import format_gate
    from hydranet.config import load_config

    t0 = time.perf_counter()
    cfg = load_config(EngineConfig, "engine", list(DEMO_SETS))
    [summary] = Loop(out, cfg, production, progress=False, log=lambda line: None).run(1)
    rdir = out / "rounds" / "r000"
    report = (rdir / "report" / "report.md").read_text().split("\n## ")
    print("\n\n".join("## " + section.strip() for section in report[1:3]))  # the mined frames and the trigger table
    gate = json.loads((rdir / "gate" / "gate.json").read_text())
    # the gate: every head's aggregate over the suites and every (slice, head) that failed
    print(format_gate({**gate, "rows": [r for r in gate["rows"] if r["slice"] == "aggregate" or r["verdict"] == "fail"]}))
    print(summary["line"])
    print(f"wrote {rdir / 'report' / 'contact_sheet.png'}, {rdir / 'gate' / 'gate.md'} and the catalog {out / 'catalog.sqlite'}")
    print(f"[demo] engine round took {time.perf_counter() - t0:.1f} s")
    return summary
