"""Catalog at scale: 1,000,000 synthetic frames (20 signal columns, a 128-d embedding each, no rendering)
written through the catalog's own API, then the queries the engine makes. Run by hand, not in CI:

    .venv/bin/python benchmarks/catalog_scale.py [--frames 1000000] [--clip-frames 100] [--dim 128] [--runs 5]

Prints one table: registration and ingest rates (`Catalog.add_fleet`, `Catalog.write_clip`: one
transaction per clip, WAL, synchronous=FULL), a top-1,000 query on a signal (`Catalog.top`, one SQL
scan; targets < 2 s), the whole signal table into numpy (`Catalog.table`, what mining reads), the
embedding matrix read into memory (`Catalog.embeddings`, once per Catalog object) and a
50-nearest-neighbour query on it (`Catalog.nearest`, target < 100 ms). Query times are the median of
--runs runs. Each query's answer is checked against numpy on the generated data. The catalog lives
in a temp folder under /tmp, deleted at the end.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_engine.catalog import Catalog
from data_engine.fleet import Clip
from data_engine.signals import SIGNALS


@dataclass
class SyntheticFleet:
    """What `Catalog.add_fleet` reads of a fleet, for `clips` x `frames` frames (nothing on disk)."""
    root: str
    clips: int
    frames: int
    rig_name: str = "synthetic"
    cameras: tuple = ("CAM_FRONT",)

    @property
    def clip_names(self) -> list[str]:
        return [f"clip_{i:06d}" for i in range(self.clips)]

    def clip(self, name: str) -> Clip:
        return Clip(name, [{"index": k, "dir": f"{k:06d}", "timestamp_us": k * 500_000} for k in range(self.frames)])


def timed(fn, runs: int) -> tuple[float, object]:
    """(median seconds over `runs` calls, the last result)."""
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def run(args) -> None:
    rng = np.random.default_rng(0)
    n_clips = args.frames // args.clip_frames
    n = n_clips * args.clip_frames
    cols = list(SIGNALS[: args.signals])
    tmp = Path(tempfile.mkdtemp(prefix="catalog_scale_", dir="/tmp"))
    rows_out = []
    try:
        path = tmp / "catalog.db"
        fleet = SyntheticFleet(str(tmp / "fleet"), n_clips, args.clip_frames)
        t0 = time.perf_counter()
        with Catalog(path, create=True) as cat:
            model = tmp / "model.onnx"
            model.write_bytes(b"synthetic")
            model_id = cat.add_model(model, {"rig": {"names": ["CAM_FRONT"]}, "heads": {}, "embedding": {"dim": args.dim}})
            fleet_id, clip_ids, frame_ids = cat.add_fleet(fleet)
            run_id = cat.add_run(model_id, None, fleet_id)
            t_reg = time.perf_counter() - t0
            values = rng.gamma(2.0, 1.0, (n, len(cols)))  # (n, S) per-frame signals
            emb = rng.standard_normal((n, 1, args.dim)).astype(np.float32)  # (n, N=1, C)
            ids = np.empty(n, np.int64)
            t0 = time.perf_counter()
            k = 0
            for name in fleet.clip_names:
                rows = []
                for f in range(args.clip_frames):
                    fid = frame_ids[(name, f)]
                    ids[k] = fid
                    rows.append({"frame_id": fid, "status": "ok", "signals": dict(zip(cols, values[k].tolist())),
                                 "embedding": emb[k]})
                    k += 1
                cat.write_clip(run_id, clip_ids[name], rows)
            t_ingest = time.perf_counter() - t0
        size_mb = sum(p.stat().st_size for p in tmp.glob("catalog.db*")) / 2**20
        rows_out += [("register fleet (clips + frames)", f"{t_reg:.1f} s", f"{n / t_reg:,.0f} frames/s"),
                     ("ingest signals + embeddings (write_clip)", f"{t_ingest:.1f} s", f"{n / t_ingest:,.0f} frames/s, "
                      f"{n_clips / t_ingest:,.0f} transactions/s"),
                     ("catalog size", f"{size_mb:,.0f} MiB", "")]

        with Catalog(path) as cat:
            for c in (cols[0], cols[len(cols) // 2], cols[-1]):
                t, (top_ids, top_vals) = timed(lambda c=c: cat.top(run_id, c, 1000), args.runs)
                j = cols.index(c)
                ref = np.lexsort((ids, -values[:, j]))[:1000]  # best first, ties by frame id
                assert np.array_equal(top_ids, ids[ref]) and np.allclose(top_vals, values[ref, j]), f"top-1000 of {c} is wrong"
                rows_out.append((f"top-1,000 on {c} (Catalog.top)", f"{t * 1e3:,.0f} ms", "target < 2 s: "
                                 + ("met" if t < 2 else "MISSED")))
            t0 = time.perf_counter()
            table = cat.table(run_id)
            t_table = time.perf_counter() - t0
            assert len(table["frame_id"]) == n
            rows_out.append(("whole signal table into numpy (Catalog.table)", f"{t_table:.1f} s", f"{n / t_table:,.0f} frames/s"))
            t0 = time.perf_counter()
            e_ids, e = cat.embeddings(run_id)
            t_load = time.perf_counter() - t0
            rows_out.append(("embedding matrix into memory (once per Catalog)", f"{t_load:.1f} s", f"{e.nbytes / 2**20:,.0f} MiB "
                             "float32, unit rows"))
            queries = rng.choice(n, args.runs, replace=False)
            times = []
            for q in queries:
                t0 = time.perf_counter()
                nn_ids, sims = cat.nearest(run_id, e[q], 50)
                times.append(time.perf_counter() - t0)
                ref = np.lexsort((e_ids, -(e @ e[q])))[:50]
                assert nn_ids[0] == e_ids[q] and np.array_equal(nn_ids, e_ids[ref]), "50-NN is wrong"
            t_nn = statistics.median(times)
            rows_out.append(("50-nearest-neighbour query (Catalog.nearest)", f"{t_nn * 1e3:,.1f} ms", "target < 100 ms: "
                             + ("met" if t_nn < 0.1 else "MISSED")))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# catalog at scale: {n:,} frames ({n_clips:,} clips x {args.clip_frames}), {len(cols)} signal columns, "
          f"{args.dim}-d embedding; median of {args.runs} runs per query\n")
    print("| step | time | rate / note |\n|---|---:|---|")
    print("\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows_out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--clip-frames", type=int, default=100, help="frames per clip (one transaction each)")
    ap.add_argument("--signals", type=int, default=20)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    run(ap.parse_args())
