"""Random raw ggml blocks for kernel tests (random bytes whose fp16 scales are sane finite values), and
ggml's decoding of packed Q4_K scales to check repacked layouts against."""

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T

from pantheon.engine.kernels.contract import read_only

# Byte offsets of the fp16 d/dmin fields inside one block of each type.
FP16_FIELDS = {T.Q4_0: (0,), T.Q8_0: (0,), T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2),
               T.Q6_K: (208,)}
K_QUANTS = (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K)


def random_blocks(qtype, rows, cols, rng):
    """uint8 [rows, row_bytes], read-only as a model's weights are: random bytes, every fp16 scale a finite
    value in 1e-4..0.2."""
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    nb = cols // block_elems
    raw = rng.integers(0, 256, (rows, nb, block_bytes), dtype=np.uint8)  # [rows, nb, block_bytes]
    for o in FP16_FIELDS[qtype]:
        scale = rng.uniform(0.5, 2.0, (rows, nb)) * 10.0 ** rng.uniform(-4, -1, (rows, nb))  # [rows, nb]
        raw[:, :, o:o + 2] = scale.astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
    return read_only(raw.reshape(rows, nb * block_bytes))  # [rows, row_bytes]


def k4_decoded(planes):
    """ggml's get_scale_min_k4 on the 12 packed bytes' planes uint8 [..., 12, rows] -> scales, mins [..., 8, rows]."""
    lo, mid, hi = planes[..., 0:4, :], planes[..., 4:8, :], planes[..., 8:12, :]
    sc = np.concatenate([lo & 63, (hi & 15) | ((lo >> 6) << 4)], axis=-2)  # [..., 8, rows]
    mn = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=-2)  # [..., 8, rows]
    return sc, mn
