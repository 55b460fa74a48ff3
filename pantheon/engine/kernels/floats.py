"""Kernels for the unquantized ggml types F32, F16 and BF16."""

import numpy as np
from gguf import GGMLQuantizationType as T
from numba import prange

from pantheon.engine.kernels.contract import QuantKernels
from pantheon.engine.kernels.jit import exact, inline, kernel
from pantheon.engine.kernels.simd import PREFETCH_BYTES, prefetch_l2
from pantheon.engine.kernels.simd512 import fzero16
from pantheon.engine.kernels.simd_f32 import bfload1, bfload16, fsum16, hload1, hload16, vfma16, widen16
from pantheon.engine.kernels.simd_lanes import fload16

CHUNK = 16  # rows per parallel task, a multiple of the tiles' 4
# Vectors per kernel call: 64 float32 vectors of a 2048-wide model (512 KiB) stay in L2 while every row
# passes them; at 128 a call ran at half the rate (22.6 ms against 2 x 5.3 for 5632 x 2048).
VECTORS = 64


@inline
def _wide16(row, j, bf16):
    """16 weights row[j:j+16] as float32 lanes (vcvtph2ps for float16, a shift for bfloat16)."""
    return bfload16(row, j) if bf16 else hload16(row, j)


@inline
def _finish(acc, row, xi, body, bf16):
    """One dot's end: its 16 lanes summed in a fixed tree, then the scalar tail past `body`. Every tile
    shape computes a dot as one fma chain over `body` and this: a vector's product is the same bits in
    any batch."""
    s = fsum16(acc)
    for j in range(body, xi.shape[0]):
        s += (bfload1(row, j) if bf16 else hload1(row, j)) * xi[j]
    return s


@inline
def _tile_4x4(h, r, x, i, out, bf16):
    """out[i:i+4, r:r+4]: 16 fma chains, each widened weight load serving four vectors and each vector
    load four rows (two loads per four fmas keep both fma ports busy)."""
    cols = x.shape[1]
    body = cols - cols % 16
    w0, w1, w2, w3 = h[r], h[r + 1], h[r + 2], h[r + 3]  # [cols] each
    x0, x1, x2, x3 = x[i], x[i + 1], x[i + 2], x[i + 3]  # [cols] each
    a00, a01, a02, a03 = fzero16(), fzero16(), fzero16(), fzero16()
    a10, a11, a12, a13 = fzero16(), fzero16(), fzero16(), fzero16()
    a20, a21, a22, a23 = fzero16(), fzero16(), fzero16(), fzero16()
    a30, a31, a32, a33 = fzero16(), fzero16(), fzero16(), fzero16()
    for j in range(0, body, 16):
        v0, v1, v2, v3 = fload16(x0, j), fload16(x1, j), fload16(x2, j), fload16(x3, j)
        u = _wide16(w0, j, bf16)
        a00, a01, a02, a03 = vfma16(u, v0, a00), vfma16(u, v1, a01), vfma16(u, v2, a02), vfma16(u, v3, a03)
        u = _wide16(w1, j, bf16)
        a10, a11, a12, a13 = vfma16(u, v0, a10), vfma16(u, v1, a11), vfma16(u, v2, a12), vfma16(u, v3, a13)
        u = _wide16(w2, j, bf16)
        a20, a21, a22, a23 = vfma16(u, v0, a20), vfma16(u, v1, a21), vfma16(u, v2, a22), vfma16(u, v3, a23)
        u = _wide16(w3, j, bf16)
        a30, a31, a32, a33 = vfma16(u, v0, a30), vfma16(u, v1, a31), vfma16(u, v2, a32), vfma16(u, v3, a33)
    out[i, r], out[i + 1, r] = _finish(a00, w0, x0, body, bf16), _finish(a01, w0, x1, body, bf16)
    out[i + 2, r], out[i + 3, r] = _finish(a02, w0, x2, body, bf16), _finish(a03, w0, x3, body, bf16)
    out[i, r + 1], out[i + 1, r + 1] = _finish(a10, w1, x0, body, bf16), _finish(a11, w1, x1, body, bf16)
    out[i + 2, r + 1], out[i + 3, r + 1] = _finish(a12, w1, x2, body, bf16), _finish(a13, w1, x3, body, bf16)
    out[i, r + 2], out[i + 1, r + 2] = _finish(a20, w2, x0, body, bf16), _finish(a21, w2, x1, body, bf16)
    out[i + 2, r + 2], out[i + 3, r + 2] = _finish(a22, w2, x2, body, bf16), _finish(a23, w2, x3, body, bf16)
    out[i, r + 3], out[i + 1, r + 3] = _finish(a30, w3, x0, body, bf16), _finish(a31, w3, x1, body, bf16)
    out[i + 2, r + 3], out[i + 3, r + 3] = _finish(a32, w3, x2, body, bf16), _finish(a33, w3, x3, body, bf16)


@inline
def _tile_4x1(h, r, x, i, out, bf16):
    """out[i, r:r+4]: four rows' chains against one vector (the vectors past the last group of four)."""
    cols = x.shape[1]
    body = cols - cols % 16
    w0, w1, w2, w3, xi = h[r], h[r + 1], h[r + 2], h[r + 3], x[i]  # [cols] each
    a0, a1, a2, a3 = fzero16(), fzero16(), fzero16(), fzero16()
    for j in range(0, body, 16):
        v = fload16(xi, j)
        a0, a1 = vfma16(_wide16(w0, j, bf16), v, a0), vfma16(_wide16(w1, j, bf16), v, a1)
        a2, a3 = vfma16(_wide16(w2, j, bf16), v, a2), vfma16(_wide16(w3, j, bf16), v, a3)
    out[i, r], out[i, r + 1] = _finish(a0, w0, xi, body, bf16), _finish(a1, w1, xi, body, bf16)
    out[i, r + 2], out[i, r + 3] = _finish(a2, w2, xi, body, bf16), _finish(a3, w3, xi, body, bf16)


@inline
def _tile_1x1(h, r, x, i, out, bf16):
    """out[i, r]: one chain, the row read in order with a software prefetch PREFETCH_BYTES ahead (decode,
    fewer than four vectors: one stream per core read from DRAM beat four rows at once, 47 GB/s against
    35 on two cores); a later vector finds the row in L1."""
    cols = x.shape[1]
    body = cols - cols % 16
    row, xi = h[r], x[i]  # [cols] each
    a = fzero16()
    for j in range(0, body, 16):
        if j % 32 == 0:  # one request per 64-byte line
            prefetch_l2(row, j + PREFETCH_BYTES // 2)
        a = vfma16(_wide16(row, j, bf16), fload16(xi, j), a)
    out[i, r] = _finish(a, row, xi, body, bf16)


def _float_gemv(bf16):
    """Product of a 16-bit float type with any number of vectors, the type closed over so LLVM sees which
    widening the loads use: from four vectors on, groups of four rows against groups of four vectors (the
    rest in narrower tiles); below that, a row at a time."""

    @kernel
    def gemv(h, x, out):
        rows, n = h.shape[0], x.shape[0]
        for c in prange((rows + CHUNK - 1) // CHUNK):
            r, end = c * CHUNK, min(rows, (c + 1) * CHUNK)
            while r + 4 <= end and n >= 4:
                for g in range(n // 4):
                    _tile_4x4(h, r, x, 4 * g, out, bf16)
                for i in range(n - n % 4, n):
                    _tile_4x1(h, r, x, i, out, bf16)
                r += 4
            for rr in range(r, end):
                for i in range(n):
                    _tile_1x1(h, rr, x, i, out, bf16)

    return gemv


_gemv_f16, _gemv_bf16 = _float_gemv(False), _float_gemv(True)


@exact
def _dequant_f16(h, out):
    for r in prange(h.shape[0]):
        widen16(h[r], 0, h.shape[1], out[r])


@exact
def _dequant_bf16(h, bits):
    for r in prange(h.shape[0]):
        for j in range(h.shape[1]):
            bits[r, j] = np.uint32(h[r, j]) << np.uint32(16)


def gemv_f32(raw, x, out):
    np.matmul(x, raw.view(np.float32).T, out=out)  # [n, rows] via BLAS sgemm/sgemv


def dequant_f32(raw, out):
    np.copyto(out, raw.view(np.float32))


def _in_blocks(gemv, raw, x, out):
    h, x = raw.view(np.uint16), np.ascontiguousarray(x)  # the lane loads read rows contiguously
    for i in range(0, x.shape[0], VECTORS):
        gemv(h, x[i:i + VECTORS], out[i:i + VECTORS])


def gemv_f16(raw, x, out):
    _in_blocks(_gemv_f16, raw, x, out)


def dequant_f16(raw, out):
    _dequant_f16(raw.view(np.uint16), out)


def gemv_bf16(raw, x, out):
    _in_blocks(_gemv_bf16, raw, x, out)


def dequant_bf16(raw, out):
    _dequant_bf16(raw.view(np.uint16), out.view(np.uint32))


KERNELS = {
    T.F32: QuantKernels(gemv=gemv_f32, dequant=dequant_f32),
    T.F16: QuantKernels(gemv=gemv_f16, dequant=dequant_f16, any_batch=True),
    T.BF16: QuantKernels(gemv=gemv_bf16, dequant=dequant_bf16, any_batch=True),
}
