"""Catalog at scale: synthetic frames (20 signal columns, a 128-d embedding each, no rendering) written through
the catalog's own API, then the queries the engine makes, on either backend. Run by hand, not in CI:

    .venv/bin/python benchmarks/catalog_scale.py --backend sqlite|lake [--frames 1000000] [--clip-frames 100]
                                                 [--writers 2] [--dim 128] [--runs 5] [--mine-budget 100] [--no-compact]

Prints one table: registration (`Catalog.add_fleet`) and ingest (sqlite: `Catalog.write_clip`, one transaction
per clip, WAL, synchronous=FULL, one writer; lake: `--writers` processes each writing its clips' Parquet parts
itself, `lake.write_frames_part`, the driver committing the done markers, `Catalog.commit_clip`; measured with 1
writer and with --writers so the scaling is visible; then the compaction `engine shadow` does as it ends,
`Catalog.compact`, unless --no-compact), a top-1,000 query on a signal (`Catalog.top`), the whole
signal table into numpy (`Catalog.table`, what mining reads), the embedding matrix into memory
(`Catalog.embeddings`), exact 50-nearest-neighbour (`Catalog.nearest`), and the FAISS IVF index
(data_engine/ann.py): build time, size, query time and recall@50 against the exact answer; then diversity
mining's k-center greedy over every frame for --mine-budget picks, exact (`mining.k_center_greedy`) and through
the index (`mining.k_center_ann`): time, and the coverage radius (the largest distance of a frame to its nearest
pick, what k-center minimises) of each and of a random pick of as many frames. The embeddings are
clustered (1,000 centres + noise, as a model's embeddings of a fleet are; uniform noise has no neighbours to
find). Query times are the median of --runs runs; each answer is checked against numpy on the generated data.
The catalog lives in a temp folder under /tmp, deleted at the end.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
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


def log(stage: str) -> None:
    """Progress on stderr: the stage done, this process's resident memory now and at its peak (Linux)."""
    status = Path("/proc/self/status").read_text() if Path("/proc/self/status").exists() else ""
    mem = {ln.split(":")[0]: int(ln.split()[1]) / 2**20 for ln in status.splitlines() if ln.startswith(("VmRSS", "VmHWM"))}
    print(f"[{time.strftime('%H:%M:%S')}] {stage}: RSS {mem.get('VmRSS', 0):.1f} GiB (peak {mem.get('VmHWM', 0):.1f})",
          file=sys.stderr, flush=True)


class Rows(list):
    """The table's rows, each also printed on stderr as it comes (a run killed late keeps what it measured)."""

    def append(self, row: tuple[str, str, str]) -> None:
        super().append(row)
        print("| " + " | ".join(row) + " |", file=sys.stderr, flush=True)

    def __iadd__(self, rows):
        for r in rows:
            self.append(r)
        return self


def timed(fn, runs: int) -> tuple[float, object]:
    """(median seconds over `runs` calls, the last result)."""
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def synthetic_rows(seed: int, ids: list[int], cols: list[str], dim: int, centres: np.ndarray) -> list[dict]:
    """A clip's rows at the real row width: every signal, a (1, dim) embedding near one of `centres`."""
    rng = np.random.default_rng(seed)
    values = rng.gamma(2.0, 1.0, (len(ids), len(cols)))
    emb = centres[rng.integers(0, len(centres), len(ids))] + rng.normal(scale=0.35, size=(len(ids), dim))
    return [{"frame_id": f, "status": "ok", "signals": dict(zip(cols, values[k].tolist())),
             "embedding": emb[k:k + 1].astype(np.float32)} for k, f in enumerate(ids)]


def _lake_writer(job: tuple) -> int:
    """One writer process: its clips' parts (as a shadow worker writes them); returns the frames written."""
    from data_engine.lake import write_frames_part

    lake, clips, cols, dim, centres = job
    n = 0
    for clip_id, name, ids, idx in clips:
        write_frames_part(lake, clip_id, name, idx, synthetic_rows(clip_id, ids, cols, dim, centres))
        n += len(ids)
    return n


def ingest_lake(cat: Catalog, run_id: int, clips: list[tuple], cols, dim, centres, writers: int) -> tuple[float, float]:
    """(seconds to write every clip's part from `writers` processes and commit every done marker, of which committing)."""
    import multiprocessing as mp

    from data_engine.lake_catalog import lake_ref

    lake = lake_ref(cat.lake, run_id)
    jobs = [(lake, clips[w::writers], cols, dim, centres) for w in range(writers)]
    t0 = time.perf_counter()
    with mp.get_context("fork").Pool(writers) as pool:
        for _ in pool.imap_unordered(_lake_writer, jobs):
            pass
    t1 = time.perf_counter()
    for clip_id, *_ in clips:
        cat.commit_clip(run_id, clip_id)
    return time.perf_counter() - t0, time.perf_counter() - t1


def run(args) -> None:
    from data_engine.ann import build, recall_at, search
    from data_engine.lake import create

    rng = np.random.default_rng(0)
    n_clips = args.frames // args.clip_frames
    n = n_clips * args.clip_frames
    cols = list(SIGNALS[: args.signals])
    centres = rng.normal(size=(1000, args.dim))
    tmp = Path(tempfile.mkdtemp(prefix="catalog_scale_", dir="/tmp"))
    rows_out = Rows()
    try:
        path = create(tmp / "lake", "lake") if args.backend == "lake" else tmp / "catalog.db"
        fleet = SyntheticFleet(str(tmp / "fleet"), n_clips, args.clip_frames)
        t0 = time.perf_counter()
        with Catalog(path, create=True) as cat:
            model = tmp / "model.onnx"
            model.write_bytes(b"synthetic")
            rig = {"names": ["CAM_FRONT"], "image_size": [64, 96], "K": [np.eye(3).tolist()], "cam2ego": [np.eye(4).tolist()],
                   "source_sizes": [[64, 96]]}  # a complete metadata rig: add_model reads it as deploy.metadata.ModelRig
            model_id = cat.add_model(model, {"rig": rig, "heads": {}, "embedding": {"dim": args.dim}})
            fleet_id, clip_ids, frame_ids = cat.add_fleet(fleet)
            run_id = cat.add_run(model_id, None, fleet_id)
            t_reg = time.perf_counter() - t0
            clips = [(clip_ids[name], name, [frame_ids[(name, f)] for f in range(args.clip_frames)],
                      {frame_ids[(name, f)]: f for f in range(args.clip_frames)}) for name in fleet.clip_names]
            del frame_ids  # 10M (clip, index) keys: gigabytes the later stages need
            log("registered")
            rows_out.append(("register fleet (clips + frames, SQLite)", f"{t_reg:.1f} s", f"{n / t_reg:,.0f} frames/s"))
            if args.backend == "lake":
                half = clips[: len(clips) // 2]
                t1, _ = ingest_lake(cat, run_id, half, cols, args.dim, centres, 1)
                n1 = sum(len(c[2]) for c in half)
                tw, tc = ingest_lake(cat, run_id, clips[len(half):], cols, args.dim, centres, args.writers)
                nw, cw = n - n1, len(clips) - len(half)
                del half
                rows_out += [("ingest, 1 writer (parts + done markers)", f"{t1:.1f} s", f"{n1 / t1:,.0f} frames/s"),
                             (f"ingest, {args.writers} writers", f"{tw:.1f} s", f"{nw / tw:,.0f} frames/s, x{(nw / tw) / (n1 / t1):.2f} "
                              "of 1 writer"),
                             ("driver: done markers (commit_clip)", f"{tc:.2f} s", f"{cw / tc:,.0f} clips/s = "
                              f"{cw / tc * args.clip_frames:,.0f} frames/s, the ceiling of N writers")]
                if args.compact:
                    t0 = time.perf_counter()
                    got = cat.compact(run_id)
                    tk = time.perf_counter() - t0
                    rows_out.append(("compaction (Catalog.compact, as engine shadow ends)", f"{tk:.1f} s",
                                     f"{got['clips']:,} clip parts -> {got['blocks']} blocks, {n / tk:,.0f} frames/s"))
            else:
                t0 = time.perf_counter()
                for clip_id, _name, ids, _ in clips:
                    cat.write_clip(run_id, clip_id, synthetic_rows(clip_id, ids, cols, args.dim, centres))
                t_ingest = time.perf_counter() - t0
                rows_out.append(("ingest, 1 writer (write_clip)", f"{t_ingest:.1f} s", f"{n / t_ingest:,.0f} frames/s, "
                                 f"{n_clips / t_ingest:,.0f} transactions/s"))
        del clips
        log("ingested")
        size_mb = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file() and "fleet" not in p.parts) / 2**20
        rows_out.append(("catalog size on disk", f"{size_mb:,.0f} MiB", ""))
        with Catalog(path) as cat:
            t0 = time.perf_counter()
            table = cat.table(run_id)
            t_table = time.perf_counter() - t0
            assert len(table["frame_id"]) == n
            log("whole table read")
            signal_cols = {c: table[c] for c in (cols[0], cols[-1])}
            frame_col = table["frame_id"]
            del table  # at 10M frames the whole table is gigabytes: keep the two columns the checks need
            for c in (cols[0], cols[-1]):
                t, (top_ids, top_vals) = timed(lambda c=c: cat.top(run_id, c, 1000), args.runs)
                ref = np.lexsort((frame_col, -signal_cols[c]))[:1000]  # best first, ties by frame id
                assert np.array_equal(top_ids, frame_col[ref]) and np.allclose(top_vals, signal_cols[c][ref]), c
                rows_out.append((f"top-1,000 on {c} (Catalog.top)", f"{t * 1e3:,.0f} ms", "target < 1 s: "
                                 + ("met" if t < 1 else "MISSED")))
            rows_out.append(("whole signal table into numpy (Catalog.table)", f"{t_table:.1f} s", f"{n / t_table:,.0f} frames/s; "
                             "target < 5 s: " + ("met" if t_table < 5 else "MISSED")))
            t0 = time.perf_counter()
            e_ids, e = cat.embeddings(run_id)
            t_load = time.perf_counter() - t0
            log("embeddings read")
            rows_out.append(("embedding matrix into memory (once per Catalog)", f"{t_load:.1f} s", f"{e.nbytes / 2**20:,.0f} MiB "
                             "float32, unit rows"))
            queries = rng.choice(n, args.runs, replace=False)
            times, exact = [], {}
            for q in queries:
                t0 = time.perf_counter()
                nn_ids, _ = cat.nearest(run_id, e[q], 50)
                times.append(time.perf_counter() - t0)
                exact[int(q)] = nn_ids
            rows_out.append(("exact 50-NN query (Catalog.nearest)", f"{statistics.median(times) * 1e3:,.1f} ms", "the reference"))
        t0 = time.perf_counter()
        index = build(e, e_ids)
        t_build = time.perf_counter() - t0
        log("index built")
        import faiss

        faiss.write_index(index, str(tmp / "index.faiss"))  # its size on disk is its size in memory (IVF-Flat)
        mib = (tmp / "index.faiss").stat().st_size / 2**20
        rows_out.append(("ANN index build (FAISS IVF-Flat)", f"{t_build:.1f} s", f"{index.nlist} lists, {mib:,.0f} MiB"))
        times, recalls = [], []
        for q, ref in exact.items():
            t0 = time.perf_counter()
            got, _ = search(index, e[q], 50)
            times.append(time.perf_counter() - t0)
            recalls.append(recall_at(ref, got))
        t_ann = statistics.median(times)
        rows_out.append(("ANN 50-NN query", f"{t_ann * 1e3:,.2f} ms", f"recall@50 vs exact {np.mean(recalls):.3f} (min "
                         f"{min(recalls):.2f}) over {len(recalls)} queries; targets < 50 ms, >= 0.95: "
                         + ("met" if t_ann < 0.05 and np.mean(recalls) >= 0.95 else "MISSED")))
        log("ANN queried")
        if args.mine_budget:
            rows_out += mining_rows(e, e_ids, index, args.mine_budget, exact=n <= args.exact_mine_max)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# catalog at scale, backend {args.backend}: {n:,} frames ({n_clips:,} clips x {args.clip_frames}), {len(cols)} "
          f"signal columns, {args.dim}-d embedding; median of {args.runs} runs per query\n")
    print("| step | time | rate / note |\n|---|---:|---|")
    print("\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows_out))


def coverage_radius(emb: np.ndarray, picks) -> float:
    """The largest cosine distance of any row to its nearest pick (rows in chunks: (M, picks) does not fit at 10M)."""
    worst = np.inf
    for s in range(0, len(emb), 262_144):
        worst = min(worst, float((emb[s:s + 262_144] @ emb[list(picks)].T).max(1).min()))
    return float(np.sqrt(max(2 - 2 * worst, 0)))


def mining_rows(e: np.ndarray, ids: np.ndarray, index, budget: int, exact: bool = True) -> list[tuple[str, str, str]]:
    """Diversity's k-center greedy over every frame, through the ANN index and (with `exact`) exactly: time and
    coverage radius. Exact k-center works on a float64 copy of the pool (10 GB at 10M frames): skipped above
    --exact-mine-max."""
    from data_engine.mining import index_ball, k_center_ann, k_center_greedy

    t0 = time.perf_counter()
    approx, _ = k_center_ann(e, budget, index_ball(index, ids, e))
    t_ann = time.perf_counter() - t0
    r_ann = coverage_radius(e, approx)
    r_rand = coverage_radius(e, np.random.default_rng(1).choice(len(e), budget, replace=False))
    rows = [(f"diversity k-center, {budget} picks, through the ANN index (`k_center_ann`)", f"{t_ann:.1f} s",
             f"coverage radius {r_ann:.3f} (random picks: {r_rand:.3f})")]
    if not exact:
        return rows + [(f"diversity k-center, {budget} picks, exact (`k_center_greedy`)", "skipped",
                        f"its float64 copy of {len(e):,} embeddings does not fit beside the index (--exact-mine-max)")]
    t0 = time.perf_counter()
    exact_picks, _ = k_center_greedy(e, budget)
    t_exact = time.perf_counter() - t0
    r_exact = coverage_radius(e, exact_picks)
    return rows + [(f"diversity k-center, {budget} picks, exact (`k_center_greedy`)", f"{t_exact:.1f} s",
                    f"coverage radius {r_exact:.3f}; the index's is {r_ann / r_exact:.3f} of it, x{t_exact / t_ann:.0f} "
                    f"faster; {len(set(exact_picks) & set(approx))} picks in common")]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--clip-frames", type=int, default=100, help="frames per clip (one transaction each)")
    ap.add_argument("--signals", type=int, default=20)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--backend", default="sqlite", choices=["sqlite", "lake"])
    ap.add_argument("--writers", type=int, default=2, help="lake: parallel writer processes for the second half")
    ap.add_argument("--no-compact", dest="compact", action="store_false", help="lake: query the clip parts as written "
                    "(one per clip), not compacted into blocks")
    ap.add_argument("--exact-mine-max", type=int, default=2_000_000, help="exact k-center only up to this many frames")
    ap.add_argument("--mine-budget", type=int, default=100, help="diversity k-center picks, exact and through the ANN "
                    "index (0: skip)")
    run(ap.parse_args())
