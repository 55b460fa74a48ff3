#!/usr/bin/env python3
"""Serving overhead and replica scaling of pantheon-serve, beside the same engine in-process.

  bench_serve.py [MODEL.gguf] [--clients 4] [--max-tokens 48] [--repeats 3]

Runs, in one invocation and on one core per die (--cpu-dies 2):
  1. the engine in this process, pinned to one core: decode tokens/s of one greedy stream;
  2. pantheon-serve with the model on one die: one streaming client (decode tokens/s over HTTP+rings),
     then --clients concurrent streaming clients (time to first token and inter-token latency p50/p99,
     aggregate tokens/s);
  3. pantheon-serve with the model replicated on two dies: wall time of one request alone vs two at once.
Targets (docs/performance.md): one stream keeps at least 90 % of in-process decode speed; two
requests on two replicas finish within 1.3x the wall time of one. Medians over --repeats.
Last line: one JSON object with every figure.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.workers.serving import Server  # noqa: E402

BAN_EOS = {"2": -100}


def in_process(path, max_tokens):
    """Decode tokens/s of one greedy stream through the engine, pinned to one core like a die."""
    import pantheon
    from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
    from pantheon.engine.sampler import SamplingParams

    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    model = pantheon.open_model(path, threads=1)
    engine = Engine(model, EngineConfig(n_ctx=512))
    prompt = tuple(model.tokenizer.encode("Once upon a time"))
    engine.add(Request(0, prompt, 4, SamplingParams(temperature=0.0)))  # compile / warm caches
    while engine.has_work:
        engine.step()
    engine.add(Request(1, prompt, max_tokens, SamplingParams(temperature=0.0, logit_bias={2: -100.0})))
    times = []
    while engine.has_work:
        times += [time.perf_counter() for e in engine.step() if isinstance(e, TokenEvent)]
    return (len(times) - 1) / (times[-1] - times[0])


def stream(url, max_tokens, out):
    body = json.dumps({"model": "m", "prompt": "Once upon a time", "max_tokens": max_tokens, "stream": True,
                       "temperature": 0, "logit_bias": BAN_EOS, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0, arrivals, tokens = time.perf_counter(), [], 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and chunk["choices"][0]["text"]:
                arrivals.append(time.perf_counter())
    out.append({"ttft": arrivals[0] - t0, "gaps": [b - a for a, b in zip(arrivals, arrivals[1:])],
                "tokens": tokens, "decode_tps": (tokens - 1) / (arrivals[-1] - arrivals[0]),
                "wall": time.perf_counter() - t0})


def run_clients(url, n, max_tokens):
    out = []
    threads = [threading.Thread(target=stream, args=(url, max_tokens, out)) for _ in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.perf_counter() - t0


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def single_die(path, args):
    srv = Server(["--cpu-dies", "2", "--model", path, "--name", "m", "--dies", "cpu0",
                  "--max-concurrent", str(args.clients), "--batch-slots", str(min(8, args.clients))])
    try:
        run_clients(srv.url, 1, 4)
        single = [run_clients(srv.url, 1, args.max_tokens)[0][0]["decode_tps"] for _ in range(args.repeats)]
        many, wall = run_clients(srv.url, args.clients, args.max_tokens)
    finally:
        srv.stop()
    gaps = [g for r in many for g in r["gaps"]]
    return {"serve_decode_tps": statistics.median(single),
            "ttft_p50_s": pct([r["ttft"] for r in many], 0.5), "ttft_p99_s": pct([r["ttft"] for r in many], 0.99),
            "itl_p50_s": pct(gaps, 0.5), "itl_p99_s": pct(gaps, 0.99),
            "aggregate_tps": sum(r["tokens"] for r in many) / wall}


def replicas(path, args):
    srv = Server(["--cpu-dies", "2", "--model", path, "--name", "m", "--dies", "cpu0",
                  "--model", path, "--name", "m", "--dies", "cpu1"])
    try:
        run_clients(srv.url, 2, 4)
        one = statistics.median(run_clients(srv.url, 1, args.max_tokens)[1] for _ in range(args.repeats))
        two = statistics.median(run_clients(srv.url, 2, args.max_tokens)[1] for _ in range(args.repeats))
    finally:
        srv.stop()
    return {"one_request_wall_s": one, "two_on_two_replicas_wall_s": two, "replica_scaling": two / one}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default=None, help="GGUF (default: the bundled demo model)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    if args.model is None:
        from pantheon.demo import demo_model_path

        args.model = str(demo_model_path())
    figures = {"in_process_decode_tps": None}
    figures.update(single_die(args.model, args))
    figures.update(replicas(args.model, args))
    figures["in_process_decode_tps"] = in_process(args.model, args.max_tokens)
    figures["serve_vs_in_process"] = figures["serve_decode_tps"] / figures["in_process_decode_tps"]
    print(f"model: {args.model}  (one core per die, {args.max_tokens} tokens, {args.clients} clients)")
    for key, value in figures.items():
        print(f"  {key:28s} {value:10.4f}")
    print(f"  single stream keeps {100 * figures['serve_vs_in_process']:.1f} % of in-process decode (target >= 90 %)")
    print(f"  two replicas: {figures['replica_scaling']:.2f}x the wall time of one (target <= 1.3x)")
    print(json.dumps({"model": os.path.basename(args.model), **{k: round(v, 5) for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
