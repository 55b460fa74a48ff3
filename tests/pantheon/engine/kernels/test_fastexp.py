"""fastexp.expf against float64 exp: its accuracy over float32's range, and its clamps."""

import numba
import numpy as np

from pantheon.engine.kernels.fastexp import HI, LO, expf, expf16
from pantheon.engine.kernels.simd512 import store16
from pantheon.engine.kernels.simd_lanes import fload16


@numba.njit
def _expf_all(x, out):
    for i in range(x.size):
        out[i] = expf(x[i])


def _expf(x):
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty_like(x)
    _expf_all(x, out)
    return out


@numba.njit
def _expf16_all(x, out):
    for i in range(0, x.size, 16):
        store16(out, i, expf16(fload16(x, i)))


def test_sixteen_lanes_give_the_scalar_bits_everywhere():
    rng = np.random.default_rng(1)
    x = np.concatenate([np.linspace(LO - 5, HI + 5, 1 << 20, dtype=np.float32),
                        (rng.standard_normal(1 << 16) * 30).astype(np.float32),
                        rng.uniform(-1e-6, 1e-6, 1 << 12).astype(np.float32),
                        np.array([-np.inf, np.inf, -1e30, 1e30, 0.0, -0.0, LO, HI] * 2, np.float32)])
    got = np.empty_like(x)
    _expf16_all(x, got)
    assert np.array_equal(got.view(np.uint32), _expf(x).view(np.uint32))
    nan = np.full(16, np.nan, np.float32)
    _expf16_all(nan, got[:16])
    assert np.isnan(got[:16]).all()


def test_relative_error_is_under_two_ten_millionths_across_the_range():
    x = np.concatenate([np.linspace(LO, HI, 1_000_001, dtype=np.float32),
                        np.random.default_rng(0).uniform(-3, 3, 100_000).astype(np.float32)])
    want = np.exp(x.astype(np.float64))
    assert np.max(np.abs(_expf(x) - want) / want) < 2e-7


def test_out_of_range_inputs_clamp_and_nan_stays_nan():
    got = _expf([-1e4, -np.inf, 1e4, np.inf, np.nan, 0.0])
    np.testing.assert_allclose(got[:2], np.exp(np.float64(LO)), rtol=1e-6)  # ~1.2e-38: a 0 to every use
    np.testing.assert_allclose(got[2:4], np.exp(np.float64(HI)), rtol=1e-6)  # finite: 1 + e^x never inf
    assert np.isnan(got[4]) and got[5] == 1.0
