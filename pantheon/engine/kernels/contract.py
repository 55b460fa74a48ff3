"""The two kernels every ggml quant type provides (the contract a type module fills in).

Contract for a type module (`legacy.py`, `kquants.py`): it exports `KERNELS`, a dict from
`gguf.GGMLQuantizationType` to `QuantKernels`. Both kernels take C-contiguous arrays:

- `gemv(raw, x, out)`: raw uint8 [rows, row_bytes], x float32 [n, cols], out float32 [n, rows];
  out[i, r] = dot(dequant(raw[r]), x[i]). Reads each weight row once for all n vectors; meant for
  decode (n = 1 .. a few). Parallel over rows with numba prange.
- `dequant(raw, out)`: raw uint8 [rows, row_bytes], out float32 [rows, cols]; exact ggml
  dequantization. Used for embedding lookups and for tiles fed to BLAS (prefill).

`any_batch`: the type's gemv beats dequantized tiles and BLAS at every batch size (prefill too).
"""

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class QuantKernels:
    gemv: Callable
    dequant: Callable
    any_batch: bool = False
