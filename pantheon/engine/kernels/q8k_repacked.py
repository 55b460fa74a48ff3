"""Q4_K / Q6_K products on repacked weights (kernels.repack) with Q8_K activations: every batch size.

A task's super-block holds its 32 rows' nibble words row-interleaved, their scales and mins one byte
per row, then d and dmin. Per 16 rows and 4 vectors: one 64-byte load gives a quant word of 16 rows,
split into its low nibbles (sub-block 2p) and high ones (2p + 1), each one vpdpbusd per vector; a
sub-block pair's exact dots are multiplied by the rows' scales (vpmulld), the mins by the vectors'
activation sums per 32, and each super-block ends with q8k_lanes' two fmas:
acc = fma(float(I), d·xd, acc), acc = fma(float(M), −(dmin·xd), acc). The same integers and float
operations as the zero-copy kernels, so results are bit-equal to them at every batch size.
"""

import numpy as np
from gguf import GGMLQuantizationType as T
from numba import prange

from pantheon.engine.kernels.jit import exact, inline
from pantheon.engine.kernels.kblocks import QK_K
from pantheon.engine.kernels.q8dot_repacked import stream_ahead
from pantheon.engine.kernels.q8dot_tiles import put_rows
from pantheon.engine.kernels.repack import LAYOUTS, ROWS
from pantheon.engine.kernels.simd512 import izero16, store16
from pantheon.engine.kernels.simd_lanes import (bload16, fload16, fma16h, fnma16h, hi16, imac16, imacs16, lo16,
                                                sbload16, six_a, six_b, six_c, six_d, vdot16, wload16)

# Bytes of one super-block of a task's 32 rows, and where its fields start: Q4_K, then Q6_K.
GB = LAYOUTS[T.Q4_K][2] * ROWS
SC, MN, D, DM = 4096, 4096 + 8 * ROWS, 4096 + 16 * ROWS, 4096 + 16 * ROWS + 2 * ROWS
GB6 = LAYOUTS[T.Q6_K][2] * ROWS
QH6, SC6, D6 = 4096, 6144, 6144 + 16 * ROWS
# Bytes of one quant word of all 32 rows.
WORD = 4 * ROWS


@inline
def _msum(bs16, i, b, j):
    """Σxq over sub-block j (32 values) of super-block b of vector i: the two per-16 sums."""
    return np.int32(bs16[i, 16 * b + 2 * j]) + np.int32(bs16[i, 16 * b + 2 * j + 1])


@inline
def _finish(acc, at, isum, msum, row, o, g, xd):
    """acc[at:at+16] after one super-block of one vector: the scaled sums' fma, then the mins'."""
    a = fma16h(fload16(acc, at), isum, row, o + D + 32 * g, xd)
    store16(acc, at, fnma16h(a, msum, row, o + DM + 32 * g, xd))


@inline
def _four(p, t, g, xq, xd, bs16, i, b, acc):
    """Vectors i..i+3 against rows 16g..16g+15 of task t over super-block b."""
    row, o, h = p[t], b * GB, 64 * g
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    i0, i1, i2, i3 = izero16(), izero16(), izero16(), izero16()
    for pr in range(4):
        c0, c1, c2, c3 = izero16(), izero16(), izero16(), izero16()
        f0, f1, f2, f3 = izero16(), izero16(), izero16(), izero16()
        for w in range(8):
            v = wload16(row, o + (pr * 8 + w) * WORD + h)
            lo, hi, xo = lo16(v), hi16(v), b * QK_K + 64 * pr + 4 * w
            c0, c1 = vdot16(c0, lo, x0, xo), vdot16(c1, lo, x1, xo)
            c2, c3 = vdot16(c2, lo, x2, xo), vdot16(c3, lo, x3, xo)
            xo += 32
            f0, f1 = vdot16(f0, hi, x0, xo), vdot16(f1, hi, x1, xo)
            f2, f3 = vdot16(f2, hi, x2, xo), vdot16(f3, hi, x3, xo)
        s0, s1 = bload16(row, o + SC + 2 * pr * ROWS + 16 * g), bload16(row, o + SC + (2 * pr + 1) * ROWS + 16 * g)
        i0, i1 = imac16(imac16(i0, c0, s0), f0, s1), imac16(imac16(i1, c1, s0), f1, s1)
        i2, i3 = imac16(imac16(i2, c2, s0), f2, s1), imac16(imac16(i3, c3, s0), f3, s1)
    m0, m1, m2, m3 = izero16(), izero16(), izero16(), izero16()
    for j in range(8):
        mn = bload16(row, o + MN + j * ROWS + 16 * g)
        m0, m1 = imacs16(m0, mn, _msum(bs16, i, b, j)), imacs16(m1, mn, _msum(bs16, i + 1, b, j))
        m2, m3 = imacs16(m2, mn, _msum(bs16, i + 2, b, j)), imacs16(m3, mn, _msum(bs16, i + 3, b, j))
    for k, (isum, msum) in enumerate(((i0, m0), (i1, m1), (i2, m2), (i3, m3))):
        _finish(acc, 32 * (i + k) + 16 * g, isum, msum, row, o, g, xd[i + k, b])


@inline
def _one(p, t, g, xq, xd, bs16, i, b, acc):
    """`_four` for the single vector i."""
    row, o, h, x0, i0, m0 = p[t], b * GB, 64 * g, xq[i], izero16(), izero16()
    for pr in range(4):
        c0, f0 = izero16(), izero16()
        for w in range(8):
            v = wload16(row, o + (pr * 8 + w) * WORD + h)
            xo = b * QK_K + 64 * pr + 4 * w
            c0, f0 = vdot16(c0, lo16(v), x0, xo), vdot16(f0, hi16(v), x0, xo + 32)
        s0, s1 = bload16(row, o + SC + 2 * pr * ROWS + 16 * g), bload16(row, o + SC + (2 * pr + 1) * ROWS + 16 * g)
        i0 = imac16(imac16(i0, c0, s0), f0, s1)
    for j in range(8):
        m0 = imacs16(m0, bload16(row, o + MN + j * ROWS + 16 * g), _msum(bs16, i, b, j))
    _finish(acc, 32 * i + 16 * g, i0, m0, row, o, g, xd[i, b])


@inline
def _finish6(acc, at, isum, msum, row, o, g, xd):
    """`_finish` for Q6_K: the offset 32 as a min of 32·scale per 16 values, with dmin = d."""
    a = fma16h(fload16(acc, at), isum, row, o + D6 + 32 * g, xd)
    store16(acc, at, fnma16h(a, imacs16(izero16(), msum, 32), row, o + D6 + 32 * g, xd))


@inline
def _mins6(row, o, g, bs16, i, b):
    """Σ_j scale_j · Σxq_j over the 16 per-16 groups of super-block b, vector i: 16 rows' lanes."""
    m = izero16()
    for j in range(16):
        m = imacs16(m, sbload16(row, o + SC6 + j * ROWS + 16 * g), bs16[i, 16 * b + j])
    return m


@inline
def _four6(p, t, g, xq, xd, bs16, i, b, acc):
    """Q6_K vectors i..i+3 against rows 16g..16g+15 of task t over super-block b: per quarter (16 byte
    positions l of a half) the four value groups l, l+32, l+64, l+96 of 16 rows, each scaled once."""
    row, o, h = p[t], b * GB6, 64 * g
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    i0, i1, i2, i3 = izero16(), izero16(), izero16(), izero16()
    for half in range(2):
        for q in range(2):
            a0, a1, a2, a3 = izero16(), izero16(), izero16(), izero16()
            b0, b1, b2, b3 = izero16(), izero16(), izero16(), izero16()
            c0, c1, c2, c3 = izero16(), izero16(), izero16(), izero16()
            d0, d1, d2, d3 = izero16(), izero16(), izero16(), izero16()
            for w in range(4 * q, 4 * q + 4):
                ql = wload16(row, o + (16 * half + w) * WORD + h)
                qm = wload16(row, o + (16 * half + 8 + w) * WORD + h)
                qh = wload16(row, o + QH6 + (8 * half + w) * WORD + h)
                xo = b * QK_K + 128 * half + 4 * w
                v = six_a(ql, qh)
                a0, a1 = vdot16(a0, v, x0, xo), vdot16(a1, v, x1, xo)
                a2, a3 = vdot16(a2, v, x2, xo), vdot16(a3, v, x3, xo)
                v, xo = six_b(qm, qh), xo + 32
                b0, b1 = vdot16(b0, v, x0, xo), vdot16(b1, v, x1, xo)
                b2, b3 = vdot16(b2, v, x2, xo), vdot16(b3, v, x3, xo)
                v, xo = six_c(ql, qh), xo + 32
                c0, c1 = vdot16(c0, v, x0, xo), vdot16(c1, v, x1, xo)
                c2, c3 = vdot16(c2, v, x2, xo), vdot16(c3, v, x3, xo)
                v, xo = six_d(qm, qh), xo + 32
                d0, d1 = vdot16(d0, v, x0, xo), vdot16(d1, v, x1, xo)
                d2, d3 = vdot16(d2, v, x2, xo), vdot16(d3, v, x3, xo)
            at = o + SC6 + (8 * half + q) * ROWS + 16 * g
            sa, sb = sbload16(row, at), sbload16(row, at + 2 * ROWS)
            sc, sd = sbload16(row, at + 4 * ROWS), sbload16(row, at + 6 * ROWS)
            i0 = imac16(imac16(imac16(imac16(i0, a0, sa), b0, sb), c0, sc), d0, sd)
            i1 = imac16(imac16(imac16(imac16(i1, a1, sa), b1, sb), c1, sc), d1, sd)
            i2 = imac16(imac16(imac16(imac16(i2, a2, sa), b2, sb), c2, sc), d2, sd)
            i3 = imac16(imac16(imac16(imac16(i3, a3, sa), b3, sb), c3, sc), d3, sd)
    for k, isum in enumerate((i0, i1, i2, i3)):
        _finish6(acc, 32 * (i + k) + 16 * g, isum, _mins6(row, o, g, bs16, i + k, b), row, o, g, xd[i + k, b])


@inline
def _one6(p, t, g, xq, xd, bs16, i, b, acc):
    """`_four6` for the single vector i."""
    row, o, h, x0, i0 = p[t], b * GB6, 64 * g, xq[i], izero16()
    for half in range(2):
        for q in range(2):
            a0, b0, c0, d0 = izero16(), izero16(), izero16(), izero16()
            for w in range(4 * q, 4 * q + 4):
                ql = wload16(row, o + (16 * half + w) * WORD + h)
                qm = wload16(row, o + (16 * half + 8 + w) * WORD + h)
                qh = wload16(row, o + QH6 + (8 * half + w) * WORD + h)
                xo = b * QK_K + 128 * half + 4 * w
                a0, b0 = vdot16(a0, six_a(ql, qh), x0, xo), vdot16(b0, six_b(qm, qh), x0, xo + 32)
                c0, d0 = vdot16(c0, six_c(ql, qh), x0, xo + 64), vdot16(d0, six_d(qm, qh), x0, xo + 96)
            at = o + SC6 + (8 * half + q) * ROWS + 16 * g
            i0 = imac16(imac16(i0, a0, sbload16(row, at)), b0, sbload16(row, at + 2 * ROWS))
            i0 = imac16(imac16(i0, c0, sbload16(row, at + 4 * ROWS)), d0, sbload16(row, at + 6 * ROWS))
    _finish6(acc, 32 * i + 16 * g, i0, _mins6(row, o, g, bs16, i, b), row, o, g, xd[i, b])


@inline
def _task(six, p, t, rows, xq, xd, bs16, out, acc, tmp):
    """Task t's rows (Q6_K when `six`, else Q4_K) for every vector, super-block by super-block (each in
    L1 while every vector passes it), the task's stream from memory prefetched on the first pass."""
    n, gb = xq.shape[0], GB6 if six else GB
    acc[:] = 0.0
    for b in range(xd.shape[1]):
        stream_ahead(p[t], b * gb, gb, True)
        for g in range(2):
            for i in range(0, n - n % 4, 4):
                if six:
                    _four6(p, t, g, xq, xd, bs16, i, b, acc)
                else:
                    _four(p, t, g, xq, xd, bs16, i, b, acc)
            for i in range(n - n % 4, n):
                if six:
                    _one6(p, t, g, xq, xd, bs16, i, b, acc)
                else:
                    _one(p, t, g, xq, xd, bs16, i, b, acc)
    nr = min(rows, (t + 1) * ROWS) - t * ROWS
    for i in range(n):
        put_rows(out[i], t * ROWS, 0, fload16(acc, 32 * i), nr, tmp)
        put_rows(out[i], t * ROWS, 16, fload16(acc, 32 * i + 16), nr, tmp)


@inline
def _products(six, p, rows, xq, xd, bs16, out, threads):
    """out [n, rows]: each of `threads` workers streams one contiguous run of tasks."""
    tasks, n = p.shape[0], xq.shape[0]
    workers = max(1, min(tasks, threads))
    per = -(-tasks // workers)
    for wk in prange(workers):
        acc = np.empty(n * ROWS, np.float32)  # [n, 32] row-lane accumulators of the task
        tmp = np.empty(16, np.float32)  # [16] one ragged row group
        for t in range(wk * per, min(tasks, (wk + 1) * per)):
            _task(six, p, t, rows, xq, xd, bs16, out, acc, tmp)


@exact
def q4_k_repacked(p, rows, xq, xd, bs16, out, threads):
    """out[i, r] for repacked Q4_K rows p (rows of them) and Q8_K vectors xq (scales xd, sums bs16)."""
    _products(False, p, rows, xq, xd, bs16, out, threads)


@exact
def q6_k_repacked(p, rows, xq, xd, bs16, out, threads):
    """out[i, r] for repacked Q6_K rows (quants 0..63; the offset 32 folded out as a min, as q8k_tiles does)."""
    _products(True, p, rows, xq, xd, bs16, out, threads)
