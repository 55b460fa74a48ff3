"""Element-wise operations against float64 references."""

import numpy as np
import pytest

from pantheon.engine.ops import SILU_SERIAL_VALUES, Rope, silu_mul, silu_mul_halves_into


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
    # The whole batch takes the thread pool's kernel, one row the serial one (ops.SILU_SERIAL_VALUES): the
    # same bits.
    n = SILU_SERIAL_VALUES // 32 + 1
    gu = rng.standard_normal((n, 64)).astype(np.float32)  # [n, 2*32] gate, then up (phi3's fused ffn_up)
    whole = silu_mul(gu[:, :32], gu[:, 32:])  # [n, 32]
    for i in range(0, n, 97):
        np.testing.assert_array_equal(silu_mul(gu[i:i + 1, :32], gu[i:i + 1, 32:])[0], whole[i])


def test_silu_mul_halves_gives_silu_mul_bits_on_one_row_or_the_thread_pool():
    rng = np.random.default_rng(2)
    n = SILU_SERIAL_VALUES // 32 + 1  # the whole batch in the thread pool's kernel, one row in the serial one
    gu = (rng.standard_normal((n, 64)) * 6).astype(np.float32)  # [n, 2*32] a stacked gate and up product
    want = silu_mul(gu[:, :32], gu[:, 32:])  # [n, 32]
    got = np.empty((n, 32), np.float32)  # [n, 32]
    silu_mul_halves_into(gu, got)
    np.testing.assert_array_equal(got, want)
    one = np.empty((1, 32), np.float32)  # [1, 32]
    silu_mul_halves_into(gu[7:8], one)
    np.testing.assert_array_equal(one[0], want[7])


def _rope_reference(x, pos, n_rot, neox, base=10000.0):
    """float64 rotation of x [S, H, hd]: pairs (j, j + n_rot/2) for NeoX, (2j, 2j + 1) otherwise."""
    half = n_rot // 2
    theta = np.asarray(pos, np.float64)[:, None, None] * base ** (-np.arange(half) * 2.0 / n_rot)  # [S, 1, half]
    ia, ib = (np.arange(half), np.arange(half) + half) if neox else (np.arange(0, n_rot, 2), np.arange(1, n_rot, 2))
    out = x.astype(np.float64)  # [S, H, hd]
    a, b = out[..., ia].copy(), out[..., ib].copy()  # [S, H, half] each
    out[..., ia], out[..., ib] = a * np.cos(theta) - b * np.sin(theta), a * np.sin(theta) + b * np.cos(theta)
    return out


@pytest.mark.parametrize("neox", [False, True], ids=["interleaved", "neox"])
@pytest.mark.parametrize("n_rot", [64, 24])  # every dim, and a partial rotation (dims past n_rot stay)
def test_rope_matches_float64_and_gives_each_row_the_same_bits_in_any_batch(neox, n_rot):
    rng = np.random.default_rng(2)
    rope = Rope(n_rot, 10000.0, neox)
    x = rng.standard_normal((5, 3, 64)).astype(np.float32)  # [S, H, hd]
    pos = np.array([0, 1, 17, 1000, 4095])
    whole = rope.apply(x.copy(), *rope.tables(pos))
    np.testing.assert_allclose(whole, _rope_reference(x, pos, n_rot, neox), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(whole[:, :, n_rot:], x[:, :, n_rot:])
    for i in range(5):
        np.testing.assert_array_equal(rope.apply(x[i:i + 1].copy(), *rope.tables(pos[i:i + 1]))[0], whole[i])
