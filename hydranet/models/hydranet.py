"""HydraNet: one shared trunk for every camera, cheap task heads on top.

The multi-task, multi-camera architecture Tesla described (Karpathy, CVPR 2021 WAD and AI Day
2021): all N cameras of B frames go through one backbone as a single batch of B*N images, a BiFPN
neck (Tan et al., CVPR 2020) builds the shared feature pyramid, and every task head reads it.
An optional `fusion` module lifts image features into a bird's-eye-view grid for BEV tasks.

`forward(batch, mode)`:
  - batch["images"]: float (B, N, 3, H, W) RGB in [0, 1] (or uint8 0..255); H and W divisible by the
    coarsest neck stride. ImageNet mean/std normalization happens inside the model.
  - batch["targets"] (mode "loss"): {task name: Task.collate(...) output}, cameras flattened b*N+n.
  - mode "tensor": {task: {output name: raw tensor (B*N, ...)}} (what deploy exports), plus
    "embedding" (B*N, C): the coarsest neck level average-pooled, one trunk feature per camera
    image (the data engine's diversity and similarity search run on it);
    "loss": {"<task>.<component>": scalar, "<task>": task sum, "loss": balanced total};
    "predict": {task: list of B*N per-image results, index b*N + n}.
Mode is an argument, never `self.training`; `loss(outputs, targets)` and `decode(outputs)` let one
pass give both. Train with `model.backward(losses)` (gradient balancers such as PCGrad need it).

With BEV tasks (docs/bev.md) the `fusion` module (hydranet.models.video.BevFusion) reads
batch["intrinsics"] (B, N, 3, 3), batch["cam2ego"] (B, N, 4, 4), batch["distortion"] (B, N, 6) lens
rows where cameras have lens models, and, for the video module,
batch["prev_bev"]/batch["ego_motion"]; BEV task outputs and results are per frame (B items). A clip
batch has images (B, T, N, 3, H, W) and ego2world (B, T, 4, 4): heads read its last frame. With the
video module, "tensor" and "predict" outputs also hold {"bev_state": {"bev_queue": (B, T-1, C, X, Y)}}.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from hydranet.models.backbones import build_backbone
from hydranet.models.balancing import FixedWeights, build_balancer
from hydranet.models.bifpn import BiFPN
from hydranet.bevgrid import BevGrid
from hydranet.models.config import BevConfig, ModelConfig
from hydranet.models.partial import SAMPLES, frozen_norm, no_labels, present_objectives, supervised_loss
from hydranet.models.state_dict import load_state_dict_checked
from hydranet.models.video import BevFusion, VideoQueue
from hydranet.models.depth_lift import DepthViewTransform
from hydranet.models.view_transform import LutViewTransform
from hydranet.rig import rig_from_dict
from hydranet.tasks import BEV_TASKS, Task, build_task

MODES = ("tensor", "loss", "predict")
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
VIEW_TRANSFORMS = {  # model.bev.method -> view transform (in_channels, grid, feature stride, BevConfig)
    "lut": lambda c, grid, stride, cfg: LutViewTransform(c, cfg.channels, grid, cfg.heights, stride, cfg.encoder_depth),
    "lss": lambda c, grid, stride, cfg: DepthViewTransform(c, cfg.channels, grid, cfg.depth_bins, cfg.z_range, stride,
                                                          cfg.encoder_depth, supervise=cfg.depth_weight > 0),
}


class HydraNet(nn.Module):
    """Shared backbone + neck over all cameras, a dict of task heads, optional BEV fusion."""

    def __init__(self, backbone: nn.Module, neck: nn.Module, heads: Mapping[str, Task], fusion: nn.Module | None = None,
                 balancer: FixedWeights | None = None, history_grad: bool = False):
        super().__init__()
        if list(neck.in_channels) != list(backbone.out_channels):
            raise ValueError(f"neck expects input channels {list(neck.in_channels)} but the backbone gives "
                             f"{list(backbone.out_channels)}; build the neck from backbone.out_channels")
        if not heads:
            raise ValueError("HydraNet needs at least one task head")
        for name, task in heads.items():
            if not isinstance(task, Task):
                raise ValueError(f"head '{name}' is a {type(task).__name__}, not a hydranet.tasks.Task")
            if task.name != name:
                raise ValueError(f"head registered as '{name}' is task '{task.name}'; the keys must be task names")
            if task.space == "bev":
                if fusion is None:
                    raise ValueError(f"task '{name}' reads bird's-eye-view features but no fusion module was given")
                if task.in_channels != fusion.out_channels:
                    raise ValueError(f"task '{name}' expects {task.in_channels} channels, fusion gives {fusion.out_channels}")
                continue
            bad = [c for c in neck.out_channels if c != task.in_channels]
            if bad:
                raise ValueError(f"task '{name}' expects {task.in_channels} channels on every level, the neck gives "
                                 f"{list(neck.out_channels)}; build the task with in_channels={neck.out_channels[0]}")
            if task.in_stride != neck.strides[0]:
                raise ValueError(f"task '{name}' expects its finest level at stride {task.in_stride}, the neck's is "
                                 f"at stride {neck.strides[0]}")
        self.backbone, self.neck, self.fusion = backbone, neck, fusion
        self.history_grad = history_grad  # False: a clip's past frames pass the trunk without gradient
        self.heads = nn.ModuleDict(heads)
        # auxiliary objectives of the fusion (LSS depth supervision): balanced like the heads' losses
        self.auxiliary = dict(fusion.auxiliary) if fusion is not None else {}
        self.objectives = list(heads) + list(self.auxiliary)
        self.balancer = balancer if balancer is not None else FixedWeights(self.objectives)
        if set(self.balancer.task_names) != set(self.objectives):
            raise ValueError(f"balancer tasks {sorted(self.balancer.task_names)} differ from the objectives "
                             f"{sorted(self.objectives)} (heads + auxiliary)")
        self.register_buffer("mean", torch.tensor(_IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(_IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    @property
    def video_frames(self) -> int:
        """The clip length the model sees: its video queue length, 1 without the video module."""
        video = getattr(self.fusion, "video", None)
        return int(video.frames) if video is not None else 1

    @property
    def size_divisor(self) -> int:
        return max(self.neck.strides)

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Neck pyramid of every camera: images (B, N, 3, H, W) -> [(B*N, C, H/s, W/s)]."""
        if images.dim() != 5 or images.shape[2] != 3:
            raise ValueError(f"batch['images'] must be (B, N, 3, H, W), got shape {tuple(images.shape)}")
        H, W = images.shape[-2:]
        d = self.size_divisor
        if H % d or W % d:
            raise ValueError(f"image size {H}x{W} is not divisible by {d} (the neck's coarsest stride); "
                             f"resize or pad the images to a multiple of {d}")
        x = images.flatten(0, 1)  # (B*N, 3, H, W)
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x
        x = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        return self.neck(self.backbone(x))  # [(B*N, C, H/s, W/s), ...], s = the finest stride (8, or 4)

    def forward(self, batch: Mapping[str, Any], mode: str = "tensor") -> dict[str, Any]:
        if mode not in MODES:
            raise ValueError(f"unknown mode '{mode}'; modes: {list(MODES)}")
        images = batch["images"]
        clip = images.dim() == 6  # (B, T, N, 3, H, W): heads read the last frame
        feats = self.clip_features(images) if clip else self.features(images)
        embedding = self.embedding(feats, images.shape[:3] if clip else None) if mode == "tensor" else None
        bev, state, aux = self.fusion(feats, batch) if self.fusion is not None else (None, {}, {})
        if clip and any(t.space != "bev" for t in self.heads.values()):
            B, T, N = images.shape[:3]
            feats = [f.view(B, T, N, *f.shape[1:])[:, -1].flatten(0, 1) for f in feats]  # [(B*N, C, h, w)]
        targets = batch.get("targets", {}) if mode == "loss" else {}
        outputs = {}
        for name, task in self.heads.items():  # a head without labels in the batch: BatchNorm statistics frozen
            with frozen_norm(task, no_labels(targets.get(name))):
                outputs[name] = task(bev if task.space == "bev" else feats)
        outputs.update(aux)  # the auxiliary objectives' inputs (LSS depth logits), for mode "loss"
        if mode == "tensor":
            outputs["embedding"] = embedding
            return {**outputs, "bev_state": state} if state else outputs
        if mode == "loss":
            if "targets" not in batch:
                raise ValueError("mode 'loss' needs batch['targets'] ({task: Task.collate(...)})")
            return self.loss(outputs, batch["targets"])
        return {**self.decode(outputs), "bev_state": state} if state else self.decode(outputs)

    def clip_features(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Neck pyramid of a clip: images (B, T, N, 3, H, W) -> [(B*T*N, C, h, w)], frames in order.

        While training (gradients on) and `history_grad` is False, the T-1 past frames pass the trunk
        under `torch.no_grad()` and only the current frame's pass is differentiated, as BEVDet4D
        (Huang & Huang, 2022) does for its adjacent frames and BEVFormer (Li et al., ECCV 2022) for its
        history BEV: the backward pass, about two thirds of a step, then covers N images instead of
        T*N. The video fusion and the view transform still learn from the past frames' features."""
        B, T, N = images.shape[:3]
        if self.history_grad or T == 1 or not torch.is_grad_enabled():
            return self.features(images.flatten(0, 1))
        with torch.no_grad():
            past = self.features(images[:, :-1].flatten(0, 1))  # [(B*(T-1)*N, C, h, w)]
        now = self.features(images[:, -1])  # [(B*N, C, h, w)]
        return [torch.cat([p.view(B, T - 1, N, *p.shape[1:]), c.view(B, 1, N, *c.shape[1:])], 1).flatten(0, 2)
                for p, c in zip(past, now, strict=True)]

    @staticmethod
    def embedding(feats: list[torch.Tensor], clip_shape: tuple[int, int, int] | None = None) -> torch.Tensor:
        """Global average pool of the coarsest neck level: [(B*N, C, h, w), ...] -> (B*N, C); a clip's
        features (B*T*N, ...) give the last frame's."""
        emb = feats[-1].float().mean(dim=(2, 3))  # (B*N, C)
        if clip_shape is not None:
            B, T, N = clip_shape
            emb = emb.view(B, T, N, -1)[:, -1].flatten(0, 1)
        return emb

    def loss(self, outputs: Mapping[str, Any], targets: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Named losses: "<task>.<component>", "<task>" (sum of its components), "loss" (balanced total)."""
        out: dict[str, torch.Tensor] = {}
        for name, objective in self.target_builders().items():
            if name not in targets:
                raise ValueError(f"no targets for '{name}' (targets have {sorted(targets)}); build them with "
                                 "model.target_builders(), which holds the heads and the auxiliary objectives")
            parts, count = supervised_loss(objective, outputs[name], targets[name])  # frames without its labels: masked
            out.update({f"{name}.{k}": v for k, v in parts.items()})
            out[name] = sum(parts.values())
            if count >= 0:
                out[f"{name}.{SAMPLES}"] = torch.tensor(float(count))
        out["loss"] = self.balancer.combine({n: out[n] for n in present_objectives(self.objectives, out)})
        return out

    def target_builders(self) -> dict[str, Any]:
        """What builds and collates training targets: the heads, then the auxiliary objectives."""
        return {**self.heads, **self.auxiliary}

    def decode(self, outputs: Mapping[str, Any]) -> dict[str, list]:
        """Per task the list of B*N per-image results (index b*N + n)."""
        return {name: task.decode(outputs[name]) for name, task in self.heads.items()}

    def shared_parameters(self) -> list[nn.Parameter]:
        """Parameters every task shares (backbone, neck, fusion)."""
        mods = [self.backbone, self.neck] + ([self.fusion] if self.fusion is not None else [])
        return [p for m in mods for p in m.parameters()]

    def backward(self, losses: Mapping[str, torch.Tensor]) -> None:
        """Backpropagate `forward(batch, "loss")` output through the balancer."""
        shared = [p for p in self.shared_parameters() if p.requires_grad]  # frozen ones (optim.lr_mult 0) left out
        ids = {id(p) for p in self.shared_parameters()}
        others = [p for p in self.parameters() if id(p) not in ids and p.requires_grad]
        self.balancer.backward({n: losses[n] for n in present_objectives(self.objectives, losses)}, shared, others)

    def load_weights(self, state: Mapping[str, torch.Tensor], partial: bool = False) -> dict[str, list[str]]:
        """Load a state dict; one that does not fit raises ValueError listing the keys (unless `partial`)."""
        return load_state_dict_checked(self, state, where="checkpoint", partial=partial)


def build_model(cfg: ModelConfig, meta: Mapping[str, Any]) -> HydraNet:
    """HydraNet from a ModelConfig and the dataset meta (class lists for the heads)."""
    names = [t.name for t in cfg.tasks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"task '{dup[0]}' appears twice in model.tasks")
    backbone = build_backbone(cfg.backbone, cfg.weights_path, cfg.finest_stride)
    neck = BiFPN(backbone.out_channels, cfg.neck_width, cfg.neck_repeats, cfg.neck_levels, backbone.strides)
    fusion, bev_meta = None, meta
    if any(t.name in BEV_TASKS for t in cfg.tasks):
        fusion = build_fusion(cfg.bev, meta, neck.out_channels[0], neck.strides[0])
        bev_meta = {**meta, "bev_grid": fusion.grid.as_dict()}
    finest = {"in_stride": neck.strides[0]} if neck.strides[0] != 8 else {}  # camera heads read the finest level
    heads = {t.name: build_task(t.name, bev_meta, cfg.bev.channels, t.options) if t.name in BEV_TASKS
             else build_task(t.name, meta, neck.out_channels[0], {**finest, **t.options}) for t in cfg.tasks}
    aux = fusion.auxiliary if fusion is not None else {}
    weights = {t.name: t.weight for t in cfg.tasks} | {name: cfg.bev.depth_weight for name in aux}
    balancer = build_balancer(cfg.balancer, names + list(aux), weights)
    return HydraNet(backbone, neck, heads, fusion=fusion, balancer=balancer, history_grad=cfg.bev.history_grad)


def build_fusion(cfg: BevConfig, meta: Mapping[str, Any], in_channels: int, stride: int) -> BevFusion:
    """View transform (+ video queue) on the configured grid; its table is precomputed from
    meta["rig"] when the meta has one (else from the first batch's intrinsics/cam2ego)."""
    if cfg.method not in VIEW_TRANSFORMS:
        raise ValueError(f"unknown model.bev.method '{cfg.method}'; known: {list(VIEW_TRANSFORMS)}")
    if cfg.depth_weight < 0 or (cfg.depth_weight > 0 and cfg.method != "lss"):
        raise ValueError(f"model.bev.depth_weight {cfg.depth_weight} supervises the depth distributions of method 'lss' "
                         f"(method is '{cfg.method}'); set it >= 0, and only with model.bev.method=lss")
    if cfg.x_range is not None and cfg.y_range is not None and cfg.resolution is not None:
        grid = BevGrid(tuple(cfg.x_range), tuple(cfg.y_range), float(cfg.resolution))
    else:
        base = BevGrid.from_meta(meta, cfg.downsample)
        grid = BevGrid(tuple(cfg.x_range or base.x_range), tuple(cfg.y_range or base.y_range),
                       float(cfg.resolution or base.resolution))
    view = VIEW_TRANSFORMS[cfg.method](in_channels, grid, stride, cfg)
    if "rig" in meta:
        rig = rig_from_dict(meta["rig"], "meta rig")
        K, T, cam_names = rig.calibration()
        view.set_calibration(K, T, rig.common_size(), cam_names, rig.distortion())
    video = VideoQueue(cfg.channels, grid, cfg.video_frames, cfg.video_fuse_depth) if cfg.video_frames > 1 else None
    return BevFusion(view, video)
