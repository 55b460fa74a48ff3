"""The two kernels every ggml quant type provides (the contract a type module fills in).

Contract for a type module (`legacy.py`, `kquants.py`): it exports `KERNELS`, a dict from
`gguf.GGMLQuantizationType` to `QuantKernels`. Both kernels take C-contiguous arrays:

- `gemv(raw, x, out)`: raw uint8 [rows, row_bytes], x float32 [n, cols], out float32 [n, rows];
  out[i, r] = dot(dequant(raw[r]), x[i]). Reads each weight row once for all n vectors; meant for
  decode (n = 1 .. a few). Parallel over rows with numba prange.
- `dequant(raw, out)`: raw uint8 [rows, row_bytes], out float32 [rows, cols]; exact ggml
  dequantization. Used for embedding lookups and for tiles fed to BLAS (prefill).

Weights reach every kernel read-only (`read_only`): numba compiles one machine-code copy per argument
signature, and an array's writability is part of it, so a writable weight (quantized in memory, or a
test's random blocks) would cost a second compile of the kernel the mapped file's read-only view got.

`any_batch`: the type's gemv beats dequantized tiles and BLAS at every batch size (prefill too).
"""

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class QuantKernels:
    gemv: Callable
    dequant: Callable
    any_batch: bool = False


def read_only(a: np.ndarray) -> np.ndarray:
    """`a` when it is read-only already, else a read-only view of it (the caller's array stays writable)."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view
