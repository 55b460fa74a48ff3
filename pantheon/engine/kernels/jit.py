"""The numba decorators every kernel uses, so compile options live in one place."""

import numba

# cache=True: compiled machine code lands in __pycache__, so a second start skips the 1-2 s per kernel.
kernel = numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
# Dequantizers promise gguf.quants' bits: without fastmath LLVM may not fuse d*q + m into one rounding.
# The int8-activation kernels (q8dot) too: with fastmath, a fresh compile and numba's cached copy of the
# same source rounded the 1-vector Q4_K sums differently, breaking bitwise batch invariance.
exact = numba.njit(parallel=True, cache=True, nogil=True)
inline = numba.njit(fastmath=True, cache=True, nogil=True, inline="always")
serial = numba.njit(fastmath=True, cache=True, nogil=True)
