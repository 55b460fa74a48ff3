"""Normalisation, rope, attention and routing kernels against the CPU engine's float32 versions."""

import numpy as np
import pytest

from pantheon.engine.attention import attend
from pantheon.engine.cuda.ops import Ops
from pantheon.engine.moe import route
from pantheon.engine.ops import Rope, rms_norm, silu
from tests.pantheon.engine.cuda.sim import WIDE, backend

RNG = np.random.default_rng(7)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("geometry", [None, WIDE], ids=["one-thread", "wide"])
def test_rms_norm_whole_rows_and_per_head_groups_at_an_offset(geometry):
    b = backend(geometry)
    x, w, wh = _f32(3, 24), _f32(24), _f32(8)
    out = b.empty((3, 24))  # [3, 24]
    Ops(b).rms_norm(b.upload(x), b.upload(w), 1e-5, 24, out)
    np.testing.assert_allclose(b.to_host(out), rms_norm(x, w, 1e-5), rtol=1e-5, atol=1e-6)
    dx = b.upload(x)
    Ops(b).rms_norm(dx, b.upload(wh), 1e-5, 8, dx, 8, 16)  # columns 8..23 as two heads of 8, in place
    want = x.copy()
    want[:, 8:] = rms_norm(x[:, 8:].reshape(3, 2, 8), wh, 1e-5).reshape(3, 16)
    np.testing.assert_allclose(b.to_host(dx), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("neox", [False, True], ids=["interleaved", "neox"])
def test_rope_both_conventions_at_an_offset(neox):
    b = backend()
    heads, hd, n_rot = 2, 8, 6
    x = _f32(3, 4 + heads * hd)
    pos = np.array([0, 5, 1000], np.int32)
    rope = Rope(n_rot, 10000.0, neox)
    dx = b.upload(x)
    Ops(b).rope(dx, 4, heads, hd, n_rot, neox, b.upload(pos), b.upload(rope.inv_freq))
    want = x.copy()
    cos, sin = rope.tables(pos)
    want[:, 4:] = rope.apply(x[:, 4:].reshape(3, heads, hd).copy(), cos, sin).reshape(3, -1)
    np.testing.assert_allclose(b.to_host(dx), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("n_ctx,lens", [(8, {1: 5, 0: 3}), (48, {1: 40, 0: 33})], ids=["one-tile", "tiles"])
@pytest.mark.parametrize("geometry", [None, WIDE], ids=["one-thread", "wide"])
def test_attention_over_the_fp16_pool_matches_cpu_attention(geometry, n_ctx, lens, splits):
    """Two sequences in slots 1 and 0 of a pool: keys written through kv_write, causal GQA read back; the
    longer pair spans several key tiles (layers.TILE_KEYS), partial last tile included; split over three
    blocks per (token, head) and merged, a split left without keys for the early tokens."""
    b = backend(geometry)
    ops, heads, n_kv, hd = Ops(b), 4, 2, 8
    k = b.zeros((2, 3, n_kv, n_ctx, hd), np.float16)  # [layers, slots, kv, ctx, hd]
    v = b.zeros((2, 3, n_kv, n_ctx, hd), np.float16)
    seqs = {s: _f32(n, heads * hd + 2 * n_kv * hd) for s, n in lens.items()}  # [n, q | k | v]
    for s, qkv in seqs.items():
        ops.kv_write(b.upload(qkv), heads * hd, k, v, 1, b.upload(np.full(len(qkv), s, np.int32)),
                     b.upload(np.arange(len(qkv), dtype=np.int32)))
    for s, qkv in seqs.items():
        n = len(qkv)
        out = b.empty((n, heads * hd))  # [n, H*hd]
        parts = None if splits == 1 else b.empty((n * heads * splits, 2 + hd))  # [n*H*splits, 2 + hd]
        ops.attention(b.upload(qkv), heads, k, v, 1, b.upload(np.full(n, s, np.int32)),
                      b.upload(np.arange(n, dtype=np.int32)), out, parts)
        kk = qkv[:, heads * hd:heads * hd + n_kv * hd].reshape(n, n_kv, hd).astype(np.float16).astype(np.float32)
        vv = qkv[:, heads * hd + n_kv * hd:].reshape(n, n_kv, hd).astype(np.float16).astype(np.float32)
        want = attend(qkv[:, :heads * hd].reshape(n, heads, hd), kk.transpose(1, 0, 2).copy(),
                      vv.transpose(1, 0, 2).copy(), 0)
        np.testing.assert_allclose(b.to_host(out), want, rtol=1e-4, atol=1e-5)


def test_routing_activation_and_expert_combination():
    b = backend(WIDE)
    ops = Ops(b)
    logits = _f32(5, 8)
    ids, w = b.empty((5, 2), np.int32), b.empty((5, 2))  # [5, 2] each
    ops.route_topk(b.upload(logits), ids, w)
    want_ids, want_w = route(logits, 2)
    np.testing.assert_array_equal(b.to_host(ids), want_ids)
    np.testing.assert_allclose(b.to_host(w), want_w, rtol=1e-5)
    gu = _f32(4, 12)
    act = b.empty((4, 6))  # [4, 6]
    ops.silu_mul(b.upload(gu), act)
    np.testing.assert_allclose(b.to_host(act), silu(gu[:, :6]) * gu[:, 6:], rtol=1e-5, atol=1e-6)
    x, y, ww = _f32(2, 6), _f32(4, 6), np.abs(_f32(2, 2))
    dx = b.upload(x)
    ops.moe_combine(dx, b.upload(y), b.upload(ww))
    want = x + ww[:, :1] * y[0::2] + ww[:, 1:] * y[1::2]
    np.testing.assert_allclose(b.to_host(dx), want, rtol=1e-5, atol=1e-6)
