"""A weight matrix as raw ggml blocks: a zero-copy view of the model file plus its type and shape."""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Weight:
    """`rows` output features of `cols` inputs each; `raw` holds the file's bytes, never a copy.

    raw: uint8 [rows, row_bytes] where row_bytes = cols / block_elems * block_bytes of `qtype`.
    """

    name: str
    qtype: int
    rows: int
    cols: int
    raw: np.ndarray

    def __post_init__(self):
        assert self.raw.dtype == np.uint8 and self.raw.ndim == 2, self.name
        assert self.raw.shape[0] == self.rows, self.name
