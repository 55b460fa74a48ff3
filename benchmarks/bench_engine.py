#!/usr/bin/env python3
"""Prefill and decode tokens/s of Pantheon's engine beside llama.cpp's, measured in the same run.

  bench_engine.py MODEL.gguf [--threads 1,2] [--prompt 128] [--gen 32] [--repeats 3]
                  [--lcpp-python PATH]

llama.cpp runs through its Python binding (llama-cpp-python) in a subprocess: the interpreter given by
--lcpp-python, else ~/.cache/pantheon-lcpp-venv/bin/python (what ../shared/tools/install-llama-cpp.sh
builds), else this interpreter if it can import llama_cpp; without any, only Pantheon is measured.
Both engines see the same token ids; runs alternate between the engines so drift hits both. Medians.
Last line: one JSON object with every figure.
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

LCPP_SNIPPET = r"""
import json, sys, time, llama_cpp
path, threads, toks, gen = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
llm = llama_cpp.Llama(model_path=path, n_ctx=2048, n_threads=threads, n_threads_batch=threads,
                      n_batch=512, verbose=False, seed=1)
llm.reset(); t = time.perf_counter(); llm.eval(toks); prefill = len(toks) / (time.perf_counter() - t)
nxt = toks[-1]; t = time.perf_counter()
for i in range(gen):
    llm.eval([nxt]); nxt = toks[(i * 7) % len(toks)]
print(json.dumps({"prefill_tps": prefill, "decode_tps": gen / (time.perf_counter() - t)}))
"""


def prompt_tokens(n, n_vocab):
    """The token ids both engines see: BOS then a deterministic spread over the vocabulary."""
    return [1] + [(i * 7919) % (n_vocab - 100) + 100 for i in range(n - 1)]


def pantheon_run(model, toks, gen):
    cache = model.new_cache(len(toks) + gen + 1)
    t = time.perf_counter()
    model.forward([(cache, toks)])
    prefill = len(toks) / (time.perf_counter() - t)
    nxt = toks[-1]
    t = time.perf_counter()
    for i in range(gen):
        model.forward([(cache, [nxt])])
        nxt = toks[(i * 7) % len(toks)]
    return {"prefill_tps": prefill, "decode_tps": gen / (time.perf_counter() - t)}


def find_lcpp(explicit):
    candidates = [explicit] if explicit else [str(pathlib.Path.home() / ".cache/pantheon-lcpp-venv/bin/python")]
    for c in candidates:
        if c and os.path.exists(c):
            return c
    try:
        import llama_cpp  # noqa: F401
        return sys.executable
    except ImportError:
        return None


def lcpp_run(python, path, threads, toks, gen):
    out = subprocess.run([python, "-c", LCPP_SNIPPET, path, str(threads), json.dumps(toks), str(gen)],
                         capture_output=True, text=True, timeout=900, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def repacked_count(model):
    """How many matrices the model serves from its repacked sidecar (pantheon.engine.repacked)."""
    from pantheon.engine.model_weights import matrices

    return sum(w.packed is not None for w in matrices(model.weights))


def measure(args, lcpp):
    import pantheon

    figures = {}
    for threads in args.threads:
        t0 = time.perf_counter()
        model = pantheon.open_model(args.model, threads=threads, repack=not args.no_repack)
        load_s = time.perf_counter() - t0  # the first run on a new model includes writing its repacked copy
        toks = prompt_tokens(args.prompt, model.config.n_vocab)
        t0 = time.perf_counter()
        pantheon_run(model, toks[:8], 2)  # JIT compile or cache load; reported, not timed below
        warm_s = time.perf_counter() - t0
        ours, theirs = [], []
        for _ in range(args.repeats):
            ours.append(pantheon_run(model, toks, args.gen))
            if lcpp:
                theirs.append(lcpp_run(lcpp, args.model, threads, toks, args.gen))
        f = {"load_s": load_s, "first_call_s": warm_s, "repacked": repacked_count(model),
             "prefill_tps": median_of(ours, "prefill_tps"), "decode_tps": median_of(ours, "decode_tps")}
        if theirs:
            f["lcpp_prefill_tps"] = median_of(theirs, "prefill_tps")
            f["lcpp_decode_tps"] = median_of(theirs, "decode_tps")
            f["prefill_ratio"] = f["prefill_tps"] / f["lcpp_prefill_tps"]
            f["decode_ratio"] = f["decode_tps"] / f["lcpp_decode_tps"]
        figures[threads] = f
    return figures


def print_table(model, figures):
    print(f"model: {model}")
    print(f"{'threads':>7} {'prefill t/s':>12} {'lcpp':>8} {'ratio':>6} {'decode t/s':>11} {'lcpp':>8} {'ratio':>6} {'1st call s':>10}")
    for threads, f in figures.items():
        lp, ld = f.get("lcpp_prefill_tps"), f.get("lcpp_decode_tps")
        print(f"{threads:>7} {f['prefill_tps']:>12.2f} {lp or float('nan'):>8.2f} {f.get('prefill_ratio', float('nan')):>6.2f}"
              f" {f['decode_tps']:>11.2f} {ld or float('nan'):>8.2f} {f.get('decode_ratio', float('nan')):>6.2f}"
              f" {f['first_call_s']:>10.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--threads", default="1,2", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--gen", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lcpp-python", default=None)
    p.add_argument("--no-repack", action="store_true", help="serve Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K from the file's layout")
    args = p.parse_args()
    lcpp = find_lcpp(args.lcpp_python)
    figures = measure(args, lcpp)
    print_table(args.model, figures)
    if not lcpp:
        print("llama.cpp binding not found: ratios omitted (see ../shared/tools/install-llama-cpp.sh)")
    print(json.dumps({"model": os.path.basename(args.model), "prompt": args.prompt, "gen": args.gen,
                      "lcpp": bool(lcpp), "repack": not args.no_repack, "threads": {str(k): {kk: round(vv, 4) for kk, vv in v.items()}
                                                       for k, v in figures.items()}}))


if __name__ == "__main__":
    main()
