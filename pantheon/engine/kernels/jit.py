"""The numba decorators every kernel uses, so compile options and the on-disk cache live in one place."""

import numba

from pantheon.engine.kernels import compile_cache


def _njit(**options):
    """numba.njit(cache=True, nogil=True, error_model="numpy", **options), its cache in the directory keyed
    by every engine source (compile_cache), chosen when the first kernel is decorated, not at import of
    this module. error_model="numpy": numba's default ("python") tests every float divisor for zero to
    raise ZeroDivisionError, a branch per element that kept LLVM from vectorizing loops that divide
    (silu_mul's serial pass: 38 -> 8 us per 5632 values); IEEE's inf and NaN are what a kernel wants."""

    def decorate(fn):
        compile_cache.activate()
        return numba.njit(cache=True, nogil=True, error_model="numpy", **options)(fn)

    return decorate


# cache=True: compiled machine code lands on disk, so a second start skips the 1-2 s per kernel.
kernel = _njit(parallel=True, fastmath=True)
# Dequantizers promise gguf.quants' bits: without fastmath LLVM may not fuse d*q + m into one rounding.
# The int8-activation kernels (q8dot) too: with fastmath, a fresh compile and numba's cached copy of the
# same source rounded the 1-vector Q4_K sums differently, breaking bitwise batch invariance.
exact = _njit(parallel=True)
# `exact` in the calling thread: for work too small to pay for waking numba's thread pool (a decode
# step's activations: tens of microseconds per launch on a 2-vCPU VM, for a few of work).
exact_serial = _njit()
# Below this many values the activation quantizers take their serial form (ops.silu_mul has its own
# bound): a decode step's one row, whose serial pass is shorter than a launch. At 8 rows of 5632 two
# threads win (Q8_K 20.2 -> 14.5 us, Q8_0 14.6 -> 11.2); at 8 x 2048 they lose (7.7 -> 8.7, 5.8 -> 10.3).
SERIAL_VALUES = 1 << 15
inline = _njit(fastmath=True, inline="always")
serial = _njit(fastmath=True)
