#!/usr/bin/env python3
"""Batched decode on one die: aggregate tokens/s of N concurrent greedy streams through the step
engine, against one stream and against the same die's prefill tokens/s (issue 17's bars: 0.7x prefill
and 3x one stream at 8 streams).

  bench_batch.py MODEL.gguf [--threads 2] [--streams 8] [--prompt 128] [--context 32] [--gen 32]
                 [--repeats 3] [--quantize] [--lcpp-python PATH]

Prefill: one sequence of --prompt tokens in one forward. Streams: --streams requests of --context
prompt tokens each, added to one Engine (max_batch = streams); once every stream has its first token,
the steps until all are done are timed (each step: one forward over all streams, then sampling).
Runs alternate between the three measurements so drift hits all of them; medians. Also checks that
every stream's greedy tokens equal what it generates alone. Then the memory roof (benchmarks/roof.py):
the weight bytes one step streams and the rate the same threads read memory, so the most tokens/s any
step of these streams could reach. Then the same three figures from llama.cpp on the same token ids
(benchmarks/lcpp_batch.py, its batch API, in the interpreter bench_engine.find_lcpp picks), when it is
installed: its own streams/prefill ratio, and ours against its. Last line: one JSON object.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks.bench_engine import find_lcpp, prompt_tokens, repacked_count  # noqa: E402
from benchmarks.roof import read_bandwidth, step_bytes  # noqa: E402


def prefill_tps(model, toks):
    cache = model.new_cache(len(toks) + 1)
    t = time.perf_counter()
    model.forward([(cache, toks)])
    return len(toks) / (time.perf_counter() - t)


def streams_run(model, prompts, gen):
    """(aggregate decode tokens/s once every stream is decoding, tokens per stream)."""
    from pantheon.engine.sampler import SamplingParams
    from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent

    engine = Engine(model, EngineConfig(n_ctx=max(map(len, prompts)) + gen + 2, max_batch=len(prompts),
                                        prefill_chunk=sum(map(len, prompts))))
    for i, p in enumerate(prompts):
        engine.add(Request(i, tuple(p), gen + 1, SamplingParams(temperature=0.0)))
    out = {i: [] for i in range(len(prompts))}
    timed, start = 0, None
    while engine.has_work:
        events = engine.step()
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        for e in tokens:
            out[e.id].append(e.token)
        if start is None and all(out.values()):
            start = time.perf_counter()  # every stream has its first token: decode steps from here
        elif start is not None:
            timed += len(tokens)
    return timed / (time.perf_counter() - start), out


def stream_prompts(args, n_vocab):
    """The --prompt tokens of the prefill, and each stream's --context + i tokens (distinct prompts)."""
    long = prompt_tokens(args.prompt, n_vocab)
    return long, [prompt_tokens(args.context + i, n_vocab)[i:] for i in range(args.streams)]


def lcpp_measure(args, python, n_vocab):
    """llama.cpp's prefill, one-stream and N-stream tokens/s on the same token ids (lcpp_batch.py)."""
    long, prompts = stream_prompts(args, n_vocab)
    script = pathlib.Path(__file__).with_name("lcpp_batch.py")
    out = subprocess.run([python, str(script), args.model, str(args.threads), str(args.gen), str(args.repeats),
                          json.dumps(long), json.dumps(prompts)], capture_output=True, text=True, timeout=1800,
                         check=True)
    f = json.loads(out.stdout.strip().splitlines()[-1])
    f["vs_prefill"] = f["streams_tps"] / f["prefill_tps"]
    f["vs_one_stream"] = f["streams_tps"] / f["one_stream_tps"]
    return f


def measure(args):
    import pantheon

    model = pantheon.open_model(args.model, threads=args.threads, quantize=args.quantize, repack=not args.no_repack)
    long, prompts = stream_prompts(args, model.config.n_vocab)
    streams_run(model, prompts[:2], 2)  # JIT compile or cache load, not timed
    prefill_tps(model, long[:20])
    pre, one, many, same = [], [], [], True
    for _ in range(args.repeats):
        pre.append(prefill_tps(model, long))
        tps, alone = streams_run(model, prompts[:1], args.gen)
        one.append(tps)
        tps, together = streams_run(model, prompts, args.gen)
        many.append(tps)
        same = same and together[0] == alone[0]
    for i in range(1, args.streams):  # every other stream alone once: batched greedy equals alone
        same = same and streams_run(model, prompts[i:i + 1], args.gen)[1][0] == together[i]
    f = {"repacked": repacked_count(model), "prefill_tps": statistics.median(pre),
         "one_stream_tps": statistics.median(one),
         "streams_tps": statistics.median(many), "greedy_equal": same}
    f["vs_prefill"] = f["streams_tps"] / f["prefill_tps"]
    f["vs_one_stream"] = f["streams_tps"] / f["one_stream_tps"]
    f["step_bytes"], f["read_gbps"] = step_bytes(model), read_bandwidth(args.threads) / 1e9
    # the memory roof: no step runs faster than its weights stream in
    f["roof_tps"] = args.streams * f["read_gbps"] * 1e9 / f["step_bytes"]
    f["roof_vs_prefill"] = f["roof_tps"] / f["prefill_tps"]
    f["n_vocab"] = model.config.n_vocab
    return f


def print_row(name, f):
    print(f"{name:<10} {f['prefill_tps']:>12.2f} {f['one_stream_tps']:>13.2f} {f['streams_tps']:>15.2f}"
          f" {f['vs_prefill']:>11.2f} {f['vs_one_stream']:>12.2f} {str(f.get('greedy_equal', '-')):>13}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--context", type=int, default=32, help="prompt tokens of each stream")
    p.add_argument("--gen", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quantize", action="store_true", help="float matrices to Q8_0 in memory (open_model)")
    p.add_argument("--no-repack", action="store_true", help="serve Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K from the file's layout")
    p.add_argument("--lcpp-python", help="interpreter with llama_cpp (default: as bench_engine.py finds one)")
    p.add_argument("--no-lcpp", action="store_true", help="measure Pantheon only")
    args = p.parse_args()
    f = measure(args)
    python, n_vocab = None if args.no_lcpp else find_lcpp(args.lcpp_python), f.pop("n_vocab")
    lcpp = lcpp_measure(args, python, n_vocab) if python else None
    print(f"model: {args.model}, {args.threads} threads, {args.streams} streams")
    print(f"{'engine':<10} {'prefill t/s':>12} {'1 stream t/s':>13} {f'{args.streams} streams t/s':>15} {'vs prefill':>11}"
          f" {'vs 1 stream':>12} {'greedy equal':>13}")
    print_row("pantheon", f)
    if lcpp:
        print_row("llama.cpp", lcpp)
        f["streams_vs_lcpp"] = f["streams_tps"] / lcpp["streams_tps"]
        print(f"{args.streams} streams: pantheon / llama.cpp = {f['streams_vs_lcpp']:.2f}")
        f.update({f"lcpp_{k}": v for k, v in lcpp.items()})
    print(f"memory roof: {f['step_bytes'] / 1e6:.0f} MB of weights per step at {f['read_gbps']:.1f} GB/s read ->"
          f" at most {f['roof_tps']:.1f} tokens/s for {args.streams} streams ({f['roof_vs_prefill']:.2f}x prefill)")
    print(json.dumps({"model": os.path.basename(args.model), "quantize": args.quantize, "repack": not args.no_repack,
                      "threads": args.threads,
                      "streams": args.streams,
                      "prompt": args.prompt, "context": args.context, "gen": args.gen,
                      **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in f.items()}}))


if __name__ == "__main__":
    main()
