"""K-quant decode kernels on AVX-512 VNNI hosts: rows read in place, each super-block's sums reduced to integers.

Per row and super-block, q8k_dot's integer pass (vpmaddubsw, then vpmaddwd by the sub-block scales)
leaves 8 int32 lanes that sum exactly to I = Σ sc_j·D_j, and its mins pass lanes summing to
M = Σ m_j·Σx_j. Both reduce to scalars and the super-block ends with acc = fma(float(I), d·xd, acc),
acc = fma(float(M), −(dmin·xd), acc): q8k_lanes' operations, so a row's result is the same whichever
kernel and batch computed it. (Reducing 8 rows' lanes at once, as q8dot does, spilled registers
around these larger blocks: 0.215 against 0.182 ms for Q4_K 5632x2048.)
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.avx2 import mins_lanes, offs_lanes
from pantheon.engine.kernels.jit import exact, inline
from pantheon.engine.kernels.kblocks import QK_K
from pantheon.engine.kernels.q8k_dot import (Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, q4_k_block, q4_k_sums4, q5_k_block,
                                             q6_k_block, q6_k_sums4)
from pantheon.engine.kernels.simd import PREFETCH_BYTES, fmadd, fzero4, half_at, lane, mul, prefetch
from pantheon.engine.kernels.simd512 import fma_super4, isum8, reduce8

# Rows per prange task.
CHUNK = 16
# Kinds, as in q8k_tiles.
Q4_K, Q5_K, Q6_K = 0, 1, 2


@inline
def _sums(kind, row, o, xi, bsi, b):
    """(int32 lanes summing to I, lanes summing to M) of super-block b at row[o:] for one vector."""
    prefetch(row, o + PREFETCH_BYTES)
    if kind == Q6_K:
        s, sc = q6_k_block(row, o, xi, b * QK_K)
    else:
        s, sc = q5_k_block(row, o, xi, b * QK_K) if kind == Q5_K else q4_k_block(row, o, xi, b * QK_K)
    return s, _mins(kind, sc, bsi, b)


@inline
def _d(kind, row, o):
    """(d, dmin) of the super-block at row[o:] (Q6_K: dmin = d, its offset 32 folded in as a min)."""
    if kind == Q6_K:
        d = half_at(row, o + 208)
        return d, d
    return half_at(row, o), half_at(row, o + 2)


@inline
def _one_row(kind, nbytes, row, xi, xd, bsi):
    """One row's output for one vector: two fmas per super-block on its exact integer sums."""
    acc = np.float32(0.0)
    for b in range(xd.shape[0]):
        o = b * nbytes
        s, m = _sums(kind, row, o, xi, bsi, b)
        d, dm = _d(kind, row, o)
        acc = fmadd(acc, np.float32(isum8(s)), mul(d, xd[b]))
        acc = fmadd(acc, np.float32(isum8(m)), -mul(dm, xd[b]))
    return acc


@inline
def _rows(kind, nbytes, raw, xq, xd, bs16, out):
    """out [n, rows] for every vector, each task a CHUNK of rows read in place."""
    rows, n = raw.shape[0], xq.shape[0]
    for c in prange((rows + CHUNK - 1) // CHUNK):
        r0, r1 = c * CHUNK, min(rows, (c + 1) * CHUNK)
        for i in range(n):
            for rr in range(r0, r1):
                out[i, rr] = _one_row(kind, nbytes, raw[rr], xq[i], xd[i], bs16[i])


@inline
def _mins(kind, sc, bsi, b):
    """Int32 lanes summing to M = Σ m_j·Σx_j of super-block b (Q6_K: its offset 32 as the mins)."""
    return offs_lanes(sc, bsi, 16 * b, 5) if kind == Q6_K else mins_lanes(sc, bsi, 16 * b)


@inline
def _x4(kind, nbytes, raw, xq, xd, bs16, out):
    """Q4_K or Q6_K rows against 4 vectors at a time (n a multiple of 4): each super-block unpacked once
    for 4 vectors, the 8 integer sums (I and M per vector) reduced together (simd512.reduce8) and the
    4 vectors' fmas run as float lanes, each lane `_one_row`'s operations."""
    rows, n = raw.shape[0], xq.shape[0]
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(0, n, 4):
            x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                acc = fzero4()
                for b in range(xd.shape[1]):
                    o = b * nbytes
                    prefetch(row, o + PREFETCH_BYTES)
                    if kind == Q6_K:
                        s0, s1, s2, s3, sc = q6_k_sums4(row, o, b, x0, x1, x2, x3)
                    else:
                        s0, s1, s2, s3, sc = q4_k_sums4(row, o, b, x0, x1, x2, x3)
                    red = reduce8(s0, s1, s2, s3, _mins(kind, sc, bs16[i], b), _mins(kind, sc, bs16[i + 1], b),
                                  _mins(kind, sc, bs16[i + 2], b), _mins(kind, sc, bs16[i + 3], b))  # [8] I, then M
                    d, dm = _d(kind, row, o)
                    acc = fma_super4(acc, red, d, dm, xd[i, b], xd[i + 1, b], xd[i + 2, b], xd[i + 3, b])
                out[i, r], out[i + 1, r] = lane(acc, 0), lane(acc, 1)
                out[i + 2, r], out[i + 3, r] = lane(acc, 2), lane(acc, 3)


@exact
def q4_k_x4(raw, xq, xd, bs16, out):
    """q4_k for n a multiple of 4 (batched decode), each row read and unpacked once per 4 vectors."""
    _x4(Q4_K, Q4_K_BYTES, raw, xq, xd, bs16, out)


@exact
def q6_k_x4(raw, xq, xd, bs16, out):
    """q6_k for n a multiple of 4 (batched decode), each row read and unpacked once per 4 vectors."""
    _x4(Q6_K, Q6_K_BYTES, raw, xq, xd, bs16, out)


@exact
def q4_k(raw, xq, xd, bs16, out):
    """out[i, r] = Σ_b d·xd·Σ sc·q·xq − dmin·xd·Σ m·Σxq over Q4_K row r and Q8_K vector i."""
    _rows(Q4_K, Q4_K_BYTES, raw, xq, xd, bs16, out)


@exact
def q5_k(raw, xq, xd, bs16, out):
    """q4_k for Q5_K rows."""
    _rows(Q5_K, Q5_K_BYTES, raw, xq, xd, bs16, out)


@exact
def q6_k(raw, xq, xd, bs16, out):
    """out[i, r] = Σ_b d·xd·(Σ sc·q·xq − 32·Σ sc·Σxq) over Q6_K row r and Q8_K vector i."""
    _rows(Q6_K, Q6_K_BYTES, raw, xq, xd, bs16, out)
