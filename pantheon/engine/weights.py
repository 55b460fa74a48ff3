"""A weight matrix as raw ggml blocks: a zero-copy view of the model file plus its type and shape."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from pantheon.engine.kernels.contract import read_only


@dataclass(frozen=True, eq=False)
class Weight:
    """`rows` output features of `cols` inputs each; `raw` holds the file's bytes, never a copy.

    raw: uint8 [rows, row_bytes] where row_bytes = cols / block_elems * block_bytes of `qtype`.
    packed: None, or the same matrix in the repacked row-lane layout (kernels.repack), a zero-copy view
    of its sidecar file (engine.repacked; Q4_0, Q8_0, Q4_K, Q5_K, Q6_K); products then read it instead of raw.
    """

    name: str
    qtype: int
    rows: int
    cols: int
    raw: np.ndarray
    packed: Optional[np.ndarray] = None

    def __post_init__(self):
        assert self.raw.dtype == np.uint8 and self.raw.ndim == 2, self.name
        assert self.raw.shape[0] == self.rows, self.name
        # the kernels' one compiled signature (kernels.contract); a frozen dataclass sets through object
        object.__setattr__(self, "raw", read_only(self.raw))
        if self.packed is not None:
            object.__setattr__(self, "packed", read_only(self.packed))
