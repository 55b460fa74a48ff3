"""Repacked Q4_K / Q5_K / Q6_K tasks at prefill sizes: each unpacked once into q8k_lanes' tile of
8-bit quants (a copy with no transposes, the layout being row-interleaved already), then its passes."""

import numpy as np

from pantheon.engine.kernels.jit import inline
from pantheon.engine.kernels.q8dot_repacked import stream_ahead
from pantheon.engine.kernels.q8k_lanes import pass1, pass4
from pantheon.engine.kernels.q8k_repacked_layout import (D6, D_BYTES, GB, GB5, GB6, KD, MN, SC, SC6, WORD, qs_at,
                                                         quants, words6)
from pantheon.engine.kernels.repack import ROWS
from pantheon.engine.kernels.simd512 import izero16, store16
from pantheon.engine.kernels.simd_lanes import (bload16, hload16, imacs16, k4_planes, pwords16, sbload16, six16,
                                                six_top16)


@inline
def _unpack6(row, o, g, b, qt32, sv, mn, dt, dm):
    """Rows 16g..16g+15 of a Q6_K super-block into q8k_lanes' tile (6-bit values 0..63, min 32·scale,
    dmin = d, as q8k_tiles' common form has them)."""
    h = 16 * g
    for half in range(2):
        for w in range(8):
            p0, p1, p2 = words6(row, o, half, w, 4 * h)
            word = b * 64 + 32 * half + w  # of value 128·half + 4w: then +32, +64, +96 values
            store16(qt32, word * ROWS + h, six16(p0))
            store16(qt32, (word + 8) * ROWS + h, six16(p1))
            store16(qt32, (word + 16) * ROWS + h, six16(p2))
            store16(qt32, (word + 24) * ROWS + h, six_top16(p0, p1, p2))
    for j in range(16):
        sc = sbload16(row, o + SC6 + j * ROWS + h)
        store16(sv, (b * 16 + j) * ROWS + h, sc)
        store16(mn, (b * 16 + j) * ROWS + h, imacs16(izero16(), sc, 32))
    d = hload16(row, o + D6 + 2 * h)
    store16(dt, b * ROWS + h, d)
    store16(dm, b * ROWS + h, d)


@inline
def _unpack45(five, row, o, g, b, qt32, sv, mn, dt, dm, ks):
    """Rows 16g..16g+15 of a Q4_K / Q5_K super-block into q8k_lanes' tile (a scale at each per-32
    entry, the per-32 kernels read only those; mins at both per-16 entries); ks: its header decoded
    (simd_lanes.k4_planes)."""
    h = 16 * g
    for pr in range(4):
        for w in range(8):
            lo, hi = quants(five, row, o, o + qs_at(five) + (pr * 8 + w) * WORD + 4 * h, 4 * h, pr, w)
            word = b * 64 + 16 * pr + w  # of value 64·pr + 4w; the high nibbles 32 values on
            store16(qt32, word * ROWS + h, lo)
            store16(qt32, (word + 8) * ROWS + h, hi)
    for j in range(8):
        m = bload16(ks, MN + j * ROWS + h)
        store16(sv, (b * 16 + 2 * j) * ROWS + h, bload16(ks, j * ROWS + h))
        store16(mn, (b * 16 + 2 * j) * ROWS + h, m)
        store16(mn, (b * 16 + 2 * j + 1) * ROWS + h, m)
    store16(dt, b * ROWS + h, hload16(ks, KD + 2 * h))
    store16(dm, b * ROWS + h, hload16(ks, KD + D_BYTES + 2 * h))


@inline
def tiled(bits, p, t, rows, xq, xd, bs16, out, qt32, sv, mn, dt, dm, tmp, ks, ahead):
    """Task t for many vectors: unpacked once into q8k_lanes' tile (a copy with no transposes: the
    layout is interleaved already), then q8k_lanes' passes, vpdpbusd alone per quant word and vector."""
    n, gb = xq.shape[0], GB6 if bits == 6 else (GB5 if bits == 5 else GB)
    for b in range(xd.shape[1]):
        stream_ahead(p[t], b * gb, gb, True, ahead)
        if bits != 6:
            k4_planes(p[t], b * gb + SC, ks)
        for g in range(2):
            if bits == 6:
                _unpack6(p[t], b * gb, g, b, qt32, sv, mn, dt, dm)
            else:
                _unpack45(bits == 5, p[t], b * gb, g, b, qt32, sv, mn, dt, dm, ks)
    nr, sub, qt = min(rows, (t + 1) * ROWS) - t * ROWS, 16 if bits == 6 else 32, qt32.view(np.uint8)
    step = pwords16(bits)
    for i in range(0, n - n % 4, 4):
        pass4(sub, step, qt, sv, mn, dt, dm, xq, xd, bs16, i, out, t * ROWS, nr, tmp)
    for i in range(n - n % 4, n):
        pass1(sub, step, qt, sv, mn, dt, dm, xq, xd, bs16, i, out, t * ROWS, nr, tmp)
