"""Kernels for the unquantized ggml types F32, F16 and BF16."""

import numpy as np
from gguf import GGMLQuantizationType as T
from numba import prange

from pantheon.engine.kernels.contract import QuantKernels
from pantheon.engine.kernels.jit import exact, inline, kernel
from pantheon.engine.kernels.simd512 import fzero16
from pantheon.engine.kernels.simd_f32 import bfload1, bfload16, fsum16, hload1, hload16, vadd16, vfma16, widen16
from pantheon.engine.kernels.simd_lanes import fload16

CHUNK = 16  # rows per parallel task
# Elements a row's dot advances per step: four 16-lane fma chains, enough to hide the fma latency
# behind the weight stream (a decode step reads each weight once, from DRAM).
STEP = 64


@inline
def _wide16(row, j, bf16):
    """16 weights row[j:j+16] as float32 lanes (vcvtph2ps for float16, a shift for bfloat16)."""
    return bfload16(row, j) if bf16 else hload16(row, j)


@inline
def _wide1(row, j, bf16):
    return bfload1(row, j) if bf16 else hload1(row, j)


@inline
def _row_dot(row, x, bf16):
    """row · x for one 16-bit float weight row and one float32 vector: four lane chains, then a fixed tree, then
    the scalar tail, the same instructions whatever else the batch holds."""
    cols = x.shape[0]
    body = cols - cols % STEP
    a0, a1, a2, a3 = fzero16(), fzero16(), fzero16(), fzero16()
    for j in range(0, body, STEP):
        a0 = vfma16(_wide16(row, j, bf16), fload16(x, j), a0)
        a1 = vfma16(_wide16(row, j + 16, bf16), fload16(x, j + 16), a1)
        a2 = vfma16(_wide16(row, j + 32, bf16), fload16(x, j + 32), a2)
        a3 = vfma16(_wide16(row, j + 48, bf16), fload16(x, j + 48), a3)
    s = fsum16(vadd16(vadd16(a0, a1), vadd16(a2, a3)))
    for j in range(body, cols):
        s += _wide1(row, j, bf16) * x[j]
    return s


def _float_gemv(bf16):
    """gemv of a 16-bit float type, the type closed over so LLVM sees which widening the loads use. Each
    row is read from memory once and its dots with the n vectors come from L1."""

    @kernel
    def gemv(h, x, out):
        rows, n = h.shape[0], x.shape[0]
        for c in prange((rows + CHUNK - 1) // CHUNK):
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = h[r]  # [cols]
                for i in range(n):
                    out[i, r] = _row_dot(row, x[i], bf16)

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


def gemv_f16(raw, x, out):
    _gemv_f16(raw.view(np.uint16), np.ascontiguousarray(x), out)  # the lane loads read rows contiguously


def dequant_f16(raw, out):
    _dequant_f16(raw.view(np.uint16), out)


def gemv_bf16(raw, x, out):
    _gemv_bf16(raw.view(np.uint16), np.ascontiguousarray(x), out)


def dequant_bf16(raw, out):
    _dequant_bf16(raw.view(np.uint16), out.view(np.uint32))


KERNELS = {
    T.F32: QuantKernels(gemv=gemv_f32, dequant=dequant_f32),
    T.F16: QuantKernels(gemv=gemv_f16, dequant=dequant_f16),
    T.BF16: QuantKernels(gemv=gemv_bf16, dequant=dequant_bf16),
}
