"""Kernels for ggml's 32-element block types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (and, re-exported, F32/F16/BF16).

Every gemv keeps a 32-wide float32 lane accumulator per (vector, row) and folds the per-block
offset out of the inner loop: Σ (d·q + c)·x = d·Σ q·x + c·Σx, with the per-block activation
sums Σx computed once per call. Scales are read in place through the fp16 lookup table.
The 32-element block loop has a literal trip count, so LLVM unrolls it and vectorizes across the
block; the vector loop sits outside the block loop and re-reads the row from L1, never from memory.
"""

import numpy as np
from gguf import GGMLQuantizationType as T
from numba import prange

from pantheon.engine.kernels import floats
from pantheon.engine.kernels.contract import QuantKernels
from pantheon.engine.kernels.fp16 import fp16_table
from pantheon.engine.kernels.jit import exact, inline, kernel

# Block geometry lives in module constants or closure values, never in locals: numba passes a local
# computed outside a prange to the outlined loop body as a run-time argument, and with run-time
# offsets LLVM left the block loop scalar (Q8_0 gemv measured 4.7x slower).
QK = 32
HALF = QK // 2
Q8_0_BYTES = QK + 2
# Rows per prange task: enough work to amortize the scratch allocation, small enough to balance 2+ threads.
CHUNK = 16


@inline
def _block_sums(x):
    """float32 [n, cols/QK]: Σx per block, so offsets and mins cost one multiply per block."""
    n, nb = x.shape[0], x.shape[1] // QK
    xs = np.empty((n, nb), np.float32)  # [n, nb]
    for i in range(n):
        for b in range(nb):
            xs[i, b] = x[i, b * QK: (b + 1) * QK].sum()
    return xs


@inline
def _scale(row, o, tab):
    return tab[np.int32(row[o]) | (np.int32(row[o + 1]) << np.int32(8))]


@inline
def _header(row, o, tab, has_m, has_qh):
    """(d, m, qh) of the block at byte o: scale, min (0 if none), the 32 fifth bits (0 if none)."""
    d = _scale(row, o, tab)
    m = _scale(row, o + 2, tab) if has_m else np.float32(0.0)
    p = o + 2 + 2 * has_m
    qh = (np.int32(row[p]) | (np.int32(row[p + 1]) << np.int32(8)) | (np.int32(row[p + 2]) << np.int32(16))
          | (np.int32(row[p + 3]) << np.int32(24))) if has_qh else np.int32(0)
    return d, m, qh


@inline
def _lo(q, qh, j, has_qh):
    """Quant j of a block: low nibble of byte j, fifth bit j of qh."""
    v = q & np.int32(15)
    return v | (((qh >> np.int32(j)) & np.int32(1)) << np.int32(4)) if has_qh else v


@inline
def _hi(q, qh, j, has_qh):
    """Quant j + 16 of a block: high nibble of byte j, fifth bit j + 16 of qh."""
    v = q >> np.int32(4)
    return v | (((qh >> np.int32(j + HALF)) & np.int32(1)) << np.int32(4)) if has_qh else v


@kernel
def _gemv_q8_0(raw, x, out, tab):
    rows, n, nb = raw.shape[0], x.shape[0], x.shape[1] // QK
    signed = raw.view(np.int8)  # [rows, row_bytes] the same bytes, signed
    for c in prange((rows + CHUNK - 1) // CHUNK):
        acc = np.empty(QK, np.float32)  # [QK]
        for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
            row, qs = raw[r], signed[r]  # [row_bytes], [row_bytes]
            for i in range(n):
                xi = x[i]  # [cols]
                acc[:] = 0.0
                for b in range(nb):
                    d = _scale(row, b * Q8_0_BYTES, tab)
                    for j in range(QK):
                        acc[j] += (d * xi[b * QK + j]) * np.float32(qs[b * Q8_0_BYTES + 2 + j])
                out[i, r] = acc.sum()


@exact
def _dequant_q8_0(raw, out, tab):
    rows, nb = raw.shape[0], out.shape[1] // QK
    signed = raw.view(np.int8)  # [rows, row_bytes] the same bytes, signed
    for r in prange(rows):
        row, qs, w = raw[r], signed[r], out[r]  # [row_bytes], [row_bytes], [cols]
        for b in range(nb):
            d = _scale(row, b * Q8_0_BYTES, tab)
            for j in range(QK):
                w[b * QK + j] = d * np.float32(qs[b * Q8_0_BYTES + 2 + j])


def _nibble_gemv(bb, has_m, has_qh, zero):
    """gemv of a nibble type; the block geometry is closed over so LLVM sees literal offsets."""
    q0 = bb - HALF

    @kernel
    def gemv(raw, x, out, tab):
        rows, n, nb = raw.shape[0], x.shape[0], x.shape[1] // QK
        xs = _block_sums(x)  # [n, nb]
        for c in prange((rows + CHUNK - 1) // CHUNK):
            acc = np.empty(QK, np.float32)  # [QK]
            for r in range(c * CHUNK, min(rows, (c + 1) * CHUNK)):
                row = raw[r]  # [row_bytes]
                for i in range(n):
                    xi, xsi = x[i], xs[i]  # [cols], [nb]
                    acc[:] = 0.0
                    off = np.float32(0.0)
                    for b in range(nb):
                        d, m, qh = _header(row, b * bb, tab, has_m, has_qh)
                        off += (m - np.float32(zero) * d) * xsi[b]
                        for j in range(HALF):
                            q = np.int32(row[b * bb + q0 + j])
                            acc[j] += (d * xi[b * QK + j]) * np.float32(_lo(q, qh, j, has_qh))
                            acc[j + HALF] += (d * xi[b * QK + HALF + j]) * np.float32(_hi(q, qh, j, has_qh))
                    out[i, r] = acc.sum() + off

    return gemv


def _nibble_dequant(bb, has_m, has_qh, zero):
    """dequant of a nibble type; no fastmath, so d·q + m rounds twice exactly as gguf.quants does."""
    q0 = bb - HALF

    @exact
    def dequant(raw, out, tab):
        rows, nb = raw.shape[0], out.shape[1] // QK
        for r in prange(rows):
            row, w = raw[r], out[r]  # [row_bytes], [cols]
            for b in range(nb):
                d, m, qh = _header(row, b * bb, tab, has_m, has_qh)
                for j in range(HALF):
                    q = np.int32(row[b * bb + q0 + j])
                    w[b * QK + j] = d * np.float32(_lo(q, qh, j, has_qh) - np.int32(zero)) + m
                    w[b * QK + HALF + j] = d * np.float32(_hi(q, qh, j, has_qh) - np.int32(zero)) + m

    return dequant


# (block bytes, has_m, has_qh, zero point) of the nibble types: value d·(q − zero) + m.
_NIBBLE = {
    T.Q4_0: (HALF + 2, False, False, 8),
    T.Q4_1: (HALF + 4, True, False, 0),
    T.Q5_0: (HALF + 6, False, True, 16),
    T.Q5_1: (HALF + 8, True, True, 0),
}


def gemv_q8_0(raw, x, out):
    _gemv_q8_0(raw, x, out, fp16_table())


def dequant_q8_0(raw, out):
    _dequant_q8_0(raw, out, fp16_table())


def _nibble_kernels(qtype):
    gemv_kernel, dequant_kernel = _nibble_gemv(*_NIBBLE[qtype]), _nibble_dequant(*_NIBBLE[qtype])

    def gemv(raw, x, out):
        gemv_kernel(raw, x, out, fp16_table())

    def dequant(raw, out):
        dequant_kernel(raw, out, fp16_table())

    gemv.__name__, dequant.__name__ = f"gemv_{qtype.name.lower()}", f"dequant_{qtype.name.lower()}"
    return QuantKernels(gemv=gemv, dequant=dequant)


KERNELS = {
    **floats.KERNELS,
    T.Q8_0: QuantKernels(gemv=gemv_q8_0, dequant=dequant_q8_0),
    **{qtype: _nibble_kernels(qtype) for qtype in _NIBBLE},
}
