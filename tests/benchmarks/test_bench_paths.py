"""bench_paths runs end to end: a row per path this host has, each rate from its own timing."""

import json
import subprocess
import sys

from pantheon.engine.kernels.vnni import has_int8_dots
from tests.conftest import ROOT


def test_bench_paths_reports_each_path_of_each_type():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_paths.py"), "--types", "Q4_0,Q6_K",
                          "--matrices", "1", "--reps", "1", "--threads", "1"],
                         capture_output=True, text=True, timeout=900, check=True)
    rows = json.loads(out.stdout.strip().splitlines()[-1])["results"]
    want = {"float"} | ({"repacked", "in_place"} if has_int8_dots() else set())
    assert {r["path"] for r in rows if r["type"] == "Q4_0"} == want
    assert {r["path"] for r in rows if r["type"] == "Q6_K"} >= want
    nbytes = 5632 * 2048 // 256 * 210  # one Q6_K matrix
    for r in rows:
        assert r["gb_s"] > 0
        if r["type"] == "Q6_K":
            assert abs(r["gb_s"] - nbytes / r["ms_per_matrix"] / 1e6) < 0.02 * r["gb_s"] + 0.01
    assert "ms/matrix" in out.stdout
