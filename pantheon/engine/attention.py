"""Causal grouped-query attention of a step's new positions, every sequence of the step in one call."""

import weakref

import numba
import numpy as np
from numba import types
from numba.typed import List

from pantheon.engine.kernels.attention_tiles import store_and_attend


class StepLayout:
    """Which sequence and position each row of a step is, and the sequences' caches as numba lists (their
    float16 bits as uint16: numba has no float16): built once per step, shared by every layer."""

    def __init__(self, caches, lengths):
        self.ks, self.vs = _solo_lists(caches[0]) if len(caches) == 1 else _lists(caches)
        self.seg = np.repeat(np.arange(len(caches)), lengths)  # [N]
        self.pos = np.concatenate([np.arange(len(c), len(c) + n) for c, n in zip(caches, lengths)])  # [N]


_BITS = types.Array(types.uint16, 4, "C")
# cache -> (its k array, [k bits], [v bits]): a decode stream's steps reuse its lists while its arrays stay
# (a typed List costs tens of microseconds to build, several times that after a step evicted the
# interpreter's working set); weak, so a finished sequence's arrays go with it.
_SOLO = weakref.WeakKeyDictionary()


def _lists(caches):
    """numba lists of the caches' keys and values as float16 bits."""
    ks, vs = List.empty_list(_BITS), List.empty_list(_BITS)
    for c in caches:
        ks.append(c.k.view(np.uint16))
        vs.append(c.v.view(np.uint16))
    return ks, vs


def _solo_lists(cache):
    """`_lists([cache])`, built again only when the cache's arrays were replaced (it grew)."""
    hit = _SOLO.get(cache)
    if hit is None or hit[0] is not cache.k:
        hit = _SOLO[cache] = (cache.k, *_lists([cache]))
    return hit[1], hit[2]


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
