"""One entry per ggml quant type: block geometry and the two kernels every type provides.

Contract for a type module (`legacy.py`, `kquants.py`): it exports `KERNELS`, a dict from
`gguf.GGMLQuantizationType` to `QuantKernels`. Both kernels take C-contiguous arrays:

- `gemv(raw, x, out)`: raw uint8 [rows, row_bytes], x float32 [n, cols], out float32 [n, rows];
  out[i, r] = dot(dequant(raw[r]), x[i]). Reads each weight row once for all n vectors; meant for
  decode (n = 1 .. a few). Parallel over rows with numba prange.
- `dequant(raw, out)`: raw uint8 [rows, row_bytes], out float32 [rows, cols]; exact ggml
  dequantization. Used for embedding lookups and for tiles fed to BLAS (prefill).
"""

from dataclasses import dataclass
from typing import Callable

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from pantheon.errors import UnsupportedTensorType


@dataclass(frozen=True)
class QuantKernels:
    gemv: Callable
    dequant: Callable


_TABLE = {}


def _load():
    from pantheon.engine.kernels import kquants, legacy

    _TABLE.update(legacy.KERNELS)
    _TABLE.update(kquants.KERNELS)


def kernels_for(qtype) -> QuantKernels:
    """The kernels of `qtype`; UnsupportedTensorType when Pantheon has none."""
    if not _TABLE:
        _load()
    try:
        return _TABLE[GGMLQuantizationType(qtype)]
    except (KeyError, ValueError):
        raise UnsupportedTensorType(f"ggml tensor type {qtype!r} is not supported") from None


def supported_types():
    """The ggml types with kernels, without importing numba."""
    return frozenset(SUPPORTED)


SUPPORTED = frozenset(GGMLQuantizationType[n] for n in (
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"))


def row_bytes(qtype, cols):
    """Bytes of one row of `cols` values; AbsurdValue-free: callers validate `cols` first."""
    block_elems, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    assert cols % block_elems == 0, (qtype, cols)
    return cols // block_elems * block_bytes
