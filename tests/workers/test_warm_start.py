"""Warm start: a model is announced only once its kernels are compiled, so its first request is not slow."""

import http.client
import json
import re
import statistics
import time

from tests.workers.serving import Server

REQUESTS = 21  # the first, then 20 warm ones


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


def test_first_request_on_a_fresh_kernel_cache_is_as_fast_as_a_warm_one(tmp_path):
    # an empty cache directory: every kernel is compiled in this run, none loaded from an earlier one
    srv = Server(["--http-workers", "1", "--cpu-dies", "1"], ready_timeout=900,
                 env={"PANTHEON_KERNEL_CACHE": str(tmp_path)})
    try:
        # Server returns once /health reports the model loaded: the very next request is the first
        times = [time_to_first_token(srv, f"Request number {i} asks about") for i in range(REQUESTS)]
        log = srv.log()
        compile_s = float(re.search(r"kernels ready in ([0-9.]+) s", log).group(1))
        # A few milliseconds of thread hand-offs on 2 shared cores spread the warm requests too (p90 at
        # ~1.6x the median here): the first is held to 2x the warm ones' 90th percentile, which a pause
        # of its own (a compile, opening the tokenizer) exceeds and noise alone rarely does.
        warm = statistics.quantiles(times[1:], n=10)[-1]
        assert times[0] <= 2 * warm, (times, log[-3000:])
        # the pause a first request would have had without the warm-up: far above that bound
        assert times[0] < compile_s / 2, (times, compile_s)
        assert log.index("kernels ready") < log.index("model pantheon-demo.gguf loaded"), log[-3000:]
        assert list(tmp_path.glob("numba-*/*/*.nbi")), "the kernels were not cached under PANTHEON_KERNEL_CACHE"
    finally:
        assert srv.stop() == 0
