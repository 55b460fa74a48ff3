"""Q4_K / Q5_K / Q6_K products on repacked weights (kernels.repack) with Q8_K activations: every batch size.

A task's super-block holds its 32 rows' packed scale bytes, d and dmin (decoded into L1 once per
super-block, simd_lanes.k4_planes), then their nibble words row-interleaved. Per 16 rows and 4 vectors:
one 64-byte load gives a quant word of 16 rows, split into its low nibbles (sub-block 2p) and high ones
(2p + 1), each one vpdpbusd per vector; a sub-block pair's exact dots are multiplied by the rows' scales
(vpmulld), the mins by the vectors' activation sums per 32 (AVX2 hosts: vpmaddubsw pair sums added in
int16 over a run of words, then one vpmaddwd by the scales, kernels.vnni.pairs), and each super-block
ends with q8k_lanes' two fmas: acc = fma(float(I), d·xd, acc), acc = fma(float(M), −(dmin·xd), acc). The
mins' sums come from vpdpwssd (two scale·Σxq products per lane), and on VNNI hosts Q6_K passes eight
vectors at once, each 6-bit word assembled once for the eight (AVX2 hosts tile Q6_K batches from 2
vectors, TILED_FROM6_AVX2). The same integers and float operations as the zero-copy kernels, so results
are bit-equal to them at every batch size. From TILED_FROM vectors on (Q6_K on AVX2: from 2), tasks go
through q8k_repacked_tiles instead; the layout's offsets are in q8k_repacked_layout.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.jit import exact, exact_serial, inline
from pantheon.engine.kernels.kblocks import QK_K
from pantheon.engine.kernels.q8dot_repacked import stream_ahead
from pantheon.engine.kernels.q8dot_tiles import put_rows
from pantheon.engine.kernels.q8k_repacked_layout import (D6, D_BYTES, GB, GB5, GB6, KD, MN, SC, SC6, WORD, qs_at,
                                                         quants, word6, words6)
from pantheon.engine.kernels.q8k_repacked_tiles import tiled
from pantheon.engine.kernels.repack import ROWS
from pantheon.engine.kernels.simd512 import izero16, store16
from pantheon.engine.kernels.simd_lanes import (bload16, dup16, fload16, fma16h, fnma16h, imacs16, k4_planes, pdot16,
                                                pmac16, pwords16, sbload16, six16, six_top16, spair16, wdot16, wload16)
from pantheon.engine.kernels.steal import claim, counters, run_of

# From this many vectors on (prefill), a task is unpacked once into q8k_lanes' tile of 8-bit quants and
# its passes are vpdpbusd alone: splitting nibbles and scaling per pass of 4 vectors cost more there
# (Q6_K 5632x2048, 128 vectors: 8.2 ms against 6.9 for the zero-copy tiles).
TILED_FROM = 16
# Q6_K's on AVX2 hosts, where int16 pair sums end every 2 words (kernels.vnni.pair_words) and the 4- and
# 8-vector passes lose to the tile from 2 vectors on (32000x2048 from DRAM, 2 threads, Zen 3: 2 vectors
# 5.15 -> 4.23 ms, 3: 5.65 -> 5.08, 6: 8.67 -> 6.80, 8: 7.84 -> 7.15, 12: 13.28 -> 10.79; 4: 6.70 / 6.63).
# Q4_K at 8 vectors stays faster in its passes (6.10 against 6.88 tiled); VNNI hosts keep TILED_FROM.
TILED_FROM6_AVX2 = 2


@inline
def _finish(acc, at, isum, msum, ks, g, xd):
    """acc[at:at+16] after one super-block of one vector (ks: its decoded header): the scaled sums'
    fma, then the mins'."""
    a = fma16h(fload16(acc, at), isum, ks, KD + 32 * g, xd)
    store16(acc, at, fnma16h(a, msum, ks, KD + D_BYTES + 32 * g, xd))


@inline
def _four(five, p, t, g, xq, xd, bs16, i, b, acc, ks):
    """Vectors i..i+3 against rows 16g..16g+15 of task t over super-block b (Q5_K when `five`; ks: its
    scales and mins decoded, simd_lanes.k4_planes)."""
    row, o, h = p[t], b * (GB5 if five else GB), 64 * g
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    i0, i1, i2, i3, step = izero16(), izero16(), izero16(), izero16(), pwords16(5 if five else 4)
    for pr in range(4):
        s0, s1 = bload16(ks, 2 * pr * ROWS + 16 * g), bload16(ks, (2 * pr + 1) * ROWS + 16 * g)
        for w0 in range(0, 8, step):
            c0, c1, c2, c3 = izero16(), izero16(), izero16(), izero16()
            f0, f1, f2, f3 = izero16(), izero16(), izero16(), izero16()
            for w in range(w0, w0 + step):
                lo, hi = quants(five, row, o, o + qs_at(five) + (pr * 8 + w) * WORD + h, h, pr, w)
                xo = b * QK_K + 64 * pr + 4 * w
                c0, c1 = pdot16(c0, lo, x0, xo), pdot16(c1, lo, x1, xo)
                c2, c3 = pdot16(c2, lo, x2, xo), pdot16(c3, lo, x3, xo)
                xo += 32
                f0, f1 = pdot16(f0, hi, x0, xo), pdot16(f1, hi, x1, xo)
                f2, f3 = pdot16(f2, hi, x2, xo), pdot16(f3, hi, x3, xo)
            i0, i1 = pmac16(pmac16(i0, c0, s0), f0, s1), pmac16(pmac16(i1, c1, s0), f1, s1)
            i2, i3 = pmac16(pmac16(i2, c2, s0), f2, s1), pmac16(pmac16(i3, c3, s0), f3, s1)
    m0, m1, m2, m3 = izero16(), izero16(), izero16(), izero16()
    for j in range(8):
        mn, at = dup16(bload16(ks, MN + j * ROWS + 16 * g)), 16 * b + 2 * j
        m0, m1 = wdot16(m0, mn, bs16[i], at), wdot16(m1, mn, bs16[i + 1], at)
        m2, m3 = wdot16(m2, mn, bs16[i + 2], at), wdot16(m3, mn, bs16[i + 3], at)
    for k, (isum, msum) in enumerate(((i0, m0), (i1, m1), (i2, m2), (i3, m3))):
        _finish(acc, 32 * (i + k) + 16 * g, isum, msum, ks, g, xd[i + k, b])


@inline
def _scaled8(s, sg, a):
    """s[k] + a[k]·sg for the eight vectors' sub-block dots a and the 16 rows' scales sg."""
    return (pmac16(s[0], a[0], sg), pmac16(s[1], a[1], sg), pmac16(s[2], a[2], sg), pmac16(s[3], a[3], sg),
            pmac16(s[4], a[4], sg), pmac16(s[5], a[5], sg), pmac16(s[6], a[6], sg), pmac16(s[7], a[7], sg))


@inline
def _end1(acc, i, g, isum, row, o, ks, bs16, b, xd):
    """Vector i's mins over super-block b (at o; ks: its decoded mins) and its two fmas."""
    m0 = izero16()
    for j in range(8):
        m0 = wdot16(m0, dup16(bload16(ks, MN + j * ROWS + 16 * g)), bs16[i], 16 * b + 2 * j)
    _finish(acc, 32 * i + 16 * g, isum, m0, ks, g, xd[i, b])


@inline
def _one2(five, p, t, xq, xd, bs16, i, b, acc, ks):
    """`_four` for the single vector i (Q5_K when `five`), both 16-row groups at once: each 128-byte quant
    word of the 32 rows read whole and in order, which the hardware prefetcher follows (Q5_K's qh words,
    a second stream on the first pair and in L1 for the other three, get kernels.stream's prefetch)."""
    row, o, x0, i0, i1 = p[t], b * (GB5 if five else GB), xq[i], izero16(), izero16()
    step = pwords16(5 if five else 4)
    for pr in range(4):
        s0, s1 = bload16(ks, 2 * pr * ROWS), bload16(ks, (2 * pr + 1) * ROWS)
        t0, t1 = bload16(ks, 2 * pr * ROWS + 16), bload16(ks, (2 * pr + 1) * ROWS + 16)
        for w0 in range(0, 8, step):
            c0, f0, c1, f1 = izero16(), izero16(), izero16(), izero16()
            for w in range(w0, w0 + step):
                at = o + qs_at(five) + (pr * 8 + w) * WORD
                lo, hi = quants(five, row, o, at, 0, pr, w)
                lo1, hi1 = quants(five, row, o, at + 64, 64, pr, w)
                xo = b * QK_K + 64 * pr + 4 * w
                c0, f0 = pdot16(c0, lo, x0, xo), pdot16(f0, hi, x0, xo + 32)
                c1, f1 = pdot16(c1, lo1, x0, xo), pdot16(f1, hi1, x0, xo + 32)
            i0, i1 = pmac16(pmac16(i0, c0, s0), f0, s1), pmac16(pmac16(i1, c1, t0), f1, t1)
    _end1(acc, i, 0, i0, row, o, ks, bs16, b, xd)
    _end1(acc, i, 1, i1, row, o, ks, bs16, b, xd)


@inline
def _finish6(acc, at, isum, msum, row, o, g, xd):
    """`_finish` for Q6_K: the offset 32 as a min of 32·scale per 16 values, with dmin = d."""
    a = fma16h(fload16(acc, at), isum, row, o + D6 + 32 * g, xd)
    store16(acc, at, fnma16h(a, imacs16(izero16(), msum, 32), row, o + D6 + 32 * g, xd))


@inline
def _pair6(row, o, g, j):
    """The scales of per-16 groups 2j and 2j + 1 of rows 16g..16g+15 as int16 pairs, for `wdot16`."""
    at = o + SC6 + 16 * g
    return spair16(row, at + 2 * j * ROWS, at + (2 * j + 1) * ROWS)


@inline
def _mins6(row, o, g, bs16, i, b):
    """Σ_j scale_j · Σxq_j over the 16 per-16 groups of super-block b, vector i: 16 rows' lanes, two
    groups per vpdpwssd."""
    m = izero16()
    for j in range(8):
        m = wdot16(m, _pair6(row, o, g, j), bs16[i], 16 * b + 2 * j)
    return m


@inline
def _four6(p, t, g, xq, xd, bs16, i, b, acc):
    """Q6_K vectors i..i+3 against rows 16g..16g+15 of task t over super-block b: per quarter (16 byte
    positions l of a half) the four value groups l, l+32, l+64, l+96 of 16 rows, each scaled once."""
    row, o, h = p[t], b * GB6, 64 * g
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    i0, i1, i2, i3, step = izero16(), izero16(), izero16(), izero16(), pwords16(6)
    for half in range(2):
        for q in range(2):
            at = o + SC6 + (8 * half + q) * ROWS + 16 * g
            sa, sb = sbload16(row, at), sbload16(row, at + 2 * ROWS)
            sc, sd = sbload16(row, at + 4 * ROWS), sbload16(row, at + 6 * ROWS)
            for w0 in range(4 * q, 4 * q + 4, step):
                a0, a1, a2, a3 = izero16(), izero16(), izero16(), izero16()
                b0, b1, b2, b3 = izero16(), izero16(), izero16(), izero16()
                c0, c1, c2, c3 = izero16(), izero16(), izero16(), izero16()
                d0, d1, d2, d3 = izero16(), izero16(), izero16(), izero16()
                for w in range(w0, min(w0 + step, 4 * q + 4)):
                    p0, p1, p2 = words6(row, o, half, w, h)
                    xo = b * QK_K + 128 * half + 4 * w
                    v = six16(p0)
                    a0, a1 = pdot16(a0, v, x0, xo), pdot16(a1, v, x1, xo)
                    a2, a3 = pdot16(a2, v, x2, xo), pdot16(a3, v, x3, xo)
                    v, xo = six16(p1), xo + 32
                    b0, b1 = pdot16(b0, v, x0, xo), pdot16(b1, v, x1, xo)
                    b2, b3 = pdot16(b2, v, x2, xo), pdot16(b3, v, x3, xo)
                    v, xo = six16(p2), xo + 32
                    c0, c1 = pdot16(c0, v, x0, xo), pdot16(c1, v, x1, xo)
                    c2, c3 = pdot16(c2, v, x2, xo), pdot16(c3, v, x3, xo)
                    v, xo = six_top16(p0, p1, p2), xo + 32
                    d0, d1 = pdot16(d0, v, x0, xo), pdot16(d1, v, x1, xo)
                    d2, d3 = pdot16(d2, v, x2, xo), pdot16(d3, v, x3, xo)
                i0 = pmac16(pmac16(pmac16(pmac16(i0, a0, sa), b0, sb), c0, sc), d0, sd)
                i1 = pmac16(pmac16(pmac16(pmac16(i1, a1, sa), b1, sb), c1, sc), d1, sd)
                i2 = pmac16(pmac16(pmac16(pmac16(i2, a2, sa), b2, sb), c2, sc), d2, sd)
                i3 = pmac16(pmac16(pmac16(pmac16(i3, a3, sa), b3, sb), c3, sc), d3, sd)
    for k, isum in enumerate((i0, i1, i2, i3)):
        _finish6(acc, 32 * (i + k) + 16 * g, isum, _mins6(row, o, g, bs16, i + k, b), row, o, g, xd[i + k, b])


@inline
def _group8(row, o, h, half, w0, w1, grp, xq, i, b):
    """Vectors i..i+7 against value group `grp` (0..3: l, l+32, l+64, l+96) of quant words w0..w1-1 of 16
    rows (within one quarter): each 6-bit word assembled once for the eight."""
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    x4, x5, x6, x7 = xq[i + 4], xq[i + 5], xq[i + 6], xq[i + 7]  # [cols] int8 bytes each
    a0, a1, a2, a3 = izero16(), izero16(), izero16(), izero16()
    a4, a5, a6, a7 = izero16(), izero16(), izero16(), izero16()
    for w in range(w0, w1):
        if grp < 3:
            v = six16(wload16(row, word6(o, half, w, grp) + h))
        else:
            p0, p1, p2 = words6(row, o, half, w, h)
            v = six_top16(p0, p1, p2)
        xo = b * QK_K + 128 * half + 4 * w + 32 * grp
        a0, a1, a2, a3 = pdot16(a0, v, x0, xo), pdot16(a1, v, x1, xo), pdot16(a2, v, x2, xo), pdot16(a3, v, x3, xo)
        a4, a5, a6, a7 = pdot16(a4, v, x4, xo), pdot16(a5, v, x5, xo), pdot16(a6, v, x6, xo), pdot16(a7, v, x7, xo)
    return a0, a1, a2, a3, a4, a5, a6, a7


@inline
def _eight6(p, t, g, xq, xd, bs16, i, b, acc, scr):
    """`_four6` for vectors i..i+7, value group by value group, so each 6-bit word is assembled once
    per eight vectors (at 8 vectors that assembly, not vpdpbusd, bounded the 4-vector passes)."""
    row, o, h = p[t], b * GB6, 64 * g
    s = (izero16(), izero16(), izero16(), izero16(), izero16(), izero16(), izero16(), izero16())
    step = pwords16(6)
    for half in range(2):
        for q in range(2):
            at = o + SC6 + (8 * half + q) * ROWS + 16 * g
            for w0 in range(4 * q, 4 * q + 4, step):
                w1 = min(w0 + step, 4 * q + 4)
                s = _scaled8(s, sbload16(row, at), _group8(row, o, h, half, w0, w1, 0, xq, i, b))
                s = _scaled8(s, sbload16(row, at + 2 * ROWS), _group8(row, o, h, half, w0, w1, 1, xq, i, b))
                s = _scaled8(s, sbload16(row, at + 4 * ROWS), _group8(row, o, h, half, w0, w1, 2, xq, i, b))
                s = _scaled8(s, sbload16(row, at + 6 * ROWS), _group8(row, o, h, half, w0, w1, 3, xq, i, b))
    for j in range(8):
        store16(scr, 64 * j, _pair6(row, o, g, j))  # built once, read by each of the eight
    for k in range(8):
        m = izero16()
        for j in range(8):
            m = wdot16(m, wload16(scr, 64 * j), bs16[i + k], 16 * b + 2 * j)
        _finish6(acc, 32 * (i + k) + 16 * g, s[k], m, row, o, g, xd[i + k, b])


@inline
def _word6(row, o, half, w, h, x0, xo, a, b, c, d):
    """The four value-group dots of vector x0 over quant word w of `half`, rows from byte h of each word."""
    p0, p1, p2 = words6(row, o, half, w, h)
    a, b = pdot16(a, six16(p0), x0, xo), pdot16(b, six16(p1), x0, xo + 32)
    return a, b, pdot16(c, six16(p2), x0, xo + 64), pdot16(d, six_top16(p0, p1, p2), x0, xo + 96)


@inline
def _scale6(i0, row, at, a0, b0, c0, d0):
    """i0 plus one quarter's four value-group dots times their rows' scales (at: the first group's)."""
    i0 = pmac16(pmac16(i0, a0, sbload16(row, at)), b0, sbload16(row, at + 2 * ROWS))
    return pmac16(pmac16(i0, c0, sbload16(row, at + 4 * ROWS)), d0, sbload16(row, at + 6 * ROWS))


@inline
def _one6x2(p, t, xq, xd, bs16, i, b, acc):
    """`_four6` for the single vector i, both 16-row groups at once: each quarter's words read whole (all
    32 rows) in address order, which the hardware prefetcher follows."""
    row, o, x0, i0, i1, step = p[t], b * GB6, xq[i], izero16(), izero16(), pwords16(6)
    for half in range(2):
        for q in range(2):
            for w0 in range(4 * q, 4 * q + 4, step):
                a0, b0, c0, d0 = izero16(), izero16(), izero16(), izero16()
                a1, b1, c1, d1 = izero16(), izero16(), izero16(), izero16()
                for w in range(w0, min(w0 + step, 4 * q + 4)):
                    xo = b * QK_K + 128 * half + 4 * w
                    a0, b0, c0, d0 = _word6(row, o, half, w, 0, x0, xo, a0, b0, c0, d0)
                    a1, b1, c1, d1 = _word6(row, o, half, w, 64, x0, xo, a1, b1, c1, d1)
                at = o + SC6 + (8 * half + q) * ROWS
                i0 = _scale6(i0, row, at, a0, b0, c0, d0)
                i1 = _scale6(i1, row, at + 16, a1, b1, c1, d1)
    _finish6(acc, 32 * i, i0, _mins6(row, o, 0, bs16, i, b), row, o, 0, xd[i, b])
    _finish6(acc, 32 * i + 16, i1, _mins6(row, o, 1, bs16, i, b), row, o, 1, xd[i, b])


@inline
def _passes45(five, p, t, xq, xd, bs16, acc, ks, ahead):
    """Task t's Q4_K (Q5_K when `five`) rows against every vector into acc, super-block by super-block
    (each in L1 while every vector passes it, its scales and mins decoded once into ks), the task's stream
    from memory prefetched on the first pass."""
    n, gb = xq.shape[0], GB5 if five else GB
    acc[:] = 0.0
    for b in range(xd.shape[1]):
        stream_ahead(p[t], b * gb, gb, True, ahead)
        k4_planes(p[t], b * gb + SC, ks)
        for i in range(n - n % 4, n):
            _one2(five, p, t, xq, xd, bs16, i, b, acc, ks)
        for g in range(2):
            for i in range(0, n - n % 4, 4):
                _four(five, p, t, g, xq, xd, bs16, i, b, acc, ks)


@inline
def _passes6(p, t, xq, xd, bs16, acc, scr, ahead):
    """`_passes45` for Q6_K: 8 vectors at a time, then 4, then one."""
    n = xq.shape[0]
    acc[:] = 0.0
    for b in range(xd.shape[1]):
        stream_ahead(p[t], b * GB6, GB6, True, ahead)
        for i in range(n - n % 4, n):
            _one6x2(p, t, xq, xd, bs16, i, b, acc)
        for g in range(2):
            for i in range(0, n - n % 8, 8):
                _eight6(p, t, g, xq, xd, bs16, i, b, acc, scr)
            for i in range(n - n % 8, n - n % 4, 4):
                _four6(p, t, g, xq, xd, bs16, i, b, acc)


@inline
def _put(t, rows, out, acc, tmp):
    """Task t's finished row lanes acc into out [n, rows]."""
    nr = min(rows, (t + 1) * ROWS) - t * ROWS
    for i in range(out.shape[0]):
        put_rows(out[i], t * ROWS, 0, fload16(acc, 32 * i), nr, tmp)
        put_rows(out[i], t * ROWS, 16, fload16(acc, 32 * i + 16), nr, tmp)


@inline
def _tiled_from6():
    """From how many vectors Q6_K tasks go through the tile: pwords16(6) is 8 after VNNI, 2 on AVX2."""
    return TILED_FROM if pwords16(6) == 8 else TILED_FROM6_AVX2


@inline
def _scratch(n, cols, m):
    """A worker's arrays: row-lane accumulators, a ragged row group, Q6_K's scale pairs or Q4_K's decoded
    scales and mins and, when `m` (the batch is tiled), q8k_lanes' tile of a task (quant words, scales,
    mins, d, dmin in row lanes)."""
    return (np.empty(n * ROWS, np.float32),  # [n, 32] row-lane accumulators of the task
            np.empty(16, np.float32),  # [16] one ragged row group
            np.empty(10 * 64, np.uint8),  # [8, 16] Q6_K scale pairs of 16 rows, int16 each; Q4_K: k4_planes'
            np.empty(cols // 4 * ROWS if m else 0, np.uint32),  # [cols/4, 32] quant words
            np.empty(cols // 16 * ROWS if m else 0, np.int32),  # [cols/16, 32] scales in row lanes
            np.empty(cols // 16 * ROWS if m else 0, np.int32),  # [cols/16, 32] mins in row lanes
            np.empty(cols // QK_K * ROWS if m else 0, np.float32),  # [nb, 32] d in row lanes
            np.empty(cols // QK_K * ROWS if m else 0, np.float32))  # [nb, 32] dmin in row lanes


@inline
def _work45(five, wk, workers, cnt, p, rows, xq, xd, bs16, out, ahead):
    """Worker wk's share of a Q4_K / Q5_K product: its own run of tasks, then what it steals from the
    others' (kernels.steal)."""
    tile = xq.shape[0] >= TILED_FROM
    acc, tmp, scr, qt32, sv, mn, dt, dm = _scratch(xq.shape[0], xq.shape[1], tile)
    tasks = p.shape[0]
    per = -(-tasks // workers)
    for j in range(workers):
        s = (wk + j) % workers
        lo, hi = run_of(s, per, tasks)
        taken, t = 0, claim(cnt, s, j == 0, lo, hi, 0)
        while t >= 0:
            if tile:
                tiled(5 if five else 4, p, t, rows, xq, xd, bs16, out, qt32, sv, mn, dt, dm, tmp, scr, ahead)
            else:
                _passes45(five, p, t, xq, xd, bs16, acc, scr, ahead)
                _put(t, rows, out, acc, tmp)
            taken += 1
            t = claim(cnt, s, j == 0, lo, hi, taken)


# One worker's share per type, each a function of its own that names only its type's passes: numba
# inlines every pass named (dead ones too, before pruning them), and its parfor passes copy a loop body
# several times, so one kernel inlining all three types' passes into its prange body compiled in ~110 s.
@exact_serial
def _worker4(wk, workers, cnt, p, rows, xq, xd, bs16, out, ahead):
    _work45(False, wk, workers, cnt, p, rows, xq, xd, bs16, out, ahead)


@exact_serial
def _worker5(wk, workers, cnt, p, rows, xq, xd, bs16, out, ahead):
    _work45(True, wk, workers, cnt, p, rows, xq, xd, bs16, out, ahead)


@exact_serial
def _worker6(wk, workers, cnt, p, rows, xq, xd, bs16, out, ahead):
    """`_work45` for Q6_K."""
    tile = xq.shape[0] >= _tiled_from6()
    acc, tmp, scr, qt32, sv, mn, dt, dm = _scratch(xq.shape[0], xq.shape[1], tile)
    tasks = p.shape[0]
    per = -(-tasks // workers)
    for j in range(workers):
        s = (wk + j) % workers
        lo, hi = run_of(s, per, tasks)
        taken, t = 0, claim(cnt, s, j == 0, lo, hi, 0)
        while t >= 0:
            if tile:
                tiled(6, p, t, rows, xq, xd, bs16, out, qt32, sv, mn, dt, dm, tmp, scr, ahead)
            else:
                _passes6(p, t, xq, xd, bs16, acc, scr, ahead)
                _put(t, rows, out, acc, tmp)
            taken += 1
            t = claim(cnt, s, j == 0, lo, hi, taken)


@inline
def _products(bits, p, rows, xq, xd, bs16, out, threads, ahead):
    """out [n, rows]: each of `threads` workers streams one contiguous run of tasks, then steals from the
    others' (kernels.steal); from TILED_FROM vectors on, each task is unpacked once into q8k_lanes' tile
    first."""
    workers = max(1, min(p.shape[0], threads))
    cnt = counters(workers)
    for wk in prange(workers):
        w = np.int64(wk)  # one signature for the worker whatever integer type prange gives wk
        if bits == 4:
            _worker4(w, workers, cnt, p, rows, xq, xd, bs16, out, ahead)
        elif bits == 5:
            _worker5(w, workers, cnt, p, rows, xq, xd, bs16, out, ahead)
        else:
            _worker6(w, workers, cnt, p, rows, xq, xd, bs16, out, ahead)


@exact
def q4_k_repacked(p, rows, xq, xd, bs16, out, threads, ahead):
    """out[i, r] for repacked Q4_K rows p (rows of them) and Q8_K vectors xq (scales xd, sums bs16);
    `ahead`: the stream's prefetch distance in bytes (kernels.stream)."""
    _products(4, p, rows, xq, xd, bs16, out, threads, ahead)


@exact
def q5_k_repacked(p, rows, xq, xd, bs16, out, threads, ahead):
    """out[i, r] for repacked Q5_K rows: Q4_K's kernel with each quant's fifth bit from qh."""
    _products(5, p, rows, xq, xd, bs16, out, threads, ahead)


@exact
def q6_k_repacked(p, rows, xq, xd, bs16, out, threads, ahead):
    """out[i, r] for repacked Q6_K rows (quants 0..63; the offset 32 folded out as a min, as q8k_tiles does)."""
    _products(6, p, rows, xq, xd, bs16, out, threads, ahead)
