"""Decode products on int8 activations (llama.cpp's mmvq): activations quantized per 32 values, dp4a dot products.

`quantize_units` turns x [n, cols] into int8 quants packed four to an int32 word, unit-major so a
warp's loads of word k of its lanes' units are one cache line: xq [n, 8, units], and per unit xs
[n, 3, units] = (d, d·Σq of values 0-15, d·Σq of values 16-31), d = max|x| / 127. A lane then reads 8
words and 3 floats per unit and vector where the float kernels (matvec.py) read 32 floats, and its
dot product is 8 dp4a instead of 32 fma. Per unit, with the weight's (a_h, b_h) from qunits.py:

    dot = d · (a0 · Σ_{l<16} q_l·xq_l + a1 · Σ_{l>=16} q_l·xq_l) + b0 · xs[1] + b1 · xs[2]

Geometry, shared-memory reduction and row loops are matvec.py's.
"""

import numpy as np
from numba import cuda

from pantheon.engine.cuda.dp4a import dp4a
from pantheon.engine.cuda.matvec import MAX_BATCH, MAX_THREADS, expert_row, lane_reduce
from pantheon.engine.cuda.qtypes import UNIT
from pantheon.engine.cuda.qunits import unit_q8

WORDS = UNIT // 4  # int32 words of int8 quants per unit
PAIRS = 2 * MAX_BATCH  # partial sums per thread of qmv8: two rows times the batch
HALF = np.float32(0.5)


@cuda.jit
def quantize_units(x, xq, xs):
    """x float32 [n, cols] -> xq int32 [n, 8, cols / 32] (value 4k + b of unit u in byte b of xq[i, k, u]),
    xs float32 [n, 3, cols / 32] (scale, and the scaled quant sums of the unit's two halves)."""
    units = xq.shape[2]
    for t in range(cuda.grid(1), x.shape[0] * units, cuda.gridsize(1)):
        i, c0 = t // units, (t % units) * UNIT
        amax = np.float32(0.0)
        for l in range(UNIT):
            amax = max(amax, abs(x[i, c0 + l]))
        d = amax / np.float32(127.0)
        inv = np.float32(127.0) / amax if amax > np.float32(0.0) else np.float32(0.0)
        sums = cuda.local.array(2, np.int32)  # [2] per half
        sums[0] = sums[1] = 0
        for k in range(WORDS):
            word = np.int32(0)
            for b in range(4):
                v = x[i, c0 + 4 * k + b] * inv
                q = np.int32(v + HALF) if v >= np.float32(0.0) else np.int32(v - HALF)  # nearest, ties away
                sums[k // 4] += q
                word |= (q & np.int32(255)) << np.int32(8 * b)  # only the low 32 bits are stored
            xq[i, k, t % units] = word
        xs[i, 0, t % units] = d
        xs[i, 1, t % units] = d * np.float32(sums[0])
        xs[i, 2, t % units] = d * np.float32(sums[1])


@cuda.jit(device=True, inline=True)
def combine(s0, s1, sc, xs, i, u):
    """A unit's dot product from its halves' integer sums s0, s1 and the weight's scales sc = (a0, a1, b0, b1)."""
    return xs[i, 0, u] * (sc[0] * np.float32(s0) + sc[1] * np.float32(s1)) + sc[2] * xs[i, 1, u] + sc[3] * xs[i, 2, u]


@cuda.jit(device=True, inline=True)
def unit_dot(qw, sc, xq, xs, i, u):
    """The dot product of one unpacked weight unit (quants qw, scales sc) with unit u of activation vector i."""
    s0 = s1 = 0
    for k in range(WORDS // 2):
        s0, s1 = dp4a(qw[k], xq[i, k, u], s0), dp4a(qw[k + WORDS // 2], xq[i, k + WORDS // 2, u], s1)
    return combine(s0, s1, sc, xs, i, u)


@cuda.jit(device=True, inline=True)
def pair_dot(qa, sa, qb, sb, xq, xs, i, u):
    """Dot products of two unpacked weight units (rows a and b) with unit u of vector i, each activation word
    loaded once for both rows."""
    a0 = a1 = b0 = b1 = 0
    for k in range(WORDS // 2):
        lo, hi = xq[i, k, u], xq[i, k + WORDS // 2, u]
        a0, a1 = dp4a(qa[k], lo, a0), dp4a(qa[k + WORDS // 2], hi, a1)
        b0, b1 = dp4a(qb[k], lo, b0), dp4a(qb[k + WORDS // 2], hi, b1)
    return combine(a0, a1, sa, xs, i, u), combine(b0, b1, sb, xs, i, u)


@cuda.jit
def qmv8(raw, qtype, xq, xs, out, c0):
    """out[i, c0 + r] = dot(dequant(raw[0, r]), x[i]) for raw uint16 words [1, rows, row_bytes / 2] of a type
    in INT8_TYPES and x [n <= 8, cols] given quantized (quantize_units) as xq, xs.

    A thread takes two adjacent rows, so each activation word it loads serves both (llama.cpp's mmvq
    does the same for batches): a block of (lanes, ry) threads covers 2·ry rows."""
    lane, lanes = cuda.threadIdx.x, cuda.blockDim.x
    tid = cuda.threadIdx.y * lanes + lane
    part = cuda.shared.array((MAX_THREADS, PAIRS), np.float32)  # [threads, 2 rows x batch]
    qa = cuda.local.array(WORDS, np.int32)  # [8] one unit of the first row, 4 quants per word
    qb = cuda.local.array(WORDS, np.int32)  # [8] the same unit of the second row
    rows, n, units = raw.shape[1], xq.shape[0], xq.shape[2]
    for r0 in range(2 * cuda.blockIdx.x * cuda.blockDim.y, rows, 2 * cuda.gridDim.x * cuda.blockDim.y):
        r = r0 + 2 * cuda.threadIdx.y
        rb = min(r + 1, rows - 1)  # a last odd row is computed twice and stored once
        for i in range(2 * n):
            part[tid, i] = 0.0
        if r < rows:
            for u in range(lane, units, lanes):
                sa, sb = unit_q8(raw, 0, r, u, qtype, qa), unit_q8(raw, 0, rb, u, qtype, qb)
                for i in range(n):
                    pa, pb = pair_dot(qa, sa, qb, sb, xq, xs, i, u)
                    part[tid, i] += pa
                    part[tid, n + i] += pb
        if lanes > 1:
            lane_reduce(part, tid, lane, lanes, 2 * n)
        if r < rows and lane == 0:
            for i in range(n):
                out[i, c0 + r] = part[tid, i]
                if rb > r:
                    out[i, c0 + rb] = part[tid, n + i]


@cuda.jit
def qmv8_sel(raw, qtype, sel, xdiv, xq, xs, out, c0):
    """out[m, c0 + r] = dot(dequant(raw[sel[m], r]), x[m // xdiv]): one expert per (token, slot) pair m, on
    x [M / xdiv, cols] quantized as xq, xs (quantize_units); raw as qmv8's with experts on axis 0."""
    lane, lanes = cuda.threadIdx.x, cuda.blockDim.x
    tid = cuda.threadIdx.y * lanes + lane
    part = cuda.shared.array((MAX_THREADS, 1), np.float32)  # [threads, 1]
    qw = cuda.local.array(WORDS, np.int32)  # [8]
    m_count, rows, units = out.shape[0], raw.shape[1], xq.shape[2]
    per_m = (rows + cuda.blockDim.y - 1) // cuda.blockDim.y
    for t0 in range(cuda.blockIdx.x, m_count * per_m, cuda.gridDim.x):
        m, r = expert_row(t0, per_m)
        part[tid, 0] = 0.0
        if r < rows:
            e, xi = sel[m], m // xdiv
            for u in range(lane, units, lanes):
                sc = unit_q8(raw, e, r, u, qtype, qw)
                part[tid, 0] += unit_dot(qw, sc, xq, xs, xi, u)
        if lanes > 1:
            lane_reduce(part, tid, lane, lanes, 1)
        if r < rows and lane == 0:
            out[m, c0 + r] = part[tid, 0]
