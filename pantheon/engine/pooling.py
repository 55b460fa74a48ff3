"""An embedding's pooling: a sequence's final normed hidden states folded into one vector, chunk by chunk."""

import numpy as np

from pantheon.errors import EngineError
from pantheon.gguf.config import POOLINGS

KINDS = POOLINGS + ("none",)  # "none" pools nothing: every position's state is kept (per-token embeddings)


class Pool:
    """`how` is one of KINDS: mean over every position, cls the first, last the last, none all of them.
    Rows arrive in prompt order over as many chunks as the prefill takes; only a running sum or one row
    is kept (every row for none)."""

    def __init__(self, how):
        if how not in KINDS:
            raise EngineError(f"embed must be one of {', '.join(KINDS)}, got {how!r}")
        self.how, self.count, self.pooled = how, 0, None  # pooled: float64 [dim], the sum for mean
        self.rows = []  # none: each chunk's rows, float32 [len(chunk), dim]

    def add(self, rows):
        """Fold one chunk's normed hidden states [len(chunk), dim]."""
        if self.how == "none":
            self.rows.append(np.array(rows, np.float32))  # [len(chunk), dim]: a copy, the model reuses its buffers
        elif self.how == "mean":
            total = rows.sum(axis=0, dtype=np.float64)  # [dim]
            self.pooled = total if self.pooled is None else self.pooled + total
        elif self.how == "last" or self.pooled is None:  # cls: the first chunk's first row, once
            self.pooled = rows[-1 if self.how == "last" else 0].astype(np.float64)  # [dim]
        self.count += len(rows)

    def vector(self):
        """float32 [dim]: the pooled vector, or [positions, dim] for none (not normalized: the caller picks
        the norm)."""
        if self.how == "none":
            return np.concatenate(self.rows)  # [positions, dim]
        scale = self.count if self.how == "mean" else 1
        return (self.pooled / scale).astype(np.float32)  # [dim]
