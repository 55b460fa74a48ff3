"""Q2_K and Q3_K kernels: 256-value blocks of sixteen 16-value sub-blocks of 2- and 3-bit values.

Q2_K block (84 bytes): scales[16] (low nibble scale, high nibble min), qs[64], d fp16, dmin fp16.
Q3_K block (110 bytes): hmask[32], qs[64], 12 bytes of packed 6-bit signed scales, d fp16.
In both, value h*128 + s*32 + p (p < 32) takes bits 2s..2s+1 of qs[h*32 + p]; Q3_K adds bit
4h+s of hmask[p] as the third bit, and its value is d*scale*(q - 4) with q = low | hbit << 2.
Q2_K value = d*(sc & 15)*q - dmin*(sc >> 4). Offsets and mins leave the loop through per-16 sums.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.jit import exact, inline, kernel
from pantheon.engine.kernels.kblocks import QK_K, ROW_CHUNK, f16_at, group_sums

Q2_K_BYTES = 84
Q3_K_BYTES = 110
LANES = 16


@inline
def _bits(v, shift, mask):
    return np.int32(np.int32(v >> shift) & np.int32(mask))


@inline
def _q3(c, h, s, hbit):
    """3-bit value (bits 2s.. of c, plus bit `hbit` of h as bit 2), as float32, offset not applied."""
    return np.float32(np.int32(_bits(c, 2 * s, 3) | np.int32(_bits(h, hbit, 1) << np.int32(2))))


@inline
def q3_scale(raw, r, o, j):
    """Signed 6-bit scale j of the Q3_K block whose 12 scale bytes start at o."""
    lo = _bits(np.int32(raw[r, o + (j & 7)]), 4 * (j >> 3), 15)
    hi = _bits(np.int32(raw[r, o + 8 + (j & 3)]), 2 * (j >> 2), 3)
    return np.float32(np.int32(np.int32(lo | np.int32(hi << np.int32(4))) - np.int32(32)))


@inline
def _fill_q2(raw, r, o, tbl, ds, ms):
    """ds[j] = d*scale_j, ms[j] = dmin*min_j of the Q2_K block at byte o."""
    d = f16_at(raw, r, o + 80, tbl)
    dmin = f16_at(raw, r, o + 82, tbl)
    for j in range(16):
        v = np.int32(raw[r, o + j])
        ds[j] = d * np.float32(_bits(v, 0, 15))
        ms[j] = dmin * np.float32(_bits(v, 4, 15))


@inline
def _fill_q3(raw, r, o, tbl, ds, ms):
    """ds[j] = d*scale_j and ms[j] = 4*ds[j] (the offset of q - 4) of the Q3_K block at byte o."""
    d = f16_at(raw, r, o + 108, tbl)
    for j in range(16):
        ds[j] = d * q3_scale(raw, r, o + 96, j)
        ms[j] = np.float32(4.0) * ds[j]


@inline
def _offset(ms, xs, i, g):
    s = np.float32(0.0)
    for j in range(16):
        s += ms[j] * xs[i, g + j]
    return s


@kernel
def q2_k_gemv(raw, x, out, tbl, lanes):
    """out[i, r] = dot(dequant(raw[r]), x[i]) for Q2_K; `lanes` = 16 at run time so LLVM keeps it inner."""
    rows = raw.shape[0]
    n, cols = x.shape
    xs = group_sums(x, lanes)  # [n, cols/16]
    for c in prange((rows + ROW_CHUNK - 1) // ROW_CHUNK):
        acc = np.empty((n, lanes), np.float32)  # [n, 16] lane accumulators
        mins = np.empty(n, np.float32)  # [n]
        ds = np.empty(16, np.float32)  # [16] d*scale per sub-block
        ms = np.empty(16, np.float32)  # [16] dmin*min per sub-block
        for r in range(c * ROW_CHUNK, min(rows, (c + 1) * ROW_CHUNK)):
            acc[:] = 0.0
            mins[:] = 0.0
            for b in range(cols // QK_K):
                o = b * Q2_K_BYTES
                _fill_q2(raw, r, o, tbl, ds, ms)
                for i in range(n):
                    mins[i] += _offset(ms, xs, i, b * 16)
                for h in range(2):
                    _pass_q2(raw, r, o + 16 + 32 * h, x, b * QK_K + 128 * h, ds, 8 * h, acc, lanes)
            for i in range(n):
                out[i, r] = acc[i].sum() - mins[i]


@kernel
def q3_k_gemv(raw, x, out, tbl, lanes):
    """out[i, r] = dot(dequant(raw[r]), x[i]) for Q3_K; `lanes` = 16 at run time so LLVM keeps it inner."""
    rows = raw.shape[0]
    n, cols = x.shape
    xs = group_sums(x, lanes)  # [n, cols/16]
    for c in prange((rows + ROW_CHUNK - 1) // ROW_CHUNK):
        acc = np.empty((n, lanes), np.float32)  # [n, 16] lane accumulators
        mins = np.empty(n, np.float32)  # [n]
        ds = np.empty(16, np.float32)  # [16] d*scale per sub-block
        ms = np.empty(16, np.float32)  # [16] 4*d*scale: the offset of q - 4 per unit of Σx
        for r in range(c * ROW_CHUNK, min(rows, (c + 1) * ROW_CHUNK)):
            acc[:] = 0.0
            mins[:] = 0.0
            for b in range(cols // QK_K):
                o = b * Q3_K_BYTES
                _fill_q3(raw, r, o, tbl, ds, ms)
                for i in range(n):
                    mins[i] += _offset(ms, xs, i, b * 16)
                for h in range(2):
                    _pass_q3(raw, r, o, o + 32 + 32 * h, x, b * QK_K + 128 * h, ds, 8 * h, acc, lanes)
            for i in range(n):
                out[i, r] = acc[i].sum() - mins[i]


@inline
def _pass_q2(raw, r, q, x, xb, ds, k, acc, lanes):
    """Accumulate half a Q2_K block (qs bytes at q, scales ds[k:k+8]) into acc for every vector."""
    d0, d1, d2, d3, d4, d5, d6, d7 = ds[k], ds[k + 1], ds[k + 2], ds[k + 3], ds[k + 4], ds[k + 5], ds[k + 6], ds[k + 7]
    for i in range(x.shape[0]):
        for l in range(lanes):
            c0 = np.int32(raw[r, q + l])
            c1 = np.int32(raw[r, q + 16 + l])
            acc[i, l] += (d0 * (x[i, xb + l] * np.float32(_bits(c0, 0, 3)))
                          + d1 * (x[i, xb + 16 + l] * np.float32(_bits(c1, 0, 3)))
                          + d2 * (x[i, xb + 32 + l] * np.float32(_bits(c0, 2, 3)))
                          + d3 * (x[i, xb + 48 + l] * np.float32(_bits(c1, 2, 3)))
                          + d4 * (x[i, xb + 64 + l] * np.float32(_bits(c0, 4, 3)))
                          + d5 * (x[i, xb + 80 + l] * np.float32(_bits(c1, 4, 3)))
                          + d6 * (x[i, xb + 96 + l] * np.float32(_bits(c0, 6, 3)))
                          + d7 * (x[i, xb + 112 + l] * np.float32(_bits(c1, 6, 3))))


@inline
def _pass_q3(raw, r, o, q, x, xb, ds, k, acc, lanes):
    """Accumulate half a Q3_K block (hmask at o, qs bytes at q, scales ds[k:k+8]) into acc."""
    d0, d1, d2, d3, d4, d5, d6, d7 = ds[k], ds[k + 1], ds[k + 2], ds[k + 3], ds[k + 4], ds[k + 5], ds[k + 6], ds[k + 7]
    hb = k >> 1  # hmask bit of the first 32 values of this half: 4*h
    for i in range(x.shape[0]):
        for l in range(lanes):
            c0 = np.int32(raw[r, q + l])
            c1 = np.int32(raw[r, q + 16 + l])
            h0 = np.int32(raw[r, o + l])
            h1 = np.int32(raw[r, o + 16 + l])
            acc[i, l] += (d0 * (x[i, xb + l] * _q3(c0, h0, 0, hb))
                          + d1 * (x[i, xb + 16 + l] * _q3(c1, h1, 0, hb))
                          + d2 * (x[i, xb + 32 + l] * _q3(c0, h0, 1, hb + 1))
                          + d3 * (x[i, xb + 48 + l] * _q3(c1, h1, 1, hb + 1))
                          + d4 * (x[i, xb + 64 + l] * _q3(c0, h0, 2, hb + 2))
                          + d5 * (x[i, xb + 80 + l] * _q3(c1, h1, 2, hb + 2))
                          + d6 * (x[i, xb + 96 + l] * _q3(c0, h0, 3, hb + 3))
                          + d7 * (x[i, xb + 112 + l] * _q3(c1, h1, 3, hb + 3)))


@exact
def q2_k_dequant(raw, out, tbl):
    """out[r] = dequant(raw[r]) for every Q2_K row, bit-exact with gguf.quants (no fused d*q - m)."""
    rows, cols = out.shape
    for r in prange(rows):
        ds = np.empty(16, np.float32)  # [16] d*scale per sub-block
        ms = np.empty(16, np.float32)  # [16] dmin*min per sub-block
        for b in range(cols // QK_K):
            o = b * Q2_K_BYTES
            _fill_q2(raw, r, o, tbl, ds, ms)
            for h in range(2):
                q = o + 16 + 32 * h
                e = b * QK_K + 128 * h
                d0, d1, d2, d3, d4, d5, d6, d7 = ds[8 * h:8 * h + 8]
                m0, m1, m2, m3, m4, m5, m6, m7 = ms[8 * h:8 * h + 8]
                for l in range(16):
                    c0 = np.int32(raw[r, q + l])
                    c1 = np.int32(raw[r, q + 16 + l])
                    out[r, e + l] = d0 * np.float32(_bits(c0, 0, 3)) - m0
                    out[r, e + 16 + l] = d1 * np.float32(_bits(c1, 0, 3)) - m1
                    out[r, e + 32 + l] = d2 * np.float32(_bits(c0, 2, 3)) - m2
                    out[r, e + 48 + l] = d3 * np.float32(_bits(c1, 2, 3)) - m3
                    out[r, e + 64 + l] = d4 * np.float32(_bits(c0, 4, 3)) - m4
                    out[r, e + 80 + l] = d5 * np.float32(_bits(c1, 4, 3)) - m5
                    out[r, e + 96 + l] = d6 * np.float32(_bits(c0, 6, 3)) - m6
                    out[r, e + 112 + l] = d7 * np.float32(_bits(c1, 6, 3)) - m7


@exact
def q3_k_dequant(raw, out, tbl):
    """out[r] = dequant(raw[r]) for every Q3_K row, bit-exact with gguf.quants."""
    rows, cols = out.shape
    for r in prange(rows):
        ds = np.empty(16, np.float32)  # [16] d*scale per sub-block
        ms = np.empty(16, np.float32)  # [16] unused here: 4*d*scale
        for b in range(cols // QK_K):
            o = b * Q3_K_BYTES
            _fill_q3(raw, r, o, tbl, ds, ms)
            for h in range(2):
                q = o + 32 + 32 * h
                e = b * QK_K + 128 * h
                for k in range(4):
                    d0, d1 = ds[8 * h + 2 * k], ds[8 * h + 2 * k + 1]
                    for l in range(16):
                        v0 = _q3(np.int32(raw[r, q + l]), np.int32(raw[r, o + l]), k, 4 * h + k)
                        v1 = _q3(np.int32(raw[r, q + 16 + l]), np.int32(raw[r, o + 16 + l]), k, 4 * h + k)
                        out[r, e + 32 * k + l] = d0 * (v0 - np.float32(4.0))
                        out[r, e + 32 * k + 16 + l] = d1 * (v1 - np.float32(4.0))
