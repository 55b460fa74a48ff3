"""Activations quantized per 256 values to llama.cpp's Q8_K: a float scale, 256 int8 quants, per-16 sums.

llama.cpp rounds the activations of every K-quant product this way (quantize_row_q8_K_ref, also on
x86), so matching its rounding to the bit keeps Pantheon's K-quant logits on llama.cpp's, and the
integer kernels (q8k_q4q5, q8k_q6) can fold the K-quant mins and offsets out through the sums.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.jit import SERIAL_VALUES, exact, exact_serial, inline
from pantheon.engine.kernels.kblocks import QK_K
from pantheon.engine.kernels.simd512 import fzero16
from pantheon.engine.kernels.simd_f32 import hmax16, isum16, qround16, vabsmax16
from pantheon.engine.kernels.simd_lanes import fload16


@inline
def _quantize_row(xr, qr, xd, bs16):
    """One row: xr float32 [cols] -> qr int8 [cols], xd [cols/256], bs16 [cols/16] (quantize_q8_k)."""
    for b in range(xr.shape[0] // QK_K):
        o = b * QK_K
        amax = _block_amax(xr, o)
        top = _first_of_magnitude(xr, o, amax)
        iscale = np.float32(-127.0) / top if amax > 0 else np.float32(0.0)
        xd[b] = np.float32(1.0) / iscale if amax > 0 else np.float32(0.0)
        for g in range(QK_K // 16):
            bs16[b * 16 + g] = isum16(qround16(xr, o + 16 * g, iscale, qr, o + 16 * g))


@exact
def quantize_q8_k(x, xq, xd, bs16):
    """x float32 [n, cols] -> xq int8 [n, cols], xd [n, cols/256], bs16 int16 Σxq per 16 values.

    No fastmath: the rounding is llama.cpp's to the bit (iscale = -127/max of the signed extreme,
    q = min(127, round-half-even(iscale·x)), d = 1/iscale), 16 values per instruction. The min is left
    out: |x| <= |top| for every x of the block, so |iscale·x| is 127·|x|/|top| <= 127 up to two float32
    roundings (a relative 2^-23), far below the 127.5 that would round to 128."""
    for i in prange(x.shape[0]):
        _quantize_row(x[i], xq[i], xd[i], bs16[i])


@exact_serial
def quantize_q8_k_serial(x, xq, xd, bs16):
    """quantize_q8_k in the calling thread: the same operations, so the same bits."""
    for i in range(x.shape[0]):
        _quantize_row(x[i], xq[i], xd[i], bs16[i])


@inline
def _block_amax(xr, o):
    """The largest |x| of xr[o:o+256] (NaN ignored, as llama.cpp's `ax > amax` test ignores it)."""
    m = fzero16()
    for k in range(o, o + QK_K, 16):
        m = vabsmax16(m, fload16(xr, k))
    return hmax16(m)


@inline
def _first_of_magnitude(xr, o, amax):
    """The signed x of the first position in xr[o:o+256] whose |x| is amax: the extreme llama.cpp keeps
    (it replaces its running extreme only on a strictly larger |x|)."""
    for j in range(o, o + QK_K):
        if abs(xr[j]) == amax:
            return xr[j]
    return np.float32(0.0)


class Q8K:
    """Float32 activations x [n, cols] (cols a multiple of 256) in Q8_K, once for every weight they meet."""

    def __init__(self, x):
        n, cols = x.shape
        self.n = n
        xq = np.empty((n, cols), np.int8)  # [n, cols]
        self.xd = np.empty((n, cols // QK_K), np.float32)  # [n, cols/256] scales
        self.bs16 = np.empty((n, cols // 16), np.int16)  # [n, cols/16] Σxq
        quantize_into(np.ascontiguousarray(x, dtype=np.float32), xq, self.xd, self.bs16)
        self.xq = xq.view(np.uint8)  # [n, cols] the int8 bytes, as the loads expect


def quantize_into(x, xq, xd, bs16):
    """C-contiguous float32 x [n, cols] rounded to Q8_K into xq (int8), xd and bs16 (`quantize_q8_k`)."""
    (quantize_q8_k_serial if x.size < SERIAL_VALUES else quantize_q8_k)(x, xq, xd, bs16)
