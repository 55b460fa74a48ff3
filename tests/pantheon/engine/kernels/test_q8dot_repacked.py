"""Kernels on repacked weights: bit for bit the zero-copy kernels' results, at every batch size (Q4_0 / Q8_0
with int8 activations per 32 here, Q4_K with Q8_K activations: test_q8k_repacked)."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels import q8dot, repack
from pantheon.engine.kernels.vnni import has_int8_dots
from tests.pantheon.engine.kernels.blocks import random_blocks

pytestmark = pytest.mark.skipif(not has_int8_dots(), reason="host has neither AVX512-VNNI nor AVX2")

# 85 rows: a ragged last task; 512 columns: two spans of 8 blocks; 11 vectors: two 4-vector passes
# and 3 single ones.
ROWS, COLS = 85, 512


@pytest.mark.parametrize("qtype", (T.Q4_0, T.Q8_0))
@pytest.mark.parametrize("n", (1, 3, 4, 5, 8, 11))
@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("ahead", (0, 4096))  # the prefetch distance moves no bit (kernels.stream)
def test_equal_to_the_zero_copy_kernels(qtype, n, threads, ahead):
    rng = np.random.default_rng(int(qtype) * 100 + n)
    raw = random_blocks(qtype, ROWS, COLS, rng)
    acts = q8dot.Activations(rng.standard_normal((n, COLS)).astype(np.float32))
    want = np.empty((n, ROWS), np.float32)  # [n, rows]
    q8dot.product(qtype, raw, acts, want)
    got = np.full((n, ROWS), np.nan, np.float32)  # [n, rows]
    kernel = q8dot.q4_0_repacked if qtype == T.Q4_0 else q8dot.q8_0_repacked
    kernel(repack.pack(qtype, raw), ROWS, acts.xq, acts.xd, acts.xsum, got, threads, ahead)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("qtype", (T.Q4_0, T.Q8_0))
def test_product_repacked_matches_dequantized_float64(qtype):
    """Independent of every kernel: the dequantized weights times the int8 activations, in float64."""
    from gguf.quants import dequantize

    rng = np.random.default_rng(int(qtype) + 9)
    raw = random_blocks(qtype, ROWS, COLS, rng)
    acts = q8dot.Activations(rng.standard_normal((4, COLS)).astype(np.float32))
    got = np.empty((4, ROWS), np.float32)  # [n, rows]
    q8dot.product_repacked(qtype, repack.pack(qtype, raw), ROWS, acts, got)
    x = acts.xq.view(np.int8).reshape(4, -1, 32) * acts.xd[..., None].astype(np.float64)  # [n, nb, 32]
    want = x.reshape(4, COLS) @ dequantize(raw, qtype).astype(np.float64).T  # [n, rows]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("n", (1, 4))
def test_q4_0_blocks_at_the_int16_extremes(n):
    """Every nibble 15 (or 0) against activations of ±127: a block's 8 nibble groups add 8 pair sums of
    ±2·15·127 in int16 on AVX2 (kernels.vnni.pairs), 30480 at most, then one vpmaddwd widens them."""
    raw = np.zeros((32, COLS // 32 * 18), np.uint8)
    blocks = raw.reshape(32, -1, 18)
    blocks[:, :, :2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)  # d = 1
    blocks[:16, :, 2:] = 0xFF  # rows 0-15: every quant 15 - 8 = 7; rows 16-31: every quant 0 - 8 = -8
    x = np.where(np.arange(n)[:, None] % 2 == 0, 1.0, -1.0) * np.ones((n, COLS))  # [n, cols]
    acts = q8dot.Activations(x.astype(np.float32))
    assert np.abs(acts.xq.view(np.int8)).min() == 127
    got = np.empty((n, 32), np.float32)  # [n, rows]
    q8dot.q4_0_repacked(repack.pack(T.Q4_0, raw), 32, acts.xq, acts.xd, acts.xsum, got, 1, 0)
    q = np.where(np.arange(32) < 16, 7.0, -8.0)  # [rows]
    want = (acts.xq.view(np.int8).astype(np.float64) * acts.xd.repeat(32, axis=1)) @ (q[:, None] * np.ones(COLS)).T
    np.testing.assert_allclose(got, want, rtol=1e-6)
