"""The Q4_K / Q5_K / Q6_K kernels on repacked weights: bit for bit the zero-copy Q8_K kernels' results, at every batch size."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from pantheon.engine.kernels import q8k, repack
from pantheon.engine.kernels.vnni import has_int8_dots
from tests.pantheon.engine.kernels.blocks import random_blocks

pytestmark = pytest.mark.skipif(not has_int8_dots(), reason="host has neither AVX512-VNNI nor AVX2")

# 85 rows: a ragged last task; 512 columns: two super-blocks; 17 vectors: four 4-vector passes and one
# single (and, on the zero-copy side, the interleaving kernels from 16 vectors).
ROWS, COLS = 85, 512


def repacked_and_zero_copy(qtype, rows, cols, n, threads, ahead=4096):
    """(repacked kernel's [n, rows], zero-copy kernel's [n, rows]) for random blocks and vectors."""
    rng = np.random.default_rng(n)
    raw = random_blocks(qtype, rows, cols, rng)
    acts = q8k.activations(rng.standard_normal((n, cols)).astype(np.float32))
    want = np.empty((n, rows), np.float32)  # [n, rows]
    q8k.product(qtype, raw, acts, want)
    got = np.full((n, rows), np.nan, np.float32)  # [n, rows]
    kernel = {T.Q4_K: q8k.q4_k_repacked, T.Q5_K: q8k.q5_k_repacked, T.Q6_K: q8k.q6_k_repacked}[qtype]
    kernel(repack.pack(qtype, raw), rows, acts.xq, acts.xd, acts.bs16, got, threads, ahead)
    return got, want


@pytest.mark.parametrize("qtype", (T.Q4_K, T.Q5_K, T.Q6_K))
@pytest.mark.parametrize("n", (1, 3, 4, 5, 8, 11, 17))
@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("ahead", (0, 16384))  # the prefetch distance moves no bit (kernels.stream)
def test_equal_to_the_zero_copy_kernels(qtype, n, threads, ahead):
    np.testing.assert_array_equal(*repacked_and_zero_copy(qtype, ROWS, COLS, n, threads, ahead))


@pytest.mark.parametrize("qtype", (T.Q4_K, T.Q5_K, T.Q6_K))
def test_matches_dequantized_float64(qtype):
    """Independent of every kernel: the dequantized weights times the Q8_K activations, in float64."""
    rng = np.random.default_rng(5)
    raw = random_blocks(qtype, ROWS, COLS, rng)
    acts = q8k.activations(rng.standard_normal((4, COLS)).astype(np.float32))
    got = np.empty((4, ROWS), np.float32)  # [n, rows]
    q8k.product_repacked(qtype, repack.pack(qtype, raw), ROWS, acts, got)
    x = acts.xq.view(np.int8).reshape(4, -1, 256) * acts.xd[..., None].astype(np.float64)  # [n, nb, 256]
    want = x.reshape(4, COLS) @ dequantize(raw, qtype).astype(np.float64).T  # [n, rows]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
