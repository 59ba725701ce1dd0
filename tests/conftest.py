"""Shared pytest options and fixtures."""
from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files under tests/golden/ from the current code instead of comparing")


@pytest.fixture
def one_torch_thread():
    """One intra-op thread for a training test: on a 2-core machine shared with another job, two OpenMP
    threads spin against it (measured: the overfit test took 411 s with 2 threads there, 8 s with 1);
    restored afterwards. Use with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
