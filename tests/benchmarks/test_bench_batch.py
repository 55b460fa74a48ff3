"""bench_batch runs end to end on the demo model: its figures, the greedy check and the memory roof."""

import json
import subprocess
import sys

from benchmarks.roof import read_bandwidth
from pantheon.demo import demo_model_path
from tests.conftest import ROOT


def test_bench_batch_reports_every_figure(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_batch.py"), str(demo_model_path()),
                          "--threads", "1", "--streams", "3", "--prompt", "16", "--context", "4", "--gen", "4",
                          "--repeats", "1"], capture_output=True, text=True, timeout=600, check=True)
    f = json.loads(out.stdout.strip().splitlines()[-1])
    assert f["greedy_equal"] is True  # each stream's tokens equal what it generates alone
    assert f["streams_tps"] > 0 and f["prefill_tps"] > 0 and f["step_bytes"] > 1e6
    assert abs(f["roof_tps"] - 3 * f["read_gbps"] * 1e9 / f["step_bytes"]) < 1e-3 * f["roof_tps"]  # 4 decimals
    assert "memory roof:" in out.stdout


def test_read_bandwidth_is_a_rate():
    """64 MiB read on one thread: a plausible rate for any machine this runs on (0.5..1000 GB/s)."""
    assert 0.5e9 < read_bandwidth(1, nbytes=64 << 20, repeats=2) < 1e12
