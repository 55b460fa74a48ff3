"""Work stealing for the kernels' parallel loops: each worker streams its own contiguous run of tasks front
to back, and a worker done early takes the rest of another's run from its back end.

A static split waits for the slowest worker, and on a shared host one core often runs far slower than
the other for a while (a TinyLlama-shaped Q4_K_M model's matrices, one vector, 2 threads: 32.7 ms a
step split statically against 26.8 stealing, while calm 21.6 against 21.7; docs/performance.md). The
owner keeps reading in address order, so the hardware prefetcher's stream is unbroken until the two
meet. Every task is computed by exactly one worker with the same operations, so results do not depend on
who ran it.

A run's counters sit on their own cache line: `claimed` (tasks handed out, by anyone) and `stolen` (taken
from the back). A claim first bumps `claimed`; one past the run's size means the run is done. The owner
then takes lo + (how many it took before) and a thief hi - 1 - (stolen before), so the two ends never
hand out one task twice: owner's and thieves' claims together never exceed the run's size.
"""

import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from pantheon.engine.kernels.jit import inline

# int64 counters per cache line: each run's pair on its own line, so the owner's claims stay in its cache.
LINE = 8


@intrinsic
def fetch_add(typingctx, arr, i, v):
    """arr[i] += v as one atomic read-modify-write (lock xadd), returning the old arr[i]."""
    sig = types.int64(arr, types.intp, types.int64)

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])
        return builder.atomic_rmw("add", ptr, args[2], "seq_cst")

    return sig, codegen


@inline
def counters(workers):
    """Zeroed claim counters for `workers` runs: int64 [workers, LINE] flat."""
    return np.zeros(workers * LINE, np.int64)  # [workers * LINE]


@inline
def run_of(s, per, tasks):
    """Run s's tasks: [lo, hi)."""
    return s * per, min(tasks, (s + 1) * per)


@inline
def claim(cnt, s, own, lo, hi, taken):
    """The next task of run s ([lo, hi)) for a worker: its owner (`own`, having taken `taken` of them)
    reads front to back, a thief from the back; -1 once every task of the run is handed out."""
    if fetch_add(cnt, LINE * s, 1) >= hi - lo:
        return -1
    return lo + taken if own else hi - 1 - fetch_add(cnt, LINE * s + 1, 1)
