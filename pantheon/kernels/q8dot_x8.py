"""8-vector tiles of the int8-activation kernels (q8dot.py) for prefill: 8 accumulators per unpacked block.

Each repeats the 1-vector kernel's operations per (row, vector) in the same order, so outputs match
it to the bit; only the weight unpacking and the scale loads are shared across the 8 vectors.
"""

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from numba import prange

from pantheon.kernels.jit import exact
from pantheon.kernels.kblocks import QK_K, scale_min_k4
from pantheon.kernels.simd import (bits32, dot4, field, fma_lane, fma_lane2, fma_lanes, fzero, half_at, hsum, lane,
                                   load8, load32, mul, nibbles16, or_shl4, scale_lanes)

QK = 32
Q4_0_BYTES = GGML_QUANT_SIZES[GGMLQuantizationType.Q4_0][1]
Q4_K_BYTES = GGML_QUANT_SIZES[GGMLQuantizationType.Q4_K][1]
Q6_K_BYTES = GGML_QUANT_SIZES[GGMLQuantizationType.Q6_K][1]
# Rows per prange task, as in q8dot.
CHUNK = 16


@exact
def q4_0_x8(raw, xq, xdt, xst, out):
    """q4_0 for n a multiple of 8 (prefill): 8 accumulators per unpacked block, 10 % over 4 (Zen 4)."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(0, n, 8):
            x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
            x4, x5, x6, x7 = xq[i + 4], xq[i + 5], xq[i + 6], xq[i + 7]  # [cols] int8 bytes each
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                a0, a1, a2, a3, off = fzero(), fzero(), fzero(), fzero(), fzero()
                a4, a5, a6, a7 = fzero(), fzero(), fzero(), fzero()
                for b in range(nb):
                    d, xo = half_at(row, b * Q4_0_BYTES), b * QK
                    w = nibbles16(row, b * Q4_0_BYTES + 2)
                    s = scale_lanes(load8(xdt[b], i), d)
                    a0 = fma_lane(a0, dot4(w, bits32(x0, xo, 0, 255)), s, 0)
                    a1 = fma_lane(a1, dot4(w, bits32(x1, xo, 0, 255)), s, 1)
                    a2 = fma_lane(a2, dot4(w, bits32(x2, xo, 0, 255)), s, 2)
                    a3 = fma_lane(a3, dot4(w, bits32(x3, xo, 0, 255)), s, 3)
                    a4 = fma_lane(a4, dot4(w, bits32(x4, xo, 0, 255)), s, 4)
                    a5 = fma_lane(a5, dot4(w, bits32(x5, xo, 0, 255)), s, 5)
                    a6 = fma_lane(a6, dot4(w, bits32(x6, xo, 0, 255)), s, 6)
                    a7 = fma_lane(a7, dot4(w, bits32(x7, xo, 0, 255)), s, 7)
                    off = fma_lanes(off, load8(xst[b], i), d)
                for k, a in enumerate((a0, a1, a2, a3, a4, a5, a6, a7)):
                    out[i + k, r] = hsum(a) - np.float32(8.0) * lane(off, k)


@exact
def q4_k_x8(raw, xq, xdt, xst, out):
    """q4_k for n a multiple of 8: each unpacked 32-quant group meets 8 vectors (xdt, xst [groups, n])."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK_K
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(0, n, 8):
            x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
            x4, x5, x6, x7 = xq[i + 4], xq[i + 5], xq[i + 6], xq[i + 7]  # [cols] int8 bytes each
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                a0, a1, a2, a3, mins = fzero(), fzero(), fzero(), fzero(), fzero()
                a4, a5, a6, a7 = fzero(), fzero(), fzero(), fzero()
                for b in range(nb):
                    o = b * Q4_K_BYTES
                    d, dmin = half_at(row, o), half_at(row, o + 2)
                    for p in range(4):
                        for h in range(2):
                            sc, m = scale_min_k4(raw, r, o + 4, 2 * p + h)
                            g = b * 8 + 2 * p + h
                            q, xo = bits32(row, o + 16 + 32 * p, 4 * h, 15), g * QK
                            s = scale_lanes(load8(xdt[g], i), mul(d, sc))
                            a0 = fma_lane(a0, dot4(q, bits32(x0, xo, 0, 255)), s, 0)
                            a1 = fma_lane(a1, dot4(q, bits32(x1, xo, 0, 255)), s, 1)
                            a2 = fma_lane(a2, dot4(q, bits32(x2, xo, 0, 255)), s, 2)
                            a3 = fma_lane(a3, dot4(q, bits32(x3, xo, 0, 255)), s, 3)
                            a4 = fma_lane(a4, dot4(q, bits32(x4, xo, 0, 255)), s, 4)
                            a5 = fma_lane(a5, dot4(q, bits32(x5, xo, 0, 255)), s, 5)
                            a6 = fma_lane(a6, dot4(q, bits32(x6, xo, 0, 255)), s, 6)
                            a7 = fma_lane(a7, dot4(q, bits32(x7, xo, 0, 255)), s, 7)
                            mins = fma_lanes(mins, load8(xst[g], i), mul(dmin, m))
                for k, a in enumerate((a0, a1, a2, a3, a4, a5, a6, a7)):
                    out[i + k, r] = hsum(a) - lane(mins, k)


@exact
def q6_k_x8(raw, xq, xdt, xst, out):
    """q6_k for n a multiple of 8 (xdt [cols/32, n], xst [cols/16, n])."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK_K
    sc = raw.view(np.int8)  # [rows, row_bytes] the same bytes, signed, for the scales
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(0, n, 8):
            x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
            x4, x5, x6, x7 = xq[i + 4], xq[i + 5], xq[i + 6], xq[i + 7]  # [cols] int8 bytes each
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                a0, a1, a2, a3, off = fzero(), fzero(), fzero(), fzero(), fzero()
                a4, a5, a6, a7 = fzero(), fzero(), fzero(), fzero()
                for b in range(nb):
                    o = b * Q6_K_BYTES
                    d = half_at(row, o + 208)
                    for h in range(2):
                        hv = load32(row, o + 128 + 32 * h)  # [32] high 2-bit fields
                        lv0, lv1 = load32(row, o + 64 * h), load32(row, o + 64 * h + 32)  # [32] low nibbles each
                        for kk in range(4):
                            k = 4 * h + kk
                            g, xo = b * 16 + 2 * k, (b * 16 + 2 * k) * 16
                            s0 = mul(d, np.float32(sc[r, o + 192 + 2 * k]))
                            s1 = mul(d, np.float32(sc[r, o + 193 + 2 * k]))
                            q = or_shl4(field(lv0 if kk % 2 == 0 else lv1, 4 * (kk // 2), 15), field(hv, 2 * kk, 3))
                            xd8 = load8(xdt[g // 2], i)
                            t0, t1 = scale_lanes(xd8, s0), scale_lanes(xd8, s1)
                            a0 = fma_lane2(a0, dot4(q, bits32(x0, xo, 0, 255)), t0, t1, 0)
                            a1 = fma_lane2(a1, dot4(q, bits32(x1, xo, 0, 255)), t0, t1, 1)
                            a2 = fma_lane2(a2, dot4(q, bits32(x2, xo, 0, 255)), t0, t1, 2)
                            a3 = fma_lane2(a3, dot4(q, bits32(x3, xo, 0, 255)), t0, t1, 3)
                            a4 = fma_lane2(a4, dot4(q, bits32(x4, xo, 0, 255)), t0, t1, 4)
                            a5 = fma_lane2(a5, dot4(q, bits32(x5, xo, 0, 255)), t0, t1, 5)
                            a6 = fma_lane2(a6, dot4(q, bits32(x6, xo, 0, 255)), t0, t1, 6)
                            a7 = fma_lane2(a7, dot4(q, bits32(x7, xo, 0, 255)), t0, t1, 7)
                            off = fma_lanes(fma_lanes(off, load8(xst[g], i), s0), load8(xst[g + 1], i), s1)
                for k, a in enumerate((a0, a1, a2, a3, a4, a5, a6, a7)):
                    out[i + k, r] = hsum(a) - np.float32(32.0) * lane(off, k)
