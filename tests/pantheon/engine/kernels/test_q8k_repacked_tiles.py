"""The repacked K-quant kernels at prefill sizes (each task unpacked into a tile): the zero-copy results, bit for bit."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels import q8k, repack
from pantheon.engine.kernels.q8k_repacked import TILED_FROM
from pantheon.engine.kernels.simd import has_vnni
from tests.pantheon.engine.kernels.blocks import random_blocks

pytestmark = pytest.mark.skipif(not has_vnni(), reason="host has no AVX512-VNNI")

ROWS, COLS = 70, 768  # a ragged last task; three super-blocks


@pytest.mark.parametrize("qtype", (T.Q4_K, T.Q5_K, T.Q6_K))
@pytest.mark.parametrize("n", (TILED_FROM - 1, TILED_FROM, TILED_FROM + 6))
def test_either_side_of_the_tile_threshold_equals_the_zero_copy_kernels(qtype, n):
    rng = np.random.default_rng(n)
    raw = random_blocks(qtype, ROWS, COLS, rng)
    acts = q8k.activations(rng.standard_normal((n, COLS)).astype(np.float32))
    want = np.empty((n, ROWS), np.float32)  # [n, rows]
    q8k.product(qtype, raw, acts, want)
    got = np.full((n, ROWS), np.nan, np.float32)  # [n, rows]
    q8k.product_repacked(qtype, repack.pack(qtype, raw), ROWS, acts, got)
    np.testing.assert_array_equal(got, want)
