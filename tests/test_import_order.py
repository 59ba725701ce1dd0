"""Any import order is safe: rendering with the sim and importing torchvision, in either order.

Mesa's llvmpipe loads its LLVM with RTLD_GLOBAL; triton's extension (loaded by torchvision)
bundles another LLVM whose exported symbols would bind to Mesa's copy, and its static
initializers crashed the process (segfault). sim.render preloads the bundled library first.
Each order runs in a fresh interpreter, since the crash kills the process.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

RENDER = """
import sys
from sim.render import create_context
ctx = create_context()
fbo = ctx.simple_framebuffer((8, 8))
fbo.use()
ctx.clear(0.2, 0.4, 0.6)
assert fbo.read()[:3] != b"\\x00\\x00\\x00"
assert TORCH_FIRST or not {"torch", "triton"} & set(sys.modules), "sim.render imported torch or triton"
"""
TORCHVISION = """
import torchvision
from torchvision.ops import nms
import torch
assert nms(torch.zeros(1, 4), torch.ones(1), 0.5).tolist() == [0]
"""


@pytest.mark.parametrize("torch_first", [False, True], ids=["render-then-torchvision", "torchvision-then-render"])
def test_import_order(torch_first):
    code = f"TORCH_FIRST = {torch_first}\n" + (TORCHVISION + RENDER if torch_first else RENDER + TORCHVISION)
    proc = subprocess.run([sys.executable, "-c", code + "\nprint('done')"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("done"), (
        f"exit {proc.returncode} (-11 is a segfault)\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def test_the_models_import_without_torchvision():
    """The models, every task, evaluation and export import neither torchvision nor torch._dynamo (which torchvision's
    ops import: 7.7 s of a process's start here), and neither does building the tiny backbone or scoring signs:
    `hydranet eval` and `export` start that much sooner. A RegNet backbone, det2d's GIoU option and torch's
    optimizers import them."""
    code = """
import sys
import torch
import hydranet.evaluate, hydranet.models.hydranet, hydranet.tasks, deploy.export
from hydranet.models.backbones import build_backbone
from hydranet.tasks.signs_lights import AttributeAccuracy
feats = build_backbone("tiny", finest_stride=4).eval()(torch.zeros(1, 3, 64, 64))
metric = AttributeAccuracy(["sign:stop", "light:red"])
box = torch.tensor([[0.0, 0.0, 8.0, 8.0]])
metric.update([{"boxes": box, "scores": torch.ones(1), "labels": torch.zeros(1, dtype=torch.long)}],
              {"gt_boxes": [box], "gt_labels": [torch.zeros(1, dtype=torch.long)]})
assert metric.compute()["accuracy"] == 1.0, metric.compute()
print(sorted(m for m in ("torchvision", "torch._dynamo") if m in sys.modules))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", f"imported at start-up: {proc.stdout.strip()}"
