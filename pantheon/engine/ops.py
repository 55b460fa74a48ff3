"""Element-wise and normalisation operations of the transformer, in float32 numpy."""

import numpy as np

from numba import prange

from pantheon.engine.kernels.fastexp import expf
from pantheon.engine.kernels.jit import exact, exact_serial, inline, serial


@serial
def _rms_rows(x, weight, eps, out):
    # Row by row in one fixed order: a row's result never depends on how many rows share the call.
    n, d = x.shape
    for i in range(n):
        ss = np.float32(0.0)
        for j in range(d):
            ss += x[i, j] * x[i, j]
        inv = np.float32(1.0) / np.sqrt(ss / np.float32(d) + eps)
        for j in range(d):
            out[i, j] = x[i, j] * inv * weight[j]


def rms_norm(x, weight, eps):
    """x float32 [..., d] scaled to unit root-mean-square, times weight [d]."""
    d = x.shape[-1]
    out = np.empty(x.shape, np.float32)  # [..., d]
    rms_norm_into(np.ascontiguousarray(x).reshape(-1, d), weight, eps, out.reshape(-1, d))
    return out


def rms_norm_into(x, weight, eps, out):
    """`rms_norm` of a C-contiguous x [n, d], written into out [n, d]."""
    _rms_rows(x, weight, np.float32(eps), out)


def silu(x):
    """x * sigmoid(x), float32, safe for large negative x (exp overflow gives 0, not NaN)."""
    with np.errstate(over="ignore"):
        return x / (np.float32(1.0) + np.exp(-x))  # [...]


@inline
def _silu_mul_row(g, u, out):
    # One pass instead of numpy's four (negate, exp, add, divide, then the product), with an exp the
    # loop vectorizes (fastexp; libm's is a call per element). No fastmath in the callers: it let a
    # row's bits depend on the batch (tests/pantheon/engine/test_ops.py).
    for j in range(g.shape[0]):
        x = g[j]
        out[j] = x / (np.float32(1.0) + expf(-x)) * u[j]


@exact
def _silu_mul_rows(g, u, out):
    for i in prange(g.shape[0]):
        _silu_mul_row(g[i], u[i], out[i])


# Below this many values silu_mul runs in the calling thread. Its exp makes a row dear enough that two
# threads win from a few rows (5632 wide: 1 row 6.7 us serial / 10.1 on two threads; 4 rows 26.6 / 17.1;
# 8 rows 50.8 / 29.1).
SILU_SERIAL_VALUES = 1 << 14


@exact_serial
def _silu_mul_serial(g, u, out):
    # A decode step's rows: waking the thread pool costs more than the work (SILU_SERIAL_VALUES).
    for i in range(g.shape[0]):
        _silu_mul_row(g[i], u[i], out[i])


@exact_serial
def _halves_serial(gu, out):
    # silu_mul_halves_into's rows in the calling thread (SILU_SERIAL_VALUES), each row as _silu_mul_serial's.
    f = out.shape[1]
    for i in range(gu.shape[0]):
        _silu_mul_row(gu[i, :f], gu[i, f:], out[i])


@exact
def _halves_rows(gu, out):
    f = out.shape[1]
    for i in prange(gu.shape[0]):
        _silu_mul_row(gu[i, :f], gu[i, f:], out[i])


def silu_mul(g, u):
    """silu(g) * u for g, u float32 [n, f] (SwiGLU's gate and up): float32 [n, f]."""
    out = np.empty(g.shape, np.float32)  # [n, f]
    silu_mul_into(g, u, out)
    return out


def silu_mul_into(g, u, out):
    """`silu_mul` written into out [n, f]."""
    (_silu_mul_serial if g.size < SILU_SERIAL_VALUES else _silu_mul_rows)(g, u, out)


def silu_mul_halves_into(gu, out):
    """`silu_mul_into` of the halves of a C-contiguous gu [n, 2f] (gate gu[:, :f], up gu[:, f:]: a stacked
    gate and up product, read in place where splitting it would copy both halves) into out [n, f]."""
    (_halves_serial if out.size < SILU_SERIAL_VALUES else _halves_rows)(gu, out)


def softmax(x, axis=-1):
    """Numerically stable softmax along `axis`."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))  # [...]
    return e / e.sum(axis=axis, keepdims=True)  # [...]


class Rope:
    """Rotary position embedding over the first n_rot dims: interleaved pairs, or NeoX halves."""

    def __init__(self, n_rot, base, neox):
        self.n_rot, self.neox = n_rot, neox
        self.inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)  # [n_rot/2]

    def tables(self, pos):
        """cos, sin float32 [S, 1, n_rot/2] for positions pos [S]; shared by q and k of one step."""
        theta = np.asarray(pos, dtype=np.float64)[:, None] * self.inv_freq[None, :]  # [S, n_rot/2]
        return np.cos(theta).astype(np.float32)[:, None, :], np.sin(theta).astype(np.float32)[:, None, :]

    def apply(self, x, cos, sin):
        """Rotate x float32 [S, heads, head_dim] (C-contiguous) in place and return it."""
        s, half = cos.shape[0], self.n_rot // 2
        second, stride = (half, 1) if self.neox else (1, 2)
        _rotate(x, cos.reshape(s, half), sin.reshape(s, half), half, second, stride)
        return x


@serial
def _rotate(x, cos, sin, half, second, stride):
    # One pass in place (numpy took eight, over strided views): pair j of a head is elements
    # j*stride and j*stride + second (NeoX: j and j + n_rot/2; interleaved: 2j and 2j + 1).
    n, heads, _ = x.shape
    for i in range(n):
        for h in range(heads):
            for j in range(half):
                a, b = x[i, h, j * stride], x[i, h, j * stride + second]
                c, s = cos[i, j], sin[i, j]
                x[i, h, j * stride] = a * c - b * s
                x[i, h, j * stride + second] = a * s + b * c
