"""Q6_K kernels: 256-value blocks of sixteen 16-value sub-blocks with int8 scales, no mins.

Block (210 bytes): ql[128] low nibbles, qh[64] high 2-bit pairs, scales int8[16], d fp16.
For half h (128 values) and l < 32, bytes a = ql[h*64 + l], a' = ql[h*64 + 32 + l], c = qh[h*32 + l]
give values h*128 + l, +32, +64, +96 as (a & 15, a' & 15, a >> 4, a' >> 4) | (2-bit field k of c) << 4,
minus 32; value = d * scale[value_index / 16] * q.

The gemv lane loop is 16 wide (one scale per lane group) and covers a half block per pass.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.jit import exact, inline, kernel
from pantheon.engine.kernels.kblocks import QK_K, ROW_CHUNK, f16_at

Q6_K_BYTES = 210
LANES = 16


@inline
def _q6(a, a_shift, c, c_shift):
    """(a >> a_shift & 15) | (c >> c_shift & 3) << 4, minus 32, as float32."""
    lo = np.int32(np.int32(a >> a_shift) & np.int32(15))
    hi = np.int32(np.int32(c >> c_shift) & np.int32(3))
    return np.float32(np.int32(np.int32(lo | np.int32(hi << np.int32(4))) - np.int32(32)))


@inline
def _scales8(sc, r, o, d):
    """d * the 8 int8 scales at byte o of `sc` (the int8 view of the rows): one half block's worth."""
    return (d * np.float32(sc[r, o]), d * np.float32(sc[r, o + 1]), d * np.float32(sc[r, o + 2]),
            d * np.float32(sc[r, o + 3]), d * np.float32(sc[r, o + 4]), d * np.float32(sc[r, o + 5]),
            d * np.float32(sc[r, o + 6]), d * np.float32(sc[r, o + 7]))


@kernel
def q6_k_gemv(raw, x, out, tbl, lanes):
    """out[i, r] = dot(dequant(raw[r]), x[i]); `lanes` = 16 at run time so LLVM keeps it inner."""
    rows = raw.shape[0]
    n, cols = x.shape
    sc = raw.view(np.int8)  # [rows, row_bytes] the same bytes, signed, for the scales
    for c in prange((rows + ROW_CHUNK - 1) // ROW_CHUNK):
        acc = np.empty((n, lanes), np.float32)  # [n, 16] lane accumulators
        for r in range(c * ROW_CHUNK, min(rows, (c + 1) * ROW_CHUNK)):
            acc[:] = 0.0
            for b in range(cols // QK_K):
                o = b * Q6_K_BYTES
                d = f16_at(raw, r, o + 208, tbl)
                for h in range(2):
                    s = o + 192 + 8 * h
                    d0, d1, d2, d3, d4, d5, d6, d7 = _scales8(sc, r, s, d)
                    ql = o + 64 * h
                    qh = o + 128 + 32 * h
                    xb = b * QK_K + 128 * h
                    for i in range(n):
                        for l in range(lanes):
                            a0 = np.int32(raw[r, ql + l])
                            a1 = np.int32(raw[r, ql + 16 + l])
                            a2 = np.int32(raw[r, ql + 32 + l])
                            a3 = np.int32(raw[r, ql + 48 + l])
                            c0 = np.int32(raw[r, qh + l])
                            c1 = np.int32(raw[r, qh + 16 + l])
                            acc[i, l] += (d0 * (x[i, xb + l] * _q6(a0, 0, c0, 0))
                                          + d1 * (x[i, xb + 16 + l] * _q6(a1, 0, c1, 0))
                                          + d2 * (x[i, xb + 32 + l] * _q6(a2, 0, c0, 2))
                                          + d3 * (x[i, xb + 48 + l] * _q6(a3, 0, c1, 2))
                                          + d4 * (x[i, xb + 64 + l] * _q6(a0, 4, c0, 4))
                                          + d5 * (x[i, xb + 80 + l] * _q6(a1, 4, c1, 4))
                                          + d6 * (x[i, xb + 96 + l] * _q6(a2, 4, c0, 6))
                                          + d7 * (x[i, xb + 112 + l] * _q6(a3, 4, c1, 6)))
            for i in range(n):
                out[i, r] = acc[i].sum()


@exact
def q6_k_dequant(raw, out, tbl):
    """out[r] = dequant(raw[r]) for every row, bit-exact with gguf.quants."""
    rows, cols = out.shape
    sc = raw.view(np.int8)  # [rows, row_bytes] the same bytes, signed, for the scales
    for r in prange(rows):
        for b in range(cols // QK_K):
            o = b * Q6_K_BYTES
            d = f16_at(raw, r, o + 208, tbl)
            for h in range(2):
                s = o + 192 + 8 * h
                d0, d1, d2, d3, d4, d5, d6, d7 = _scales8(sc, r, s, d)
                ql = o + 64 * h
                qh = o + 128 + 32 * h
                e = b * QK_K + 128 * h
                for l in range(16):
                    a0 = np.int32(raw[r, ql + l])
                    a1 = np.int32(raw[r, ql + 16 + l])
                    a2 = np.int32(raw[r, ql + 32 + l])
                    a3 = np.int32(raw[r, ql + 48 + l])
                    c0 = np.int32(raw[r, qh + l])
                    c1 = np.int32(raw[r, qh + 16 + l])
                    out[r, e + l] = d0 * _q6(a0, 0, c0, 0)
                    out[r, e + 16 + l] = d1 * _q6(a1, 0, c1, 0)
                    out[r, e + 32 + l] = d2 * _q6(a2, 0, c0, 2)
                    out[r, e + 48 + l] = d3 * _q6(a3, 0, c1, 2)
                    out[r, e + 64 + l] = d4 * _q6(a0, 4, c0, 4)
                    out[r, e + 80 + l] = d5 * _q6(a1, 4, c1, 4)
                    out[r, e + 96 + l] = d6 * _q6(a2, 4, c0, 6)
                    out[r, e + 112 + l] = d7 * _q6(a3, 4, c1, 6)
