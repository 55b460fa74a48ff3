"""Element-wise operations against float64 references."""

import numpy as np

from pantheon.engine.ops import silu_mul


def test_silu_mul_matches_float64_and_survives_extreme_gates():
    rng = np.random.default_rng(0)
    g = (rng.standard_normal((5, 300)) * 6).astype(np.float32)  # [5, 300]
    g[0, :4] = [-1e4, 1e4, 0.0, -89.0]  # exp overflows for the first: silu is -0, not NaN
    u = rng.standard_normal((5, 300)).astype(np.float32)  # [5, 300]
    with np.errstate(over="ignore"):  # the reference overflows too, to the same -0
        want = g.astype(np.float64) / (1.0 + np.exp(-g.astype(np.float64))) * u  # [5, 300]
    got = silu_mul(g, u)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_silu_mul_takes_strided_halves_and_gives_each_row_the_same_bits_in_any_batch():
    rng = np.random.default_rng(1)
    gu = rng.standard_normal((7, 64)).astype(np.float32)  # [7, 2*32] gate, then up (phi3's fused ffn_up)
    whole = silu_mul(gu[:, :32], gu[:, 32:])  # [7, 32]
    for i in range(7):
        np.testing.assert_array_equal(silu_mul(gu[i:i + 1, :32], gu[i:i + 1, 32:])[0], whole[i])
