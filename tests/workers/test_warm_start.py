"""Warm start: a model is announced only once its kernels are compiled, so its first request is not slow."""

import http.client
import json
import re
import statistics
import time

from tests.workers.serving import Server

REQUESTS = 11  # the first, then 10 warm ones
STARTS = 5  # one on an empty kernel cache, then restarts on it: the median first request of five


def time_to_first_token(server, prompt):
    """Seconds from sending a streamed completion to its first token event."""
    conn = http.client.HTTPConnection(server.url.split("//")[1], timeout=600)
    body = {"prompt": prompt, "max_tokens": 2, "stream": True, "temperature": 0}
    start = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    while not resp.readline().startswith(b"data: {"):
        pass
    first = time.monotonic() - start
    resp.read()
    conn.close()
    return first


def _fresh_start(cache):
    """One server on kernel cache `cache`: the time to first token of its first request and of REQUESTS - 1
    warm ones after it, and its log."""
    srv = Server(["--http-workers", "1", "--cpu-dies", "1"], ready_timeout=900,
                 env={"PANTHEON_KERNEL_CACHE": str(cache)})
    try:
        # Server returns once /health reports the model loaded: the very next request is the first
        times = [time_to_first_token(srv, f"Request number {i} asks about") for i in range(REQUESTS)]
        return times, srv.log()
    finally:
        assert srv.stop() == 0


def test_first_request_on_a_fresh_kernel_cache_is_as_fast_as_a_warm_one(tmp_path):
    """The first server compiles every kernel into an empty cache (a fresh install); the others load them from
    it (a restart: numba loads a cached kernel at its first call, so they too must do that before announcing
    the model). A fresh compile is a minute of this machine's CI; one shows what several would, and the
    restarts (seconds each) give the median five first requests, so two slow draws of a busy machine (a
    first request of 30 ms among 8 ms ones, seen) do not decide it."""
    starts = [_fresh_start(tmp_path / "cache") for _ in range(STARTS)]
    compile_s = float(re.search(r"kernels ready in ([0-9.]+) s", starts[0][1]).group(1))
    # the pause a first request would have had without the warm-up: seconds, far above any bound below
    assert starts[0][0][0] < compile_s / 2, (starts[0][0], compile_s)
    assert list((tmp_path / "cache").glob("numba-*/*/*.nbi")), "the kernels were not cached there"
    for times, log in starts:
        assert log.index("kernels ready") < log.index("model pantheon-demo.gguf loaded"), log[-3000:]
    # Requests of 3-5 ms on 2 shared cores spread by thread hand-offs alone (300 warm ones here: median
    # 3.3 ms, p90 5.4, p99 9.2), so one first request is one draw from that spread: the median first of
    # STARTS servers is held to 2x the warm requests' 90th percentile.
    firsts = [times[0] for times, _ in starts]
    warm = statistics.quantiles([t for times, _ in starts for t in times[1:]], n=10)[-1]
    assert statistics.median(firsts) <= 2 * warm, (firsts, [times[1:] for times, _ in starts])
