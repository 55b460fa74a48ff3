"""The memory roof of a decode step: bytes of weights one step streams, and the rate this host's cores read memory.

A decode step multiplies every matrix once whatever the number of streams, so on a model larger than
the caches it cannot run faster than bytes_per_step / read_bandwidth: that bounds the aggregate
tokens/s of N streams at N x bandwidth / bytes_per_step, which the benchmarks print beside what they
measured.
"""

import statistics
import time

import numba
import numpy as np


@numba.njit(parallel=True, cache=True)
def _touch(a, step):
    """Σ of every step-th uint64 of a, across numba's threads: one load per cache line read."""
    total = np.uint64(0)
    for i in numba.prange(a.shape[0] // step):
        total += a[i * step]
    return total


def read_bandwidth(threads, nbytes=1 << 30, repeats=5):
    """Bytes per second `threads` cores read from a buffer of `nbytes` (past every cache): the median of
    `repeats` passes, each touching every 64-byte line once."""
    a = np.ones(nbytes // 8, np.uint64)  # [n] one cache line is 8 of them
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        _touch(a, 8)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            _touch(a, 8)
            times.append(time.perf_counter() - t)
    finally:
        numba.set_num_threads(before)
    return nbytes / statistics.median(times)


def step_bytes(model):
    """Bytes of weights one forward step reads: every matrix qmatmul multiplies (its repacked copy when it
    has one), plus nothing for the embeddings (a row per token)."""
    from pantheon.engine.model_weights import matrices

    return sum((w.packed if w.packed is not None else w.raw).nbytes for w in matrices(model.weights))
