"""Prefill kernels: K-quant rows unpacked once per task, then 4 Q8_K vectors per pass over each row.

A task unpacks CHUNK rows into one common form: u8 quants in activation order, an int16 scale and an
int16 min per 16 values, and float32 d and dmin per super-block (Q6_K: min = 32·scale, Q3_K:
min = 4·scale, both with dmin = d). Q2_K and Q3_K take this path for every batch, decode included.
The dot loop then multiplies each 32-quant group by 4 activation vectors with the same
vpmaddubsw/vpmaddwd lanes and the same fma order as q8k_dot's 1-vector kernels, so a row's result
is bit-identical whichever kernel and batch computed it.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.avx2 import izero, kdot_v, load_i16, offs_lanes, or_shl2, pair_scales
from pantheon.engine.kernels.jit import exact, inline
from pantheon.engine.kernels.kblocks import QK_K, scale_min_k4
from pantheon.engine.kernels.kquants_q2q3 import q3_scale
from pantheon.engine.kernels.q8k_dot import Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES
from pantheon.engine.kernels.simd import field, fma_scaled, fzero, half_at, hsum, load32, mul, or_shl4, store32

# Rows unpacked per prange task: 16 rows of a 5632-column matrix are 88 KiB of quants (L2).
CHUNK = 16
Q2_K_BYTES, Q3_K_BYTES = 84, 110
# Tile kinds: which unpacker fills the scratch.
Q4_K, Q5_K, Q6_K, Q2_K, Q3_K = 0, 1, 2, 3, 4


@inline
def _unpack_k45(raw, r, q, sv, mn, d, dm, five):
    """Row r of Q4_K (five = False) or Q5_K into the common form."""
    row = raw[r]  # [row_bytes]
    nbytes = Q5_K_BYTES if five else Q4_K_BYTES
    qo = 48 if five else 16
    for b in range(q.shape[0] // QK_K):
        o = b * nbytes
        d[b], dm[b] = half_at(row, o), half_at(row, o + 2)
        hv = load32(row, o + 16)  # [32] Q5_K's fifth bits (unused for Q4_K)
        for j in range(8):
            sc, m = scale_min_k4(raw, r, o + 4, j)
            g = b * 16 + 2 * j
            sv[g], sv[g + 1], mn[g], mn[g + 1] = sc, sc, m, m
            v = field(load32(row, o + qo + 32 * (j // 2)), 4 * (j % 2), 15)  # [32] nibbles
            store32(q, g * 16, or_shl4(v, field(hv, j, 1)) if five else v)


@inline
def _unpack_q6(raw, r, q, sv, mn, d, dm):
    """Row r of Q6_K into the common form (quants 0..63, min = 32·scale so q − 32 folds out)."""
    row = raw[r]  # [row_bytes]
    sc = raw.view(np.int8)[r]  # [row_bytes] the same bytes, signed, for the scales
    for b in range(q.shape[0] // QK_K):
        o = b * Q6_K_BYTES
        d[b] = dm[b] = half_at(row, o + 208)
        for k in range(16):
            sv[b * 16 + k] = sc[o + 192 + k]
            mn[b * 16 + k] = 32 * np.int32(sc[o + 192 + k])
        for h in range(2):
            hv = load32(row, o + 128 + 32 * h)  # [32] high 2-bit fields
            lv0, lv1 = load32(row, o + 64 * h), load32(row, o + 64 * h + 32)  # [32] low nibbles each
            e = b * QK_K + 128 * h
            store32(q, e, or_shl4(field(lv0, 0, 15), field(hv, 0, 3)))
            store32(q, e + 32, or_shl4(field(lv1, 0, 15), field(hv, 2, 3)))
            store32(q, e + 64, or_shl4(field(lv0, 4, 15), field(hv, 4, 3)))
            store32(q, e + 96, or_shl4(field(lv1, 4, 15), field(hv, 6, 3)))


@inline
def _unpack_q2(raw, r, q, sv, mn, d, dm):
    """Row r of Q2_K into the common form (4-bit scale and min per 16 values)."""
    row = raw[r]  # [row_bytes]
    for b in range(q.shape[0] // QK_K):
        o = b * Q2_K_BYTES
        d[b], dm[b] = half_at(row, o + 80), half_at(row, o + 82)
        for k in range(16):
            sv[b * 16 + k] = row[o + k] & 15
            mn[b * 16 + k] = row[o + k] >> 4
        for h in range(2):
            v = load32(row, o + 16 + 32 * h)  # [32] four 2-bit fields each
            for j in range(4):
                store32(q, b * QK_K + 128 * h + 32 * j, field(v, 2 * j, 3))


@inline
def _unpack_q3(raw, r, q, sv, mn, d, dm):
    """Row r of Q3_K into the common form (quants q + 4 in 0..7, min = 4·scale so the − 4 folds out)."""
    row = raw[r]  # [row_bytes]
    for b in range(q.shape[0] // QK_K):
        o = b * Q3_K_BYTES
        d[b] = dm[b] = half_at(row, o + 108)
        for k in range(16):
            sc = np.int32(q3_scale(raw, r, o + 96, k))
            sv[b * 16 + k], mn[b * 16 + k] = sc, 4 * sc
        hv = load32(row, o)  # [32] third bits of the 8 groups
        for h in range(2):
            v = load32(row, o + 32 + 32 * h)  # [32] four 2-bit fields each
            for j in range(4):
                store32(q, b * QK_K + 128 * h + 32 * j, or_shl2(field(v, 2 * j, 3), field(hv, 4 * h + j, 1)))


@inline
def unpack(kind, raw, r, q, sv, mn, d, dm):
    """Row r of a K-quant `kind` into the common form."""
    if kind == Q6_K:
        _unpack_q6(raw, r, q, sv, mn, d, dm)
    elif kind == Q2_K:
        _unpack_q2(raw, r, q, sv, mn, d, dm)
    elif kind == Q3_K:
        _unpack_q3(raw, r, q, sv, mn, d, dm)
    else:
        _unpack_k45(raw, r, q, sv, mn, d, dm, kind == Q5_K)


@inline
def _block(acc, s, mv, d, dm, xd, bs16, i, b):
    """acc after super-block b of vector i: q8k_dot's two fmas (scaled sums, then mins) in its order."""
    acc = fma_scaled(acc, s, mul(d[b], xd[i, b]))
    return fma_scaled(acc, offs_lanes(mv, bs16[i], 16 * b, 0), -mul(dm[b], xd[i, b]))


@inline
def _tile4(q, sv, mn, d, dm, xq, xd, bs16, i, out, r):
    """Unpacked row (q, sv, mn, d, dm) against vectors i..i+3 into out[i:i+4, r]."""
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    a0, a1, a2, a3 = fzero(), fzero(), fzero(), fzero()
    for b in range(q.shape[0] // QK_K):
        s0, s1, s2, s3 = izero(), izero(), izero(), izero()
        for g in range(8):
            xo = b * QK_K + 32 * g
            w, s = load32(q, xo), pair_scales(sv, b * 16 + 2 * g)  # [32] quants, [16] their scales
            s0, s1 = kdot_v(s0, w, x0, xo, s), kdot_v(s1, w, x1, xo, s)
            s2, s3 = kdot_v(s2, w, x2, xo, s), kdot_v(s3, w, x3, xo, s)
        mv = load_i16(mn, b * 16)  # [16] mins of the super-block
        a0, a1 = _block(a0, s0, mv, d, dm, xd, bs16, i, b), _block(a1, s1, mv, d, dm, xd, bs16, i + 1, b)
        a2, a3 = _block(a2, s2, mv, d, dm, xd, bs16, i + 2, b), _block(a3, s3, mv, d, dm, xd, bs16, i + 3, b)
    out[i, r], out[i + 1, r], out[i + 2, r], out[i + 3, r] = hsum(a0), hsum(a1), hsum(a2), hsum(a3)


@inline
def _one(q, sv, mn, d, dm, xq, xd, bs16, i, out, r):
    """_tile4 for the single vector i."""
    x0, a0 = xq[i], fzero()  # [cols] int8 bytes
    for b in range(q.shape[0] // QK_K):
        s0 = izero()
        for g in range(8):
            xo = b * QK_K + 32 * g
            s0 = kdot_v(s0, load32(q, xo), x0, xo, pair_scales(sv, b * 16 + 2 * g))
        a0 = _block(a0, s0, load_i16(mn, b * 16), d, dm, xd, bs16, i, b)
    out[i, r] = hsum(a0)


@exact
def tiles(kind, raw, xq, xd, bs16, out):
    """out[i, r] for Q8_K vectors i and the K-quant rows raw of type `kind`: 4 vectors per pass, then singly."""
    rows, n, cols = raw.shape[0], xq.shape[0], xq.shape[1]
    for c in prange((rows + CHUNK - 1) // CHUNK):
        r0 = c * CHUNK
        m = min(rows, r0 + CHUNK) - r0
        q = np.empty((CHUNK, cols), np.uint8)  # [CHUNK, cols] quants in activation order
        sv = np.empty((CHUNK, cols // 16), np.int16)  # [CHUNK, cols/16] scales
        mn = np.empty((CHUNK, cols // 16), np.int16)  # [CHUNK, cols/16] mins
        d = np.empty((CHUNK, cols // QK_K), np.float32)  # [CHUNK, nb]
        dm = np.empty((CHUNK, cols // QK_K), np.float32)  # [CHUNK, nb]
        for rr in range(m):
            unpack(kind, raw, r0 + rr, q[rr], sv[rr], mn[rr], d[rr], dm[rr])
        for i in range(0, n - n % 4, 4):
            for rr in range(m):
                _tile4(q[rr], sv[rr], mn[rr], d[rr], dm[rr], xq, xd, bs16, i, out, r0 + rr)
        for i in range(n - n % 4, n):
            for rr in range(m):
                _one(q[rr], sv[rr], mn[rr], d[rr], dm[rr], xq, xd, bs16, i, out, r0 + rr)
