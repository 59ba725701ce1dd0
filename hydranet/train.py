"""Training: `hydranet train --config configs/tiny.yaml --out runs/tiny [--resume runs/tiny]`.

AdamW (Loshchilov & Hutter, ICLR 2019) with a cosine schedule after a linear warmup, or
OneCycle (Smith, 2018). Checkpoints (RUN/checkpoint.pt) hold weights, optimizer, scheduler,
step, RNG states and the resolved config as plain types, are written to a temp file and renamed,
and load with `torch.load(weights_only=True)`. A resumed run continues exactly: the batch order is
a function of (seed, epoch) (`hydranet.loader.StepBatchSampler`), augmentation is seeded per
(seed, epoch, frame), and every RNG state is restored.

`init_from` (`hydranet train --init CHECKPOINT`) starts a run from another run's weights, loading
every key whose name and shape match (`hydranet.checkpoint.load_init_weights`, as mmengine's
`load_from`): a camera model's trunk and heads into a model that adds the BEV heads. `overfit_batch`
(`--overfit-batch`) is the single-batch check of Karpathy's "A Recipe for Training Neural Networks"
(2019): the first batch of the seeded order, without augmentation, at every step, and each head's
loss at step 1 and at the end printed side by side.

Several processes (torchrun; gloo on CPU, NCCL on GPU): each rank reads its shard of the batch
order and gradients are averaged with one all-reduce after `model.backward(losses)`. This is
what DistributedDataParallel does, done by hand because gradient balancers such as PCGrad write
`.grad` themselves (DDP's hooks fire only inside a plain autograd backward). BatchNorm buffers
are broadcast from rank 0 after every step (DDP's `broadcast_buffers`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hydranet.bevgrid import BevGrid
from hydranet.checkpoint import (CHECKPOINT, format_init_report, group_by_module, load_checkpoint, load_init_weights,
                                 model_meta, rng_state, save_checkpoint, set_rng_state)
from hydranet.config import ConfigError, to_dict
from hydranet.data.sources import check_supervision, open_data, open_sources, run_dataset
from hydranet.ema import WeightEma
from hydranet.experiment import ExperimentConfig, OptimConfig, experiment_from_json
from hydranet.io import check_apart, remove_stale_temps
from hydranet.class_balance import frame_classes, repeat_counts, repeat_line
from hydranet.loader import Augmenter, Collate, LabelledFrames, camera_intrinsics, SourceBatchSampler, StepBatchSampler, to_device
from hydranet.models import HydraNet, build_model
from hydranet.models.partial import leading_rows, split_mask, supervised_targets


class TrainingDiverged(RuntimeError):
    """A loss became NaN or Inf."""


# -- distributed -----------------------------------------------------------------------------
@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str) -> Dist:
    """Single process, or torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT)."""
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("config device 'cuda' but no CUDA device is available; use device=auto or cpu")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Dist(0, 1, torch.device("cuda" if use_cuda else "cpu"))
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(local)
    return Dist(rank, world, torch.device(f"cuda:{local}" if use_cuda else "cpu"))


def allreduce_gradients(model: torch.nn.Module, world: int) -> None:
    """Average .grad over ranks with one flat all-reduce (parameters without a gradient count as 0)."""
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n


def broadcast_buffers(model: torch.nn.Module) -> None:
    for b in model.buffers():
        dist.broadcast(b, src=0)


# -- the loop --------------------------------------------------------------------------------
def make_scheduler(cfg: OptimConfig, optimizer: torch.optim.Optimizer, steps: int):
    if cfg.schedule == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[g["lr"] for g in optimizer.param_groups],
                                                   total_steps=steps, pct_start=min(max(cfg.warmup_steps / steps, 0.01), 0.5))
    warm = max(cfg.warmup_steps, 0)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        if cfg.schedule == "constant":
            return 1.0
        t = (step - warm) / max(steps - warm, 1)
        return 0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * min(t, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def lr_multipliers(cfg: OptimConfig, model: torch.nn.Module) -> dict[str, float]:
    """{parameter name: its `optim.lr_mult`} (1.0 where no prefix matches; the longest matching prefix
    wins, a prefix matching at a module boundary: "heads.det2d" is not "heads.det2d_extra"). A prefix
    that names no parameter is a ConfigError listing the model's modules."""
    names = [n for n, _ in model.named_parameters()]

    def matches(prefix: str, name: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    for prefix in cfg.lr_mult:
        if not any(matches(prefix, n) for n in names):
            raise ConfigError(f"config key 'optim.lr_mult.{prefix}' names no parameter of the model; its modules: "
                              f"{', '.join(group_by_module(names))}")
    out = {}
    for n in names:
        hits = [p for p in cfg.lr_mult if matches(p, n)]
        out[n] = float(cfg.lr_mult[max(hits, key=len)]) if hits else 1.0
    return out


def make_optimizer(cfg: OptimConfig, model: torch.nn.Module) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases, norm scales and balancer log-variances (1-D or scalar); one parameter
    group per (`optim.lr_mult` multiplier, decay); parameters at multiplier 0 are frozen (requires_grad off, left
    out). torch's fused kernel where the parameters live on a CPU or CUDA device: one call for every tensor (the
    demo model's ~200 tensors: 7.6 -> 1.6 ms a step on 2 CPU threads, where the per-tensor loop is Python)."""
    mult = lr_multipliers(cfg, model)
    groups: dict[tuple[float, bool], list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if mult[name] == 0:
            p.requires_grad_(False)
        if p.requires_grad:
            groups.setdefault((mult[name], p.dim() >= 2), []).append(p)
    params = [p for g in groups.values() for p in g]
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    order = [(m, decay) for m in dict.fromkeys(m for m, _ in groups) for decay in (True, False) if (m, decay) in groups]
    return torch.optim.AdamW([{"params": groups[m, decay], "lr": cfg.lr * m,
                               "weight_decay": cfg.weight_decay if decay else 0.0} for m, decay in order],
                             lr=cfg.lr, fused=fused or None)


def check_finite(losses: dict[str, torch.Tensor], heads: list[str], step: int, d: Dist, last_good: str) -> None:
    """Raise TrainingDiverged naming the first head whose loss is NaN/Inf (agreed over all ranks)."""
    flags = torch.tensor([float(torch.isfinite(losses[h].detach()).all()) for h in heads], device=d.device)
    if d.world > 1:
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    bad = [h for h, ok in zip(heads, flags.tolist()) if ok < 1]
    if bad:
        local = losses[bad[0]].detach()
        value = f"{float(local)}" if not torch.isfinite(local).all() else "non-finite on another rank"
        also = f" (also {', '.join(bad[1:])})" if bad[1:] else ""
        raise TrainingDiverged(f"loss of head '{bad[0]}' is {value} at step {step}{also}; training stopped, "
                               f"{last_good}. Lower optim.lr or check that head's targets")


def build_training_data(cfg: ExperimentConfig, model: HydraNet, root: str | None = None, augment: bool = True,
                        clip_length: int | None = None, data=None):
    """Training items of `root` (default: the run's datasets, data.root or data.sources, read by
    `hydranet.data.sources`) or of the dataset `data` already opened: clips of the model's video
    length (docs/bev.md)."""
    ds = data if data is not None else open_data(cfg.data, root) if root is not None else \
        run_dataset(open_sources(cfg.data))
    bev = model.fusion is not None
    aug = Augmenter.from_config(cfg.augment, bev, BevGrid.from_meta(ds.meta) if bev and "bev" in ds.meta else None)
    aug = aug if augment and aug.active else None
    T = model.video_frames if clip_length is None else clip_length
    return LabelledFrames(ds, model.target_builders(), cfg.data.image_size, aug, cfg.seed, clip_length=T,
                          fit=cfg.data.fit,
                          camera_K=camera_intrinsics(ds.rig, cfg.data.image_size) if cfg.data.fit == "camera" else None)


def fit_priors(model: HydraNet, frames: LabelledFrames, heads: list[str] | None = None, count: int = 32) -> None:
    """The output bias of every head in `heads` (default: all) at its label prior (`Task.fit_prior`) of
    `count` training frames spread evenly over `frames`, unaugmented single frames (no RNG drawn)."""
    heads = list(model.heads) if heads is None else heads
    if not heads:
        return
    plain = frames.sibling({n: model.heads[n] for n in heads})  # the frames it decodes stay (forked workers copy them)
    picks = np.unique(np.linspace(0, len(plain) - 1, min(count, len(plain))).round().astype(int))
    targets = to_device(Collate(plain.tasks)([plain[int(i)] for i in picks]), next(model.parameters()).device)["targets"]
    for name, task in plain.tasks.items():
        labelled = supervised_targets(targets[name], leading_rows(split_mask(targets[name])[0]))
        if labelled is not None:  # a mixed run: the frames that have this head's labels
            task.fit_prior(labelled)


class FixedBatchSampler(torch.utils.data.Sampler):
    """`overfit_batch`: the same batch (this rank's share of the seeded order's first) at every global
    step start_step .. total_steps-1, so a resumed overfit run continues on it too."""

    def __init__(self, batch: list[tuple[int, int]], total_steps: int, start_step: int = 0):
        self.batch, self.total_steps, self.start_step = list(batch), total_steps, start_step

    def __iter__(self):
        for _ in range(self.start_step, self.total_steps):
            yield list(self.batch)

    def __len__(self) -> int:
        return max(self.total_steps - self.start_step, 0)


def format_overfit(first: dict[str, float], last: dict[str, float], names: list[str], steps: tuple[int, int]) -> str:
    """The per-head table `--overfit-batch` prints: the loss at the first and the last step, and its drop."""
    w = max(len(n) for n in names)
    lines = [f"overfit-batch: loss per head on the one batch, step {steps[0]} -> step {steps[1]}"]
    for n in names:
        x, y = first.get(n, float("nan")), last.get(n, float("nan"))
        if not x > 0:
            change = "n/a (no loss at the first step: the batch has no label for it)"
        elif y <= x:
            change = f"down {100.0 * (x - y) / x:.1f}%"
        else:
            change = f"UP {100.0 * (y - x) / x:.1f}%"
        lines.append(f"  {n:<{w}}  {x:10.4f} -> {y:10.4f}  {change}")
    return "\n".join(lines)


# keys a resumed run may change: they do not alter what the finished steps computed
RESUMABLE_KEYS = ("steps", "checkpoint_every", "log_every", "num_workers", "device", "amp")


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def check_resume(cfg: ExperimentConfig, ckpt: dict[str, Any], where: str) -> list[str]:
    """The config keys `cfg` changes against the checkpoint's run ("key: old -> new"); a change
    outside RESUMABLE_KEYS (it would not take effect, or would make the run inexact) raises
    ConfigError, as does a run already at or past cfg.steps."""
    old = _flat(to_dict(experiment_from_json(ckpt["config"])))  # keys added since it was written: their defaults
    new = _flat(to_dict(cfg))
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    bad = [k for k in changed if k not in RESUMABLE_KEYS]
    if bad:
        raise ConfigError(f"config key '{bad[0]}' differs from the run being resumed ({where}: {old.get(bad[0])!r}, now "
                          f"{new.get(bad[0])!r}); a resumed run can change only {list(RESUMABLE_KEYS)}: start a new run "
                          "(--out NEW_DIR) to change it")
    step = int(ckpt["step"])
    if step >= cfg.steps:
        raise ConfigError(f"{where} is already at step {step} and config 'steps' is {cfg.steps}: nothing to train; "
                          f"raise it with --set steps=N (N > {step})")
    if cfg.optim.schedule == "onecycle" and "steps" in changed:
        raise ConfigError("config key 'steps' cannot change on resume with optim.schedule=onecycle (its schedule is "
                          "fixed by the total steps); start a new run")
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed]


def prepare_run_folder(out: Path, resume: str | Path | None, overwrite: bool) -> None:
    """Refuse to replace a finished or running run's checkpoint unless resuming it or told to
    overwrite; with `overwrite`, remove the old run's files (checkpoint, config, events)."""
    has_run = (out / CHECKPOINT).exists()
    resuming_here = resume is not None and Path(resume).resolve() in (out.resolve(), (out / CHECKPOINT).resolve())
    if has_run and not resuming_here:
        if not overwrite:
            raise FileExistsError(f"{out} already holds a run ({out / CHECKPOINT}); continue it with --resume {out}, "
                                  "write to another --out, or pass --overwrite to replace it")
        import shutil

        (out / CHECKPOINT).unlink()
        (out / "config.json").unlink(missing_ok=True)
        shutil.rmtree(out / "tb", ignore_errors=True)
    remove_stale_temps(out)


def train(cfg: ExperimentConfig, out: str | Path, resume: str | Path | None = None, progress: bool = True,
          stop_at: int | None = None, on_step: Callable[[int, dict[str, float]], None] | None = None,
          overwrite: bool = False, init_from: str | Path | None = None) -> HydraNet:
    """Train `cfg` into run folder `out` (checkpoint.pt, config.json, TensorBoard events under tb/).

    `resume`: a run folder or checkpoint to continue from (exactly; `check_resume` says which
    config keys may change). `overwrite`: replace a run already in `out` (refused otherwise).
    `init_from` (or config key `init_from`; `hydranet train --init`): start from that checkpoint's
    weights, a partial load (`load_init_weights`): keys matching by name and shape are loaded, missing
    ones keep their initialization, unexpected ones are ignored, a shape mismatch or no match at all
    raises ValueError before the run folder is touched; the same architecture is fine-tuning.
    Optimizer, scheduler and step start fresh. The summary is printed (rank 0); the path is recorded
    in config.json, the checkpoint's `init_from` holds its sha256, step and the matched/missing/unexpected
    counts; a resumed run continues from its own checkpoint.
    Config key `overfit_batch`: every step trains on the seeded order's first batch, without
    augmentation; each head's loss at the first and the last step is printed (rank 0).
    `stop_at`: stop after this global step as if interrupted (tests). `on_step(step, {loss name:
    value})` is called after every step. Returns the trained model (this rank's copy)."""
    out = Path(out)
    if init_from is not None:
        if cfg.init_from is not None and cfg.init_from != str(init_from):
            raise ConfigError(f"train(init_from={str(init_from)!r}) differs from config key 'init_from' {cfg.init_from!r}; "
                              "give one of them")
        cfg = dataclasses.replace(cfg, init_from=str(init_from))
    if cfg.norm_eval and cfg.init_from is None and resume is None:
        raise ConfigError("config key 'norm_eval' keeps BatchNorm's running statistics from the start, and a model "
                          "built fresh has none worth keeping: start from a trained one (init_from, --init CHECKPOINT) "
                          "or set norm_eval false")
    d = setup_distributed(cfg.device)
    ckpt = load_checkpoint(resume) if resume is not None else None
    if ckpt is not None:
        check_resume(cfg, ckpt, str(resume))
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    sources = open_sources(cfg.data)  # data.root or data.sources, any format (docs/datasets.md)
    check_supervision([t.name for t in cfg.model.tasks], sources)
    data = run_dataset(sources)
    meta = model_meta(cfg, data)
    model = build_model(cfg.model, meta).to(d.device)
    frames = build_training_data(cfg, model, data=data, augment=not cfg.overfit_batch)
    optimizer = make_optimizer(cfg.optim, model)
    scheduler = make_scheduler(cfg.optim, optimizer, cfg.steps)
    start, init, ema = 0, None, None
    if ckpt is not None:
        # a run with a weight average keeps its trained weights under "ema" and the average as "model"
        trained = ckpt["ema"]["raw"] if cfg.optim.ema_decay else ckpt["model"]
        model.load_weights({k: v.to(d.device) for k, v in trained.items()})
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"], model)
        start = int(ckpt["step"])
        init = ckpt.get("init_from")
    else:
        if cfg.init_from is not None:  # partial load: matching weights from there, all else fresh (no RNG drawn)
            init = load_init_weights(model, cfg.init_from)
        if cfg.label_priors:  # the heads the init checkpoint holds none of (all without one): a head it holds keeps
            # its trained biases, and a prior buffer it lacks (a newer option) stays 0, the head as it was trained
            fit_priors(model, frames, [n for n in model.heads if init is None or f"heads.{n}" not in init["matched_modules"]])
        if d.world > 1:
            broadcast_buffers(model)
            for p in model.parameters():
                dist.broadcast(p.data, src=0)
    if cfg.optim.ema_decay:  # every rank averages its own (identical) weights
        ema = WeightEma(model, cfg.optim.ema_decay)
        if ckpt is not None:
            ema.load({k: v.to(d.device) for k, v in ckpt["model"].items()}, int(ckpt["ema"]["updates"]))
    if d.main:  # after the init checks: a refused init leaves an existing run folder as it was
        # a run folder beside or above its data is fine (a run writes only its own files); in it, not
        check_apart({"--out": out}, {"data.root": cfg.data.root, "data.val_root": cfg.data.val_root,
                                     "data.sources": [s.root for s in cfg.data.sources]},
                    error=ConfigError, refuse=("is", "sits inside"))
        prepare_run_folder(out, resume, overwrite)
        if init is not None and ckpt is None:
            print(format_init_report(init), flush=True)


    repeats = None
    if cfg.data.repeat_threshold is not None and not cfg.overfit_batch:  # rare classes drawn more often (class_balance)
        counts, factor = repeat_counts([frame_classes(data, frames.frame_index(i)) for i in range(len(frames))],
                                       cfg.data.repeat_threshold)
        repeats = counts
        if d.main:
            print(repeat_line(counts, factor, cfg.data.repeat_threshold), flush=True)

    def sampler_from(first: int):
        if len(sources) > 1:  # one source per batch, drawn by weight
            return SourceBatchSampler(data.ranges, [s.weight for s in sources], cfg.batch_size, cfg.seed, cfg.steps,
                                      first, d.rank, d.world, repeats)
        return StepBatchSampler(len(frames), cfg.batch_size, cfg.seed, cfg.steps, first, d.rank, d.world, repeats)

    sampler = sampler_from(start)
    if cfg.overfit_batch:  # the first batch of the seeded order, every step
        sampler = FixedBatchSampler(next(iter(sampler_from(0))), cfg.steps, start)
    loader = torch.utils.data.DataLoader(frames, batch_sampler=sampler, collate_fn=Collate(model.target_builders()),
                                         num_workers=cfg.num_workers, persistent_workers=False,
                                         generator=torch.Generator().manual_seed(cfg.seed))  # not the global RNG
    heads = model.objectives  # the losses every step must keep finite
    ckpt_path = out / CHECKPOINT
    config_json = json.dumps(to_dict(cfg))
    meta_json = json.dumps(meta)
    last_good = f"the last good checkpoint is {ckpt_path} (step {start})" if ckpt is not None else "no checkpoint was written yet"
    writer = None
    if d.main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(to_dict(cfg), indent=2) + "\n")
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb"), purge_step=start + 1 if start else None)

    def checkpoint(step: int) -> None:
        nonlocal last_good
        if d.main:
            weights = {"model": model.state_dict()} if ema is None else \
                {"model": ema.state, "ema": {"raw": model.state_dict(), "updates": ema.updates}}
            save_checkpoint(ckpt_path, {**weights, "optimizer": optimizer.state_dict(),
                                        "scheduler": scheduler.state_dict(), "step": step, "rng": rng_state(model),
                                        "config": config_json, "meta": meta_json,
                                        **({"init_from": init} if init is not None else {})})
        last_good = f"the last good checkpoint is {ckpt_path} (step {step})"

    use_amp = cfg.amp and d.device.type == "cuda"
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_amp else contextlib.nullcontext
    end = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    bar = None
    if progress and d.main:
        from tqdm import tqdm

        bar = tqdm(total=end, initial=start, desc="train", unit="step", dynamic_ncols=True)
    train_mode(model, cfg.norm_eval)
    step, t0, batch = start, time.perf_counter(), None
    first_losses: dict[str, float] | None = None
    last_losses: dict[str, float] = {}
    report_names = [*heads, "loss"]

    def say(text: str) -> None:
        if bar is not None:
            bar.write(text)
        else:
            print(text, flush=True)
    try:
        for batch in loader:
            if step >= end:
                break
            batch = to_device(batch, d.device)
            with autocast():
                losses = model(batch, "loss")
            check_finite(losses, heads, step + 1, d, last_good)
            optimizer.zero_grad(set_to_none=True)
            model.backward(losses)
            if d.world > 1:
                allreduce_gradients(model, d.world)
            if cfg.optim.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
            optimizer.step()
            scheduler.step()
            if d.world > 1:
                broadcast_buffers(model)
            if ema is not None:
                ema.update(model)
            step += 1
            if on_step is not None or cfg.overfit_batch:
                values = {k: float(v.detach()) for k, v in losses.items()}
                if on_step is not None:
                    on_step(step, values)
                if cfg.overfit_batch:
                    last_losses = values
                    if first_losses is None and d.main:
                        first_losses = values
                        say(f"overfit-batch: frames {sorted({i for _, i in sampler.batch})} at every step, no "
                            f"augmentation; step {step} loss "
                            + ", ".join(f"{n} {values[n]:.4f}" for n in report_names if n in values))
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{float(losses['loss'].detach()):.3f}")
            if writer is not None and (step % cfg.log_every == 0 or step == end):
                for k, v in losses.items():
                    writer.add_scalar(f"loss/{k}", float(v.detach()), step)
                writer.add_scalar("lr", optimizer.param_groups[0]["lr"], step)
                writer.add_scalar("steps_per_s", (step - start) / (time.perf_counter() - t0), step)
            if step % cfg.checkpoint_every == 0 or step == end:
                checkpoint(step)
    finally:
        if bar is not None:
            bar.close()
    if first_losses is not None:  # overfit_batch, rank 0
        print(format_overfit(first_losses, last_losses, [n for n in report_names if n in first_losses],
                             (start + 1, step)), flush=True)
    if writer is not None and batch is not None:
        _log_example(writer, model, frames, step, cfg.norm_eval)
        writer.close()
    if d.world > 1:
        dist.barrier()
    if ema is not None:  # what the checkpoint holds as "model"
        model.load_state_dict(ema.state)
    return model


def train_mode(model: torch.nn.Module, norm_eval: bool) -> None:
    """`model.train()`; with `norm_eval` its BatchNorm layers then back in eval mode: they normalize with, and keep,
    their running statistics (config key `norm_eval`)."""
    model.train()
    if norm_eval:
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.eval()


def _log_example(writer, model: HydraNet, frames: LabelledFrames, step: int, norm_eval: bool) -> None:
    """Predictions next to ground truth for frame 0 (TensorBoard image 'example')."""
    from hydranet.stream import predict_frame
    from hydranet.viz import prediction_picture

    single = frames.sibling(frames.tasks)  # no augmentation, no clips
    sample, pred = predict_frame(model, single, 0)
    writer.add_image("example", prediction_picture(model, sample, pred, frames.data.meta), step, dataformats="HWC")
    train_mode(model, norm_eval)
