"""bench_batch runs end to end on the demo model: its figures, the greedy check and the memory roof."""

import json
import subprocess
import sys

import pytest

from benchmarks.bench_engine import find_lcpp
from benchmarks.roof import read_bandwidth
from pantheon.demo import demo_model_path
from tests.conftest import ROOT


def run_batch(*extra):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_batch.py"), str(demo_model_path()),
                          "--threads", "1", "--streams", "3", "--prompt", "16", "--context", "4", "--gen", "4",
                          "--repeats", "1", *extra], capture_output=True, text=True, timeout=600, check=True)
    return out.stdout, json.loads(out.stdout.strip().splitlines()[-1])


def test_bench_batch_reports_every_figure():
    stdout, f = run_batch("--no-lcpp")
    assert f["greedy_equal"] is True  # each stream's tokens equal what it generates alone
    assert f["streams_tps"] > 0 and f["prefill_tps"] > 0 and f["step_bytes"] > 1e6
    assert abs(f["roof_tps"] - 3 * f["read_gbps"] * 1e9 / f["step_bytes"]) < 1e-3 * f["roof_tps"]  # 4 decimals
    assert "memory roof:" in stdout and "lcpp_streams_tps" not in f


@pytest.mark.skipif(find_lcpp(None) is None, reason="llama-cpp-python is not installed (../shared/tools/install-llama-cpp.sh)")
def test_bench_batch_measures_llama_cpp_batched_decode():
    """llama.cpp's three figures through its batch API, and the ratios bench_batch derives from them."""
    stdout, f = run_batch()
    assert min(f["lcpp_prefill_tps"], f["lcpp_one_stream_tps"], f["lcpp_streams_tps"]) > 0
    assert abs(f["lcpp_vs_prefill"] - f["lcpp_streams_tps"] / f["lcpp_prefill_tps"]) < 1e-3 * f["lcpp_vs_prefill"]
    assert abs(f["streams_vs_lcpp"] - f["streams_tps"] / f["lcpp_streams_tps"]) < 1e-3 * f["streams_vs_lcpp"]
    assert "llama.cpp " in stdout


def test_read_bandwidth_is_a_rate():
    """64 MiB read on one thread: a plausible rate for any machine this runs on (0.5..1000 GB/s)."""
    assert 0.5e9 < read_bandwidth(1, nbytes=64 << 20, repeats=2) < 1e12
