"""Shared pytest options and fixtures."""
from __future__ import annotations

# Load torchvision (and with it triton's bundled LLVM) before any test opens the sim's EGL
# context: Mesa's llvmpipe loads LLVM 15 globally, and triton's LLVM loaded after it crashes
# the process (segfault on `import torchvision` after rendering). See README, "Known issues".
import torchvision  # noqa: F401,E402


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files under tests/golden/ from the current code instead of comparing")
