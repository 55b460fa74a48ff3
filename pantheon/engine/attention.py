"""Causal grouped-query attention of a step's new positions, every sequence of the step in one call."""

import numpy as np
from numba import prange
from numba.typed import List

from pantheon.engine.kernels.jit import kernel


@kernel
def _store_and_attend(q, k_new, v_new, ks, vs, seg, pos, li, out):
    """Write k_new, v_new [N, KV, hd] into their sequences' caches, then out [N, H*hd] from q [N, H, hd].

    Row r belongs to sequence seg[r] at position pos[r]; ks[s], vs[s] are that sequence's caches
    [n_layer, KV, capacity, hd] and layer `li` is used. One (row, head) pair per task, keys in order:
    a row's output is the same instruction sequence whatever else shares the step (batch invariance:
    downstream int8 rounding turns a 1e-7 wobble into a flipped quant)."""
    n, n_head, hd = q.shape
    n_kv = k_new.shape[1]
    for r in prange(n):
        kc, vc = ks[seg[r]], vs[seg[r]]
        for h in range(n_kv):
            for d in range(hd):
                kc[li, h, pos[r], d] = k_new[r, h, d]
                vc[li, h, pos[r], d] = v_new[r, h, d]
    g = n_head // n_kv
    scale = np.float32(1.0 / np.sqrt(hd))
    for t in prange(n * n_head):
        i, h = t // n_head, t % n_head
        kc, vc = ks[seg[i]], vs[seg[i]]
        kh, length = h // g, pos[i] + 1
        scores = np.empty(length, np.float32)  # [length]
        top = np.float32(-np.inf)
        for j in range(length):
            acc = np.float32(0.0)
            for d in range(hd):
                acc += q[i, h, d] * kc[li, kh, j, d]
            scores[j] = acc * scale
            top = max(top, scores[j])
        acc_v = np.zeros(hd, np.float32)  # [hd]
        total = np.float32(0.0)
        for j in range(length):
            e = np.exp(scores[j] - top)
            total += e
            for d in range(hd):
                acc_v[d] += e * vc[li, kh, j, d]
        inv = np.float32(1.0) / total
        for d in range(hd):
            out[i, h * hd + d] = acc_v[d] * inv


class StepLayout:
    """Which sequence and position each row of a step is, and the sequences' caches as numba lists:
    built once per step, shared by every layer."""

    def __init__(self, caches, lengths):
        self.ks, self.vs = List([c.k for c in caches]), List([c.v for c in caches])
        self.seg = np.repeat(np.arange(len(caches)), lengths)  # [N]
        self.pos = np.concatenate([np.arange(len(c), len(c) + n) for c, n in zip(caches, lengths)])  # [N]


def attend_step(layout, li, q, k, v):
    """q [N, H, hd], k, v [N, KV, hd] of layer `li` -> [N, H*hd]; k and v are stored in the caches first."""
    n, n_head, hd = q.shape
    out = np.empty((n, n_head * hd), np.float32)  # [N, H*hd]
    _store_and_attend(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v),
                      layout.ks, layout.vs, layout.seg, layout.pos, li, out)
    return out


def attend(q, k, v, p0):
    """One sequence alone: q [s, H, hd] at positions p0..p0+s-1 over k, v [KV, L, hd] (L >= p0 + s)
    whose positions p0.. already hold the new keys and values -> [s, H*hd]."""
    s = q.shape[0]
    ks, vs = List([np.ascontiguousarray(k)[None]]), List([np.ascontiguousarray(v)[None]])  # [1, KV, L, hd]
    k_new = np.ascontiguousarray(k[:, p0:p0 + s].transpose(1, 0, 2))  # [s, KV, hd]
    v_new = np.ascontiguousarray(v[:, p0:p0 + s].transpose(1, 0, 2))  # [s, KV, hd]
    out = np.empty((s, q.shape[1] * q.shape[2]), np.float32)  # [s, H*hd]
    seg, pos = np.zeros(s, np.int64), np.arange(p0, p0 + s)  # [s] each
    _store_and_attend(np.ascontiguousarray(q), k_new, v_new, ks, vs, seg, pos, 0, out)
    return out
