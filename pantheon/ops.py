"""Element-wise and normalisation operations of the transformer, in float32 numpy."""

import numpy as np


def rms_norm(x, weight, eps):
    """x float32 [..., d] scaled to unit root-mean-square, times weight [d]."""
    ms = np.einsum("...i,...i->...", x, x)[..., None] / np.float32(x.shape[-1])  # [..., 1]
    return x * (np.float32(1.0) / np.sqrt(ms + np.float32(eps))) * weight  # [..., d]


def silu(x):
    """x * sigmoid(x), float32, safe for large negative x (exp overflow gives 0, not NaN)."""
    with np.errstate(over="ignore"):
        return x / (np.float32(1.0) + np.exp(-x))  # [...]


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
        """Rotate x float32 [S, heads, head_dim] in place and return it."""
        half = self.n_rot // 2
        if self.neox:
            a, b = x[..., :half], x[..., half:self.n_rot]  # [S, H, half] views
        else:
            a, b = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]  # [S, H, half] views
        a2 = a * cos - b * sin  # [S, H, half]
        b[...] = a * sin + b * cos
        a[...] = a2
        return x
