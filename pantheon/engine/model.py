"""The transformer forward pass for the llama family (llama, qwen2, qwen3, qwen3moe, phi3)."""

import os

import numpy as np

from pantheon.engine import decode_step, repacked
from pantheon.engine.attention import StepLayout, attend_step
from pantheon.engine.kernels.matmul import STACK_MAX_BATCH, dequantize_rows, qmatmul
from pantheon.engine.kvcache import KVCache
from pantheon.engine.model_weights import bind_weights
from pantheon.engine.moe import moe_ffn
from pantheon.engine.ops import Rope, rms_norm, silu_mul
from pantheon.engine.quantize import quantize_weights
from pantheon.engine.threads import ThreadBudget
from pantheon.engine.model_text import ModelText
from pantheon.source import open_files


class Model(ModelText):
    """Weights (zero-copy), config and tokenizer of one model; forward() advances several sequences.

    `gguf` is the opened file set: a GGUFFile, or an HFModel (pantheon.hf.directory)."""

    def __init__(self, gguf, config, weights, threads):
        self.gguf, self.config, self.weights = gguf, config, weights
        self.threads = ThreadBudget(threads)
        self.rope = Rope(config.n_rot, config.rope_base, config.neox_rope)
        self.heartbeat = None  # a callable forward() calls once per layer (a server's liveness signal)
        self.decode_step = decode_step.plan(weights, config, self.rope)  # None: no fast path for these weights

    def new_cache(self, n_ctx=None):
        """An empty KV cache for one sequence (n_ctx defaults to the training context)."""
        return KVCache(self.config, n_ctx or self.config.n_ctx_train)

    def logits(self, tokens):
        """float32 [len(tokens), n_vocab]: logits at every position of `tokens`, in one pass."""
        cache = KVCache(self.config, max(len(tokens), 1), initial=len(tokens))
        return self.forward([(cache, tokens)], all_logits=True)[0]

    def forward(self, segments, all_logits=False, hidden=(), every=()):
        """Extend each (cache, new token ids) segment; one pass over the weights for all of them.

        Returns per segment float32 [len(ids), n_vocab] if all_logits (or its index is in `every`), else
        [1, n_vocab] (last position); segments whose index is in `hidden` get their final normed hidden
        states [len(ids), dim] instead (what an embedding is pooled from: the output head is not run for them).
        """
        segs = [(c, np.asarray(t, dtype=np.int64)) for c, t in segments]
        for cache, toks in segs:
            cache.reserve(len(toks))
        with self.threads:
            out = self._decode(segs, hidden)
            if out is None:
                x = self._layers(segs)  # [N, dim]
                out = self._head(x, segs, all_logits, frozenset(hidden), frozenset(every))
        for cache, toks in segs:
            cache.tokens.extend(int(t) for t in toks)
        return out

    def _decode(self, segs, hidden):
        """Each segment's logits [1, n_vocab] from the fast path (engine.decode_step) when every segment is
        one token, at most STACK_MAX_BATCH of them; else None (the general path's turn: a prompt, hidden
        states wanted, or the path busy)."""
        if self.decode_step is None or hidden or len(segs) > STACK_MAX_BATCH or any(len(t) != 1 for _, t in segs):
            return None
        logits = self.decode_step.step([c for c, _ in segs], [int(t[0]) for _, t in segs], self.heartbeat)
        return None if logits is None else [logits[i:i + 1] for i in range(len(segs))]  # [1, n_vocab] each

    def _layers(self, segs):
        toks = np.concatenate([t for _, t in segs])  # [N]
        layout = StepLayout([c for c, _ in segs], [len(t) for _, t in segs])  # rows' sequences, positions
        cos, sin = self.rope.tables(layout.pos)  # [N, 1, n_rot/2] each
        x = dequantize_rows(self.weights.token_embd, toks)  # [N, dim]
        for li, blk in enumerate(self.weights.blocks):
            if self.heartbeat is not None:
                self.heartbeat()  # a server's hang detector hears from a long forward once per layer
            h = rms_norm(x, blk.attn_norm, self.config.norm_eps)  # [N, dim]
            x += qmatmul([blk.wo], self._attention(li, blk, h, layout, cos, sin))[0]  # [N, dim]
            h = rms_norm(x, blk.ffn_norm, self.config.norm_eps)  # [N, dim]
            x += self._ffn(blk, h)  # [N, dim]
        return x

    def _head(self, x, segs, all_logits, hidden, every):
        ends = np.cumsum([len(t) for _, t in segs])  # [segments]
        spans = [(e - len(t), e) for (_, t), e in zip(segs, ends)]
        out = [None] * len(segs)
        for i in hidden:
            out[i] = rms_norm(x[spans[i][0]:spans[i][1]], self.weights.output_norm, self.config.norm_eps)  # [n, dim]
        heads = [i for i in range(len(segs)) if i not in hidden]
        if not heads:
            return out
        picks = [np.arange(*spans[i]) if all_logits or i in every else np.array([spans[i][1] - 1])
                 for i in heads]  # rows each
        h = rms_norm(x[np.concatenate(picks)], self.weights.output_norm, self.config.norm_eps)  # [rows, dim]
        logits = qmatmul([self.weights.output], np.ascontiguousarray(h))[0]  # [rows, n_vocab]
        for i, part in zip(heads, np.split(logits, np.cumsum([len(p) for p in picks])[:-1])):
            out[i] = part  # [len(ids) or 1, n_vocab]
        return out

    def _qkv(self, blk, h):
        c = self.config
        if blk.wqkv is not None:
            qkv = qmatmul([blk.wqkv], h)[0]  # [N, (H + 2*KV)*hd]
            nq, nk = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
            q, k, v = qkv[:, :nq], qkv[:, nq:nq + nk], qkv[:, nq + nk:]  # column views
        else:
            q, k, v = qmatmul([blk.wq, blk.wk, blk.wv], h)  # [N, H*hd], [N, KV*hd] x2
        if blk.bq is not None:
            q, k, v = q + blk.bq, k + blk.bk, v + blk.bv
        n = len(h)
        q = np.ascontiguousarray(q).reshape(n, c.n_head, c.head_dim)  # [N, H, hd]
        k = np.ascontiguousarray(k).reshape(n, c.n_head_kv, c.head_dim)  # [N, KV, hd]
        v = np.ascontiguousarray(v).reshape(n, c.n_head_kv, c.head_dim)  # [N, KV, hd]
        if blk.q_norm is not None:
            q, k = rms_norm(q, blk.q_norm, c.norm_eps), rms_norm(k, blk.k_norm, c.norm_eps)  # per head
        return q, k, v

    def _attention(self, li, blk, h, layout, cos, sin):
        q, k, v = self._qkv(blk, h)
        self.rope.apply(q, cos, sin)
        self.rope.apply(k, cos, sin)
        return attend_step(layout, li, q, k, v)  # [N, H*hd], every sequence of the step in one call

    def _ffn(self, blk, h):
        if blk.experts is not None:
            return moe_ffn(blk.experts, h, self.config.n_expert_used)  # [N, dim]
        if blk.gate is None:
            gu = qmatmul([blk.up], h)[0]  # [N, 2*ff]
            ff = self.config.n_ff
            return qmatmul([blk.down], silu_mul(gu[:, :ff], gu[:, ff:]))[0]  # [N, dim]
        g, u = qmatmul([blk.gate, blk.up], h)  # [N, ff] x2
        return qmatmul([blk.down], silu_mul(g, u))[0]  # [N, dim]


def default_threads():
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0))


def open_model(path, threads=None, quantize=False, config=None, repack=True, repack_dir=None):
    """Open a model zero-copy: a GGUF file, or an HF directory / safetensors file (`config`: its
    config.json when not beside it); typed GGUFError subclasses on anything malformed.

    quantize=True converts float (F32/F16/BF16) matrices to Q8_0 in memory: no longer zero-copy,
    but half of F16's memory traffic per token. Otherwise, with `repack`, Q4_0 / Q8_0 / Q4_K / Q5_K /
    Q6_K matrices are read from their repacked sidecar in `repack_dir` (None: sizes.REPACK_DIR;
    engine.repacked, written on the first open), else from the file's own layout."""
    gguf, cfg = open_files(path, config)
    weights = bind_weights(gguf.tensors, cfg)
    if quantize:
        weights = quantize_weights(weights)
    elif repack:
        weights = repacked.attach(weights, path, repack_dir)
    return Model(gguf, cfg, weights, threads or default_threads())
