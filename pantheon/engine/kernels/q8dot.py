"""Products of raw blocks with int8-quantized activations (llama.cpp's Q8 dot path) via VNNI or AVX2.

The activations are quantized once per call to int8 per 32 values with a float32 scale, exactly
the Q8_0 layout llama.cpp's CPU backend quantizes to before its Q4_0/Q8_0 dot products; every 32
quants then cost one vpdpbusd. The results differ from the exact float `gemv` by that rounding
(relative ~1e-3 per product), which is why they live behind their own entry point.

Every kernel computes one output the same way (simd512): per block b the exact integer dot
D_b = Σ q·xq − z·Σxq (z the type's zero point, Σxq counted once per call), then
acc = fma(float(D_b), d_b·xd_b, acc) in block order. The decode kernels here read 8 rows in place
and reduce their partial dots into row lanes; q8dot_tiles interleaves rows for prefill.
"""

import functools

import numba
import numpy as np
from gguf import GGMLQuantizationType
from numba import prange

from pantheon.engine.kernels.jit import SERIAL_VALUES, exact, exact_serial, inline
from pantheon.engine.kernels.q8dot_repacked import q4_0_repacked, q8_0_repacked
from pantheon.engine.kernels.q8dot_tiles import prefetch_rows, q4_0_tiles, q8_0_tiles
from pantheon.engine.kernels.simd import (PREFETCH_BYTES, bits32, dot4, flip_sign, fmadd, half_at, mul,
                                          nibbles16, prefetch, store8)
from pantheon.engine.kernels.simd import fzero as fzero8
from pantheon.engine.kernels.simd512 import fma8, fzero16, isum8, pack8, reduce8
from pantheon.engine.kernels.simd_f32 import hmax16, isum16, qround16, vabsmax16
from pantheon.engine.kernels.simd_lanes import fload16
from pantheon.engine.kernels.stream import prefetch_ahead
from pantheon.engine.kernels.vnni import has_int8_dots

QK = 32
Q4_0_BYTES, Q8_0_BYTES = 18, 34
# Rows per prange task: the activations of one vector stay in L1 across the chunk's rows.
CHUNK = 16
# From this many vectors on, interleaving each task's rows once (q8dot_tiles) beats reading them in
# place per vector. Measured on 5632x2048 at 2 threads: docs/performance.md.
TILES_FROM = 2


@inline
def _quantize_row(xr, qr, xd, xsum):
    """One row: xr float32 [cols] -> qr int8 [cols], xd [cols/32], xsum [cols/32] (quantize_rows)."""
    for b in range(xr.shape[0] // QK):
        o = b * QK
        amax = hmax16(vabsmax16(vabsmax16(fzero16(), fload16(xr, o)), fload16(xr, o + 16)))
        d = amax / np.float32(127.0)
        inv = np.float32(1.0) / d if d > 0 else np.float32(0.0)
        xd[b] = d
        xsum[b] = isum16(qround16(xr, o, inv, qr, o)) + isum16(qround16(xr, o + 16, inv, qr, o + 16))


@exact
def quantize_rows(x, xq, xd, xsum):
    """x float32 [n, cols] -> xq int8 [n, cols], xd [n, cols/32] scales, xsum int32 Σxq per 32 values.

    No fastmath: the rounding must be llama.cpp's to the bit (amax / 127, not amax · (1/127)); 16 values
    per instruction (max, product and rint are exact per lane, so the order does not matter)."""
    for i in prange(x.shape[0]):
        _quantize_row(x[i], xq[i], xd[i], xsum[i])


@exact_serial
def quantize_rows_serial(x, xq, xd, xsum):
    """quantize_rows in the calling thread (jit.SERIAL_VALUES): the same operations, the same bits."""
    for i in range(x.shape[0]):
        _quantize_row(x[i], xq[i], xd[i], xsum[i])


class Activations:
    """Float32 activations x [n, cols] quantized once, for every weight that multiplies them."""

    def __init__(self, x):
        n, cols = x.shape
        self.n = n
        xq = np.empty((n, cols), np.int8)  # [n, cols]
        self.xd = np.empty((n, cols // QK), np.float32)  # [n, cols/32] scales
        self.xsum = np.empty((n, cols // QK), np.int32)  # [n, cols/32] Σxq
        quantize_into(np.ascontiguousarray(x, dtype=np.float32), xq, self.xd, self.xsum)
        self.xq = xq.view(np.uint8)  # [n, cols] the int8 bytes, as the loads expect


def quantize_into(x, xq, xd, xsum):
    """C-contiguous float32 x [n, cols] rounded per 32 into xq (int8), xd and xsum (`Activations`)."""
    (quantize_rows_serial if x.size < SERIAL_VALUES else quantize_rows)(x, xq, xd, xsum)


@inline
def _dots(row, o, xi, xo, eight):
    """<8 x i32> partial dots of the block at row[o:] (Q8_0 when `eight`, else Q4_0) with xi[xo:xo+32]."""
    x = bits32(xi, xo, 0, 255)  # [32] int8 activations
    if eight:
        return dot4(flip_sign(bits32(row, o + 2, 0, 255)), x)  # [32] q + 128
    return dot4(nibbles16(row, o + 2), x)  # [32] nibbles


@inline
def _eight_rows(raw, r, xi, xd, xsum, zero, nbytes, outi):
    """outi[r:r+8] for one vector: 8 rows in place, their partial dots reduced into row lanes per block."""
    w0, w1, w2, w3 = raw[r], raw[r + 1], raw[r + 2], raw[r + 3]  # [row_bytes] each
    w4, w5, w6, w7 = raw[r + 4], raw[r + 5], raw[r + 6], raw[r + 7]  # [row_bytes] each
    eight, acc = nbytes == Q8_0_BYTES, fzero8()
    for b in range(xd.shape[0]):
        o, xo = b * nbytes, b * QK
        dots = reduce8(_dots(w0, o, xi, xo, eight), _dots(w1, o, xi, xo, eight), _dots(w2, o, xi, xo, eight),
                       _dots(w3, o, xi, xo, eight), _dots(w4, o, xi, xo, eight), _dots(w5, o, xi, xo, eight),
                       _dots(w6, o, xi, xo, eight), _dots(w7, o, xi, xo, eight))  # [8] row lanes
        prefetch_rows(raw, r + 8, 8, o)
        d = pack8(half_at(w0, o), half_at(w1, o), half_at(w2, o), half_at(w3, o),
                  half_at(w4, o), half_at(w5, o), half_at(w6, o), half_at(w7, o))  # [8] row scales
        acc = fma8(acc, dots, -zero * xsum[b], d, xd[b])
    store8(outi, r, acc)


@inline
def _one_row(row, xi, xd, xsum, zero, nbytes):
    """One row's output for one vector, with `_eight_rows`' operations on a single lane."""
    eight, acc = nbytes == Q8_0_BYTES, np.float32(0.0)
    for b in range(xd.shape[0]):
        o = b * nbytes
        prefetch(row, o + PREFETCH_BYTES)
        dot = isum8(_dots(row, o, xi, b * QK, eight)) - zero * xsum[b]
        acc = fmadd(acc, np.float32(dot), mul(half_at(row, o), xd[b]))
    return acc


@inline
def _rows_in_place(raw, xq, xd, xsum, out, zero, nbytes):
    """out [n, rows] for every vector, each task a CHUNK of rows read in place."""
    rows, n = raw.shape[0], xq.shape[0]
    for c in prange((rows + CHUNK - 1) // CHUNK):
        r0, r1 = c * CHUNK, min(rows, (c + 1) * CHUNK)
        for i in range(n):
            r = r0
            while r + 8 <= r1:
                _eight_rows(raw, r, xq[i], xd[i], xsum[i], zero, nbytes, out[i])
                r += 8
            for rr in range(r, r1):
                out[i, rr] = _one_row(raw[rr], xq[i], xd[i], xsum[i], zero, nbytes)


@exact
def q4_0(raw, xq, xd, xsum, out):
    """out[i, r] = Σ_b d_b·xd·(Σ q·xq − 8·Σxq) over the Q4_0 row r and quantized vector i."""
    _rows_in_place(raw, xq, xd, xsum, out, np.int32(8), Q4_0_BYTES)


@exact
def q8_0(raw, xq, xd, xsum, out):
    """Q8_0 rows: q + 128 as the unsigned side of vpdpbusd, the 128·Σxq folded out per block."""
    _rows_in_place(raw, xq, xd, xsum, out, np.int32(128), Q8_0_BYTES)


# qtype name -> (kernel reading rows in place, kernel interleaving rows first (q8dot_tiles), kernel on the
# repacked layout (q8dot_repacked)). K-quants take
# llama.cpp's Q8_K activations and kernels (q8k), which measured faster than VNNI kernels for them at
# every batch size (docs/performance.md).
_BY_TYPE = {"Q4_0": (q4_0, q4_0_tiles, q4_0_repacked), "Q8_0": (q8_0, q8_0_tiles, q8_0_repacked)}


@functools.cache
def _kernels(qtype):
    """The kernels of `qtype` as in _BY_TYPE, or None: one enum lookup per type, not per call."""
    if not has_int8_dots():
        return None
    return _BY_TYPE.get(GGMLQuantizationType(qtype).name)


def supports(qtype):
    """True when an int8 kernel serves `qtype` on this host (VNNI, or AVX2's sequence: kernels.vnni)."""
    return _kernels(qtype) is not None


def product(qtype, raw, acts, out):
    """out [n, rows] = acts @ dequant(raw).T for a type that `supports`.

    Every n takes these kernels, never BLAS, and both kernels compute each (row, vector) with the same
    operations in the same order: an output does not depend on the batch, and a 1e-6 batch-dependent
    wobble upstream of the int8 rounding would otherwise flip quants and move logits by 1e-2
    (test_model_batch)."""
    in_place, tiles, _ = _kernels(qtype)
    if acts.n >= TILES_FROM:
        tiles(raw, acts.xq, acts.xd, acts.xsum, out, numba.get_num_threads())
    else:
        in_place(raw, acts.xq, acts.xd, acts.xsum, out)


def repacked_kernel(qtype):
    """The kernel `product_repacked` calls for `qtype`: (packed, rows, xq, xd, xsum, out, threads, ahead)."""
    return _kernels(qtype)[2]


def product_repacked(qtype, packed, rows, acts, out, threads=None):
    """`product` on the repacked copy (kernels.repack) of a `rows`-row weight: one kernel for every n,
    with the same bits as `product`; `threads` None: numba's."""
    repacked_kernel(qtype)(packed, rows, acts.xq, acts.xd, acts.xsum, out, threads or numba.get_num_threads(),
                           prefetch_ahead(qtype, acts.n))
