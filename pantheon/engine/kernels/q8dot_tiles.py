"""Prefill kernels (n >= 8 vectors) that unpack a chunk of weight rows once into scratch, then tile 8 vectors.

Unpacking each weight group once per 8 vectors (the former 8-vector kernels) redid it 16 times per row
at n = 128, with the nibble shifts, 6-bit scale decoding and scale products in the inner loop. Here
each task unpacks its CHUNK rows once into u8 quants in activation order plus float32 scales (tens of
KiB, cache-resident; the weights stay zero-copy views of the file). The dot loop then takes two rows
against 8 vectors (16 accumulators, each activation load serving both rows) and reads every
weight-times-activation scale as a broadcast load from a small table instead of a lane shuffle.
Per (row, vector) the float operations are the 1-vector kernels' in the same order: bit-identical.
"""

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from numba import prange

from pantheon.engine.kernels.jit import exact, inline
from pantheon.engine.kernels.simd import (PREFETCH_BYTES, bits32, dot4, flip_sign, fma_at, fma_lanes, fzero, half_at,
                                          hsum, lane, load8, load32, nibbles16, prefetch, scale_lanes, store8, store32)

QK = 32
Q4_0_BYTES = GGML_QUANT_SIZES[GGMLQuantizationType.Q4_0][1]
Q8_0_BYTES = GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0][1]
# Rows unpacked per prange task: 16 rows of a 5632-column matrix are 88 KiB of quants (L2), and
# 16 rows give each 8-vector activation tile enough reuse to stay in L1.
CHUNK = 16


@inline
def _unpack_q4_0(raw, r, q, ds, dm):
    """Row r of Q4_0 -> q u8 [cols] (0..15), ds = dm = d per 32 quants."""
    row = raw[r]  # [row_bytes]
    for b in range(q.shape[0] // QK):
        prefetch(row, b * Q4_0_BYTES + PREFETCH_BYTES)
        d = half_at(row, b * Q4_0_BYTES)
        ds[b], dm[b] = d, d
        store32(q, b * QK, nibbles16(row, b * Q4_0_BYTES + 2))


@inline
def _unpack_q8_0(raw, r, q, ds):
    """Row r of Q8_0 -> q u8 [cols] (q + 128, vpdpbusd's unsigned side), ds = d per 32 quants."""
    row = raw[r]  # [row_bytes]
    for b in range(q.shape[0] // QK):
        prefetch(row, b * Q8_0_BYTES + PREFETCH_BYTES)
        ds[b] = half_at(row, b * Q8_0_BYTES)
        store32(q, b * QK, flip_sign(bits32(row, b * Q8_0_BYTES + 2, 0, 255)))


@inline
def _scales32(tbl, t0, xdt, i, ds, rr):
    """tbl[t0 + 8g + k] = ds[rr, g]·xd[i + k, g]: a row's scales for the dot loop's broadcast loads."""
    for g in range(ds.shape[1]):
        store8(tbl, t0 + g * 16, scale_lanes(load8(xdt[g], i), ds[rr, g]))


@inline
def _pair32(q, ds, dm, rr, r0, xq, i, xdt, xst, tbl, out, zero):
    """Rows rr, rr + 1 against vectors i..i+7: each activation load serves two rows (16 accumulators)."""
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    x4, x5, x6, x7 = xq[i + 4], xq[i + 5], xq[i + 6], xq[i + 7]  # [cols] int8 bytes each
    qa, qb = q[rr], q[rr + 1]  # [cols] unpacked quants each
    _scales32(tbl, 0, xdt, i, ds, rr)
    _scales32(tbl, 8, xdt, i, ds, rr + 1)
    a0, a1, a2, a3, a4, a5, a6, a7, oa = fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero()
    b0, b1, b2, b3, b4, b5, b6, b7, ob = fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero(), fzero()
    for g in range(ds.shape[1]):
        wa, wb, xo, t = load32(qa, g * QK), load32(qb, g * QK), g * QK, g * 16
        y0, y1, y2, y3 = bits32(x0, xo, 0, 255), bits32(x1, xo, 0, 255), bits32(x2, xo, 0, 255), bits32(x3, xo, 0, 255)
        a0, b0 = fma_at(a0, dot4(wa, y0), tbl, t), fma_at(b0, dot4(wb, y0), tbl, t + 8)
        a1, b1 = fma_at(a1, dot4(wa, y1), tbl, t + 1), fma_at(b1, dot4(wb, y1), tbl, t + 9)
        a2, b2 = fma_at(a2, dot4(wa, y2), tbl, t + 2), fma_at(b2, dot4(wb, y2), tbl, t + 10)
        a3, b3 = fma_at(a3, dot4(wa, y3), tbl, t + 3), fma_at(b3, dot4(wb, y3), tbl, t + 11)
        y0, y1, y2, y3 = bits32(x4, xo, 0, 255), bits32(x5, xo, 0, 255), bits32(x6, xo, 0, 255), bits32(x7, xo, 0, 255)
        a4, b4 = fma_at(a4, dot4(wa, y0), tbl, t + 4), fma_at(b4, dot4(wb, y0), tbl, t + 12)
        a5, b5 = fma_at(a5, dot4(wa, y1), tbl, t + 5), fma_at(b5, dot4(wb, y1), tbl, t + 13)
        a6, b6 = fma_at(a6, dot4(wa, y2), tbl, t + 6), fma_at(b6, dot4(wb, y2), tbl, t + 14)
        a7, b7 = fma_at(a7, dot4(wa, y3), tbl, t + 7), fma_at(b7, dot4(wb, y3), tbl, t + 15)
        xs8 = load8(xst[g], i)
        oa, ob = fma_lanes(oa, xs8, dm[rr, g]), fma_lanes(ob, xs8, dm[rr + 1, g])
    for k, (a, b) in enumerate(((a0, b0), (a1, b1), (a2, b2), (a3, b3), (a4, b4), (a5, b5), (a6, b6), (a7, b7))):
        out[i + k, r0 + rr] = hsum(a) - zero * lane(oa, k)
        out[i + k, r0 + rr + 1] = hsum(b) - zero * lane(ob, k)


@inline
def _one32(q, ds, dm, rr, r0, xq, i, xdt, xst, tbl, out, zero):
    """Row rr alone against vectors i..i+7 (the odd row of a ragged chunk)."""
    qr = q[rr]  # [cols] unpacked quants
    _scales32(tbl, 0, xdt, i, ds, rr)
    a0, a1, a2, a3, off = fzero(), fzero(), fzero(), fzero(), fzero()
    a4, a5, a6, a7 = fzero(), fzero(), fzero(), fzero()
    for g in range(ds.shape[1]):
        w, xo, t = load32(qr, g * QK), g * QK, g * 16
        a0 = fma_at(a0, dot4(w, bits32(xq[i], xo, 0, 255)), tbl, t)
        a1 = fma_at(a1, dot4(w, bits32(xq[i + 1], xo, 0, 255)), tbl, t + 1)
        a2 = fma_at(a2, dot4(w, bits32(xq[i + 2], xo, 0, 255)), tbl, t + 2)
        a3 = fma_at(a3, dot4(w, bits32(xq[i + 3], xo, 0, 255)), tbl, t + 3)
        a4 = fma_at(a4, dot4(w, bits32(xq[i + 4], xo, 0, 255)), tbl, t + 4)
        a5 = fma_at(a5, dot4(w, bits32(xq[i + 5], xo, 0, 255)), tbl, t + 5)
        a6 = fma_at(a6, dot4(w, bits32(xq[i + 6], xo, 0, 255)), tbl, t + 6)
        a7 = fma_at(a7, dot4(w, bits32(xq[i + 7], xo, 0, 255)), tbl, t + 7)
        off = fma_lanes(off, load8(xst[g], i), dm[rr, g])
    for k, a in enumerate((a0, a1, a2, a3, a4, a5, a6, a7)):
        out[i + k, r0 + rr] = hsum(a) - zero * lane(off, k)


@inline
def _tiles32(q, ds, dm, nrows, r0, xq, xdt, xst, out, zero):
    """Every 8-vector tile against the unpacked rows, two rows at a time; out = Σ - zero·Σ dm·xs."""
    tbl = np.empty(ds.shape[1] * 16, np.float32)  # [groups * 16] ds·xd of two rows and 8 vectors
    for i in range(0, xq.shape[0], 8):
        for rr in range(0, nrows - 1, 2):
            _pair32(q, ds, dm, rr, r0, xq, i, xdt, xst, tbl, out, zero)
        if nrows % 2:
            _one32(q, ds, dm, nrows - 1, r0, xq, i, xdt, xst, tbl, out, zero)


@exact
def q4_0_tiles(raw, xq, xdt, xst, out):
    """q4_0 for n a multiple of 8 (xdt, xst [cols/32, n]): rows unpacked once per task."""
    rows, cols = raw.shape[0], xq.shape[1]
    for c in prange((rows + CHUNK - 1) // CHUNK):
        r0, nr = c * CHUNK, min(rows, (c + 1) * CHUNK) - c * CHUNK
        q = np.empty((CHUNK, cols), np.uint8)  # [chunk, cols] quants in activation order
        ds = np.empty((CHUNK, cols // QK), np.float32)  # [chunk, cols/32] d
        for rr in range(nr):
            _unpack_q4_0(raw, r0 + rr, q[rr], ds[rr], ds[rr])
        _tiles32(q, ds, ds, nr, r0, xq, xdt, xst, out, np.float32(8.0))


@exact
def q8_0_tiles(raw, xq, xdt, xst, out):
    """q8_0 for n a multiple of 8 (xdt, xst [cols/32, n]): rows unpacked once per task."""
    rows, cols = raw.shape[0], xq.shape[1]
    for c in prange((rows + CHUNK - 1) // CHUNK):
        r0, nr = c * CHUNK, min(rows, (c + 1) * CHUNK) - c * CHUNK
        q = np.empty((CHUNK, cols), np.uint8)  # [chunk, cols] quants + 128 in activation order
        ds = np.empty((CHUNK, cols // QK), np.float32)  # [chunk, cols/32] d
        for rr in range(nr):
            _unpack_q8_0(raw, r0 + rr, q[rr], ds[rr])
        _tiles32(q, ds, ds, nr, r0, xq, xdt, xst, out, np.float32(128.0))
