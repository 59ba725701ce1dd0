"""Training: `hydranet train --config configs/tiny.yaml --out runs/tiny [--resume runs/tiny]`.

AdamW (Loshchilov & Hutter, ICLR 2019) with a cosine schedule after a linear warmup, or
OneCycle (Smith, 2018). Checkpoints (RUN/checkpoint.pt) hold weights, optimizer, scheduler,
step, RNG states and the resolved config as plain types, are written to a temp file and renamed,
and load with `torch.load(weights_only=True)`. A resumed run continues exactly: the batch order is
a function of (seed, epoch) (`hydranet.loader.StepBatchSampler`), augmentation is seeded per
(seed, epoch, frame), and every RNG state is restored.

Several processes (torchrun; gloo on CPU, NCCL on GPU): each rank reads its shard of the batch
order and gradients are averaged with one all-reduce after `model.backward(losses)`. This is
what DistributedDataParallel does, done by hand because gradient balancers such as PCGrad write
`.grad` themselves (DDP's hooks fire only inside a plain autograd backward). BatchNorm buffers
are broadcast from rank 0 after every step (DDP's `broadcast_buffers`).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist

from hydranet.bevgrid import BevGrid
from hydranet.config import ConfigError, apply_overrides, from_dict, load_config, to_dict
from hydranet.data import SimDataset
from hydranet.loader import Augmenter, Collate, StepBatchSampler, TrainingFrames
from hydranet.models import HydraNet, ModelConfig, build_model
from hydranet.tasks import to_device

CHECKPOINT = "checkpoint.pt"


@dataclass(frozen=True)
class DataConfig:
    root: str = "out/demo/sim"  # a generated dataset (docs/dataset_format.md)
    val_root: str | None = None  # held-out dataset for metrics at the end of training
    cameras: tuple[str, ...] | None = None  # None = every camera of the rig
    image_size: tuple[int, int] = (96, 160)  # (H, W) the network sees; multiples of 32
    on_bad_frame: Literal["raise", "skip"] = "raise"


@dataclass(frozen=True)
class AugmentConfig:
    photometric: bool = True
    geometric: bool = True
    scale_range: tuple[float, float] = (1.0, 1.25)  # random zoom, then crop back to image_size
    geometric_p: float = 0.5
    bev_rotation_deg: float = 0.0  # BEV models: random yaw of the ego frame in [-a, a] (hydranet/bev_augment.py)


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 2e-3
    weight_decay: float = 1e-4
    schedule: Literal["cosine", "onecycle", "constant"] = "cosine"
    warmup_steps: int = 20
    grad_clip: float = 10.0  # max global gradient norm; 0 = off


@dataclass(frozen=True)
class ExperimentConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    steps: int = 200
    batch_size: int = 2  # frames per process (each with every selected camera)
    checkpoint_every: int = 50
    log_every: int = 10
    amp: bool = True  # bf16 autocast on CUDA (no effect on CPU)
    seed: int = 0
    num_workers: int = 0
    device: str = "auto"  # auto | cpu | cuda


class TrainingDiverged(RuntimeError):
    """A loss became NaN or Inf."""


def load_experiment(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    cfg = load_config(ExperimentConfig, path, overrides)
    check_experiment(cfg)
    return cfg


def check_experiment(cfg: ExperimentConfig) -> None:
    H, W = cfg.data.image_size
    div = 32 * 2 ** max(cfg.model.neck_levels - 3, 0)  # the coarsest neck level's stride
    if H % div or W % div or H <= 0 or W <= 0:
        raise ConfigError(f"config key 'data.image_size': {[H, W]} must be positive multiples of {div} "
                          f"(the stride of the coarsest of model.neck_levels={cfg.model.neck_levels} levels)")
    bev_hw = cfg.model.bev.image_size
    if bev_hw is not None and tuple(bev_hw) != (H, W):
        raise ConfigError(f"config key 'model.bev.image_size': {list(bev_hw)} differs from data.image_size {[H, W]}, "
                          "the size every camera is resized to; leave it null or set both alike")
    for key in ("steps", "batch_size", "checkpoint_every", "log_every"):
        if getattr(cfg, key) < 1:
            raise ConfigError(f"config key '{key}' must be >= 1, got {getattr(cfg, key)}")


# -- checkpoints -----------------------------------------------------------------------------
def rng_state(model: HydraNet) -> dict[str, Any]:
    """Python, numpy, torch (and CUDA, balancer) RNG states as tensors and plain types."""
    np_state = np.random.get_state()
    state = {"python": random.getstate(),
             "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    gen = getattr(model.balancer, "generator", None)
    if isinstance(gen, torch.Generator):
        state["balancer"] = gen.get_state()
    return state


def set_rng_state(state: dict[str, Any], model: HydraNet) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n[0], np.asarray(n[1], np.uint32), *n[2:]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    gen = getattr(model.balancer, "generator", None)
    if "balancer" in state and isinstance(gen, torch.Generator):
        gen.set_state(state["balancer"])


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """torch.save to PATH.tmp-<pid>, then rename: a crash never leaves a half-written checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint file (or RUN_DIR/checkpoint.pt), read with weights_only=True."""
    path = Path(path)
    if path.is_dir():
        path = path / CHECKPOINT
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist; give a file written by `hydranet train` or its run folder")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"checkpoint {path} could not be read ({type(e).__name__}: {e}); it is corrupt or not "
                         "written by `hydranet train`") from None
    missing = [k for k in ("model", "config", "meta", "step") if k not in ckpt]
    if missing:
        raise ValueError(f"checkpoint {path} lacks {missing}; it was not written by `hydranet train`")
    return ckpt


def config_from_checkpoint(ckpt: dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    data = apply_overrides(json.loads(ckpt["config"]), list(overrides))
    cfg = from_dict(ExperimentConfig, data)
    check_experiment(cfg)
    return cfg


def model_from_checkpoint(ckpt: dict[str, Any], cfg: ExperimentConfig | None = None) -> HydraNet:
    """The trained model of a checkpoint; weights that do not fit raise ValueError listing the keys."""
    cfg = cfg or config_from_checkpoint(ckpt)
    model = build_model(cfg.model, json.loads(ckpt["meta"]))
    model.load_weights(ckpt["model"])
    return model


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
        return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=cfg.lr, total_steps=steps,
                                                   pct_start=min(max(cfg.warmup_steps / steps, 0.01), 0.5))
    warm = max(cfg.warmup_steps, 0)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        if cfg.schedule == "constant":
            return 1.0
        t = (step - warm) / max(steps - warm, 1)
        return 0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * min(t, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def make_optimizer(cfg: OptimConfig, model: torch.nn.Module) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases, norm scales and balancer log-variances (1-D or scalar)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr)


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


def video_frames(model: HydraNet) -> int:
    """The clip length a model trains on: its video queue length, 1 without the video module."""
    video = getattr(model.fusion, "video", None)
    return int(video.frames) if video is not None else 1


def model_meta(cfg: ExperimentConfig, ds: SimDataset) -> dict[str, Any]:
    """The dataset meta the model is built from: its rig is the selected cameras resized to
    data.image_size (what the network sees), so the BEV view transform's build-time table (and
    an export) match the training input. `source_rig` keeps the cameras' own calibration, so a
    deployed model accepts images at the cameras' native size too."""
    H, W = cfg.data.image_size
    return {**ds.meta, "rig": ds.rig.resized(W, H).to_dict(), "source_rig": ds.rig.to_dict()}


def build_training_data(cfg: ExperimentConfig, model: HydraNet, root: str | None = None, augment: bool = True,
                        clip_length: int | None = None):
    """Training items of `root` (default data.root): clips of the model's video length (docs/bev.md)."""
    ds = SimDataset(root or cfg.data.root, cameras=list(cfg.data.cameras) if cfg.data.cameras else None,
                    on_bad_frame=cfg.data.on_bad_frame)
    a = cfg.augment
    bev = model.fusion is not None
    aug = Augmenter(a.photometric, a.geometric, a.scale_range, a.geometric_p, a.bev_rotation_deg if bev else 0.0,
                    BevGrid.from_meta(ds.meta) if bev and "bev" in ds.meta else None)
    aug = aug if augment and aug.active else None
    T = video_frames(model) if clip_length is None else clip_length
    return TrainingFrames(ds, model.target_builders(), cfg.data.image_size, aug, cfg.seed, clip_length=T)


def train(cfg: ExperimentConfig, out: str | Path, resume: str | Path | None = None, progress: bool = True,
          stop_at: int | None = None, on_step: Callable[[int, dict[str, float]], None] | None = None) -> HydraNet:
    """Train `cfg` into run folder `out` (checkpoint.pt, config.json, TensorBoard events under tb/).

    `resume`: a run folder or checkpoint to continue from (exactly). `stop_at`: stop after this
    global step as if interrupted (tests). `on_step(step, {loss name: value})` is called after
    every step. Returns the trained model (this rank's copy)."""
    out = Path(out)
    d = setup_distributed(cfg.device)
    ckpt = load_checkpoint(resume) if resume is not None else None
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    meta_ds = SimDataset(cfg.data.root, cameras=list(cfg.data.cameras) if cfg.data.cameras else None,
                         channels=(), on_bad_frame=cfg.data.on_bad_frame)
    meta = model_meta(cfg, meta_ds)
    model = build_model(cfg.model, meta).to(d.device)
    optimizer = make_optimizer(cfg.optim, model)
    scheduler = make_scheduler(cfg.optim, optimizer, cfg.steps)
    start = 0
    if ckpt is not None:
        model.load_weights({k: v.to(d.device) for k, v in ckpt["model"].items()})
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"], model)
        start = int(ckpt["step"])
    elif d.world > 1:
        broadcast_buffers(model)
        for p in model.parameters():
            dist.broadcast(p.data, src=0)

    frames = build_training_data(cfg, model)
    sampler = StepBatchSampler(len(frames), cfg.batch_size, cfg.seed, cfg.steps, start, d.rank, d.world)
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
            save_checkpoint(ckpt_path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                        "scheduler": scheduler.state_dict(), "step": step, "rng": rng_state(model),
                                        "config": config_json, "meta": meta_json})
        last_good = f"the last good checkpoint is {ckpt_path} (step {step})"

    use_amp = cfg.amp and d.device.type == "cuda"
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if use_amp else contextlib.nullcontext
    end = cfg.steps if stop_at is None else min(stop_at, cfg.steps)
    bar = None
    if progress and d.main:
        from tqdm import tqdm

        bar = tqdm(total=end, initial=start, desc="train", unit="step", dynamic_ncols=True)
    model.train()
    step, t0, batch = start, time.perf_counter(), None
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
            step += 1
            if on_step is not None:
                on_step(step, {k: float(v.detach()) for k, v in losses.items()})
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
    if writer is not None and batch is not None:
        _log_example(writer, model, frames, step)
        writer.close()
    if d.world > 1:
        dist.barrier()
    return model


def _log_example(writer, model: HydraNet, frames: TrainingFrames, step: int) -> None:
    """Predictions next to ground truth for frame 0 (TensorBoard image 'example')."""
    from hydranet.evaluate import prediction_picture

    model.eval()
    img = prediction_picture(model, frames, 0)
    writer.add_image("example", img, step, dataformats="HWC")
    model.train()
