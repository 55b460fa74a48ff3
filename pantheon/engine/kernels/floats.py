"""Kernels for the unquantized ggml types F32, F16 and BF16."""

import numpy as np
from gguf import GGMLQuantizationType as T
from numba import prange

from pantheon.engine.kernels.contract import QuantKernels
from pantheon.engine.kernels.fp16 import fp16_table
from pantheon.engine.kernels.jit import exact, inline, kernel

# Lanes of the float32 accumulator: one 512-bit vector, or two 256-bit ones.
LANES = 16
CHUNK = 16


@inline
def _dot_rows(w, x, acc, out, r):
    """out[i, r] = w · x[i] for every i, with a LANES-wide accumulator and a scalar tail."""
    n, cols = x.shape
    body = cols - cols % acc.shape[0]
    for i in range(n):
        acc[:] = 0.0
        for b in range(0, body, acc.shape[0]):
            for j in range(acc.shape[0]):
                acc[j] += w[b + j] * x[i, b + j]
        s = np.float32(0.0)
        for j in range(body, cols):
            s += w[j] * x[i, j]
        for j in range(acc.shape[0]):
            s += acc[j]
        out[i, r] = s


@kernel
def _gemv_f16(h, x, out, tab, lanes):
    rows, cols = h.shape
    for c in prange((rows + CHUNK - 1) // CHUNK):
        w = np.empty(cols, np.float32)  # [cols]
        acc = np.empty(lanes, np.float32)  # [lanes]
        for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
            for j in range(cols):
                w[j] = tab[h[r, j]]
            _dot_rows(w, x, acc, out, r)


@kernel
def _gemv_bf16(h, x, out, lanes):
    rows, cols = h.shape
    for c in prange((rows + CHUNK - 1) // CHUNK):
        bits = np.empty(cols, np.uint32)  # [cols]
        w = bits.view(np.float32)  # [cols]
        acc = np.empty(lanes, np.float32)  # [lanes]
        for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
            for j in range(cols):
                bits[j] = np.uint32(h[r, j]) << np.uint32(16)
            _dot_rows(w, x, acc, out, r)


@exact
def _dequant_f16(h, out, tab):
    for r in prange(h.shape[0]):
        for j in range(h.shape[1]):
            out[r, j] = tab[h[r, j]]


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
    _gemv_f16(raw.view(np.uint16), x, out, fp16_table(), LANES)


def dequant_f16(raw, out):
    _dequant_f16(raw.view(np.uint16), out, fp16_table())


def gemv_bf16(raw, x, out):
    _gemv_bf16(raw.view(np.uint16), x, out, LANES)


def dequant_bf16(raw, out):
    _dequant_bf16(raw.view(np.uint16), out.view(np.uint32))


KERNELS = {
    T.F32: QuantKernels(gemv=gemv_f32, dequant=dequant_f32),
    T.F16: QuantKernels(gemv=gemv_f16, dequant=dequant_f16),
    T.BF16: QuantKernels(gemv=gemv_bf16, dequant=dequant_bf16),
}
