"""Shared fixtures: where ../shared lives, and skips with a reason when it is absent."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("PANTHEON_SHARED", ROOT.parent / "shared"))


def shared_path(*parts):
    """Path under ../shared, or skip the test naming what is missing."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"reference data {p} is absent (../shared not laid out beside the checkout)")
    return p


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="run long soaks and benchmarks")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: pass --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
