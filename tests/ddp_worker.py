"""Run by tests/test_train.py under torchrun: trains, then saves this rank's weights to OUT/rank<r>.pt.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/ddp_worker.py OUT key=value ...
"""
import os
import sys

import torch

from hydranet.experiment import load_experiment

from hydranet.train import train

if __name__ == "__main__":
    out, overrides = sys.argv[1], sys.argv[2:]
    model = train(load_experiment("configs/tiny.yaml", overrides), out, progress=False)
    torch.save(model.state_dict(), os.path.join(out, f"rank{os.environ['RANK']}.pt"))
