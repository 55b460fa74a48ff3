"""Q4_K and Q5_K kernels: 256-value blocks of eight 32-value sub-blocks with 6-bit scales and mins.

Q4_K block (144 bytes): d fp16, dmin fp16, 12 bytes of packed 6-bit (scale, min) pairs, 128 nibble
bytes; byte c*32+l holds value c*64+l (low nibble) and c*64+32+l (high nibble).
Q5_K block (176 bytes): the same head, then 32 bytes qh whose bit j of byte l is the fifth bit of
value j*32+l, then the 128 nibble bytes. value = d*scale*q - dmin*min.

The gemv lane loop covers a whole block (32 lanes x 8 sub-blocks), so the accumulator is loaded
and stored once per block; mins leave the loop through per-32 activation sums.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.jit import exact, inline, kernel
from pantheon.engine.kernels.kblocks import QK_K, ROW_CHUNK, f16_at, group_sums, scale_min_k4

Q4_K_BYTES = 144
Q5_K_BYTES = 176
LANES = 32


@inline
def _scales8(raw, r, o, d):
    """d * scale of the 8 sub-blocks of the block at byte o."""
    return (d * scale_min_k4(raw, r, o + 4, 0)[0], d * scale_min_k4(raw, r, o + 4, 1)[0],
            d * scale_min_k4(raw, r, o + 4, 2)[0], d * scale_min_k4(raw, r, o + 4, 3)[0],
            d * scale_min_k4(raw, r, o + 4, 4)[0], d * scale_min_k4(raw, r, o + 4, 5)[0],
            d * scale_min_k4(raw, r, o + 4, 6)[0], d * scale_min_k4(raw, r, o + 4, 7)[0])


@inline
def _mins_dot(raw, r, o, xs, i, g):
    """Σ_j min_j * xs[i, g + j] over the 8 sub-blocks of the block at byte o (times dmin by the caller)."""
    s = np.float32(0.0)
    for j in range(8):
        s += scale_min_k4(raw, r, o + 4, j)[1] * xs[i, g + j]
    return s


@inline
def _nib(v, hi):
    """Low (hi=0) or high (hi=4) nibble of int32 v as float32."""
    return np.float32(np.int32(np.int32(v >> hi) & np.int32(15)))


@kernel
def q4_k_gemv(raw, x, out, tbl, lanes):
    """out[i, r] = dot(dequant(raw[r]), x[i]); `lanes` = 32, passed at run time so LLVM keeps it inner."""
    rows = raw.shape[0]
    n, cols = x.shape
    xs = group_sums(x, lanes)  # [n, cols/32]
    for c in prange((rows + ROW_CHUNK - 1) // ROW_CHUNK):
        acc = np.empty((n, lanes), np.float32)  # [n, 32] lane accumulators
        mins = np.empty(n, np.float32)  # [n]
        for r in range(c * ROW_CHUNK, min(rows, (c + 1) * ROW_CHUNK)):
            acc[:] = 0.0
            mins[:] = 0.0
            for b in range(cols // QK_K):
                o = b * Q4_K_BYTES
                d0, d1, d2, d3, d4, d5, d6, d7 = _scales8(raw, r, o, f16_at(raw, r, o, tbl))
                dmin = f16_at(raw, r, o + 2, tbl)
                xb = b * QK_K
                q = o + 16
                for i in range(n):
                    mins[i] += dmin * _mins_dot(raw, r, o, xs, i, b * 8)
                    for l in range(lanes):
                        v0 = np.int32(raw[r, q + l])
                        v1 = np.int32(raw[r, q + 32 + l])
                        v2 = np.int32(raw[r, q + 64 + l])
                        v3 = np.int32(raw[r, q + 96 + l])
                        acc[i, l] += (d0 * (x[i, xb + l] * _nib(v0, 0))
                                      + d1 * (x[i, xb + 32 + l] * _nib(v0, 4))
                                      + d2 * (x[i, xb + 64 + l] * _nib(v1, 0))
                                      + d3 * (x[i, xb + 96 + l] * _nib(v1, 4))
                                      + d4 * (x[i, xb + 128 + l] * _nib(v2, 0))
                                      + d5 * (x[i, xb + 160 + l] * _nib(v2, 4))
                                      + d6 * (x[i, xb + 192 + l] * _nib(v3, 0))
                                      + d7 * (x[i, xb + 224 + l] * _nib(v3, 4)))
            for i in range(n):
                out[i, r] = acc[i].sum() - mins[i]


@inline
def _q5(v, hi, h, bit):
    """5-bit value: nibble of v (hi = 0 or 4) plus bit `bit` of h as the fifth bit, as float32."""
    lo = np.int32(np.int32(v >> hi) & np.int32(15))
    return np.float32(np.int32(lo | np.int32(np.int32(np.int32(h >> bit) & np.int32(1)) << np.int32(4))))


@kernel
def q5_k_gemv(raw, x, out, tbl, lanes):
    """out[i, r] = dot(dequant(raw[r]), x[i]); same loop shape as q4_k_gemv plus the qh bit plane."""
    rows = raw.shape[0]
    n, cols = x.shape
    xs = group_sums(x, lanes)  # [n, cols/32]
    for c in prange((rows + ROW_CHUNK - 1) // ROW_CHUNK):
        acc = np.empty((n, lanes), np.float32)  # [n, 32] lane accumulators
        mins = np.empty(n, np.float32)  # [n]
        for r in range(c * ROW_CHUNK, min(rows, (c + 1) * ROW_CHUNK)):
            acc[:] = 0.0
            mins[:] = 0.0
            for b in range(cols // QK_K):
                o = b * Q5_K_BYTES
                d0, d1, d2, d3, d4, d5, d6, d7 = _scales8(raw, r, o, f16_at(raw, r, o, tbl))
                dmin = f16_at(raw, r, o + 2, tbl)
                xb = b * QK_K
                q = o + 48
                for i in range(n):
                    mins[i] += dmin * _mins_dot(raw, r, o, xs, i, b * 8)
                    for l in range(lanes):
                        h = np.int32(raw[r, o + 16 + l])
                        v0 = np.int32(raw[r, q + l])
                        v1 = np.int32(raw[r, q + 32 + l])
                        v2 = np.int32(raw[r, q + 64 + l])
                        v3 = np.int32(raw[r, q + 96 + l])
                        acc[i, l] += (d0 * (x[i, xb + l] * _q5(v0, 0, h, 0))
                                      + d1 * (x[i, xb + 32 + l] * _q5(v0, 4, h, 1))
                                      + d2 * (x[i, xb + 64 + l] * _q5(v1, 0, h, 2))
                                      + d3 * (x[i, xb + 96 + l] * _q5(v1, 4, h, 3))
                                      + d4 * (x[i, xb + 128 + l] * _q5(v2, 0, h, 4))
                                      + d5 * (x[i, xb + 160 + l] * _q5(v2, 4, h, 5))
                                      + d6 * (x[i, xb + 192 + l] * _q5(v3, 0, h, 6))
                                      + d7 * (x[i, xb + 224 + l] * _q5(v3, 4, h, 7)))
            for i in range(n):
                out[i, r] = acc[i].sum() - mins[i]


@inline
def _mins8(raw, r, o, dmin):
    """dmin * min of the 8 sub-blocks of the block at byte o."""
    return (dmin * scale_min_k4(raw, r, o + 4, 0)[1], dmin * scale_min_k4(raw, r, o + 4, 1)[1],
            dmin * scale_min_k4(raw, r, o + 4, 2)[1], dmin * scale_min_k4(raw, r, o + 4, 3)[1],
            dmin * scale_min_k4(raw, r, o + 4, 4)[1], dmin * scale_min_k4(raw, r, o + 4, 5)[1],
            dmin * scale_min_k4(raw, r, o + 4, 6)[1], dmin * scale_min_k4(raw, r, o + 4, 7)[1])


@exact
def q4_k_dequant(raw, out, tbl):
    """out[r] = dequant(raw[r]) for every row, bit-exact with gguf.quants (no fastmath: no fused d*q - m)."""
    rows, cols = out.shape
    for r in prange(rows):
        for b in range(cols // QK_K):
            o = b * Q4_K_BYTES
            d0, d1, d2, d3, d4, d5, d6, d7 = _scales8(raw, r, o, f16_at(raw, r, o, tbl))
            m0, m1, m2, m3, m4, m5, m6, m7 = _mins8(raw, r, o, f16_at(raw, r, o + 2, tbl))
            e = b * QK_K
            for l in range(32):
                v0 = np.int32(raw[r, o + 16 + l])
                v1 = np.int32(raw[r, o + 48 + l])
                v2 = np.int32(raw[r, o + 80 + l])
                v3 = np.int32(raw[r, o + 112 + l])
                out[r, e + l] = d0 * _nib(v0, 0) - m0
                out[r, e + 32 + l] = d1 * _nib(v0, 4) - m1
                out[r, e + 64 + l] = d2 * _nib(v1, 0) - m2
                out[r, e + 96 + l] = d3 * _nib(v1, 4) - m3
                out[r, e + 128 + l] = d4 * _nib(v2, 0) - m4
                out[r, e + 160 + l] = d5 * _nib(v2, 4) - m5
                out[r, e + 192 + l] = d6 * _nib(v3, 0) - m6
                out[r, e + 224 + l] = d7 * _nib(v3, 4) - m7


@exact
def q5_k_dequant(raw, out, tbl):
    """out[r] = dequant(raw[r]) for every row, bit-exact with gguf.quants (no fastmath: no fused d*q - m)."""
    rows, cols = out.shape
    for r in prange(rows):
        for b in range(cols // QK_K):
            o = b * Q5_K_BYTES
            d0, d1, d2, d3, d4, d5, d6, d7 = _scales8(raw, r, o, f16_at(raw, r, o, tbl))
            m0, m1, m2, m3, m4, m5, m6, m7 = _mins8(raw, r, o, f16_at(raw, r, o + 2, tbl))
            e = b * QK_K
            for l in range(32):
                h = np.int32(raw[r, o + 16 + l])
                v0 = np.int32(raw[r, o + 48 + l])
                v1 = np.int32(raw[r, o + 80 + l])
                v2 = np.int32(raw[r, o + 112 + l])
                v3 = np.int32(raw[r, o + 144 + l])
                out[r, e + l] = d0 * _q5(v0, 0, h, 0) - m0
                out[r, e + 32 + l] = d1 * _q5(v0, 4, h, 1) - m1
                out[r, e + 64 + l] = d2 * _q5(v1, 0, h, 2) - m2
                out[r, e + 96 + l] = d3 * _q5(v1, 4, h, 3) - m3
                out[r, e + 128 + l] = d4 * _q5(v2, 0, h, 4) - m4
                out[r, e + 160 + l] = d5 * _q5(v2, 4, h, 5) - m5
                out[r, e + 192 + l] = d6 * _q5(v3, 0, h, 6) - m6
                out[r, e + 224 + l] = d7 * _q5(v3, 4, h, 7) - m7
