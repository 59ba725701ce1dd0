"""Training throughput against this CPU's measured peak (issue 26.1), and the step's speed options.

For each config: images per second of train.py's full training step (forward in "loss" mode,
check_finite, zero_grad, model.backward, gradient clipping, AdamW, scheduler) on batches
pre-loaded in memory (the loader is out of it); the model's FLOPs per image counted with
torch.utils.flop_counter.FlopCounterMode (forward and backward: matmuls and convolutions, the ops
it counts); the achieved GFLOP/s; and this machine's peak measured in the same run with the same
torch thread count: a large fp32 matmul, and forward + backward of the conv that carries the most
FLOPs in the model (its shape, stride and groups). Achieved / peak is printed for both.

Run by hand, not in CI:

    .venv/bin/python benchmarks/train_throughput.py [--config configs/tiny.yaml --config configs/regnet.yaml]
        [--steps 10] [--warmup 2] [--repeats 3] [--threads 2] [--profile] [--json out.json]
        [--variants baseline,channels_last,fused,foreach,bf16,compile] [--curve 100]

- Data: a sim dataset with the demo settings at --data (generated if missing, as
  loader_overhead.py does), resized by the loader to each config's data.image_size.
- regnet is run at its shipped image size and widths (512x896, regnet_y_800mf, 5-level neck 128
  wide) but on --regnet-set (default batch_size=1, camera CAM_FRONT): its shipped
  batch (4 x 6 cameras) does not fit a 2-core machine's minutes. Images/s is per camera image.
- Variants (each its own model from the same seed, timed interleaved: one block of --steps per
  variant per repeat, median of the repeats' median step): baseline = train.py as it is;
  channels_last = model in torch.channels_last (the first conv turns the NCHW input); fused /
  foreach = AdamW(fused=True) / AdamW(foreach=True); bf16 = CPU autocast to bfloat16 around the
  forward; compile = torch.compile of backbone and neck (CPU inductor; its compile time printed).
- --profile: torch.profiler over one baseline step; the ops' self times grouped into buckets
  (convolutions, other forward ops, losses and target assignment, other backward ops, optimizer,
  Python/dispatch overhead).
- --curve N: N training steps of each variant from seed 0 and of the baseline from seeds 0, 1, 2
  (the run-to-run spread); prints each run's final loss (mean of its last 10 steps).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from hydranet.config import add_override_option
from hydranet.experiment import load_experiment
from hydranet.loader import Collate, StepBatchSampler
from hydranet.models import build_model
from hydranet.train import Dist, build_training_data, check_finite, make_optimizer, make_scheduler
from hydranet.data.sources import open_sources, run_dataset

REPO = Path(__file__).resolve().parents[1]
SCOPES = ("loss", "forward", "backward", "optimizer")  # innermost first
OPTIONS = ("channels_last", "fused", "foreach", "bf16", "compile")  # a variant: options joined by '+'
REGNET_SET = "batch_size=1;data.cameras=[CAM_FRONT]"


def load() -> str:
    """The machine's load average (1, 5, 15 min) as `uptime` prints it."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def ensure_sim(path: Path) -> Path:
    if not (path / "dataset.json").is_file():  # demo settings, as benchmarks/loader_overhead.py
        from sim.config import SimConfig
        from sim.generate import generate_dataset

        generate_dataset(path, SimConfig(frames_per_scene=10, image_width=320, image_height=192), 3, 0, progress=False)
    return path


# -- the step --------------------------------------------------------------------------------
class Stepper:
    """train.py's step on its own model, with one variant's speed options."""

    def __init__(self, cfg, meta: dict, variant: str, seed: int, total: int):
        torch.manual_seed(seed)
        self.cfg, self.opts = cfg, set(variant.split("+")) - {"baseline"}
        unknown = self.opts - set(OPTIONS)
        if unknown:
            raise ValueError(f"unknown variant option(s) {sorted(unknown)}; known: baseline, {', '.join(OPTIONS)}")
        self.model = build_model(cfg.model, meta)
        if "channels_last" in self.opts:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.optimizer = make_optimizer(cfg.optim, self.model)
        for impl in self.opts & {"fused", "foreach"}:  # same groups, the other AdamW implementation
            groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in self.optimizer.param_groups]
            self.optimizer = torch.optim.AdamW(groups, lr=cfg.optim.lr, **{impl: True})
        self.scheduler = make_scheduler(cfg.optim, self.optimizer, total)
        self.compile_s = 0.0
        if "compile" in self.opts:
            self.model.backbone.compile()
            self.model.neck.compile()
        self.model.train()
        self.heads = self.model.objectives
        self.scoped = False  # record_function scopes (for the profiler)

    def scope(self, name: str):
        return torch.profiler.record_function(name) if self.scoped else contextlib.nullcontext()

    def __call__(self, batch: dict, step: int = 0) -> float:
        """One training step; returns the total loss."""
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if "bf16" in self.opts else contextlib.nullcontext()
        if "channels_last" in self.opts:  # (B, N, 3, H, W) stored as (B, N, H, W, 3): flatten(0, 1) is NHWC
            batch = {**batch, "images": batch["images"].permute(0, 1, 3, 4, 2).contiguous().permute(0, 1, 4, 2, 3)}
        with self.scope("forward"), autocast:
            losses = self.model(batch, "loss")
        check_finite(losses, self.heads, step, Dist(), "")
        with self.scope("backward"):
            self.optimizer.zero_grad(set_to_none=True)
            self.model.backward(losses)
        with self.scope("optimizer"):
            if self.cfg.optim.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.optim.grad_clip)
            self.optimizer.step()
            self.scheduler.step()
        return float(losses["loss"].detach())  # train.py's progress bar reads it too


def preload(cfg, n: int):
    """n training batches (augmentation as in training) and the dataset meta; ms a batch to build."""
    data = run_dataset(open_sources(cfg.data))
    probe = build_model(cfg.model, data.meta)
    frames = build_training_data(cfg, probe, data=data)
    collate = Collate(probe.target_builders())
    t0 = time.perf_counter()
    batches = [collate([frames[i] for i in b]) for b in StepBatchSampler(len(frames), cfg.batch_size, cfg.seed, n)]
    return batches, data.meta, 1e3 * (time.perf_counter() - t0) / n


def images_per_batch(batch: dict) -> int:
    return int(np.prod(batch["images"].shape[:-3]))  # (B, N, 3, H, W) -> B*N


# -- FLOPs and the peak ----------------------------------------------------------------------
def count_flops(stepper: Stepper, batch: dict) -> tuple[float, float, dict]:
    """(forward, backward) FLOPs per image of one step on a copy of the model, and the conv that
    carries the most forward FLOPs: {input, weight, stride, padding, dilation, groups, share}."""
    model = copy.deepcopy(stepper.model)
    convs: dict[tuple, float] = {}

    def hook(mod, inputs, out):
        w = mod.weight
        key = (tuple(inputs[0].shape), tuple(w.shape), mod.stride, mod.padding, mod.dilation, mod.groups)
        convs[key] = convs.get(key, 0.0) + 2.0 * out.numel() * w.shape[1] * w.shape[2] * w.shape[3]

    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with FlopCounterMode(display=False) as fwd:
        losses = model(batch, "loss")
    with FlopCounterMode(display=False) as bwd:
        model.backward(losses)
    for h in hooks:
        h.remove()
    # FlopCounterMode's convolution_backward ignores groups for grad_input (a groups-8 conv counts
    # 9x its forward): take the standard 2x forward (grad_input + grad_weight) for every conv
    conv_fwd = fwd.get_flop_counts()["Global"].get(torch.ops.aten.convolution, 0)
    conv_bwd = bwd.get_flop_counts()["Global"].get(torch.ops.aten.convolution_backward, 0)
    bwd_total = bwd.get_total_flops() - conv_bwd + 2 * conv_fwd
    n = images_per_batch(batch)
    key, flops = max(convs.items(), key=lambda kv: kv[1])
    top = dict(zip(("input", "weight", "stride", "padding", "dilation", "groups"), key))
    top["share"] = flops / max(sum(convs.values()), 1.0)
    return fwd.get_total_flops() / n, bwd_total / n, top


def timed(fn, reps: int) -> float:
    """Median seconds of fn() over reps calls after two warm-up calls."""
    fn()
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def peak_matmul(n: int, reps: int) -> float:
    """GFLOP/s of an (n, n) @ (n, n) fp32 matmul (2 n^3 FLOPs), median of reps."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return 2.0 * n ** 3 / timed(lambda: torch.mm(a, b), reps) / 1e9


def peak_conv(top: dict, reps: int, channels_last: bool) -> float:
    """GFLOP/s of forward + backward of the model's top conv shape (FLOPs counted as in the model),
    tensors in NCHW or channels_last."""
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(top["input"]).to(memory_format=fmt).requires_grad_()
    w = torch.randn(top["weight"]).to(memory_format=fmt).requires_grad_()
    kw = {k: top[k] for k in ("stride", "padding", "dilation", "groups")}

    def run():
        F.conv2d(x, w, **kw).sum().backward()

    with FlopCounterMode(display=False) as fc:
        F.conv2d(x, w, **kw)
    return 3 * fc.get_total_flops() / timed(run, reps) / 1e9  # forward + grad_input + grad_weight


# -- the profile -----------------------------------------------------------------------------
BUCKETS = ("convolutions (fwd + bwd)", "other forward ops (norm, act, resize, add)", "losses + target assignment (fwd)",
           "other backward ops", "optimizer (clip, AdamW, schedule)", "Python + dispatch overhead")


def bucket_of(evt) -> str:
    name = evt.name
    if name in SCOPES or name == "step" or name.startswith("autograd::engine") or name.startswith("## "):
        return BUCKETS[5]  # a scope's own time: Python between ops, the autograd engine's bookkeeping
    if "conv" in name.lower():
        return BUCKETS[0]
    p = evt.cpu_parent
    while p is not None and p.name not in SCOPES:
        p = p.cpu_parent
    scope = p.name if p is not None else "step"
    return {"loss": BUCKETS[2], "forward": BUCKETS[1], "backward": BUCKETS[3], "optimizer": BUCKETS[4]}.get(scope,
                                                                                                      BUCKETS[5])


def profile_step(stepper: Stepper, batch: dict) -> tuple[dict[str, float], float]:
    """ms of self CPU time per bucket over one step, and the step's wall ms under the profiler."""
    stepper.scoped = True
    loss_fn = stepper.model.loss

    def scoped_loss(*a, **k):  # the loss inside forward gets its own scope
        with torch.profiler.record_function("loss"):
            return loss_fn(*a, **k)

    stepper.model.loss = scoped_loss
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            with torch.profiler.record_function("step"):
                stepper(batch)
            wall = 1e3 * (time.perf_counter() - t0)
    finally:
        del stepper.model.loss
        stepper.scoped = False
    ms = dict.fromkeys(BUCKETS, 0.0)
    for evt in prof.events():
        ms[bucket_of(evt)] += evt.self_cpu_time_total / 1e3
    return ms, wall


# -- runs ------------------------------------------------------------------------------------
def throughput(cfg, batches, meta, variants, steps: int, warmup: int, repeats: int) -> dict[str, dict]:
    """Per variant: images/s (median over repeats of each repeat's median step) and its steppers."""
    total = warmup + steps * repeats + 1
    steppers = {}
    for v in variants:
        steppers[v] = Stepper(cfg, meta, v, cfg.seed, total)
        t0 = time.perf_counter()
        for i in range(warmup):
            steppers[v](batches[i % len(batches)], i)
        steppers[v].compile_s = time.perf_counter() - t0 if "compile" in v else 0.0
    n_img = images_per_batch(batches[0])
    per: dict[str, list[float]] = {v: [] for v in variants}
    loads = []
    for r in range(repeats):
        for v in variants:
            ts = []
            for i in range(steps):
                t0 = time.perf_counter()
                steppers[v](batches[(warmup + r * steps + i) % len(batches)], i)
                ts.append(time.perf_counter() - t0)
            per[v].append(n_img / statistics.median(ts))
        loads.append(os.getloadavg()[0])
    return {v: {"images_per_s": statistics.median(per[v]), "repeats": per[v], "stepper": steppers[v],
                "compile_s": steppers[v].compile_s, "load1": loads} for v in variants}


def curves(cfg, batches, meta, variants, n: int) -> dict[str, float]:
    """Final loss (mean of the last 10 of n steps) of each variant from seed 0 and of the baseline
    from seeds 1 and 2 (the spread)."""
    runs = [(v, 0) for v in variants] + [("baseline", 1), ("baseline", 2)]
    out = {}
    for v, seed in runs:
        s = Stepper(cfg, meta, v, seed, n)
        losses = [s(batches[i % len(batches)], i) for i in range(n)]
        out[f"{v} seed {seed}"] = float(np.mean(losses[-10:]))
        print(f"  curve {v} seed {seed}: loss step 1 {losses[0]:.4f}, step {n // 2} {losses[n // 2 - 1]:.4f}, "
              f"final (mean of last 10) {out[f'{v} seed {seed}']:.4f}  [{load()}]", flush=True)
    return out


def run_config(path: str, args) -> dict:
    sets = [f"data.root={ensure_sim(Path(args.data))}"] + list(args.set)
    if "regnet" in Path(path).stem:
        sets += [s for s in args.regnet_set.split(";") if s]
    cfg = load_experiment(path, sets)
    n_batches = max(args.warmup + args.steps * args.repeats, args.curve, 4)
    n_batches = min(n_batches, args.max_batches)
    batches, meta, build_ms = preload(cfg, n_batches)
    b0 = batches[0]
    H, W = b0["images"].shape[-2:]
    res = {"config": path, "backbone": cfg.model.backbone, "batch": list(b0["images"].shape[:-3]), "image_hw": [H, W],
           "tasks": [t.name for t in cfg.model.tasks], "threads": torch.get_num_threads(),
           "loader_ms_per_batch": build_ms, "load_start": load()}
    print(f"\n== {path}: backbone {cfg.model.backbone}, batch {res['batch']} (B, N) at {H}x{W}, "
          f"{len(res['tasks'])} heads, {len(batches)} pre-loaded batches (built at {build_ms:.0f} ms/batch by the loader, "
          f"one process: decode, augmentation, targets) [{load()}]", flush=True)
    variants = args.variants.split(",")
    tp = throughput(cfg, batches, meta, variants, args.steps, args.warmup, args.repeats)
    fwd, bwd, top = count_flops(tp[variants[0]]["stepper"], b0)
    mm = peak_matmul(args.matmul_n, args.peak_reps)
    cv_nchw, cv_nhwc = peak_conv(top, args.peak_reps, False), peak_conv(top, args.peak_reps, True)
    cv = max(cv_nchw, cv_nhwc)
    res.update(flops_fwd_per_image=fwd, flops_bwd_per_image=bwd, top_conv={k: (list(v) if isinstance(v, tuple) else v)
                                                                          for k, v in top.items()},
               peak_matmul_gflops=mm, peak_conv_gflops=cv, peak_conv_nchw_gflops=cv_nchw,
               peak_conv_channels_last_gflops=cv_nhwc, load_end=load())
    print(f"FLOPs per image (FlopCounterMode: matmul + conv; conv backward = 2x forward): forward {fwd / 1e9:.3f} G, "
          f"backward {bwd / 1e9:.3f} G, "
          f"step {(fwd + bwd) / 1e9:.3f} G")
    print(f"peak, same {torch.get_num_threads()} threads: fp32 matmul {args.matmul_n}^3 {mm:.1f} GFLOP/s; top conv "
          f"(input {top['input']}, weight {top['weight']}, stride {top['stride']}, groups {top['groups']}: "
          f"{100 * top['share']:.0f}% of the model's conv FLOPs) fwd+bwd {cv_nchw:.1f} GFLOP/s NCHW, "
          f"{cv_nhwc:.1f} channels_last (peak: the better)")
    hdr = (f"{'variant':>13} | {'images/s':>8} | {'repeats (images/s)':>24} | {'GFLOP/s':>7} | {'/ matmul':>8} | "
           f"{'/ conv':>6} | {'vs baseline':>11}")
    print(hdr + "\n" + "-" * len(hdr))
    base = tp[variants[0]]["images_per_s"]
    res["variants"] = {}
    for v in variants:
        ips = tp[v]["images_per_s"]
        g = ips * (fwd + bwd) / 1e9
        reps = " ".join(f"{x:.3f}" for x in tp[v]["repeats"])
        extra = f"  (compile + warm-up {tp[v]['compile_s']:.0f} s)" if "compile" in v else ""
        print(f"{v:>13} | {ips:>8.3f} | {reps:>24} | {g:>7.2f} | {g / mm:>8.3f} | {g / cv:>6.3f} | "
              f"{ips / base:>10.2f}x{extra}")
        res["variants"][v] = {"images_per_s": ips, "repeats": tp[v]["repeats"], "gflops": g, "frac_matmul": g / mm,
                              "frac_conv": g / cv, "vs_baseline": ips / base, "compile_s": tp[v]["compile_s"]}
    print(f"load during the repeats (1-min average): {' '.join(f'{x:.2f}' for x in tp[variants[0]]['load1'])}; "
          f"{load()}")
    if args.profile:
        ms, wall = profile_step(tp[variants[0]]["stepper"], b0)
        total = sum(ms.values())
        print(f"profile of one {variants[0]} step (torch.profiler, self CPU time): {wall:.0f} ms wall under the "
              f"profiler, {total:.0f} ms in events")
        for k, v in sorted(ms.items(), key=lambda kv: -kv[1]):
            print(f"  {k:>44} | {v:>8.1f} ms | {100 * v / total:>5.1f}%")
        res["profile_ms"], res["profile_wall_ms"] = ms, wall
    if args.curve:
        res["curves"] = curves(cfg, batches, meta, variants, args.curve)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", help="experiment YAML (repeatable); default tiny and regnet")
    ap.add_argument("--data", default=str(REPO / "out" / "bench" / "sim"), help="sim dataset (generated if missing)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per variant per repeat")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; images/s is their median")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--variants", default="baseline", help="comma-separated; the first is the reference")
    ap.add_argument("--profile", action="store_true", help="profile one step of the first variant")
    ap.add_argument("--curve", type=int, default=0, help="steps of the loss-curve check (0: none)")
    ap.add_argument("--max-batches", type=int, default=40, help="distinct pre-loaded batches (cycled)")
    ap.add_argument("--matmul-n", type=int, default=2048)
    ap.add_argument("--peak-reps", type=int, default=5)
    ap.add_argument("--regnet-set", default=REGNET_SET, help="';'-separated overrides for a regnet config")
    ap.add_argument("--json", default=None, help="write the results here")
    add_override_option(ap, "config override (all configs)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    configs = args.config or [str(REPO / "configs" / "tiny.yaml"), str(REPO / "configs" / "regnet.yaml")]
    print(f"torch {torch.__version__}, cpu, threads {torch.get_num_threads()}, {os.cpu_count()} CPUs; "
          f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    results = [run_config(c, args) for c in configs]
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
