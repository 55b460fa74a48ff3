"""One entry per ggml quant type Pantheon reads: its kernels (see kernels/contract.py)."""

from gguf import GGMLQuantizationType

from pantheon.engine.kernels import kquants, legacy
from pantheon.errors import UnsupportedTensorType
from pantheon.gguf.ggml import SUPPORTED

_TABLE = {**legacy.KERNELS, **kquants.KERNELS}
assert set(_TABLE) == SUPPORTED, "every type the GGUF reader accepts has kernels"


def kernels_for(qtype):
    """The QuantKernels of `qtype`; UnsupportedTensorType when Pantheon has none."""
    try:
        return _TABLE[GGMLQuantizationType(qtype)]
    except (KeyError, ValueError):
        raise UnsupportedTensorType(f"ggml tensor type {qtype!r} is not supported") from None


def supported_types():
    """The ggml types with kernels."""
    return SUPPORTED
