"""Shared fixtures: where ../shared lives, and skips with a reason when it is absent."""

import os
import pathlib

# The GPU engine's kernels run in numba's CUDA simulator unless a run asks for the real device
# (benchmarks/gpu_check.sh sets 0). It must be set before numba is first imported, here or in a
# server the tests start (they inherit the environment).
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import shutil  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

from pantheon.engine import sizes  # noqa: E402 (no numba: the supervisor imports it too)

# Repacked weights (pantheon.engine.repacked) of the models tests open go to one directory per run,
# removed at its end, not to the user's cache: in this process and in every server a test starts.
REPACK_DIR = tempfile.mkdtemp(prefix="pantheon-test-repacked-")
os.environ["PANTHEON_REPACK_DIR"] = sizes.REPACK_DIR = REPACK_DIR


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(REPACK_DIR, ignore_errors=True)

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


WARM_MODELS = ("llama-q8_0", "llama-q4_0", "llama-q4_k_m", "llama-q5_k_m", "llama-q6_k", "llama-q2_k",
               "llama-q3_k_m", "llama-q4_1", "llama-q5_0", "llama-q5_1", "llama-f16", "llama-bf16", "llama-f32",
               "qwen3moe-q8_0")


@pytest.fixture(scope="session")
def compiled_kernels():
    """Compile every numba kernel once (or load it from numba's disk cache) before the tests that need it.

    On a fresh checkout the first compile of the kernels takes tens of seconds; without this, that
    cost lands inside whichever test first runs a model, under that test's HTTP timeouts (and inside
    server workers, which then load the cached machine code instead). Only tests that run models behind
    a timeout ask for it (the conftest of tests/workers and tests/pantheon/serve/http, test_cli); the
    rest never load numba."""
    golden = SHARED / "golden"
    if not golden.exists():
        return
    import pantheon

    for name in WARM_MODELS:
        if not (golden / f"{name}.gguf").exists():  # a partial copy (the device carries a subset)
            continue
        model = pantheon.open_model(str(golden / f"{name}.gguf"), threads=2)
        model.logits(list(range(1, 21)))  # prefill: the 4- and 8-vector tiles
        cache = model.new_cache(64)
        model.forward([(cache, [5, 6, 7])])
        model.forward([(cache, [8])])  # decode: one vector
