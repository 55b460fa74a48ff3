"""A weight matrix as raw ggml blocks: a zero-copy view of the model file plus its type and shape."""

from dataclasses import dataclass
from typing import Optional

import numpy as np

from pantheon.engine.kernels.contract import read_only


@dataclass(frozen=True, eq=False)
class Stack:
    """Matrices that multiply one input (a block's attn_q, attn_k, attn_v; ffn_gate, ffn_up) repacked back to
    back in the sidecar (engine.repacked): one kernel call reads `packed` as one matrix of sum(rows) rows
    where the members would take one call each, the same operations per row, so the same bits."""

    names: tuple
    rows: tuple
    packed: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "packed", read_only(self.packed))
        ends = np.cumsum(self.rows).tolist()
        # each member's output columns (start, end) in the stack's product, worked out once, not per call
        object.__setattr__(self, "spans", tuple(zip([0, *ends[:-1]], ends)))

    def serves(self, ws, i):
        """True when ws[i:] starts with this stack's members, in order."""
        k = len(self.names)
        return len(ws) - i >= k and tuple([w.name for w in ws[i:i + k]]) == self.names


@dataclass(frozen=True, eq=False)
class Weight:
    """`rows` output features of `cols` inputs each; `raw` holds the file's bytes, never a copy.

    raw: uint8 [rows, row_bytes] where row_bytes = cols / block_elems * block_bytes of `qtype`.
    packed: None, or the same matrix in the repacked row-lane layout (kernels.repack), a zero-copy view
    of its sidecar file (engine.repacked; Q4_0, Q8_0, Q4_K, Q5_K, Q6_K); products then read it instead of raw.
    stack: None, or (on the first member only) the Stack this matrix leads in the sidecar.
    """

    name: str
    qtype: int
    rows: int
    cols: int
    raw: np.ndarray
    packed: Optional[np.ndarray] = None
    stack: Optional[Stack] = None

    def __post_init__(self):
        assert self.raw.dtype == np.uint8 and self.raw.ndim == 2, self.name
        assert self.raw.shape[0] == self.rows, self.name
        # the kernels' one compiled signature (kernels.contract); a frozen dataclass sets through object
        object.__setattr__(self, "raw", read_only(self.raw))
        if self.packed is not None:
            object.__setattr__(self, "packed", read_only(self.packed))
