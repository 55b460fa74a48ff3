"""Kernels that read raw weight blocks: matrix-vector products (decode), tile dequantization (prefill), embeddings.

Geometry of the matrix-vector kernels: a thread block of (lanes, rows) threads; the `lanes` threads
of one row stride over its 32-value units (adjacent lanes read adjacent blocks, so a warp's loads
coalesce), dequantize a unit into registers once and dot it with every activation vector, then
reduce across lanes in shared memory. Activations come unit-major (`unit_major`: value l of unit u
of vector i at xt[i, l, u]) so that the lanes' reads of value l of their units are adjacent floats,
one cache line per warp, where the row-major x would put them 128 bytes apart (32 lines per warp).
Weights are read as uint16 words (blocks.py). `lanes` is a power of two up to 32; blockDim.x *
blockDim.y is at most MAX_THREADS. Row loops step by whole thread blocks, so every thread reaches every barrier.
"""

import numpy as np
from numba import cuda

from pantheon.engine.cuda.blocks import unit
from pantheon.engine.cuda.qtypes import UNIT

MAX_BATCH = 8     # activation vectors per matrix-vector call (larger batches take the tile path)
MAX_THREADS = 256
PADDED = UNIT + 1  # floats per unit staged in shared memory: value l of 32 units then lies in 32 distinct banks


@cuda.jit(device=True, inline=True)
def lane_reduce(part, tid, lane, lanes, n):
    """Sum part[tid, :n] over the `lanes` threads of this row into part[tid - lane, :n]; all threads call it."""
    s = lanes // 2
    while s > 0:
        cuda.syncthreads()
        if lane < s:
            for i in range(n):
                part[tid, i] += part[tid + s, i]
        s //= 2
    cuda.syncthreads()


@cuda.jit(device=True, inline=True)
def expert_row(t0, per_m):
    """(pair m, weight row r) of this thread in work item t0 of an expert-selected product: item t0 is the
    block-row t0 % per_m of pair t0 // per_m, the thread's row within it its threadIdx.y."""
    return t0 // per_m, (t0 % per_m) * cuda.blockDim.y + cuda.threadIdx.y


@cuda.jit
def unit_major(x, xt):
    """xt[i, l, u] = x[i, 32u + l] for x float32 [n, cols], xt float32 [n, 32, cols / 32]."""
    units = xt.shape[2]
    cols = units * UNIT
    for t in range(cuda.grid(1), x.shape[0] * cols, cuda.gridsize(1)):
        i, c = t // cols, t % cols
        xt[i, c % UNIT, c // UNIT] = x[i, c]


@cuda.jit
def qmv(raw, qtype, xt, out, c0):
    """out[i, c0 + r] = dot(dequant(raw[0, r]), x[i]) for raw uint16 words [1, rows, row_bytes / 2] and
    x [n <= 8, cols] given unit-major as xt float32 [n, 32, cols / 32]."""
    lane, lanes = cuda.threadIdx.x, cuda.blockDim.x
    tid = cuda.threadIdx.y * lanes + lane
    part = cuda.shared.array((MAX_THREADS, MAX_BATCH), np.float32)  # [threads, batch]
    w = cuda.local.array(UNIT, np.float32)  # [32] one dequantized unit
    rows, n, units = raw.shape[1], xt.shape[0], xt.shape[2]
    for r0 in range(cuda.blockIdx.x * cuda.blockDim.y, rows, cuda.gridDim.x * cuda.blockDim.y):
        r = r0 + cuda.threadIdx.y
        for i in range(n):
            part[tid, i] = 0.0
        if r < rows:
            for u in range(lane, units, lanes):
                unit(raw, 0, r, u, qtype, w)
                for i in range(n):
                    acc = np.float32(0.0)
                    for l in range(UNIT):
                        acc += w[l] * xt[i, l, u]
                    part[tid, i] += acc
        if lanes > 1:
            lane_reduce(part, tid, lane, lanes, n)
        if r < rows and lane == 0:
            for i in range(n):
                out[i, c0 + r] = part[tid, i]


@cuda.jit
def qmv_sel(raw, qtype, sel, xdiv, xt, out, c0):
    """out[m, c0 + r] = dot(dequant(raw[sel[m], r]), x[m // xdiv]): one expert per (token, slot) pair m.

    raw uint16 words [experts, rows, row_bytes / 2], sel int32 [M], x [M / xdiv, cols] given unit-major as
    xt float32 [M / xdiv, 32, cols / 32], out float32 [M, >= c0 + rows]."""
    lane, lanes = cuda.threadIdx.x, cuda.blockDim.x
    tid = cuda.threadIdx.y * lanes + lane
    part = cuda.shared.array((MAX_THREADS, 1), np.float32)  # [threads, 1]
    w = cuda.local.array(UNIT, np.float32)  # [32]
    m_count, rows, units = out.shape[0], raw.shape[1], xt.shape[2]
    per_m = (rows + cuda.blockDim.y - 1) // cuda.blockDim.y
    for t0 in range(cuda.blockIdx.x, m_count * per_m, cuda.gridDim.x):
        m, r = expert_row(t0, per_m)
        part[tid, 0] = 0.0
        if r < rows:
            e, xi = sel[m], m // xdiv
            for u in range(lane, units, lanes):
                unit(raw, e, r, u, qtype, w)
                acc = np.float32(0.0)
                for l in range(UNIT):
                    acc += w[l] * xt[xi, l, u]
                part[tid, 0] += acc
        if lanes > 1:
            lane_reduce(part, tid, lane, lanes, 1)
        if r < rows and lane == 0:
            out[m, c0 + r] = part[tid, 0]


@cuda.jit
def dequant_tile(raw, qtype, r0, out):
    """out float16 [n, cols] = dequant(raw[0, r0:r0+n]). A thread decodes one 32-value unit into shared memory,
    then the block stores its units' values in address order: adjacent threads write adjacent halves, where
    a thread writing its own unit would put a warp's stores 64 bytes apart (16 lines per instruction)."""
    n, units = out.shape[0], out.shape[1] // UNIT
    total, tid, size = n * units, cuda.threadIdx.x, cuda.blockDim.x
    w = cuda.local.array(UNIT, np.float32)  # [32]
    staged = cuda.shared.array((MAX_THREADS, PADDED), np.float32)  # [threads, 33]
    for base in range(cuda.blockIdx.x * size, total, cuda.gridDim.x * size):  # uniform per block: barriers
        if base + tid < total:
            unit(raw, 0, r0 + (base + tid) // units, (base + tid) % units, qtype, w)
            for l in range(UNIT):
                staged[tid, l] = w[l]
        cuda.syncthreads()
        for f in range(tid, size * UNIT, size):  # value f % 32 of the block's unit f // 32
            t = base + f // UNIT
            if t < total:
                out[t // units, (t % units) * UNIT + f % UNIT] = staged[f // UNIT, f % UNIT]
        cuda.syncthreads()  # staged is rewritten by the next round


@cuda.jit
def embed(raw, qtype, ids, out):
    """out float32 [n, cols] = dequant(raw[0, ids[i]]) for token ids int32 [n]."""
    n, units = out.shape[0], out.shape[1] // UNIT
    w = cuda.local.array(UNIT, np.float32)  # [32]
    for t in range(cuda.grid(1), n * units, cuda.gridsize(1)):
        i, u = t // units, t % units
        unit(raw, 0, ids[i], u, qtype, w)
        for l in range(UNIT):
            out[i, u * UNIT + l] = w[l]
