"""Approximate nearest neighbours over a shadow run's frame embeddings: a FAISS inverted-file index (IVF-Flat,
Jégou, Douze & Schmid, "Product quantization for nearest neighbor search", TPAMI 2011; Johnson, Douze & Jégou,
"Billion-scale similarity search with GPUs", 2017), inner product on the catalog's unit vectors (cosine).

    hydranet engine similar --catalog C --frame ID --k 50 --ann

Exact search (`Catalog.nearest`, a matrix product over every embedding) stays the default and the reference:
benchmarks/catalog_scale.py measures recall@50 of this index against it. Diversity mining on a large lake pool
(data_engine/mining.py, `k_center_ann`) updates each pick's neighbourhood through `ball`, a range search. The
index is built once per run and then grows as clips arrive: it records the done clips it holds, and on every use
the run's clips done since are added (an index older than the parts is brought up to date, never a silent miss);
an index holding a clip the catalog does not mark done, or made for another catalog, is refused in one line
(delete it to rebuild).
Files: DIR/index/run=R.faiss + run=R.json in a catalog folder, CATALOG.db.index/ beside a catalog file; written
through a temp file and a rename.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from data_engine.catalog import Catalog
from data_engine.lake import EXTRA
from hydranet.io import atomic_path, atomic_write_text, read_json

NPROBE = 64  # inverted lists visited per query (of about sqrt(M)): recall@50 >= 0.95 on clustered embeddings
TRAIN_PER_LIST = 64  # k-means points per list (FAISS warns under 39): training costs sample x lists, so it is capped


class AnnError(ValueError):
    """An ANN index that cannot be used as asked; one line saying what to do."""


def _faiss():
    try:
        import faiss
    except ModuleNotFoundError:
        raise AnnError(f"--ann needs faiss-cpu, which is not installed: {EXTRA}; or search exactly without --ann") from None
    return faiss


def index_files(cat: Catalog, run_id: int) -> tuple[Path, Path]:
    folder = cat.path / "index" if cat.path.is_dir() else cat.path.with_name(cat.path.name + ".index")
    return folder / f"run={run_id}.faiss", folder / f"run={run_id}.json"


def _identity(cat: Catalog) -> str:
    return cat.lake.id if cat.lake is not None else str(cat.path.resolve())


def _clip_frames(cat: Catalog, clips: list[int]) -> set[int]:
    out: set[int] = set()
    for k in range(0, len(clips), 500):
        chunk = clips[k:k + 500]
        out |= {r[0] for r in cat.db.execute(f"SELECT id FROM frames WHERE clip_id IN ({', '.join('?' * len(chunk))})", chunk)}
    return out


def build(emb: np.ndarray, ids: np.ndarray, nlist: int | None = None):
    """An IVF-Flat index of unit rows `emb` (M, D) under ids `ids` (M,): nlist = sqrt(M) (at most M / 39, the
    k-means' points per centroid), trained on TRAIN_PER_LIST points per list. Build cost is training (sample x nlist)
    plus assignment (M x nlist): about 2 minutes at 10M frames on two cores; a query scans NPROBE / nlist of the rows."""
    faiss = _faiss()
    m, d = emb.shape
    nlist = nlist or max(1, min(int(math.sqrt(m)), m // 39))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
    n_train = TRAIN_PER_LIST * nlist
    sample = emb if m <= n_train else emb[np.sort(np.random.default_rng(0).choice(m, n_train, replace=False))]
    index.train(np.ascontiguousarray(sample, np.float32))
    index.add_with_ids(np.ascontiguousarray(emb, np.float32), np.asarray(ids, np.int64))
    return index


def open_index(cat: Catalog, run_id: int) -> tuple[Any, dict[str, Any]]:
    """(the run's index, {"added": frames added now, "clips": new clips, "built": True when made now}), built or
    brought up to date with the clips done since it was written."""
    faiss = _faiss()
    path, side = index_files(cat, run_id)
    done = cat.done_clips(run_id)
    ids, emb = cat.embeddings(run_id)
    if not path.is_file():
        if len(ids) == 0:
            raise AnnError(f"shadow run {run_id} of {cat.path} holds no embeddings to index")
        index, info = build(emb, ids), {"added": len(ids), "clips": len(done), "built": True}
    else:
        meta = read_json(side, "ANN index record", AnnError, f"delete {path} and its .json to rebuild the index")
        try:
            index = faiss.read_index(str(path))
        except RuntimeError:
            raise AnnError(f"ANN index {path} cannot be read (truncated or not a FAISS index); delete it and its .json to "
                           "rebuild it") from None
        held = set(meta.get("clips", []))
        if meta.get("catalog") != _identity(cat) or not held <= done or index.ntotal != meta.get("ntotal") \
                or index.d != emb.shape[1]:
            raise AnnError(f"ANN index {path} is not an index of this catalog's run {run_id} (another catalog, or clips "
                           "it holds are not done here); delete it and its .json to rebuild it")
        new = sorted(done - held)
        keep = np.isin(ids, np.fromiter(_clip_frames(cat, new), np.int64)) if new else np.zeros(len(ids), bool)
        if keep.any():
            index.add_with_ids(np.ascontiguousarray(emb[keep], np.float32), ids[keep])
        info = {"added": int(keep.sum()), "clips": len(new), "built": False}
    if info["added"] or info["built"]:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            faiss.write_index(index, str(tmp))
        atomic_write_text(side, json.dumps({"catalog": _identity(cat), "run": run_id, "clips": sorted(done),
                                            "ntotal": int(index.ntotal), "nlist": int(index.nlist)}) + "\n")
    return index, info


def search(index, query: np.ndarray, k: int, nprobe: int = NPROBE) -> tuple[np.ndarray, np.ndarray]:
    """(frame ids, cosine similarities) of the k nearest rows to `query` (D,), best first, ties by frame id."""
    index.nprobe = min(int(nprobe), int(index.nlist))
    q = np.asarray(query, np.float32).reshape(1, -1)
    q = q / max(float(np.linalg.norm(q)), 1e-12)
    sims, ids = index.search(q, int(k))
    ok = ids[0] >= 0
    ids, sims = ids[0][ok], sims[0][ok]
    order = np.lexsort((ids, -sims))
    return ids[order].astype(np.int64), sims[order]


def ball(index, query: np.ndarray, radius: float, nprobe: int = NPROBE) -> tuple[np.ndarray, np.ndarray]:
    """(frame ids, cosine distances) of the indexed rows closer than `radius` to the unit row `query` (D,), in no
    order: a FAISS range search over the `nprobe` inverted lists nearest the query (rows of lists not visited are
    missed: the approximation)."""
    index.nprobe = min(int(nprobe), int(index.nlist))
    q = np.asarray(query, np.float32).reshape(1, -1)
    _, sims, ids = index.range_search(q, float(1 - radius * radius / 2))  # |a - b|^2 = 2 - 2 a.b on unit rows
    return ids.astype(np.int64), np.sqrt(np.maximum(2 - 2 * sims.astype(np.float64), 0))


def recall_at(exact_ids: np.ndarray, ann_ids: np.ndarray) -> float:
    """The share of the exact k nearest that the ANN answer holds (recall@k)."""
    return len(set(exact_ids.tolist()) & set(ann_ids.tolist())) / max(len(exact_ids), 1)
