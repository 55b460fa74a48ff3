"""K-quant prefill and batched-decode kernels (AVX-512 VNNI or AVX2): 32 rows unpacked and interleaved per task.

A task moves its rows' quants into the interleaved layout of q8dot_tiles ([4-quant group, row,
4 bytes]) and their scales, mins, d and dmin into row lanes: Q4_K straight from the file (one register
transpose per two sub-blocks of 16 rows), the other types through q8k_tiles' common form (u8 quants
in activation order, an int16 scale and min per 16 values). Per sub-block the quant words' dots
(simd_lanes.pdot16) take their scale once (pmac16): after VNNI one 512-bit vpdpbusd per 4 quants and
one vpmulld, on AVX2 vpmaddubsw pair sums added in int16 for pwords16(bits) words and one vpmaddwd by
the scale (llama.cpp's AVX2 form; an emulated vpdpbusd spent a vpmaddwd and a vpaddd per word). Per
super-block vpdpwssd forms M = Σ m_j·Σx_j (one per 16 values), and acc = fma(float(I), d·xd, acc),
acc = fma(float(M), −(dmin·xd), acc) with I = Σ sc_j·D_j: the operations of q8k_rows' decode
kernels, so a row's result does not depend on the batch.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.avx2 import k4_scales
from pantheon.engine.kernels.jit import exact, exact_serial, inline
from pantheon.engine.kernels.kblocks import QK_K
from pantheon.engine.kernels.q8dot_tiles import put_rows
from pantheon.engine.kernels.q8k_dot import Q4_K_BYTES
from pantheon.engine.kernels.q8k_tiles import Q4_K, Q5_K, Q6_K, unpack
from pantheon.engine.kernels.simd import half_at
from pantheon.engine.kernels.simd512 import (fma16, fnma16, fzero16, interleave_k4, interleave_u8, izero16, mins16,
                                             put_k4_scales)
from pantheon.engine.kernels.simd_lanes import pdot16, pmac16, pwords16, wload16

# Rows per task: two 16-lane groups.
CHUNK = 32
# Bytes of one 4-quant group of all CHUNK rows in the interleaved tile.
GROUP = 4 * CHUNK


@inline
def _interleave(q, nr, qt32):
    """The task's unpacked quants q [CHUNK, cols] into the interleaved tile qt32 [cols/4, CHUNK] words."""
    cols = q.shape[1]
    if nr < CHUNK:
        q[nr:] = 0  # spare rows: zero quants (their scales and d were zeroed too), lanes never stored
    for g in range(0, CHUNK, 16):
        for o in range(0, cols, 32):
            interleave_u8(q, g, o, cols, qt32, (o // 4) * CHUNK + g, CHUNK)


@inline
def _unpack_any(kind, raw, r0, nr, q, qt32, svt, mnt, dt, dmt):
    """Rows r0..r0+nr of any K-quant `kind` through the common form into the row lanes."""
    if nr < CHUNK:
        svt[:, nr:], mnt[:, nr:], dt[:, nr:], dmt[:, nr:] = 0, 0, 0.0, 0.0
    for rr in range(nr):  # scales straight into row lanes: no second pass over them
        unpack(kind, raw, r0 + rr, q[rr], svt[:, rr], mnt[:, rr], dt[:, rr], dmt[:, rr])
    _interleave(q, nr, qt32)


@inline
def _unpack_q4_k(raw, r0, qt32, svt, mnt, dt, dmt):
    """CHUNK Q4_K rows into the row lanes without the common form: each 32 nibble bytes of 16 rows move as
    one register transpose (interleave_k4: two sub-blocks), then the 6-bit scales and mins per row."""
    stride = raw.strides[0]
    for g in range(0, CHUNK, 16):
        for b in range(dt.shape[0]):
            for p in range(4):
                dst = (b * 64 + 16 * p) * CHUNK + g
                interleave_k4(raw, r0 + g, b * Q4_K_BYTES + 16 + 32 * p, stride, qt32, dst, CHUNK)
    svf, mnf = svt.ravel(), mnt.ravel()  # [cols/16 * CHUNK] each, the same memory
    for rr in range(CHUNK):
        row = raw[r0 + rr]  # [row_bytes]
        for b in range(dt.shape[0]):
            o = b * Q4_K_BYTES
            dt[b, rr], dmt[b, rr] = half_at(row, o), half_at(row, o + 2)
            put_k4_scales(k4_scales(row, o + 4), svf, b * 16 * CHUNK + rr, mnf, b * 16 * CHUNK + rr, CHUNK)


@inline
def pass4(sub, step, qt, svt, mnt, dt, dmt, xq, xd, bs16, i, out, r0, nr, tmp):
    """Vectors i..i+3 against the task's two 16-row groups (sub: values per scale, 16 or 32; step: quant
    words pdot16 adds between two pmac16s, pwords16 of the quants' bits), one group at a time: both at
    once hold 24 16-lane accumulators, which AVX2 (two registers a value) spills."""
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    sb = svt.view(np.uint8)  # [cols/16 · CHUNK · 4] the scales' bytes, for 16-lane loads
    for h in range(2):
        a0, a1, a2, a3 = fzero16(), fzero16(), fzero16(), fzero16()
        for b in range(xd.shape[1]):
            i0, i1, i2, i3 = izero16(), izero16(), izero16(), izero16()
            for s in range(QK_K // sub):
                sv = wload16(sb, 4 * (((b * QK_K + s * sub) // 16) * CHUNK + 16 * h))  # 16 rows' scales
                for g0 in range(0, sub // 4, step):
                    c0, c1, c2, c3 = izero16(), izero16(), izero16(), izero16()
                    for g in range(g0, min(sub // 4, g0 + step)):
                        xo = b * QK_K + s * sub + 4 * g
                        w = wload16(qt, (xo // 4) * GROUP + 64 * h)
                        c0, c1 = pdot16(c0, w, x0, xo), pdot16(c1, w, x1, xo)
                        c2, c3 = pdot16(c2, w, x2, xo), pdot16(c3, w, x3, xo)
                    i0, i1 = pmac16(i0, c0, sv), pmac16(i1, c1, sv)
                    i2, i3 = pmac16(i2, c2, sv), pmac16(i3, c3, sv)
            a0 = _end(a0, i0, mnt, dt, dmt, bs16[i], xd[i, b], b, h)
            a1 = _end(a1, i1, mnt, dt, dmt, bs16[i + 1], xd[i + 1, b], b, h)
            a2 = _end(a2, i2, mnt, dt, dmt, bs16[i + 2], xd[i + 2, b], b, h)
            a3 = _end(a3, i3, mnt, dt, dmt, bs16[i + 3], xd[i + 3, b], b, h)
        for k, a in enumerate((a0, a1, a2, a3)):
            put_rows(out[i + k], r0, 16 * h, a, nr, tmp)


@inline
def _end(a, ia, mnt, dt, dmt, bsi, xd, b, h):
    """Super-block b's two fmas for row group h of one vector: scaled sums, then mins."""
    t, m = b * CHUNK + 16 * h, b * 16 * CHUNK + 16 * h
    return fnma16(fma16(a, ia, dt, t, xd), mins16(mnt, m, CHUNK, bsi, 16 * b), dmt, t, xd)


@inline
def pass1(sub, step, qt, svt, mnt, dt, dmt, xq, xd, bs16, i, out, r0, nr, tmp):
    """`pass4` for the single vector i, both row groups at once."""
    x0, a0, e0 = xq[i], fzero16(), fzero16()  # [cols] int8 bytes
    sb = svt.view(np.uint8)  # [cols/16 · CHUNK · 4] the scales' bytes
    for b in range(xd.shape[1]):
        i0, j0 = izero16(), izero16()
        for s in range(QK_K // sub):
            t = 4 * ((b * QK_K + s * sub) // 16) * CHUNK
            sv, sw = wload16(sb, t), wload16(sb, t + 64)  # rows 0-15's and 16-31's scales
            for g0 in range(0, sub // 4, step):
                c0, f0 = izero16(), izero16()
                for g in range(g0, min(sub // 4, g0 + step)):
                    xo = b * QK_K + s * sub + 4 * g
                    wo = (xo // 4) * GROUP
                    c0, f0 = pdot16(c0, wload16(qt, wo), x0, xo), pdot16(f0, wload16(qt, wo + 64), x0, xo)
                i0, j0 = pmac16(i0, c0, sv), pmac16(j0, f0, sw)
        a0 = _end(a0, i0, mnt, dt, dmt, bs16[i], xd[i, b], b, 0)
        e0 = _end(e0, j0, mnt, dt, dmt, bs16[i], xd[i, b], b, 1)
    put_rows(out[i], r0, 0, a0, nr, tmp)
    put_rows(out[i], r0, 16, e0, nr, tmp)


@inline
def _bits(kind):
    """The bits below which `kind`'s common-form quants lie, as pwords16 takes them (Q2_K's and Q3_K's
    within 4's bound)."""
    return 6 if kind == Q6_K else (5 if kind == Q5_K else 4)


@inline
def _tiles(kind, sub, raw, xq, xd, bs16, out, threads):
    """out [n, rows] for every vector: each of `threads` workers takes every threads-th task of CHUNK
    rows with one scratch, allocated once per call (sub: values per scale, 16 or 32)."""
    tasks = (raw.shape[0] + CHUNK - 1) // CHUNK
    workers = max(1, min(tasks, threads))
    for w in prange(workers):
        if sub == 32:
            _worker32(kind, np.int64(w), workers, raw, xq, xd, bs16, out)
        else:
            _worker16(kind, np.int64(w), workers, raw, xq, xd, bs16, out)


# A worker's tasks as a function of its own per scale granularity: numba's parfor passes copy a loop
# body several times, so every unpack and pass inlined into the prange body cost compile time.
@exact_serial
def _worker32(kind, w, workers, raw, xq, xd, bs16, out):
    _work(kind, 32, w, workers, raw, xq, xd, bs16, out)


@exact_serial
def _worker16(kind, w, workers, raw, xq, xd, bs16, out):
    _work(kind, 16, w, workers, raw, xq, xd, bs16, out)


@inline
def _work(kind, sub, w, workers, raw, xq, xd, bs16, out):
    """Worker w's tasks: every workers-th of CHUNK rows, with one scratch."""
    rows, n, cols = raw.shape[0], xq.shape[0], xq.shape[1]
    tasks = (rows + CHUNK - 1) // CHUNK
    q = np.empty((CHUNK, cols), np.uint8)  # [CHUNK, cols] common-form quants in activation order
    svt = np.empty((cols // 16, CHUNK), np.int32)  # [cols/16, CHUNK] scales in row lanes
    mnt = np.empty((cols // 16, CHUNK), np.int32)  # [cols/16, CHUNK] mins in row lanes
    dt = np.empty((cols // QK_K, CHUNK), np.float32)  # [nb, CHUNK] d in row lanes
    dmt = np.empty((cols // QK_K, CHUNK), np.float32)  # [nb, CHUNK] dmin in row lanes
    qt32 = np.empty(cols // 4 * CHUNK, np.uint32)  # [cols/4, CHUNK] interleaved quant words
    tmp = np.empty(16, np.float32)  # [16] one ragged row group
    qt, svf, mnf, dtf, dmf = qt32.view(np.uint8), svt.ravel(), mnt.ravel(), dt.ravel(), dmt.ravel()
    step = pwords16(_bits(kind))
    for c in range(w, tasks, workers):
        r0 = c * CHUNK
        nr = min(rows, r0 + CHUNK) - r0
        if kind == Q4_K and nr == CHUNK:
            _unpack_q4_k(raw, r0, qt32, svt, mnt, dt, dmt)
        else:
            _unpack_any(kind, raw, r0, nr, q, qt32, svt, mnt, dt, dmt)
        for i in range(0, n - n % 4, 4):
            pass4(sub, step, qt, svf, mnf, dtf, dmf, xq, xd, bs16, i, out, r0, nr, tmp)
        for i in range(n - n % 4, n):
            pass1(sub, step, qt, svf, mnf, dtf, dmf, xq, xd, bs16, i, out, r0, nr, tmp)


@exact
def tiles32(kind, raw, xq, xd, bs16, out, threads):
    """out[i, r] for Q8_K vectors and rows of a K-quant `kind` with one scale per 32 values (Q4_K, Q5_K)."""
    _tiles(kind, 32, raw, xq, xd, bs16, out, threads)


@exact
def tiles16(kind, raw, xq, xd, bs16, out, threads):
    """out[i, r] for a K-quant `kind` with one scale per 16 values (Q6_K, Q2_K, Q3_K)."""
    _tiles(kind, 16, raw, xq, xd, bs16, out, threads)


def tiles(kind, raw, xq, xd, bs16, out, threads):
    """The kernel for `kind`'s scale granularity."""
    (tiles32 if kind in (Q4_K, Q5_K) else tiles16)(kind, raw, xq, xd, bs16, out, threads)
