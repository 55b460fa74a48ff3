"""Compile (or load from numba's disk cache) every CPU kernel a served step can call, before serving."""

import numpy as np

from pantheon.engine.kernels import repack
from pantheon.engine.kernels.matmul import qmatmul
from pantheon.engine.weights import Weight

# (new tokens, cached before): a prefill chunk past every small-batch limit (16 vectors), a decode batch
# (5: a 4-vector kernel plus a single vector), one decode step.
STEPS = ((20, 0), (5, 20), (1, 25))
# Sequences of one batched decode step (engine.decode_step with several rows): its gate and up halves
# take ops.silu_mul_halves_into's thread-pool form from 8 rows of 2048.
DECODE_BATCH = 8
# Rows an expert may receive in one step: 1 takes the int8 kernels that read rows in place, 4 and 9 the
# 4-vector or row-interleaving ones (or the float gemv, or dequant + BLAS), 17 the interleaving ones of
# every type; a 20-token forward gives each expert only a row or two.
EXPERT_ROWS = (1, 4, 9, 17)


def warm_up(model, n_ctx):
    """Run the step shapes a server sees through `model` (a first compile inside a served step would
    stall that request and look like a hang to the supervisor); no-op for a context too small for it."""
    if n_ctx <= sum(STEPS[-1]) + 1:
        return
    cache = model.new_cache(sum(STEPS[-1]) + 1)
    for n, _ in STEPS:
        model.forward([(cache, [1] * n)])
    model.forward([(model.new_cache(2), [1]) for _ in range(DECODE_BATCH)])
    for w in _expert_samples(model.weights.blocks):
        for n in EXPERT_ROWS:
            qmatmul([w], np.zeros((n, w.cols), np.float32))  # [n, <=16] discarded


def _expert_samples(blocks):
    """One 16-row slice of an expert matrix per distinct (type, width): the kernels differ by type only."""
    seen = {}
    for blk in blocks:
        if blk.experts is None:
            continue
        for w in (blk.experts.gate[0], blk.experts.up[0], blk.experts.down[0]):
            seen.setdefault((w.qtype, w.cols, w.packed is not None), _sample(w, min(16, w.rows)))
    return list(seen.values())


def _sample(w, rows):
    """The first `rows` rows of `w`, repacked too when `w` is (Weight hands both to the kernels read-only, as
    the sidecar's view is, so the kernel compiled here is the one the served step calls)."""
    if w.packed is None:
        return Weight(w.name, w.qtype, rows, w.cols, w.raw[:rows])
    packed = repack.pack(w.qtype, w.raw[:rows])  # [1, 32 row_bytes]
    return Weight(w.name, w.qtype, rows, w.cols, w.raw[:rows], packed)
