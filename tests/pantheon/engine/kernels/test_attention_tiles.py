"""Tiled attention: every head grouping against a float64 softmax over the float16 caches' values, and a
row's bits whatever shares its tile."""

import numpy as np
import pytest
from numba.typed import List

from pantheon.engine.kernels.attention_scores import dims_per_lane
from pantheon.engine.kernels.attention_tiles import CHUNK, store_and_attend

# (heads, kv heads, head dim): 2 heads per kv head; 8 (two rows per tile); 3 with a 12-wide head (five
# rows, one lane unused, columns past the last 8); 20 (one row in tiles of 16 and 4 heads); no grouping,
# with a 24-wide head and with a 32-wide one. Their scores take 8, 2, 4, 1, 8 and 16 dims per lane.
SHAPES = [(4, 2, 16), (32, 4, 64), (6, 2, 12), (40, 2, 8), (3, 3, 24), (2, 2, 32)]


def _caches(rng, kv, hd, capacity, n_layer=2):
    """One sequence's k, v caches [n_layer, KV, capacity, hd] holding random earlier positions, as the
    kernel takes them: float16 bits in uint16."""
    return [rng.standard_normal((n_layer, kv, capacity, hd)).astype(np.float16).view(np.uint16) for _ in range(2)]


def _values(cache):
    """float64 values of a cache's float16 bits."""
    return cache.view(np.float16).astype(np.float64)


def _run(q, k, v, kc, vc, p0, li=1, threads=2):
    """Rows of one sequence at positions p0.. through the kernel -> [rows, H*hd]."""
    n, heads, hd = q.shape
    out = np.full((n, heads * hd), np.nan, np.float32)  # [rows, H*hd]
    seg, pos = np.zeros(n, np.int64), np.arange(p0, p0 + n)  # [rows] each
    store_and_attend(q, k, v, List([kc]), List([vc]), seg, pos, li, out, threads)
    return out


def _reference(q, kc, vc, p0, li=1):
    """float64 causal GQA of rows at p0.. over the caches' layer li (new keys already stored)."""
    n, heads, hd = q.shape
    g = heads // kc.shape[1]
    out = np.zeros((n, heads, hd))  # [rows, H, hd]
    for i in range(n):
        for h in range(heads):
            keys = _values(kc)[li, h // g, :p0 + i + 1]  # [len, hd]
            s = keys @ q[i, h] / np.sqrt(hd)  # [len]
            w = np.exp(s - s.max())  # [len]
            out[i, h] = w @ _values(vc)[li, h // g, :p0 + i + 1] / w.sum()
    return out.reshape(n, heads * hd)


def _step(rng, heads, kv, hd, n):
    q = (rng.standard_normal((n, heads, hd)) * 2).astype(np.float32)  # [n, H, hd]
    k, v = (rng.standard_normal((n, kv, hd)).astype(np.float32) for _ in range(2))  # [n, KV, hd] each
    return q, k, v


@pytest.mark.parametrize("heads,kv,hd", SHAPES)
def test_every_head_grouping_matches_float64(heads, kv, hd):
    rng = np.random.default_rng(heads * 100 + hd)
    kc, vc = _caches(rng, kv, hd, 40)
    q, k, v = _step(rng, heads, kv, hd, 21)
    got = _run(q, k, v, kc, vc, p0=5)
    np.testing.assert_array_equal(kc[1, :, 5:26], k.transpose(1, 0, 2).astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(vc[1, :, 5:26], v.transpose(1, 0, 2).astype(np.float16).view(np.uint16))
    np.testing.assert_allclose(got, _reference(q, kc, vc, 5), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("p0", [3, CHUNK - 10])
@pytest.mark.parametrize("heads,kv,hd", [(32, 4, 64), (6, 2, 12), (40, 2, 8)])
def test_a_prefill_row_gets_the_bits_it_gets_decoded_alone(heads, kv, hd, p0):
    """19 rows in one call (tiles of several rows, lanes with different lengths; from p0 = CHUNK - 10 they
    straddle a chunk of widened positions) against the same rows one call each, extending the cache as
    decoding does, on one thread and on two."""
    rng = np.random.default_rng(7)
    kc, vc = _caches(rng, kv, hd, p0 + 29)
    q, k, v = _step(rng, heads, kv, hd, 19)
    together = _run(q, k, v, kc.copy(), vc.copy(), p0=p0)
    alone = np.concatenate([_run(q[i:i + 1], k[i:i + 1], v[i:i + 1], kc, vc, p0=p0 + i, threads=1)
                            for i in range(19)])
    np.testing.assert_array_equal(together, alone)


@pytest.mark.parametrize("heads,kv,hd", [(32, 4, 64), (6, 2, 12)])
def test_rows_reading_several_chunks_of_positions_match_float64(heads, kv, hd):
    """Rows at 2·CHUNK + 5.. read three chunks of widened keys and values, the last one ragged: scores of
    every chunk enter one softmax, and value sums carry from chunk to chunk."""
    rng = np.random.default_rng(11)
    p0 = 2 * CHUNK + 5
    kc, vc = _caches(rng, kv, hd, p0 + 8)
    q, k, v = _step(rng, heads, kv, hd, 3)
    np.testing.assert_allclose(_run(q, k, v, kc, vc, p0=p0), _reference(q, kc, vc, p0), rtol=2e-5, atol=2e-6)


def test_sequences_of_one_step_each_get_their_own_keys():
    """Two sequences in one call: each row attends to its own cache only, as if it ran alone."""
    rng = np.random.default_rng(3)
    heads, kv, hd = 8, 2, 16
    caches = [_caches(rng, kv, hd, 24) for _ in range(2)]
    q, k, v = _step(rng, heads, kv, hd, 5)
    seg, pos = np.array([0, 0, 0, 1, 1]), np.array([4, 5, 6, 10, 11])  # a prefill of 3 beside 2 rows
    out = np.empty((5, heads * hd), np.float32)  # [5, H*hd]
    store_and_attend(q, k, v, List([c[0] for c in caches]), List([c[1] for c in caches]), seg, pos, 0, out, 2)
    for s, rows in ((0, slice(0, 3)), (1, slice(3, 5))):
        p0 = pos[rows][0]
        want = _reference(q[rows], caches[s][0], caches[s][1], p0, li=0)
        np.testing.assert_allclose(out[rows], want, rtol=2e-5, atol=2e-6)


def test_a_dominant_first_key_neither_overflows_nor_is_missed():
    """Scores hundreds apart: each lane's max covers every position (the first included), so the
    weights stay finite and the first position takes all of them."""
    rng = np.random.default_rng(5)
    heads, kv, hd = 8, 2, 16
    kc, vc = _caches(rng, kv, hd, 16)
    q, k, v = _step(rng, heads, kv, hd, 3)
    q = np.abs(q)  # every query positive, so a positive first key dominates
    kc[1, :, 0] = np.float16(30.0).view(np.uint16)
    got = _run(q, k, v, kc, vc, p0=4)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, _reference(q, kc, vc, 4), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("g,hd,r", [(1, 128, 16), (1, 24, 8), (2, 16, 8), (3, 12, 4), (4, 128, 4), (7, 64, 2),
                                    (8, 64, 2), (16, 64, 1), (20, 8, 1), (8, 12, 2), (1, 6, 2)])
def test_a_register_holds_as_many_dims_per_query_as_its_grouping_leaves_room_for(g, hd, r):
    assert dims_per_lane(g, hd) == r
