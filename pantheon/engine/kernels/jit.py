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
# Below this many values the activation quantizers and silu_mul take their serial form: a step of 8
# streams (8 x 5632) too, whose serial pass is shorter than a launch.
SERIAL_VALUES = 1 << 16
inline = _njit(fastmath=True, inline="always")
serial = _njit(fastmath=True)
