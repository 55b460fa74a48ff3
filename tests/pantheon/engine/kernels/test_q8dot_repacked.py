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
