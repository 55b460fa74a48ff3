"""Mixture-of-experts feed-forward: softmax router, top-k experts, weights renormalised to sum to 1."""

import numpy as np

from pantheon.engine.kernels.matmul import matmul, qmatmul
from pantheon.engine.ops import silu_mul, softmax


def route(router_logits, k):
    """Top-k experts per row and their renormalised weights: ids int [n, k], weights float32 [n, k]."""
    probs = softmax(router_logits)  # [n, E]
    ids = np.argsort(-probs, axis=-1, kind="stable")[:, :k]  # [n, k]
    w = np.take_along_axis(probs, ids, axis=-1)  # [n, k]
    return ids, (w / w.sum(axis=-1, keepdims=True)).astype(np.float32)  # [n, k]


def router_logits(router, h):
    """float32 [n, E], one row at a time: the same kernel whatever n is, so a row's routing (and the
    int8 rounding of everything after it) does not depend on how many rows share the batch."""
    return np.concatenate([matmul(router, h[i:i + 1]) for i in range(len(h))])  # [n, E]


def moe_ffn(experts, h, n_used):
    """h float32 [n, dim] -> float32 [n, dim]; each expert runs once on the rows routed to it."""
    ids, weights = route(router_logits(experts.router, h), n_used)  # [n, k], [n, k]
    out = np.zeros_like(h)  # [n, dim]
    for e in np.unique(ids):
        rows, slot = np.nonzero(ids == e)  # [m], [m]
        x = np.ascontiguousarray(h[rows])  # [m, dim]
        # the int8 path of dense layers: x rounded once for gate and up, per row (batch-invariant)
        gate, up = qmatmul((experts.gate[e], experts.up[e]), x)  # [m, ff] each
        y = qmatmul((experts.down[e],), silu_mul(gate, up))[0]  # [m, dim]
        out[rows] += y * weights[rows, slot][:, None]
    return out
