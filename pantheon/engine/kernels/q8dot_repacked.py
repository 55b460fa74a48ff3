"""Q4_0 / Q8_0 products on repacked weights (kernels.repack): every batch size, rows read as they lie.

A task's block holds its 32 rows' quant words row-interleaved, so one 64-byte load gives one word of
16 rows and one vpdpbusd against 4 broadcast activation bytes advances all 16 (Q4_0: two, after
splitting the nibbles in the register). Nothing is transposed per call, and each worker streams one
contiguous run of tasks, the access the hardware prefetcher follows best. Per (row, vector) the
operations are q8dot's: D_b = Σ q·xq − z·Σxq exactly, then acc = fma(float(D_b), d_b·xd_b, acc) in
block order, so results equal the zero-copy kernels' bit for bit at every batch size. On AVX2 hosts
(no vpdpbusd) a Q4_0 block's words add vpmaddubsw pair sums in int16 and one vpmaddwd ends the block
(kernels.vnni.pairs), where the emulated vpdpbusd spent a vpmaddwd and a vpaddd per word.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.jit import exact, exact_serial, inline
from pantheon.engine.kernels.q8dot_tiles import block_end, block_start, put_rows
from pantheon.engine.kernels.repack import ROWS
from pantheon.engine.kernels.simd import prefetch_l2
from pantheon.engine.kernels.simd512 import store16
from pantheon.engine.kernels.simd_lanes import fload16, fma16h, hi16, lo16, pdot16, qdot16, wload16
from pantheon.engine.kernels.steal import claim, counters, run_of

QK = 32
# Bytes of one quant word of all 32 rows, and of its first 16 rows.
WORD, HALF = 4 * ROWS, 2 * ROWS
# Blocks per span: every vector passes over a span before the next is read (8 Q4_0 blocks of 32
# rows are 4.5 KiB).
SPAN = 8


@inline
def _word4(c0, c1, c2, c3, w, x0, x1, x2, x3, xo, nibbles):
    """Four vectors' dots advanced by one quant word of 16 rows. Q4_0 (`nibbles`: two groups) adds pair
    sums (kernels.vnni.pairs) that `block_end` widens; a block's 8 groups of nibbles stay in int16 range
    (pair_words(4) = 8), so on AVX2 a word costs vpmaddubsw + vpaddw instead of an emulated vpdpbusd."""
    if nibbles:
        lo, hi = lo16(w), hi16(w)
        c0, c1 = pdot16(pdot16(c0, lo, x0, xo), hi, x0, xo + 16), pdot16(pdot16(c1, lo, x1, xo), hi, x1, xo + 16)
        c2, c3 = pdot16(pdot16(c2, lo, x2, xo), hi, x2, xo + 16), pdot16(pdot16(c3, lo, x3, xo), hi, x3, xo + 16)
        return c0, c1, c2, c3
    return qdot16(c0, w, x0, xo), qdot16(c1, w, x1, xo), qdot16(c2, w, x2, xo), qdot16(c3, w, x3, xo)


@inline
def _word1(c, w, x, xo, nibbles):
    """`_word4` for one vector."""
    if nibbles:
        return pdot16(pdot16(c, lo16(w), x, xo), hi16(w), x, xo + 16)
    return qdot16(c, w, x, xo)


@inline
def stream_ahead(row, o, gb, first, ahead):
    """Ask for block o's bytes `ahead` on (kernels.stream; 0: leave it to the hardware prefetcher), on the
    pass that reads the task from memory (later passes find it in L2): every cache line of it, the
    task's rows being one contiguous stream."""
    if first and ahead:
        for line in range(o + ahead, o + ahead + gb, 64):
            prefetch_l2(row, line)


@inline
def _four(p, t, words, xq, xd, xsum, i, zero, b0, b1, acc, ahead):
    """Vectors i..i+3 against task t's two 16-row groups over blocks b0..b1, one group at a time: its 4
    int row-lane accumulators stay in registers across the block's words (both groups at once spill on
    AVX2's 16 registers); the float ones are carried in acc [n·32]."""
    k1, k2, k3 = i + 1, i + 2, i + 3
    x0, x1, x2, x3 = xq[i], xq[k1], xq[k2], xq[k3]  # [cols] int8 bytes each
    row, gb, nibbles = p[t], words * WORD + 2 * ROWS, words == 4
    for b in range(b0, b1):
        o = b * gb
        stream_ahead(row, o, gb, i == 0, ahead)
        s0, s1, s2, s3 = xsum[i, b], xsum[k1, b], xsum[k2, b], xsum[k3, b]
        for h in range(2):
            c0, c1 = block_start(zero, s0, nibbles), block_start(zero, s1, nibbles)
            c2, c3 = block_start(zero, s2, nibbles), block_start(zero, s3, nibbles)
            for w in range(words):
                c0, c1, c2, c3 = _word4(c0, c1, c2, c3, wload16(row, o + w * WORD + h * HALF), x0, x1, x2, x3,
                                        b * QK + 4 * w, nibbles)
            c0, c1 = block_end(c0, zero, s0, nibbles), block_end(c1, zero, s1, nibbles)
            c2, c3 = block_end(c2, zero, s2, nibbles), block_end(c3, zero, s3, nibbles)
            dq, lane = o + words * WORD + h * (HALF // 2), 16 * h
            for k, (c, xdk) in enumerate(((c0, xd[i, b]), (c1, xd[k1, b]), (c2, xd[k2, b]), (c3, xd[k3, b]))):
                at = 32 * (i + k) + lane
                store16(acc, at, fma16h(fload16(acc, at), c, row, dq, xdk))


@inline
def _one(p, t, words, xq, xd, xsum, i, zero, b0, b1, acc, ahead):
    """`_four` for the single vector i."""
    x0, a0, e0 = xq[i], fload16(acc, 32 * i), fload16(acc, 32 * i + 16)  # [cols] int8 bytes
    row, gb, nibbles = p[t], words * WORD + 2 * ROWS, words == 4
    for b in range(b0, b1):
        o = b * gb
        stream_ahead(row, o, gb, i == 0, ahead)
        c0 = block_start(zero, xsum[i, b], nibbles)
        f0 = c0
        for w in range(words):
            xo = b * QK + 4 * w
            c0 = _word1(c0, wload16(row, o + w * WORD), x0, xo, nibbles)
            f0 = _word1(f0, wload16(row, o + w * WORD + HALF), x0, xo, nibbles)
        c0, f0 = block_end(c0, zero, xsum[i, b], nibbles), block_end(f0, zero, xsum[i, b], nibbles)
        dq = o + words * WORD
        a0, e0 = fma16h(a0, c0, row, dq, xd[i, b]), fma16h(e0, f0, row, dq + HALF // 2, xd[i, b])
    store16(acc, 32 * i, a0)
    store16(acc, 32 * i + 16, e0)


@inline
def _task(p, t, rows, xq, xd, xsum, out, zero, words, acc, tmp, ahead):
    """Task t's rows for every vector: span by span of SPAN blocks, every vector past each span while
    it is in L1, so the stream from memory never waits for later vectors' passes."""
    n, nb = xq.shape[0], xd.shape[1]
    acc[:] = 0.0
    for b0 in range(0, nb, SPAN):
        b1 = min(nb, b0 + SPAN)
        for i in range(0, n - n % 4, 4):
            _four(p, t, words, xq, xd, xsum, i, zero, b0, b1, acc, ahead)
        for i in range(n - n % 4, n):
            _one(p, t, words, xq, xd, xsum, i, zero, b0, b1, acc, ahead)
    nr = min(rows, (t + 1) * ROWS) - t * ROWS
    for i in range(n):
        put_rows(out[i], t * ROWS, 0, fload16(acc, 32 * i), nr, tmp)
        put_rows(out[i], t * ROWS, 16, fload16(acc, 32 * i + 16), nr, tmp)


@inline
def _products(p, rows, xq, xd, xsum, out, zero, words, threads, ahead):
    """out [n, rows]: each of `threads` workers streams one contiguous run of tasks, then steals from the
    others' (kernels.steal)."""
    workers = max(1, min(p.shape[0], threads))
    cnt = counters(workers)
    for wk in prange(workers):
        if words == 4:
            _worker4(np.int64(wk), workers, cnt, p, rows, xq, xd, xsum, out, ahead)
        else:
            _worker8(np.int64(wk), workers, cnt, p, rows, xq, xd, xsum, out, ahead)


@inline
def _work(wk, workers, cnt, p, rows, xq, xd, xsum, out, zero, words, ahead):
    """Worker wk's share: its own run of tasks, then what it steals from the others'."""
    tasks = p.shape[0]
    per = -(-tasks // workers)
    acc = np.empty(xq.shape[0] * ROWS, np.float32)  # [n, 32] row-lane accumulators of the task
    tmp = np.empty(16, np.float32)  # [16] one ragged row group
    for j in range(workers):
        s = (wk + j) % workers
        lo, hi = run_of(s, per, tasks)
        taken, t = 0, claim(cnt, s, j == 0, lo, hi, 0)
        while t >= 0:
            _task(p, t, rows, xq, xd, xsum, out, zero, words, acc, tmp, ahead)
            taken += 1
            t = claim(cnt, s, j == 0, lo, hi, taken)


# A worker's share as a function of its own per type: numba's parfor passes copy a loop body several
# times, so the passes inlined into the prange body cost compile time (q8k_repacked: ~4x).
@exact_serial
def _worker4(wk, workers, cnt, p, rows, xq, xd, xsum, out, ahead):
    _work(wk, workers, cnt, p, rows, xq, xd, xsum, out, np.int32(8), 4, ahead)


@exact_serial
def _worker8(wk, workers, cnt, p, rows, xq, xd, xsum, out, ahead):
    _work(wk, workers, cnt, p, rows, xq, xd, xsum, out, np.int32(128), 8, ahead)


@exact
def q4_0_repacked(p, rows, xq, xd, xsum, out, threads, ahead):
    """out[i, r] for repacked Q4_0 rows p (rows of them) and quantized vectors xq (scales xd, sums xsum);
    `ahead`: the stream's prefetch distance in bytes (kernels.stream)."""
    _products(p, rows, xq, xd, xsum, out, np.int32(8), 4, threads, ahead)


@exact
def q8_0_repacked(p, rows, xq, xd, xsum, out, threads, ahead):
    """out[i, r] for repacked Q8_0 rows (q + 128 as vpdpbusd's unsigned side, 128·Σxq folded out)."""
    _products(p.view(np.int8), rows, xq, xd, xsum, out, np.int32(128), 8, threads, ahead)  # wide bytes
