"""The kernels' shared numba options (kernels.jit)."""

import numpy as np

from pantheon.engine.kernels.jit import exact_serial


@exact_serial
def _ratios(a, b, out):
    for i in range(a.shape[0]):
        out[i] = a[i] / b[i]


def test_kernels_divide_in_ieee_arithmetic_with_no_zero_test_per_element():
    # numba's default error model tests each divisor to raise ZeroDivisionError: a branch per element
    # that kept silu_mul's loop from vectorizing; the kernels take IEEE's inf and NaN instead
    a, b = np.array([1.0, -1.0, 0.0, 6.0], np.float32), np.array([0.0, 0.0, 0.0, 3.0], np.float32)
    out = np.empty(4, np.float32)
    with np.errstate(all="ignore"):
        _ratios(a, b, out)
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2]) and out[3] == 2.0
