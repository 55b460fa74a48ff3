#!/usr/bin/env python3
"""llama.cpp's own batched decode, for bench_batch: the same three figures (prefill, one stream, N
streams) through llama-cpp-python's low-level batch API, so the same-run ratios say what llama.cpp's
kernels reach on this die.

  lcpp_batch.py MODEL.gguf THREADS GEN REPEATS PROMPT_JSON STREAM_PROMPTS_JSON

Run by the interpreter that has llama_cpp (bench_engine.find_lcpp); it imports nothing of Pantheon.
Streams: every prompt in one llama_decode (one sequence id each), then one batch of one token per
stream per step, greedy; the steps after every stream has its first token are timed, as bench_batch
times Pantheon's. Prints one JSON object: prefill_tps, one_stream_tps, streams_tps (medians).
"""

import ctypes
import json
import statistics
import sys
import time

import llama_cpp as L
import numpy as np


class Session:
    """One model and one context able to hold `seqs` sequences of `per_seq` positions."""

    def __init__(self, path, threads, seqs, per_seq):
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = seqs * per_seq, 512, 512
        cp.n_seq_max, cp.n_threads, cp.n_threads_batch = seqs, threads, threads
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(512, 0, seqs)

    def decode(self, items):
        """items: (token, position, sequence, wants logits) -> the argmax of each row that wants them."""
        b = self.batch
        for i, (tok, pos, seq, out) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, out
            b.seq_id[i][0] = seq
        b.n_tokens = len(items)
        if L.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        return [self._argmax(i) for i, it in enumerate(items) if it[3]]

    def _argmax(self, i):
        row = ctypes.cast(L.llama_get_logits_ith(self.ctx, i), ctypes.POINTER(ctypes.c_float))
        return int(np.argmax(np.ctypeslib.as_array(row, shape=(self.n_vocab,))))

    def clear(self):
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)


def prefill_tps(s, toks):
    s.clear()
    t = time.perf_counter()
    for c in range(0, len(toks), 512):  # one decode call per n_batch tokens
        chunk = toks[c:c + 512]
        s.decode([(tok, c + j, 0, c + j == len(toks) - 1) for j, tok in enumerate(chunk)])
    return len(toks) / (time.perf_counter() - t)


def streams_tps(s, prompts, gen):
    """Aggregate decode tokens/s of len(prompts) greedy streams, once each has its first token."""
    s.clear()
    items = [(tok, j, q, j == len(p) - 1) for q, p in enumerate(prompts) for j, tok in enumerate(p)]
    # The prompts in decode calls of at most n_batch (512) tokens: the batch holds no more.
    nxt = [a for c in range(0, len(items), 512) for a in s.decode(items[c:c + 512])]
    pos = [len(p) for p in prompts]
    t = time.perf_counter()
    for _ in range(gen):
        nxt = s.decode([(nxt[q], pos[q], q, True) for q in range(len(prompts))])
        pos = [p + 1 for p in pos]
    return gen * len(prompts) / (time.perf_counter() - t)


def main():
    path, threads, gen, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    long, prompts = json.loads(sys.argv[5]), json.loads(sys.argv[6])
    s = Session(path, threads, len(prompts), max(len(long), max(map(len, prompts)) + gen + 2))
    streams_tps(s, prompts[:2], 2)  # first-call setup, not timed
    pre, one, many = [], [], []
    for _ in range(repeats):
        pre.append(prefill_tps(s, long))
        one.append(streams_tps(s, prompts[:1], gen))
        many.append(streams_tps(s, prompts, gen))
    print(json.dumps({"prefill_tps": statistics.median(pre), "one_stream_tps": statistics.median(one),
                      "streams_tps": statistics.median(many)}))


if __name__ == "__main__":
    main()
