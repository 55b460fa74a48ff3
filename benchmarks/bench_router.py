#!/usr/bin/env python3
"""The cost of the `pantheon router` path (HAProxy) against talking to the instance directly.

  bench_router.py [MODEL.gguf] [--repeats 15] [--max-tokens 64] [--synthetic MS]

Starts one pantheon-serve instance (the bundled demo model unless MODEL is given) registered with a
`pantheon router`, then runs the same greedy streaming completion in pairs, one direct and one through
the router, back to back and in alternating order, so that a shared machine's drift and noise hit both
halves of a pair alike. It reports the medians of the paired differences (what the router adds) next
to each path's own medians, for: decode tokens/s of the stream, time to first token, and the round
trip of a cheap routed request (POST /tokenize, the proxy's own latency). Targets (issue 16): decode
tokens/s within 2 % and time to first token within 2 ms of direct. Prints a table; the last line is
one JSON object.

--synthetic MS replaces the instance by a scripted one (benchmarks/router_upstream.py) that streams
--max-tokens events MS milliseconds apart, with no model: the proxy's own cost, without a model's
step-to-step noise drowning it.
"""

import argparse
import http.client
import json
import pathlib
import statistics
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pantheon.router.fleet_kit import Router  # noqa: E402
from benchmarks.router_upstream import ScriptedInstance  # noqa: E402
from tests.workers.serving import Server  # noqa: E402

BAN_EOS = {"2": -100}
PATHS = ("direct", "router")


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
    tokens = arrivals[:-1]  # the last event carries finish_reason only
    if len(tokens) < 2:
        raise SystemExit(f"{url}: {len(tokens)} token events; --max-tokens must be at least 2")
    return tokens[0] - t0, (len(tokens) - 1) / (tokens[-1] - tokens[0])


def tokenize(url):
    body = json.dumps({"model": "m", "content": "Once upon a time"}).encode()
    req = urllib.request.Request(url + "/tokenize", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
    return time.perf_counter() - t0


def one(name, url, max_tokens):
    """One path's streamed completion and /tokenize round trip; a failure names the path and the step
    (a lost connection on one path must not read as the other's)."""
    step = "stream"
    try:
        ttft, tps = stream(url, max_tokens)
        step = "tokenize"
        return {"ttft": ttft, "tps": tps, "rtt": tokenize(url)}
    except (OSError, http.client.HTTPException) as e:
        raise RuntimeError(f"{name} path ({url}), {step}: {e!r}") from e


def measure(urls, repeats, max_tokens):
    """Per repeat, one direct and one routed run back to back; the order alternates between repeats."""
    pairs = []
    for i in range(repeats):
        order = PATHS if i % 2 == 0 else PATHS[::-1]
        runs = {name: one(name, urls[name], max_tokens) for name in order}
        pairs.append(runs)
    return pairs


def summarise(pairs):
    """Each path's medians, and the medians of the per-pair differences (router minus direct)."""
    med = {name: {k: statistics.median(p[name][k] for p in pairs) for k in ("ttft", "tps", "rtt")}
           for name in PATHS}
    loss = [100.0 * (p["direct"]["tps"] - p["router"]["tps"]) / p["direct"]["tps"] for p in pairs]
    ttft = [1000.0 * (p["router"]["ttft"] - p["direct"]["ttft"]) for p in pairs]
    rtt = [1000.0 * (p["router"]["rtt"] - p["direct"]["rtt"]) for p in pairs]
    diff = {"decode_loss_pct": statistics.median(loss), "ttft_added_ms": statistics.median(ttft),
            "roundtrip_added_ms": statistics.median(rtt)}
    spread = {"decode_loss_pct": _iqr(loss), "ttft_added_ms": _iqr(ttft), "roundtrip_added_ms": _iqr(rtt)}
    return med, diff, spread


def _iqr(xs):
    """(25th, 75th) percentile of the paired differences: how far one pair strays on this machine."""
    if len(xs) < 2:
        return [xs[0], xs[0]]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return [q[0], q[2]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--repeats", type=int, default=15, help="pairs of runs (one direct, one routed)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2, help="pairs run first and not counted")
    ap.add_argument("--synthetic", type=float, metavar="MS", help="a scripted instance, an event every MS ms")
    args = ap.parse_args()
    if args.repeats < 1 or args.max_tokens < 3 or (args.synthetic is not None and args.synthetic < 0):
        ap.error("--repeats must be at least 1, --max-tokens at least 3, --synthetic at least 0")
    router = Router(["--heartbeat", "1", "--evict-after", "5"])
    server = None
    try:
        server = start_instance(args, router.url)
        router.await_fleet(lambda f: "m" in f["models"])
        urls = {"direct": server.url, "router": router.url}
        measure(urls, args.warmup, min(8, args.max_tokens))  # connections, caches, compiled paths
        pairs = measure(urls, args.repeats, args.max_tokens)
    finally:
        if server is not None:
            server.stop()
        router.stop()
    report(*summarise(pairs), args)


def start_instance(args, router_url):
    """pantheon-serve with the model (the demo model by default), or the scripted instance."""
    if args.synthetic is not None:
        return ScriptedInstance(router_url, args.synthetic / 1000.0)
    from pantheon.demo import demo_model_path

    model = args.model or str(demo_model_path())
    return Server(["--http-workers", "1", "--model", model, "--name", "m", "--registry", router_url])


def report(med, diff, spread, args):
    print(f"{'path':<8} {'decode tok/s':>13} {'TTFT ms':>9} {'/tokenize ms':>13}")
    for name in PATHS:
        m = med[name]
        print(f"{name:<8} {m['tps']:>13.1f} {1000 * m['ttft']:>9.2f} {1000 * m['rtt']:>13.2f}")
    print(f"router overhead, median of {args.repeats} paired differences [interquartile range]:")
    print(f"  decode tokens/s lost  {diff['decode_loss_pct']:+7.2f} %   "
          f"[{spread['decode_loss_pct'][0]:+.2f}, {spread['decode_loss_pct'][1]:+.2f}]  (target < 2 %)")
    print(f"  time to first token   {diff['ttft_added_ms']:+7.2f} ms  "
          f"[{spread['ttft_added_ms'][0]:+.2f}, {spread['ttft_added_ms'][1]:+.2f}]  (target < 2 ms)")
    print(f"  /tokenize round trip  {diff['roundtrip_added_ms']:+7.2f} ms  "
          f"[{spread['roundtrip_added_ms'][0]:+.2f}, {spread['roundtrip_added_ms'][1]:+.2f}]")
    upstream = "pantheon-serve" if args.synthetic is None else f"scripted, an event every {args.synthetic:g} ms"
    print(f"instance: {upstream}")
    out = {"bench": "router", "instance": upstream, "repeats": args.repeats, "max_tokens": args.max_tokens, "paired": True,
           "direct": med["direct"], "router": med["router"],
           **{k: round(v, 3) for k, v in diff.items()},
           "iqr": {k: [round(a, 3), round(b, 3)] for k, (a, b) in spread.items()},
           "decode_target_met": diff["decode_loss_pct"] < 2.0, "ttft_target_met": diff["ttft_added_ms"] < 2.0}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
