"""Causal grouped-query attention of one sequence's new positions over its cached keys and values."""

import numpy as np

from pantheon.ops import softmax


def causal_mask(p0, s, length):
    """float32 [s, length]: 0 where key j is visible to query p0+i, -inf after it."""
    j = np.arange(length)[None, :]  # [1, L]
    i = np.arange(p0, p0 + s)[:, None]  # [s, 1]
    return np.where(j <= i, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)  # [s, L]


def attend(q, k, v, p0):
    """q [s, n_head, hd] at positions p0..p0+s-1; k, v [n_kv, L, hd] with L = p0 + s -> [s, n_head*hd]."""
    s, n_head, hd = q.shape
    n_kv, length, _ = k.shape
    g = n_head // n_kv
    # Query heads h*g..h*g+g-1 share KV head h: fold the group into the row axis of one matmul.
    qg = q.reshape(s, n_kv, g, hd).transpose(1, 2, 0, 3).reshape(n_kv, g * s, hd)  # [kv, g*s, hd]
    scores = np.matmul(qg, k.transpose(0, 2, 1))  # [kv, g*s, L]
    scores *= np.float32(1.0 / np.sqrt(hd))
    if s > 1:
        scores = scores.reshape(n_kv, g, s, length) + causal_mask(p0, s, length)  # [kv, g, s, L]
    probs = softmax(scores).reshape(n_kv, g * s, length)  # [kv, g*s, L]
    out = np.matmul(probs, v)  # [kv, g*s, hd]
    return out.reshape(n_kv, g, s, hd).transpose(2, 0, 1, 3).reshape(s, n_head * hd)  # [s, H*hd]
