"""float16 bits to float32 through a lookup table, because numba's nopython mode has no float16."""

import functools

import numpy as np


@functools.lru_cache(maxsize=1)
def fp16_table():
    """float32 [65536]: the value of every float16 bit pattern; pass it to kernels as an argument."""
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)  # [65536]
