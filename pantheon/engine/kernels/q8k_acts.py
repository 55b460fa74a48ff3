"""Activations quantized per 256 values to llama.cpp's Q8_K: a float scale, 256 int8 quants, per-16 sums.

llama.cpp rounds the activations of every K-quant product this way (quantize_row_q8_K_ref, also on
x86), so matching its rounding to the bit keeps Pantheon's K-quant logits on llama.cpp's, and the
integer kernels (q8k_q4q5, q8k_q6) can fold the K-quant mins and offsets out through the sums.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.jit import exact
from pantheon.engine.kernels.kblocks import QK_K


@exact
def quantize_q8_k(x, xq, xd, bs16):
    """x float32 [n, cols] -> xq int8 [n, cols], xd [n, cols/256], bs16 int16 Σxq per 16 values.

    No fastmath: the rounding is llama.cpp's to the bit (iscale = -127/max of the signed extreme,
    q = min(127, round-half-even(iscale·x)), d = 1/iscale)."""
    n, cols = x.shape
    for i in prange(n):
        for b in range(cols // QK_K):
            amax, top = np.float32(0.0), np.float32(0.0)
            for j in range(b * QK_K, (b + 1) * QK_K):
                if abs(x[i, j]) > amax:
                    amax, top = abs(x[i, j]), x[i, j]
            iscale = np.float32(-127.0) / top if amax > 0 else np.float32(0.0)
            xd[i, b] = np.float32(1.0) / iscale if amax > 0 else np.float32(0.0)
            for g in range(b * 16, (b + 1) * 16):
                s = np.int32(0)
                for j in range(g * 16, g * 16 + 16):
                    q = min(np.int32(127), np.int32(np.rint(iscale * x[i, j])))
                    xq[i, j] = q
                    s += q
                bs16[i, g] = s


class Q8K:
    """Float32 activations x [n, cols] (cols a multiple of 256) in Q8_K, once for every weight they meet."""

    def __init__(self, x):
        n, cols = x.shape
        self.n = n
        xq = np.empty((n, cols), np.int8)  # [n, cols]
        self.xd = np.empty((n, cols // QK_K), np.float32)  # [n, cols/256] scales
        self.bs16 = np.empty((n, cols // 16), np.int16)  # [n, cols/16] Σxq
        quantize_q8_k(np.ascontiguousarray(x, dtype=np.float32), xq, self.xd, self.bs16)
        self.xq = xq.view(np.uint8)  # [n, cols] the int8 bytes, as the loads expect
