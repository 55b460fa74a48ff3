"""Causal grouped-query attention of one sequence's new positions over its cached keys and values."""

import numpy as np
from numba import prange

from pantheon.engine.kernels.jit import kernel


@kernel
def _attend(q, k, v, p0, out):
    """out [s, H*hd] from q [s, H, hd] at positions p0.. over k, v [n_kv, >= p0+s, hd].

    One (query, head) pair per task, keys in order: each output is the same instruction sequence
    whether its segment has 1 or 100 positions (BLAS blocking would depend on the shape, and with
    int8-quantized activations downstream a 1e-7 wobble can flip a rounding)."""
    s, n_head, hd = q.shape
    g = n_head // k.shape[0]
    scale = np.float32(1.0 / np.sqrt(hd))
    for t in prange(s * n_head):
        i, h = t // n_head, t % n_head
        kh, length = h // g, p0 + i + 1
        scores = np.empty(length, np.float32)  # [length]
        top = np.float32(-np.inf)
        for j in range(length):
            acc = np.float32(0.0)
            for d in range(hd):
                acc += q[i, h, d] * k[kh, j, d]
            scores[j] = acc * scale
            top = max(top, scores[j])
        acc_v = np.zeros(hd, np.float32)  # [hd]
        total = np.float32(0.0)
        for j in range(length):
            e = np.exp(scores[j] - top)
            total += e
            for d in range(hd):
                acc_v[d] += e * v[kh, j, d]
        inv = np.float32(1.0) / total
        for d in range(hd):
            out[i, h * hd + d] = acc_v[d] * inv


def attend(q, k, v, p0):
    """q [s, n_head, hd] at positions p0..p0+s-1; k, v [n_kv, L, hd] with L >= p0 + s -> [s, n_head*hd]."""
    s, n_head, hd = q.shape
    out = np.empty((s, n_head * hd), np.float32)  # [s, H*hd]
    _attend(np.ascontiguousarray(q), k, v, p0, out)
    return out
