"""benchmarks/bench_router.py at a tiny size: it starts a router and an instance, pairs its runs, and
prints a table and a last-line JSON report whose figures agree with each other."""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.pantheon.router.fleet_kit import require_haproxy
from tests.workers.serving import ROOT


@pytest.mark.parametrize("extra, instance", [((), "pantheon-serve"),
                                             (("--synthetic", "5"), "scripted, an event every 5 ms")])
def test_router_benchmark_reports_paired_differences(extra, instance):
    require_haproxy()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_router.py"), "--repeats", "3",
                          "--max-tokens", "4", "--warmup", "1", *extra], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0].split() == ["path", "decode", "tok/s", "TTFT", "ms", "/tokenize", "ms"]
    report = json.loads(lines[-1])
    assert (report["bench"], report["repeats"], report["max_tokens"], report["paired"]) == ("router", 3, 4, True)
    assert report["instance"] == instance
    for path in ("direct", "router"):
        fig = report[path]
        assert fig["tps"] > 0 and 0 < fig["ttft"] < 600 and 0 < fig["rtt"] < 60, fig
    for key in ("decode_loss_pct", "ttft_added_ms", "roundtrip_added_ms"):
        low, high = report["iqr"][key]
        assert math.isfinite(report[key]) and low <= report[key] <= high, (key, report)
    assert report["decode_target_met"] == (report["decode_loss_pct"] < 2.0)
    assert report["ttft_target_met"] == (report["ttft_added_ms"] < 2.0)
