"""Decode kernels: Q4_K, Q5_K and Q6_K rows against Q8_K activations, llama.cpp's integer dot products.

Per 256-value super-block: vpmaddubsw multiplies 32 quants by 32 int8 activations, vpmaddwd applies
the sub-block's integer scale to those pair sums, the int32 lanes accumulate the whole super-block,
and one fma scales them by d·xd. Mins (Q4_K, Q5_K) and Q6_K's offset of 32 never enter the loop:
Σ m·Σx comes from the activations' per-16 integer sums (bsums), one more fma per super-block.
Each vector i and row r is one independent sequence of operations, so a row's result does not
depend on the batch; q8k_tiles repeats these operations lane for lane for many vectors.
"""

from numba import prange

from pantheon.engine.kernels.avx2 import i8_scales, izero, k4_scales, kdot, kdot2, mins_lanes, offs_lanes
from pantheon.engine.kernels.jit import exact, inline
from pantheon.engine.kernels.kblocks import QK_K
from pantheon.engine.kernels.simd import (PREFETCH_BYTES, field, fma_scaled, fzero, half_at, hsum, load32, mul, or_shl4,
                                          prefetch)

Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES = 144, 176, 210
# Rows per prange task: the activations of one vector stay in L1 across the chunk's rows.
CHUNK = 16


@inline
def _k4_pair(sumi, row, qo, xi, xo, sc, j):
    """Sub-blocks j (low nibbles) and j + 1 (high nibbles) of the 32 bytes at row[qo:]."""
    v = load32(row, qo)  # [32] two sub-blocks' nibbles
    sumi = kdot(sumi, field(v, 0, 15), xi, xo, sc, j)
    return kdot(sumi, field(v, 4, 15), xi, xo + 32, sc, j + 1)


@inline
def q4_k_block(row, o, xi, xo):
    """(int32 lanes of Σ sc·q·x, Σ m·bsum32 scale vector) of the Q4_K super-block at row[o:]."""
    sc = k4_scales(row, o + 4)  # [16] scales then mins
    sumi = _k4_pair(izero(), row, o + 16, xi, xo, sc, 0)
    sumi = _k4_pair(sumi, row, o + 48, xi, xo + 64, sc, 2)
    sumi = _k4_pair(sumi, row, o + 80, xi, xo + 128, sc, 4)
    return _k4_pair(sumi, row, o + 112, xi, xo + 192, sc, 6), sc


@inline
def _k5_pair(sumi, row, qo, hv, xi, xo, sc, j):
    """_k4_pair plus the fifth bits of sub-blocks j, j + 1 (bits j, j + 1 of the qh bytes hv)."""
    v = load32(row, qo)  # [32] two sub-blocks' nibbles
    sumi = kdot(sumi, or_shl4(field(v, 0, 15), field(hv, j, 1)), xi, xo, sc, j)
    return kdot(sumi, or_shl4(field(v, 4, 15), field(hv, j + 1, 1)), xi, xo + 32, sc, j + 1)


@inline
def q5_k_block(row, o, xi, xo):
    """q4_k_block for the Q5_K super-block at row[o:] (qh at o + 16, nibbles at o + 48)."""
    sc = k4_scales(row, o + 4)  # [16] scales then mins
    hv = load32(row, o + 16)  # [32] fifth bits of the 8 sub-blocks
    sumi = _k5_pair(izero(), row, o + 48, hv, xi, xo, sc, 0)
    sumi = _k5_pair(sumi, row, o + 80, hv, xi, xo + 64, sc, 2)
    sumi = _k5_pair(sumi, row, o + 112, hv, xi, xo + 128, sc, 4)
    return _k5_pair(sumi, row, o + 144, hv, xi, xo + 192, sc, 6), sc


@inline
def _q6_half(sumi, row, o, h, xi, xo, sc):
    """The 128 values of half h of the Q6_K super-block at row[o:]: 4 groups of 32, 2 scales each."""
    hv = load32(row, o + 128 + 32 * h)  # [32] high 2-bit fields
    lv0, lv1 = load32(row, o + 64 * h), load32(row, o + 64 * h + 32)  # [32] low nibbles each
    k = 8 * h
    sumi = kdot2(sumi, or_shl4(field(lv0, 0, 15), field(hv, 0, 3)), xi, xo, sc, k)
    sumi = kdot2(sumi, or_shl4(field(lv1, 0, 15), field(hv, 2, 3)), xi, xo + 32, sc, k + 2)
    sumi = kdot2(sumi, or_shl4(field(lv0, 4, 15), field(hv, 4, 3)), xi, xo + 64, sc, k + 4)
    return kdot2(sumi, or_shl4(field(lv1, 4, 15), field(hv, 6, 3)), xi, xo + 96, sc, k + 6)


@inline
def q6_k_block(row, o, xi, xo):
    """(int32 lanes of Σ sc·q·x with q in 0..63, the 16 scales) of the Q6_K super-block at row[o:]."""
    sc = i8_scales(row, o + 192)  # [16] int8 scales
    sumi = _q6_half(izero(), row, o, 0, xi, xo, sc)
    return _q6_half(sumi, row, o, 1, xi, xo + 128, sc), sc


@inline
def _k4_end(acc, sumi, sc, row, o, xd, bs16, i, b):
    """q4_k's two fmas of super-block b for vector i, in its order (scaled sums, then mins)."""
    acc = fma_scaled(acc, sumi, mul(half_at(row, o), xd[i, b]))
    return fma_scaled(acc, mins_lanes(sc, bs16[i], 16 * b), -mul(half_at(row, o + 2), xd[i, b]))


@inline
def _q6_end(acc, sumi, sc, row, o, xd, bs16, i, b):
    """q6_k's two fmas of super-block b for vector i, in its order (scaled sums, then the 32 offsets)."""
    dd = mul(half_at(row, o + 208), xd[i, b])
    acc = fma_scaled(acc, sumi, dd)
    return fma_scaled(acc, offs_lanes(sc, bs16[i], 16 * b, 5), -dd)


@exact
def q4_k(raw, xq, xd, bs16, out):
    """out[i, r] = Σ_b d·xd·Σ sc·q·xq − dmin·xd·Σ m·bsums over Q4_K row r and Q8_K vector i."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK_K
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(n):
            xi = xq[i]  # [cols] int8 bytes
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                acc = fzero()
                for b in range(nb):
                    o = b * Q4_K_BYTES
                    prefetch(row, o + PREFETCH_BYTES)
                    sumi, sc = q4_k_block(row, o, xi, b * QK_K)
                    acc = _k4_end(acc, sumi, sc, row, o, xd, bs16, i, b)
                out[i, r] = hsum(acc)


@exact
def q4_k_x4(raw, xq, xd, bs16, out):
    """q4_k for n a multiple of 4 (batched decode), each row read and unpacked once per 4 vectors."""
    _x4(False, raw, xq, xd, bs16, out)


@exact
def q6_k_x4(raw, xq, xd, bs16, out):
    """q6_k for n a multiple of 4 (batched decode), each row read and unpacked once per 4 vectors."""
    _x4(True, raw, xq, xd, bs16, out)


@inline
def _x4(six, raw, xq, xd, bs16, out):
    """Q4_K (six = False) or Q6_K rows against 4 vectors at a time, with the 1-vector kernel's operations
    per (row, vector), so each output keeps its bits in any batch. `six` is a constant in each caller:
    a runtime flag cost the Q6_K kernel 7 % (0.84 vs 0.78 ms at n = 8, 5632x2048)."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK_K
    nbytes = Q6_K_BYTES if six else Q4_K_BYTES
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(0, n, 4):
            x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                a0, a1, a2, a3 = fzero(), fzero(), fzero(), fzero()
                for b in range(nb):
                    o = b * nbytes
                    prefetch(row, o + PREFETCH_BYTES)
                    if six:
                        a0, a1, a2, a3 = _q6_block4(a0, a1, a2, a3, row, o, b, x0, x1, x2, x3, xd, bs16, i)
                    else:
                        a0, a1, a2, a3 = _k4_block4(a0, a1, a2, a3, row, o, b, x0, x1, x2, x3, xd, bs16, i)
                out[i, r], out[i + 1, r], out[i + 2, r], out[i + 3, r] = hsum(a0), hsum(a1), hsum(a2), hsum(a3)


@inline
def q4_k_sums4(row, o, b, x0, x1, x2, x3):
    """(int32 lanes of Σ sc·q·x for vectors x0..x3, the scales) of the Q4_K super-block b at row[o:]."""
    sc = k4_scales(row, o + 4)  # [16] scales then mins
    s0, s1, s2, s3 = izero(), izero(), izero(), izero()
    for p in range(4):
        s0, s1, s2, s3 = _k4_pair4(s0, s1, s2, s3, row, o + 16 + 32 * p, x0, x1, x2, x3, b * QK_K + 64 * p, sc, 2 * p)
    return s0, s1, s2, s3, sc


@inline
def q6_k_sums4(row, o, b, x0, x1, x2, x3):
    """q4_k_sums4 for the Q6_K super-block b at row[o:] (quants 0..63, int8 scales)."""
    sc = i8_scales(row, o + 192)  # [16] int8 scales
    s0, s1, s2, s3 = izero(), izero(), izero(), izero()
    for h in range(2):
        s0, s1, s2, s3 = _q6_half4(s0, s1, s2, s3, row, o, h, x0, x1, x2, x3, b * QK_K + 128 * h, sc)
    return s0, s1, s2, s3, sc


@inline
def _k4_block4(a0, a1, a2, a3, row, o, b, x0, x1, x2, x3, xd, bs16, i):
    """Q4_K super-block b at row[o:] against vectors i..i+3."""
    s0, s1, s2, s3, sc = q4_k_sums4(row, o, b, x0, x1, x2, x3)
    return (_k4_end(a0, s0, sc, row, o, xd, bs16, i, b), _k4_end(a1, s1, sc, row, o, xd, bs16, i + 1, b),
            _k4_end(a2, s2, sc, row, o, xd, bs16, i + 2, b), _k4_end(a3, s3, sc, row, o, xd, bs16, i + 3, b))


@inline
def _q6_block4(a0, a1, a2, a3, row, o, b, x0, x1, x2, x3, xd, bs16, i):
    """Q6_K super-block b at row[o:] against vectors i..i+3."""
    s0, s1, s2, s3, sc = q6_k_sums4(row, o, b, x0, x1, x2, x3)
    return (_q6_end(a0, s0, sc, row, o, xd, bs16, i, b), _q6_end(a1, s1, sc, row, o, xd, bs16, i + 1, b),
            _q6_end(a2, s2, sc, row, o, xd, bs16, i + 2, b), _q6_end(a3, s3, sc, row, o, xd, bs16, i + 3, b))


@inline
def _k4_pair4(s0, s1, s2, s3, row, qo, x0, x1, x2, x3, xo, sc, j):
    """_k4_pair for 4 vectors: the two sub-blocks' nibbles unpacked once, each meeting 4 activations."""
    v = load32(row, qo)  # [32] two sub-blocks' nibbles
    lo, hi = field(v, 0, 15), field(v, 4, 15)  # [32] quants each
    s0, s1 = kdot(kdot(s0, lo, x0, xo, sc, j), hi, x0, xo + 32, sc, j + 1), \
        kdot(kdot(s1, lo, x1, xo, sc, j), hi, x1, xo + 32, sc, j + 1)
    s2, s3 = kdot(kdot(s2, lo, x2, xo, sc, j), hi, x2, xo + 32, sc, j + 1), \
        kdot(kdot(s3, lo, x3, xo, sc, j), hi, x3, xo + 32, sc, j + 1)
    return s0, s1, s2, s3


@inline
def _q6_half4(s0, s1, s2, s3, row, o, h, x0, x1, x2, x3, xo, sc):
    """_q6_half for 4 vectors: the half's 4 quant groups unpacked once, each meeting 4 activations."""
    hv = load32(row, o + 128 + 32 * h)  # [32] high 2-bit fields
    lv0, lv1 = load32(row, o + 64 * h), load32(row, o + 64 * h + 32)  # [32] low nibbles each
    k = 8 * h
    for t in range(4):
        q = or_shl4(field(lv1 if t % 2 else lv0, 4 * (t // 2), 15), field(hv, 2 * t, 3))  # [32] quants 0..63
        s0, s1 = kdot2(s0, q, x0, xo + 32 * t, sc, k + 2 * t), kdot2(s1, q, x1, xo + 32 * t, sc, k + 2 * t)
        s2, s3 = kdot2(s2, q, x2, xo + 32 * t, sc, k + 2 * t), kdot2(s3, q, x3, xo + 32 * t, sc, k + 2 * t)
    return s0, s1, s2, s3


@exact
def q5_k(raw, xq, xd, bs16, out):
    """q4_k for Q5_K rows."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK_K
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(n):
            xi, bi = xq[i], bs16[i]  # [cols] int8 bytes, [cols/16] sums
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                acc = fzero()
                for b in range(nb):
                    o = b * Q5_K_BYTES
                    prefetch(row, o + PREFETCH_BYTES)
                    sumi, sc = q5_k_block(row, o, xi, b * QK_K)
                    acc = fma_scaled(acc, sumi, mul(half_at(row, o), xd[i, b]))
                    acc = fma_scaled(acc, mins_lanes(sc, bi, 16 * b), -mul(half_at(row, o + 2), xd[i, b]))
                out[i, r] = hsum(acc)


@exact
def q6_k(raw, xq, xd, bs16, out):
    """out[i, r] = Σ_b d·xd·(Σ sc·q·xq − 32·Σ sc·bsums) over Q6_K row r and Q8_K vector i."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK_K
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(n):
            xi = xq[i]  # [cols] int8 bytes
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                acc = fzero()
                for b in range(nb):
                    o = b * Q6_K_BYTES
                    prefetch(row, o + PREFETCH_BYTES)
                    sumi, sc = q6_k_block(row, o, xi, b * QK_K)
                    acc = _q6_end(acc, sumi, sc, row, o, xd, bs16, i, b)
                out[i, r] = hsum(acc)
