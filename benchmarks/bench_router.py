#!/usr/bin/env python3
"""The cost of the `pantheon router` path (HAProxy) against talking to the instance directly.

  bench_router.py [MODEL.gguf] [--repeats 15] [--max-tokens 64]

Starts one pantheon-serve instance (the bundled demo model unless MODEL is given) registered with a
`pantheon router`, then alternates the same greedy streaming completion direct and through the
router (alternating keeps a shared machine's drift out of the comparison) and reports medians of:
decode tokens/s of the stream, time to first token, and the round trip of a cheap routed request
(POST /tokenize, the proxy's own latency). Targets (issue 16): decode tokens/s within 2 % and time
to first token within 2 ms of direct. Prints a table; the last line is one JSON object.
"""

import argparse
import json
import pathlib
import statistics
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pantheon.router.fleet_kit import Router  # noqa: E402
from tests.workers.serving import Server  # noqa: E402

BAN_EOS = {"2": -100}


def stream(url, max_tokens):
    """(time to first token s, decode tokens/s after the first) of one streamed completion."""
    body = json.dumps({"model": "m", "prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
                       "temperature": 0, "logit_bias": BAN_EOS}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0, arrivals = time.perf_counter(), []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {"):
                arrivals.append(time.perf_counter())
    return arrivals[0] - t0, (len(arrivals) - 2) / (arrivals[-2] - arrivals[0])  # last event: finish_reason


def tokenize(url):
    body = json.dumps({"model": "m", "content": "Once upon a time"}).encode()
    req = urllib.request.Request(url + "/tokenize", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
    return time.perf_counter() - t0


def measure(paths, repeats, max_tokens):
    rows = {name: {"ttft": [], "tps": [], "rtt": []} for name in paths}
    for _ in range(repeats):
        for name, url in paths.items():
            ttft, tps = stream(url, max_tokens)
            rows[name]["ttft"].append(ttft)
            rows[name]["tps"].append(tps)
            rows[name]["rtt"].append(tokenize(url))
    return {name: {k: statistics.median(v) for k, v in r.items()} for name, r in rows.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    router = Router(["--heartbeat", "1", "--evict-after", "5"])
    from pantheon.demo import demo_model_path

    model = args.model or str(demo_model_path())
    server = None
    try:
        server = Server(["--http-workers", "1", "--model", model, "--name", "m", "--registry", router.url])
        router.await_fleet(lambda f: "m" in f["models"])
        paths = {"direct": server.url, "router": router.url}
        measure(paths, 2, 8)  # warm both paths (connections, caches)
        med = measure(paths, args.repeats, args.max_tokens)
    finally:
        if server is not None:
            server.stop()
        router.stop()
    report(med, args)


def report(med, args):
    d, r = med["direct"], med["router"]
    tps_loss = 100.0 * (d["tps"] - r["tps"]) / d["tps"]
    ttft_add = 1000.0 * (r["ttft"] - d["ttft"])
    rtt_add = 1000.0 * (r["rtt"] - d["rtt"])
    print(f"{'path':<8} {'decode tok/s':>13} {'TTFT ms':>9} {'/tokenize ms':>13}")
    for name, m in med.items():
        print(f"{name:<8} {m['tps']:>13.1f} {1000 * m['ttft']:>9.2f} {1000 * m['rtt']:>13.2f}")
    print(f"router overhead: decode {tps_loss:+.2f} % (target < 2 %), TTFT {ttft_add:+.2f} ms (target < 2 ms), "
          f"round trip {rtt_add:+.2f} ms; medians of {args.repeats}")
    print(json.dumps({"bench": "router", "repeats": args.repeats, "max_tokens": args.max_tokens,
                      "direct": med["direct"], "router": med["router"], "decode_loss_pct": round(tps_loss, 3),
                      "ttft_added_ms": round(ttft_add, 3), "roundtrip_added_ms": round(rtt_add, 3),
                      "decode_target_met": tps_loss < 2.0, "ttft_target_met": ttft_add < 2.0}))


if __name__ == "__main__":
    main()
