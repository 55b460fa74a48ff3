"""Causal grouped-query attention of a step's new positions, every sequence of the step in one call."""

import numba
import numpy as np
from numba.typed import List

from pantheon.engine.kernels.attention_tiles import store_and_attend


class StepLayout:
    """Which sequence and position each row of a step is, and the sequences' caches as numba lists (their
    float16 bits as uint16: numba has no float16): built once per step, shared by every layer."""

    def __init__(self, caches, lengths):
        self.ks, self.vs = List([c.k.view(np.uint16) for c in caches]), List([c.v.view(np.uint16) for c in caches])
        self.seg = np.repeat(np.arange(len(caches)), lengths)  # [N]
        self.pos = np.concatenate([np.arange(len(c), len(c) + n) for c, n in zip(caches, lengths)])  # [N]


def attend_step(layout, li, q, k, v):
    """q [N, H, hd], k, v [N, KV, hd] of layer `li` -> [N, H*hd]; k and v are stored in the caches first."""
    n, n_head, hd = q.shape
    out = np.empty((n, n_head * hd), np.float32)  # [N, H*hd]
    store_and_attend(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v),
                     layout.ks, layout.vs, layout.seg, layout.pos, li, out, numba.get_num_threads())
    return out


def attend(q, k, v, p0):
    """One sequence alone: q [s, H, hd] at positions p0..p0+s-1 over k, v [KV, L, hd] (L >= p0 + s)
    whose positions p0.. already hold the new keys and values -> [s, H*hd]; k and v are rounded to
    float16 as the caches hold them."""
    s = q.shape[0]
    ks = List([np.ascontiguousarray(k, np.float16)[None].view(np.uint16)])  # [1, KV, L, hd]
    vs = List([np.ascontiguousarray(v, np.float16)[None].view(np.uint16)])  # [1, KV, L, hd]
    k_new = np.ascontiguousarray(k[:, p0:p0 + s].transpose(1, 0, 2), np.float32)  # [s, KV, hd]
    v_new = np.ascontiguousarray(v[:, p0:p0 + s].transpose(1, 0, 2), np.float32)  # [s, KV, hd]
    out = np.empty((s, q.shape[1] * q.shape[2]), np.float32)  # [s, H*hd]
    seg, pos = np.zeros(s, np.int64), np.arange(p0, p0 + s)  # [s] each
    store_and_attend(np.ascontiguousarray(q, np.float32), k_new, v_new, ks, vs, seg, pos, 0, out,
                     numba.get_num_threads())
    return out
