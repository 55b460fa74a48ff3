"""The intermediate arrays of one pass of n rows through a stage's layers, allocated before the pass."""

import numpy as np

from pantheon.engine.cuda.matvec import MAX_BATCH

ATTN_SPLITS = 16  # blocks per (token, head) of a decode step's attention: 32 heads make 512 blocks


class Workspace:
    """Every array a stage's layers write besides the residual stream x, for `n` rows.

    A pass allocates nothing once its Workspace exists: that is what lets a decode step be captured
    as a CUDA graph (a captured kernel keeps the pointers it was launched with) and replayed.
    Sub-layer outputs that are consumed before the next one is produced share one buffer.
    """

    def __init__(self, backend, cfg, blocks, n):
        e = backend.empty
        qd, kd = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
        self.n = n
        self.h = e((n, cfg.dim))  # [n, dim] the normalised input of a sub-layer
        self.qkv = e((n, qd + 2 * kd))  # [n, qd + 2kd]
        self.att = e((n, qd))  # [n, H*hd] attention output before wo
        # a decode step's attention split over ATTN_SPLITS blocks per (token, head): their partial sums
        self.parts = e((n * cfg.n_head * ATTN_SPLITS, 2 + cfg.head_dim)) if n <= MAX_BATCH else None
        self.proj = e((n, cfg.dim))  # [n, dim] wo's output, then the FFN's, before each residual add
        gu = max((sum(m.rows for m in b.gate_up) for b in blocks if b.router is None), default=0)
        self.gu, self.act = e((n, gu)), e((n, gu // 2))  # [n, 2ff], [n, ff]
        widest = n * max(cfg.dim, qd, gu // 2) if n <= MAX_BATCH else 0  # longer inputs take the tile path
        moe = [b for b in blocks if b.router is not None]
        if moe:  # experts run matrix-vector kernels at every n
            widest = max(widest, n * cfg.dim, self._experts(e, cfg, moe, n))
        # a matrix-vector input laid out for the kernels (ops.Activations), reused by every product
        self.xt = e((widest,))  # [widest] unit-major floats
        self.xq, self.xs = e((widest // 4,), np.int32), e((3 * widest // 32,))  # [widest/4], [3*widest/32] int8

    def _experts(self, e, cfg, blocks, n):
        """The routing and expert arrays; returns the largest matrix-vector input they add."""
        k, n_exp, ff = cfg.n_expert_used, blocks[0].router.rows, blocks[0].gate_exps.rows  # alike in every block
        self.route = e((n, n_exp))  # [n, E] router logits
        self.ids, self.weights = e((n, k), np.int32), e((n, k))  # [n, k] each
        self.sel = self.ids.reshape(n * k)  # [n*k] expert of each (token, slot) pair: a view of ids
        self.egu, self.eact = e((n * k, 2 * ff)), e((n * k, ff))  # [n*k, 2ff], [n*k, ff]
        self.ey = e((n * k, cfg.dim))  # [n*k, dim] each pair's expert output
        return n * k * ff  # the experts' down projection reads eact: its unit-major size
