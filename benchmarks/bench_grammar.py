"""Decode speed with and without a grammar mask (constrained decoding), and the mask's own cost.

Usage: python benchmarks/bench_grammar.py [--model GGUF] [--tokens 256] [--reps 5] [--vocab GGUF ...]
Decodes --tokens tokens of one sequence (EOS banned) unconstrained, then under a JSON schema that
cannot finish within them (an array of at least 10^4 strings), and reports the median decode
tokens/s of each and the slowdown. --vocab files (tokenizer-only GGUFs, e.g. ../shared/vocab) add
the median time of one mask over a bigger vocabulary. The last line is one JSON object.
"""

import argparse
import json
import pathlib
import statistics
import time

import numpy as np

import pantheon
from pantheon.engine.sampler import SamplingParams
from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.gguf.file import open_gguf
from pantheon.text.grammar import JSON_SCHEMA, Constraint, compile_spec
from pantheon.text.tokenizer import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = {"type": "array", "items": {"type": "string"}, "minItems": 10000}


def decode_rate(model, n, grammar):
    """Decode tokens/s of one sequence, timed from its first generated token to its last."""
    tok = model.tokenizer
    engine = Engine(model, EngineConfig(n_ctx=n + 16))
    ban = {t: float("-inf") for t in tok.stop_ids}
    params = SamplingParams(temperature=1.0, seed=1, logit_bias=ban)
    constraint = Constraint(tok, grammar) if grammar else None
    engine.add(Request(1, tuple(tok.encode("Hello")), n, params, frozenset(tok.stop_ids), constraint=constraint))
    stamps = []
    while engine.has_work:
        events = engine.step()
        if any(isinstance(e, TokenEvent) for e in events):
            stamps.append(time.perf_counter())
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def mask_ms(tokenizer, grammar, reps=50):
    """Median ms of one mask (Constraint.mask on a logits row), the grammar inside a long string."""
    c = Constraint(tokenizer, grammar)
    for t in tokenizer.encode_exact('["abc'):
        c.accept(t)
    logits = np.zeros(tokenizer.n_vocab, np.float32)  # [n_vocab]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        c.mask(logits)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "pantheon" / "demo" / "pantheon-demo.gguf"))
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--vocab", nargs="*", default=[])
    args = ap.parse_args()
    model = pantheon.open_model(args.model, threads=args.threads)
    grammar = compile_spec(JSON_SCHEMA, json.dumps(SCHEMA))
    decode_rate(model, 8, None)  # compile the kernels before timing
    runs = [(decode_rate(model, args.tokens, None), decode_rate(model, args.tokens, grammar))
            for _ in range(args.reps)]  # interleaved, so drift in machine load hits both alike
    free, masked = (statistics.median(r[i] for r in runs) for i in (0, 1))
    result = {"model": pathlib.Path(args.model).name, "tokens": args.tokens, "free_tok_s": round(free, 2),
              "masked_tok_s": round(masked, 2), "slowdown_pct": round(100 * (1 - masked / free), 2),
              "mask_ms": {pathlib.Path(args.model).name: round(mask_ms(model.tokenizer, grammar), 4)}}
    for path in args.vocab:
        tok = Tokenizer.from_metadata(open_gguf(path).metadata)
        result["mask_ms"][f"{pathlib.Path(path).name} ({tok.n_vocab} tokens)"] = round(mask_ms(tok, grammar), 4)
    print(f"decode {free:.1f} tok/s free, {masked:.1f} tok/s masked: {result['slowdown_pct']:+.1f} %")
    for name, ms in result["mask_ms"].items():
        print(f"mask {name}: {ms:.3f} ms")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
