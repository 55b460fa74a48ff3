"""The ggml type table: which tensor types Pantheon reads, their block geometry and row sizes."""

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

# Every type the engine has kernels for (pantheon.engine.kernels.registry provides one per entry).
SUPPORTED = frozenset(T[n] for n in (
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"))

FLOAT_TYPES = frozenset((T.F32, T.F16, T.BF16))
Q8_0_BLOCK = GGML_QUANT_SIZES[T.Q8_0][0]         # 32 values per block
Q8_0_BLOCK_BYTES = GGML_QUANT_SIZES[T.Q8_0][1]   # f16 scale + 32 int8


def block_elements(qtype):
    """Values per block of `qtype` (1 for the float types)."""
    return GGML_QUANT_SIZES[T(qtype)][0]


def float_size(qtype):
    """Bytes per value of a float type."""
    return GGML_QUANT_SIZES[T(qtype)][1]


def row_bytes(qtype, cols):
    """Bytes of one row of `cols` values; callers validate that `cols` is a whole number of blocks."""
    block_elems, block_bytes = GGML_QUANT_SIZES[T(qtype)]
    assert cols % block_elems == 0, (qtype, cols)
    return cols // block_elems * block_bytes
