"""Products of raw blocks with int8-quantized activations (llama.cpp's Q8 dot path) via VNNI.

The activations are quantized once per call to int8 per 32 values with a float32 scale, exactly
the Q8_0 layout llama.cpp's CPU backend quantizes to before its Q4_0/Q8_0/K-quant dot products;
every 32 quants then cost one vpdpbusd. The results differ from the exact float `gemv` by that
rounding (relative ~1e-3 per product), which is why they live behind their own entry point.

Offsets leave the integer loop: Σ (q − z)·xq = Σ q·xq − z·Σxq, with Σxq per 16 values (times the
block's activation scale) computed once per call; K-quant mins use the same sums.
"""

import functools

import numpy as np
from gguf import GGMLQuantizationType
from numba import prange

from pantheon.engine.kernels.jit import exact
from pantheon.engine.kernels.q8dot_tiles import q4_0_tiles, q8_0_tiles
from pantheon.engine.kernels.simd import (PREFETCH_BYTES, bits32, dot4, flip_sign, fma_lane, fma_lanes, fma_scaled,
                                          fmadd, fzero, fzero4, half_at, has_vnni, hsum, lane, load4, mul, nibbles16,
                                          prefetch, scale_lanes)

QK = 32
Q4_0_BYTES, Q8_0_BYTES = 18, 34
# Rows per prange task: the activations of one vector stay in L1 across the chunk's rows.
CHUNK = 16
# Below this many vectors the 4-vector kernels beat unpacking rows for the 8-vector tiles (batched
# decode): 8 vectors of Q8_0 5632x2048, 2 threads, 0.85 ms in two 4-vector passes against 1.04 ms
# through the tiles; Q4_0 0.84 against 0.86.
TILES_FROM = 16


@exact
def quantize_rows(x, xq, xd, xs, xs32):
    """x float32 [n, cols] -> xq int8 [n, cols], xd [n, cols/32] scales, xs/xs32 xd·Σxq per 16/32 values.

    No fastmath: the rounding must be llama.cpp's to the bit (amax / 127, not amax · (1/127))."""
    n, cols = x.shape
    for i in prange(n):
        for b in range(cols // QK):
            amax = np.float32(0.0)
            for j in range(QK):
                amax = max(amax, abs(x[i, b * QK + j]))
            d = amax / np.float32(127.0)
            inv = np.float32(1.0) / d if d > 0 else np.float32(0.0)
            xd[i, b] = d
            for h in range(2):
                s = np.int32(0)
                for j in range(h * 16, h * 16 + 16):
                    q = np.int32(np.rint(x[i, b * QK + j] * inv))
                    xq[i, b * QK + j] = q
                    s += q
                xs[i, 2 * b + h] = d * np.float32(s)
            xs32[i, b] = xs[i, 2 * b] + xs[i, 2 * b + 1]


class Activations:
    """Float32 activations x [n, cols] quantized once, for every weight that multiplies them."""

    def __init__(self, x):
        n, cols = x.shape
        self.n = n
        xq = np.empty((n, cols), np.int8)  # [n, cols]
        self.xd = np.empty((n, cols // QK), np.float32)  # [n, cols/32] scales
        self.xs16 = np.empty((n, cols // 16), np.float32)  # [n, cols/16] xd·Σxq
        self.xs32 = np.empty((n, cols // QK), np.float32)  # [n, cols/32] xd·Σxq
        quantize_rows(x, xq, self.xd, self.xs16, self.xs32)
        self.xq = xq.view(np.uint8)  # [n, cols] the int8 bytes, as the loads expect


@exact
def q4_0(raw, xq, xd, xs, out):
    """out[i, r] = Σ_b d_b·xd·Σ (q − 8)·xq over the Q4_0 row r and quantized vector i."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(n):
            xi = xq[i]  # [cols] int8 bytes
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                acc, off = fzero(), np.float32(0.0)
                for b in range(nb):
                    prefetch(row, b * Q4_0_BYTES + PREFETCH_BYTES)
                    d = half_at(row, b * Q4_0_BYTES)
                    dots = dot4(nibbles16(row, b * Q4_0_BYTES + 2), bits32(xi, b * QK, 0, 255))
                    acc = fma_scaled(acc, dots, mul(d, xd[i, b]))
                    off = fmadd(off, d, xs[i, b])
                out[i, r] = hsum(acc) - np.float32(8.0) * off


@exact
def q8_0(raw, xq, xd, xs, out):
    """Q8_0 rows: q + 128 as the unsigned side of vpdpbusd, the 128·Σxq folded out per block."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(n):
            xi = xq[i]  # [cols] int8 bytes
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                acc, off = fzero(), np.float32(0.0)
                for b in range(nb):
                    prefetch(row, b * Q8_0_BYTES + PREFETCH_BYTES)
                    d = half_at(row, b * Q8_0_BYTES)
                    w = flip_sign(bits32(row, b * Q8_0_BYTES + 2, 0, 255))
                    acc = fma_scaled(acc, dot4(w, bits32(xi, b * QK, 0, 255)), mul(d, xd[i, b]))
                    off = fmadd(off, d, xs[i, b])
                out[i, r] = hsum(acc) - np.float32(128.0) * off


@exact
def q4_0_x4(raw, xq, xdt, xst, out):
    """q4_0 for n a multiple of 4: each unpacked weight block meets 4 vectors in registers.

    xdt, xst: the scales and sums transposed, [nb, n], so the 4 vectors' values are one load."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(0, n, 4):
            x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                a0, a1, a2, a3, off = fzero(), fzero(), fzero(), fzero(), fzero4()
                for b in range(nb):
                    prefetch(row, b * Q4_0_BYTES + PREFETCH_BYTES)
                    d = half_at(row, b * Q4_0_BYTES)
                    w = nibbles16(row, b * Q4_0_BYTES + 2)
                    s = scale_lanes(load4(xdt[b], i), d)
                    a0 = fma_lane(a0, dot4(w, bits32(x0, b * QK, 0, 255)), s, 0)
                    a1 = fma_lane(a1, dot4(w, bits32(x1, b * QK, 0, 255)), s, 1)
                    a2 = fma_lane(a2, dot4(w, bits32(x2, b * QK, 0, 255)), s, 2)
                    a3 = fma_lane(a3, dot4(w, bits32(x3, b * QK, 0, 255)), s, 3)
                    off = fma_lanes(off, load4(xst[b], i), d)
                out[i, r] = hsum(a0) - np.float32(8.0) * lane(off, 0)
                out[i + 1, r] = hsum(a1) - np.float32(8.0) * lane(off, 1)
                out[i + 2, r] = hsum(a2) - np.float32(8.0) * lane(off, 2)
                out[i + 3, r] = hsum(a3) - np.float32(8.0) * lane(off, 3)


@exact
def q8_0_x4(raw, xq, xdt, xst, out):
    """q8_0 for n a multiple of 4: each weight block meets 4 vectors in registers (xdt, xst [nb, n])."""
    rows, n, nb = raw.shape[0], xq.shape[0], xq.shape[1] // QK
    for c in prange((rows + CHUNK - 1) // CHUNK):
        for i in range(0, n, 4):
            x0, x1, x2, x3 = xq[i], xq[i + 1], xq[i + 2], xq[i + 3]  # [cols] int8 bytes each
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                a0, a1, a2, a3, off = fzero(), fzero(), fzero(), fzero(), fzero4()
                for b in range(nb):
                    prefetch(row, b * Q8_0_BYTES + PREFETCH_BYTES)
                    d = half_at(row, b * Q8_0_BYTES)
                    w = flip_sign(bits32(row, b * Q8_0_BYTES + 2, 0, 255))
                    s = scale_lanes(load4(xdt[b], i), d)
                    a0 = fma_lane(a0, dot4(w, bits32(x0, b * QK, 0, 255)), s, 0)
                    a1 = fma_lane(a1, dot4(w, bits32(x1, b * QK, 0, 255)), s, 1)
                    a2 = fma_lane(a2, dot4(w, bits32(x2, b * QK, 0, 255)), s, 2)
                    a3 = fma_lane(a3, dot4(w, bits32(x3, b * QK, 0, 255)), s, 3)
                    off = fma_lanes(off, load4(xst[b], i), d)
                out[i, r] = hsum(a0) - np.float32(128.0) * lane(off, 0)
                out[i + 1, r] = hsum(a1) - np.float32(128.0) * lane(off, 1)
                out[i + 2, r] = hsum(a2) - np.float32(128.0) * lane(off, 2)
                out[i + 3, r] = hsum(a3) - np.float32(128.0) * lane(off, 3)


# qtype name -> (kernel for any n, for n a multiple of 4, for n a multiple of 8 (q8dot_tiles: rows unpacked
# once per task)). K-quants take llama.cpp's Q8_K activations and kernels (q8k), which measured faster
# than VNNI kernels for them at every batch size (docs/performance.md).
_BY_TYPE = {"Q4_0": (q4_0, q4_0_x4, q4_0_tiles), "Q8_0": (q8_0, q8_0_x4, q8_0_tiles)}


@functools.cache
def _kernels(qtype):
    """The kernels of `qtype` as in _BY_TYPE, or None: one enum lookup per type, not per call."""
    if not has_vnni():
        return None
    return _BY_TYPE.get(GGMLQuantizationType(qtype).name)


def supports(qtype):
    """True when a VNNI kernel serves `qtype` (on this host)."""
    return _kernels(qtype) is not None


def product(qtype, raw, acts, out):
    """out [n, rows] = acts @ dequant(raw).T for a type that `supports`.

    Every n takes these kernels, never BLAS, and the 4- and 8-vector kernels repeat the 1-vector
    kernels' operations per (row, vector) in the same order: each output is then the same instruction
    sequence whatever the batch, and a 1e-6 batch-dependent wobble upstream of the int8 rounding
    would otherwise flip quants and move logits by 1e-2 (test_model_batch)."""
    one, four, eight = _kernels(qtype)
    xs = acts.xs32
    m8 = acts.n - acts.n % 8 if acts.n >= TILES_FROM else 0
    m4 = acts.n - acts.n % 4
    for k, lo, hi in ((eight, 0, m8), (four, m8, m4)):
        if hi > lo:
            xdt, xst = np.ascontiguousarray(acts.xd[lo:hi].T), np.ascontiguousarray(xs[lo:hi].T)  # [groups, m]
            k(raw, acts.xq[lo:hi], xdt, xst, out[lo:hi])
    if m4 < acts.n:
        one(raw, acts.xq[m4:], acts.xd[m4:], xs[m4:], out[m4:])
