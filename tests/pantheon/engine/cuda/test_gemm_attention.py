"""Prefill attention as matrix products equals the attention kernel: two segments in one pass, one of them
continuing a sequence whose earlier keys are already in the pool, GQA groups of two."""

import types

import numpy as np

from pantheon.engine.cuda import gemm_attention
from pantheon.engine.cuda.ops import Ops
from tests.pantheon.engine.cuda.sim import backend

RNG = np.random.default_rng(7)
CFG = types.SimpleNamespace(n_head=4, n_head_kv=2, head_dim=8)


def _pool(b, n_ctx=48):
    shape = (2, 3, CFG.n_head_kv, n_ctx, CFG.head_dim)  # [layers, slots, kv, ctx, hd]
    return b.zeros(shape, np.float16), b.zeros(shape, np.float16)


def test_segments_attend_as_the_kernel_does():
    b = backend()
    ops, (k, v) = Ops(b), _pool(b)
    qd, kd = CFG.n_head * CFG.head_dim, CFG.n_head_kv * CFG.head_dim
    earlier = RNG.standard_normal((9, qd + 2 * kd)).astype(np.float32)  # [9, q | k | v] slot 2's first tokens
    ops.kv_write(b.upload(earlier), qd, k, v, 1, b.upload(np.full(9, 2, np.int32)),
                 b.upload(np.arange(9, dtype=np.int32)))
    spans = [(2, 9, 13), (0, 0, 20)]  # (slot, first position, rows)
    qkv = RNG.standard_normal((33, qd + 2 * kd)).astype(np.float32)  # [33, q | k | v]
    slot = np.concatenate([np.full(n, s, np.int32) for s, _, n in spans])  # [33]
    pos = np.concatenate([np.arange(p0, p0 + n, dtype=np.int32) for _, p0, n in spans])  # [33]
    dq, ds, dp = b.upload(qkv), b.upload(slot), b.upload(pos)
    ops.kv_write(dq, qd, k, v, 1, ds, dp)
    want = b.empty((33, qd))  # [33, H*hd]
    ops.attention(dq, CFG.n_head, k, v, 1, ds, dp, want)
    got = b.zeros((33, qd))  # [33, H*hd]
    r0 = 0
    for s, p0, n in spans:
        gemm_attention.segment_attention(b, CFG, dq, k, v, 1, s, p0, slice(r0, r0 + n), got)
        r0 += n
    np.testing.assert_allclose(b.to_host(got), b.to_host(want), rtol=1e-4, atol=1e-5)


def test_a_segment_too_long_for_the_score_bound_is_left_to_the_kernel(monkeypatch):
    monkeypatch.setattr(gemm_attention, "SCORE_BYTES", 4 * CFG.n_head * 20 * 20)
    assert gemm_attention.fits(CFG, 20, 20) and not gemm_attention.fits(CFG, 20, 21)
