"""Matrix products of raw-block weights with float32 activations: gemv for few rows (for F16 / BF16, whose
tiled gemv beats BLAS, at any count), dequantized tiles + BLAS for many."""

import numba
import numpy as np

from pantheon.engine.kernels import q8dot, q8k
from pantheon.engine.kernels.contract import read_only
from pantheon.engine.kernels.registry import kernels_for
from pantheon.engine.sizes import TILE_BYTES

# Above this many activation rows, dequantizing tiles and calling sgemm beats the raw-block kernel:
# gemv costs grow with every vector (Q4_0 2048x5632: ~1.6 ms each on one core) while the tile path
# pays one dequantization (~12 ms) and a cheap sgemm.
GEMV_MAX_BATCH = 8
# Up to this many activation rows a stack (weights.Stack) takes one kernel call: decode, where each call's
# thread fork and join and its stream's start count; above it the members' separate calls leave each
# output contiguous without a copy.
STACK_MAX_BATCH = 16
# Threads for the dequantization ahead of sgemm: running it on numba's pool while OpenBLAS's workers
# still spin from the previous sgemm made it slower than one thread (measured at 2 threads).
DEQUANT_THREADS = 1


def matmul(w, x, out=None):
    """x float32 [n, w.cols] -> float32 [n, w.rows]: x @ dequant(w).T."""
    n = x.shape[0]
    if out is None:
        out = np.empty((n, w.rows), dtype=np.float32)  # [n, rows]
    k = kernels_for(w.qtype)
    if n <= GEMV_MAX_BATCH or k.any_batch:
        k.gemv(w.raw, x, out)
        return out
    step = max(1, min(w.rows, TILE_BYTES // (4 * w.cols)))
    tile = np.empty((step, w.cols), dtype=np.float32)  # [step, cols]
    for r0 in range(0, w.rows, step):
        r1 = min(r0 + step, w.rows)
        _dequant_serially(k, w.raw[r0:r1], tile[: r1 - r0])
        np.matmul(x, tile[: r1 - r0].T, out=out[:, r0:r1])  # [n, r1-r0]
    return out


def qmatmul(ws, x):
    """[x @ dequant(w).T for w in ws], float32 [n, w.rows] each, with x rounded once to int8 as llama.cpp does.

    That rounding is the one llama.cpp applies before its quantized dot products (so logits track
    llama.cpp's, not the exact float product): per 256 (Q8_K) for K-quants wherever AVX2 runs (q8k:
    integer sums per super-block, faster than the VNNI kernels for them at every n measured), per 32
    for Q4_0 / Q8_0 through the VNNI kernels (q8dot); weights without either get the exact matmul.
    Members of a repacked stack (weights.Stack) in order take one call for the stack, up to
    STACK_MAX_BATCH rows."""
    acts, outs, i = _Acts(x), [], 0
    while i < len(ws):
        s = ws[i].stack
        if s is not None and acts.n <= STACK_MAX_BATCH and s.serves(ws, i):
            outs.extend(_stacked(ws[i], s, acts))
            i += len(s.names)
        else:
            outs.append(_product(ws[i], ws[i].packed, ws[i].rows, acts))
            i += 1
    return outs


class _Acts:
    """Activations x [n, cols], rounded to int8 on first need, once per rounding, for every weight; and
    the thread count the products take (numba's getter costs about a microsecond: read once a call)."""

    def __init__(self, x):
        self.x, self.n, self.threads = x, x.shape[0], numba.get_num_threads()
        self._q8k = self._q8 = None

    def q8k(self):
        if self._q8k is None:  # not functools.cached_property, whose lock costs more than this lookup
            self._q8k = q8k.activations(self.x)  # per 256, Q8_K
        return self._q8k

    def q8(self):
        if self._q8 is None:
            self._q8 = q8dot.Activations(self.x)  # per 32, Q8_0
        return self._q8


def _product(w, packed, rows, acts):
    """float32 [n, rows]: acts.x times w, or times `packed` (w's repacked copy, or the stack w leads,
    of `rows` rows) when not None."""
    out = np.empty((acts.n, rows), dtype=np.float32)  # [n, rows]
    k_quant = q8k.supports(w.qtype, w.cols)
    if packed is not None and k_quant:
        q8k.product_repacked(w.qtype, packed, rows, acts.q8k(), out, acts.threads)
    elif packed is not None:
        q8dot.product_repacked(w.qtype, packed, rows, acts.q8(), out, acts.threads)
    elif k_quant:
        q8k.product(w.qtype, w.raw, acts.q8k(), out)
    elif q8dot.supports(w.qtype):
        q8dot.product(w.qtype, w.raw, acts.q8(), out)
    else:
        matmul(w, acts.x, out)
    return out


def _stacked(w, s, acts):
    """Stack s's members' outputs (w leads it), float32 [n, rows] each, from one call over its rows."""
    out = _product(w, s.packed, s.spans[-1][1], acts)  # [n, sum(rows)]
    # contiguous like an unstacked output (one compiled signature downstream); a view when n is 1
    return [np.ascontiguousarray(out[:, a:e]) for a, e in s.spans]  # [n, rows] each


def _dequant_serially(k, raw, tile):
    threads = numba.get_num_threads()
    numba.set_num_threads(min(threads, DEQUANT_THREADS))
    try:
        k.dequant(raw, tile)
    finally:
        numba.set_num_threads(threads)


def dequantize_rows(w, ids):
    """float32 [len(ids), w.cols]: rows `ids` of `w` dequantized (embedding lookup)."""
    k = kernels_for(w.qtype)
    out = np.empty((len(ids), w.cols), dtype=np.float32)  # [n, cols]
    rows = np.ascontiguousarray(w.raw[np.asarray(ids)])  # [n, row_bytes], a writable copy
    k.dequant(read_only(rows), out)  # the signature the prefill tiles' dequant compiled (kernels.contract)
    return out
