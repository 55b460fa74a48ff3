"""The repacked K-quant kernels at prefill sizes (each task unpacked into a tile): the zero-copy results, bit for bit."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels.q8k_repacked import TILED_FROM, TILED_FROM6_AVX2
from pantheon.engine.kernels.vnni import has_int8_dots
from tests.pantheon.engine.kernels.test_q8k_repacked import repacked_and_zero_copy

pytestmark = pytest.mark.skipif(not has_int8_dots(), reason="host has neither AVX512-VNNI nor AVX2")


@pytest.mark.parametrize("qtype", (T.Q4_K, T.Q5_K, T.Q6_K))
@pytest.mark.parametrize("n", (TILED_FROM - 1, TILED_FROM, TILED_FROM + 6))
def test_either_side_of_the_tile_threshold_equals_the_zero_copy_kernels(qtype, n):
    # 70 rows: a ragged last task; 768 columns: three super-blocks
    np.testing.assert_array_equal(*repacked_and_zero_copy(qtype, 70, 768, n, 2))


@pytest.mark.parametrize("n", (TILED_FROM6_AVX2 - 1, TILED_FROM6_AVX2, TILED_FROM6_AVX2 + 1))
def test_q6_k_either_side_of_its_avx2_threshold_equals_the_zero_copy_kernels(n):
    """Q6_K on AVX2 hosts goes through the tile from 2 vectors (VNNI hosts: from TILED_FROM)."""
    np.testing.assert_array_equal(*repacked_and_zero_copy(T.Q6_K, 70, 768, n, 2))
