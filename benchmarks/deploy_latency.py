"""Deploy latency table: torch eager fp32 vs ONNX Runtime fp32 vs ONNX Runtime int8 (+ TensorRT
where present), median and p90, pre/post-processing apart. Markdown and JSON into --out.

    .venv/bin/python benchmarks/deploy_latency.py --checkpoint runs/tiny [--data DIR] [--runs 50]

Same as `hydranet bench`; see deploy/bench.py. Timings are noisy on shared 2-core machines: read
the ratios."""
from __future__ import annotations

import argparse

from deploy.bench import run_bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--data", default=None, help="sim dataset for the frame and the int8 calibration")
    ap.add_argument("--out", default="out/bench")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    run_bench(a.checkpoint, a.out, a.data, a.runs, a.warmup, a.threads)


if __name__ == "__main__":
    main()
