"""Shared pytest options and fixtures."""
from __future__ import annotations


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden files under tests/golden/ from the current code instead of comparing")
