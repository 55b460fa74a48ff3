"""Matrix products of raw-block weights with float32 activations: gemv for few rows, tiles+BLAS for many."""

import numpy as np

from pantheon.kernels.registry import kernels_for

# Above this many activation rows, dequantizing tiles and calling sgemm beats the raw-block kernel.
GEMV_MAX_BATCH = 4
# Output features dequantized per tile: the float32 tile (TILE_ROWS x cols) should stay cache-resident.
TILE_ROWS = 256


def matmul(w, x, out=None):
    """x float32 [n, w.cols] -> float32 [n, w.rows]: x @ dequant(w).T."""
    n = x.shape[0]
    if out is None:
        out = np.empty((n, w.rows), dtype=np.float32)  # [n, rows]
    k = kernels_for(w.qtype)
    if n <= GEMV_MAX_BATCH:
        k.gemv(w.raw, x, out)
        return out
    tile = np.empty((min(TILE_ROWS, w.rows), w.cols), dtype=np.float32)  # [tile, cols]
    for r0 in range(0, w.rows, TILE_ROWS):
        r1 = min(r0 + TILE_ROWS, w.rows)
        k.dequant(w.raw[r0:r1], tile[: r1 - r0])
        np.matmul(x, tile[: r1 - r0].T, out=out[:, r0:r1])  # [n, r1-r0]
    return out


def dequantize_rows(w, ids):
    """float32 [len(ids), w.cols]: rows `ids` of `w` dequantized (embedding lookup)."""
    k = kernels_for(w.qtype)
    out = np.empty((len(ids), w.cols), dtype=np.float32)  # [n, cols]
    k.dequant(np.ascontiguousarray(w.raw[np.asarray(ids)]), out)
    return out
