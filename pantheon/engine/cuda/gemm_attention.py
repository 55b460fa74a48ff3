"""Prefill attention as matrix products (cuBLAS through CuPy; numpy in the simulator): one segment at a time.

A prompt of n tokens asks n·H (token, head) pairs for attention over up to n keys each, the same keys
for every token of the segment. The tiled kernel (layers.attention) re-reads them for every pair;
as two batched products per KV head (scores = Q·Kᵀ, out = softmax(scores)·V) they are read once
and cuBLAS does the work (on the H200: 162 ms of an 8B prefill in the kernel, out of the top ten
after). fp32 products: the scores keep the kernel's precision. Decode steps (a row per sequence) keep the kernel: their
launches are captured, and a row's products are too small for a library call to pay.
"""

import numpy as np

# the scores of one segment, float32 [H, n, keys], above which the segment takes the kernel instead
SCORE_BYTES = 256 << 20


def fits(cfg, n, keys):
    return 4 * cfg.n_head * n * keys <= SCORE_BYTES


def segment_attention(b, cfg, qkv, kcache, vcache, layer, slot, p0, rows, out):
    """out[rows] float32 [n, H*hd] = causal attention of the queries qkv[rows, :H*hd] of one segment at
    positions p0.. of KV slot `slot`, over keys [0, p0 + n) of the pool (already written)."""
    xp, n = b.xp, rows.stop - rows.start
    kv, hd = cfg.n_head_kv, cfg.head_dim
    group = cfg.n_head // kv
    with b.context():
        q = qkv[rows, : cfg.n_head * hd].reshape(n, kv, group, hd).transpose(1, 2, 0, 3)  # [KV, g, n, hd]
        q = q.reshape(kv, group * n, hd) * np.float32(1.0 / np.sqrt(hd))  # [KV, g*n, hd] scaled
        k = kcache[layer, slot, :, : p0 + n].astype(np.float32)  # [KV, keys, hd]
        v = vcache[layer, slot, :, : p0 + n].astype(np.float32)  # [KV, keys, hd]
        s = xp.matmul(q, k.transpose(0, 2, 1)).reshape(kv, group, n, p0 + n)  # [KV, g, n, keys]
        seen = xp.arange(p0 + n)[None, :] <= (p0 + xp.arange(n))[:, None]  # [n, keys] causal
        s = xp.where(seen, s, np.float32(-np.inf))  # [KV, g, n, keys]
        e = xp.exp(s - s.max(axis=-1, keepdims=True))  # [KV, g, n, keys]
        e /= e.sum(axis=-1, keepdims=True)
        o = xp.matmul(e.reshape(kv, group * n, p0 + n), v)  # [KV, g*n, hd]
        out[rows] = o.reshape(kv, group, n, hd).transpose(2, 0, 1, 3).reshape(n, cfg.n_head * hd)  # [n, H*hd]
