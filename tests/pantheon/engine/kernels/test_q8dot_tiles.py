"""Row-interleaving kernels: bitwise equal to the in-place kernels, close to float64 of dequantize."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

from pantheon.engine.kernels import q8dot, q8dot_tiles
from pantheon.engine.kernels.vnni import has_int8_dots
from tests.pantheon.engine.kernels.test_q8dot import random_blocks, reference_quantize

pytestmark = pytest.mark.skipif(not has_int8_dots(), reason="host has neither AVX512-VNNI nor AVX2")

# qtype -> (interleaving kernel, in-place kernel)
KERNELS = {T.Q4_0: (q8dot_tiles.q4_0_tiles, q8dot.q4_0), T.Q8_0: (q8dot_tiles.q8_0_tiles, q8dot.q8_0)}
# 85 rows: two full 32-row tasks, then one with a full 16-row group and 5 rows moved one by one;
# 11 vectors: two 4-vector passes and 3 single ones.
ROWS, COLS, N = 85, 512, 11


def run_tiles(qtype, raw, acts):
    tiles, _ = KERNELS[qtype]
    out = np.full((acts.n, raw.shape[0]), np.nan, np.float32)  # [n, rows]
    tiles(raw, acts.xq, acts.xd, acts.xsum, out, 2)
    return out


@pytest.mark.parametrize("qtype", tuple(KERNELS))
def test_tiles_match_the_one_vector_kernel_bit_for_bit(qtype):
    rng = np.random.default_rng(int(qtype) + 100)
    raw = random_blocks(qtype, ROWS, COLS, rng)
    acts = q8dot.Activations(rng.standard_normal((N, COLS)).astype(np.float32))
    _, one = KERNELS[qtype]
    want = np.empty((N, ROWS), np.float32)  # [n, rows]
    one(raw, acts.xq, acts.xd, acts.xsum, want)
    np.testing.assert_array_equal(run_tiles(qtype, raw, acts), want)


@pytest.mark.parametrize("qtype", tuple(KERNELS))
def test_tiles_match_float64_on_the_same_int8_activations(qtype):
    rng = np.random.default_rng(int(qtype) + 200)
    raw = random_blocks(qtype, ROWS, COLS, rng)
    x = rng.standard_normal((N, COLS)).astype(np.float32)  # [n, cols]
    q, d = reference_quantize(x)
    xr = (q.reshape(N, -1, 32) * d[..., None].astype(np.float64)).reshape(N, COLS)  # [n, cols] float64
    w = dequantize(raw, qtype).astype(np.float64)  # [rows, cols]
    out = run_tiles(qtype, raw, q8dot.Activations(x))  # [n, rows]
    bound = np.abs(xr) @ np.abs(w).T  # [n, rows]
    err = np.abs(out - xr @ w.T)  # [n, rows]
    assert np.all(err <= 2e-5 * bound), f"worst relative error {np.max(err / bound)}"
