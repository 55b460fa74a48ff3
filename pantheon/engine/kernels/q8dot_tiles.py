"""Prefill and batched-decode kernels: a task interleaves 32 weight rows once, then runs every vector past them.

Each task unpacks its CHUNK rows into u8 quants laid out [block, 4-quant group, row, 4 bytes]
(tens of KiB, cache-resident; the weights stay zero-copy views of the file) and their float32 d
laid out [block, row]. One 512-bit vpdpbusd then advances 16 rows by 4 quants against 4 activation
bytes broadcast to every lane (on AVX2: Q4_0's vpmaddubsw pair sums added in int16 over a block,
Q8_0's sign-moved form, simd_lanes' pdot16 / qdot16), so a row's block dot lands whole in its lane and
one convert and one fma finish 16 rows. Four vectors share every weight load. Per (row, vector) the
operations are q8dot's decode kernels': the same bits.
"""

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from numba import prange

from pantheon.engine.kernels.jit import exact, exact_serial, inline
from pantheon.engine.kernels.simd import bits32, flip_sign, half_at, nibbles16, prefetch
from pantheon.engine.kernels.simd512 import (fma16, fzero16, ibcast16, interleave_q4_0, interleave_q8_0, izero16,
                                             scatter_words, store16)
from pantheon.engine.kernels.simd_lanes import pdot16, pmac16, qdot16, qstart16, wload16

QK = 32
Q4_0_BYTES = GGML_QUANT_SIZES[GGMLQuantizationType.Q4_0][1]
Q8_0_BYTES = GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0][1]
# Rows interleaved per prange task: two 16-lane groups. 32 rows of a 5632-column matrix are 176 KiB
# of quants (L2).
CHUNK = 32
# Bytes of one 4-quant group of all CHUNK rows in the interleaved tile.
GROUP = 4 * CHUNK


@inline
def _unpack(raw, r0, nr, qt32, ds, eight, nbytes, ahead):
    """Rows r0..r0+nr (Q8_0 when `eight`, else Q4_0) into lanes 0..nr of the interleaved tile qt32 and ds.

    Block-major, so the 1 KiB a block fills stays in L1; full 16-row groups move as one register
    transpose (interleave_*), a ragged group's rows word by word."""
    full, stride = nr - nr % 16, raw.strides[0]
    for b in range(ds.shape[0] // CHUNK):
        o = b * nbytes
        for g in range(0, full, 16):
            if eight:
                interleave_q8_0(raw, r0 + g, o, stride, qt32, b * 8 * CHUNK + g, CHUNK)
            else:
                interleave_q4_0(raw, r0 + g, o, stride, qt32, b * 8 * CHUNK + g, CHUNK)
        for rr in range(nr):
            ds[b * CHUNK + rr] = half_at(raw[r0 + rr], o)
        prefetch_rows(raw, ahead, CHUNK, o)
    for rr in range(full, nr):
        row = raw[r0 + rr]  # [row_bytes]
        for b in range(ds.shape[0] // CHUNK):
            if eight:
                scatter_words(qt32, b * 8 * CHUNK + rr, CHUNK, flip_sign(bits32(row, b * nbytes + 2, 0, 255)))
            else:
                scatter_words(qt32, b * 8 * CHUNK + rr, CHUNK, nibbles16(row, b * nbytes + 2))


@inline
def prefetch_rows(raw, r0, count, o):
    """Prefetch byte o of rows r0..r0+count (those that exist; none if r0 < 0).

    Reading many rows block by block runs as many streams at once, more than the hardware prefetcher
    follows: from DRAM (a model's weights, not a benchmark's cached matrix) the kernels waited on
    memory. Called at each block offset o of the rows being read, it touches every cache line of the
    next group of rows before that group is read. No division: a line-by-line form with a division
    per line doubled the cache-resident decode time (Q4_0 5632x2048: 0.37 against 0.18 ms)."""
    if r0 < 0:
        return
    for r in range(r0, min(r0 + count, raw.shape[0])):
        prefetch(raw[r], o)


@inline
def put_rows(outi, r0, lo, acc, nr, tmp):
    """outi[r0+lo : r0+lo+16] = acc, only the rows the task has (nr of them)."""
    if lo + 16 <= nr:
        store16(outi, r0 + lo, acc)
        return
    store16(tmp, 0, acc)
    for k in range(max(0, nr - lo)):
        outi[r0 + lo + k] = tmp[k]


@inline
def block_start(zero, xsum, nibbles):
    """A block's dot before its words: Q8_0's `qstart16` (−z·Σxq in int32 lanes after VNNI, 0 on AVX2), or
    empty pair sums (Q4_0, whose −z·Σxq `block_end` adds)."""
    return izero16() if nibbles else qstart16(zero, xsum)


@inline
def _dot(c, qt, wo, x, xo, nibbles):
    """c advanced by one 4-quant group of 16 rows: Q8_0's `qdot16`, or Q4_0's int16 pair sums (a block's 8
    groups of nibbles stay in range: pair_words(4) = 8)."""
    w = wload16(qt, wo)
    return pdot16(c, w, x, xo) if nibbles else qdot16(c, w, x, xo)


@inline
def block_end(c, zero, xsum, nibbles):
    """A block's exact D_b = Σ q·xq − z·Σxq in int32 lanes from what its words accumulated."""
    return pmac16(ibcast16(-zero * xsum), c, ibcast16(1)) if nibbles else c


@inline
def _four(qt, ds, xq, xd, xsum, i, zero, out, r0, nr, tmp, nibbles):
    """Vectors i..i+3 against the task's 16-row groups, one at a time: 4 int and 4 float row-lane
    accumulators (both groups at once spill on AVX2, two registers a 16-lane value)."""
    x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
    for h in range(2):
        a0, a1, a2, a3 = fzero16(), fzero16(), fzero16(), fzero16()
        for b in range(xd.shape[1]):
            s0, s1, s2, s3 = xsum[i, b], xsum[i + 1, b], xsum[i + 2, b], xsum[i + 3, b]
            c0, c1 = block_start(zero, s0, nibbles), block_start(zero, s1, nibbles)
            c2, c3 = block_start(zero, s2, nibbles), block_start(zero, s3, nibbles)
            for j in range(8):
                wo, xo = (b * 8 + j) * GROUP + 64 * h, b * QK + 4 * j
                c0, c1 = _dot(c0, qt, wo, x0, xo, nibbles), _dot(c1, qt, wo, x1, xo, nibbles)
                c2, c3 = _dot(c2, qt, wo, x2, xo, nibbles), _dot(c3, qt, wo, x3, xo, nibbles)
            t = b * CHUNK + 16 * h
            a0 = fma16(a0, block_end(c0, zero, s0, nibbles), ds, t, xd[i, b])
            a1 = fma16(a1, block_end(c1, zero, s1, nibbles), ds, t, xd[i + 1, b])
            a2 = fma16(a2, block_end(c2, zero, s2, nibbles), ds, t, xd[i + 2, b])
            a3 = fma16(a3, block_end(c3, zero, s3, nibbles), ds, t, xd[i + 3, b])
        for k, a in enumerate((a0, a1, a2, a3)):
            put_rows(out[i + k], r0, 16 * h, a, nr, tmp)


@inline
def _one(qt, ds, xq, xd, xsum, i, zero, out, r0, nr, tmp, nibbles):
    """`_four` for the single vector i, both row groups at once."""
    x0, a0, e0 = xq[i], fzero16(), fzero16()  # [cols] int8 bytes
    for b in range(xd.shape[1]):
        s0 = xsum[i, b]
        c0, f0 = block_start(zero, s0, nibbles), block_start(zero, s0, nibbles)
        for j in range(8):
            wo, xo = (b * 8 + j) * GROUP, b * QK + 4 * j
            c0, f0 = _dot(c0, qt, wo, x0, xo, nibbles), _dot(f0, qt, wo + 64, x0, xo, nibbles)
        a0 = fma16(a0, block_end(c0, zero, s0, nibbles), ds, b * CHUNK, xd[i, b])
        e0 = fma16(e0, block_end(f0, zero, s0, nibbles), ds, b * CHUNK + 16, xd[i, b])
    put_rows(out[i], r0, 0, a0, nr, tmp)
    put_rows(out[i], r0, 16, e0, nr, tmp)


@inline
def _task(raw, xq, xd, xsum, out, zero, nbytes, c, ahead, qt, ds, tmp):
    """Rows c·CHUNK onward (CHUNK or fewer) interleaved into the worker's scratch, then every vector."""
    rows, n = raw.shape[0], xq.shape[0]
    r0 = c * CHUNK
    nr = min(rows, r0 + CHUNK) - r0
    if nr < CHUNK:
        qt[:] = 0  # a ragged task's spare rows: zero quants and scales, their lanes never stored
        ds[:] = 0.0
    qt32 = qt.view(np.uint32)  # [nb * 8 * CHUNK] the same bytes as 4-quant words
    nibbles = nbytes == Q4_0_BYTES
    _unpack(raw, r0, nr, qt32, ds, not nibbles, nbytes, ahead)
    for i in range(0, n - n % 4, 4):
        _four(qt, ds, xq, xd, xsum, i, zero, out, r0, nr, tmp, nibbles)
    for i in range(n - n % 4, n):
        _one(qt, ds, xq, xd, xsum, i, zero, out, r0, nr, tmp, nibbles)


@inline
def _tiles(raw, xq, xd, xsum, out, zero, nbytes, threads, quants):
    """out [n, rows] for every vector: each of `threads` workers takes every threads-th task with one
    scratch, allocated once per call rather than once per task. `quants`, the tile's dtype: int8 for
    Q8_0's bytes of any value (simd512.wide_bytes), uint8 for nibbles."""
    workers = max(1, min((raw.shape[0] + CHUNK - 1) // CHUNK, threads))
    for t in prange(workers):
        if nbytes == Q4_0_BYTES:
            _worker4(np.int64(t), workers, raw, xq, xd, xsum, out)
        else:
            _worker8(np.int64(t), workers, raw, xq, xd, xsum, out)


@inline
def _work(t, workers, raw, xq, xd, xsum, out, zero, nbytes, quants):
    """Worker t's tasks: every workers-th, with one scratch."""
    tasks, nb = (raw.shape[0] + CHUNK - 1) // CHUNK, xd.shape[1]
    qt = np.empty(nb * 8 * GROUP, quants)  # [nb, 8, CHUNK, 4] interleaved quants
    ds = np.empty(nb * CHUNK, np.float32)  # [nb, CHUNK] d
    tmp = np.empty(16, np.float32)  # [16] one ragged row group
    for c in range(t, tasks, workers):
        ahead = (c + workers) * CHUNK if c + workers < tasks else -1
        _task(raw, xq, xd, xsum, out, zero, nbytes, c, ahead, qt, ds, tmp)


# A worker's tasks as a function of its own per type: numba's parfor passes copy a loop body several
# times, so the passes inlined into the prange body cost compile time (q8k_repacked: ~4x).
@exact_serial
def _worker4(t, workers, raw, xq, xd, xsum, out):
    _work(t, workers, raw, xq, xd, xsum, out, np.int32(8), Q4_0_BYTES, np.uint8)


@exact_serial
def _worker8(t, workers, raw, xq, xd, xsum, out):
    _work(t, workers, raw, xq, xd, xsum, out, np.int32(128), Q8_0_BYTES, np.int8)


@exact
def q4_0_tiles(raw, xq, xd, xsum, out, threads):
    """out[i, r] for Q4_0 rows raw and quantized vectors xq (scales xd, sums xsum [n, cols/32])."""
    _tiles(raw, xq, xd, xsum, out, np.int32(8), Q4_0_BYTES, threads, np.uint8)


@exact
def q8_0_tiles(raw, xq, xd, xsum, out, threads):
    """out[i, r] for Q8_0 rows (q + 128 as vpdpbusd's unsigned side, 128·Σxq folded out)."""
    _tiles(raw, xq, xd, xsum, out, np.int32(128), Q8_0_BYTES, threads, np.int8)
