"""The KV cache on the GPU: one fp16 pool per model stage, allocated once; a sequence owns one slot of it.

Slot s of every stage holds one sequence's keys and values for that stage's layers:
k, v fp16 [stage_layers, slots, n_kv, n_ctx, head_dim]. A cache gives its slot back when dropped
(the step Engine drops caches by forgetting them), so the pool never grows after load.
"""

import weakref

import numpy as np

from pantheon.engine.kvcache import SequenceTokens
from pantheon.errors import EngineError


class SlotPool:
    """Free slot ids of a pool of `n` sequences of at most `n_ctx` tokens."""

    def __init__(self, n, n_ctx):
        self.n, self.n_ctx = n, n_ctx
        self.free = list(range(n - 1, -1, -1))
        self.copy = None  # copy(src_slot, dst_slot, n): set by the model that owns the pool's arrays

    def take(self):
        if not self.free:
            raise EngineError(f"all {self.n} KV slots of this model are in use")
        return self.free.pop()

    def give(self, slot):
        self.free.append(slot)


def stage_arrays(backend, n_layers, slots, n_ctx, cfg):
    """(k, v) fp16 [n_layers, slots, n_kv, n_ctx, head_dim] on `backend`, zeroed."""
    shape = (n_layers, slots, cfg.n_head_kv, n_ctx, cfg.head_dim)
    return backend.zeros(shape, np.float16), backend.zeros(shape, np.float16)


def pool_bytes(cfg, slots, n_ctx):
    """Device bytes of a whole model's pool (all stages together)."""
    return 2 * 2 * cfg.n_layer * slots * cfg.n_head_kv * n_ctx * cfg.head_dim


class DeviceCache(SequenceTokens):
    """One sequence's slot in the pool and the token ids computed into it (the CPU KVCache's contract)."""

    def __init__(self, pool, n_ctx):
        super().__init__(min(n_ctx, pool.n_ctx))
        self.slot = pool.take()
        self._copy = pool.copy
        self._release = weakref.finalize(self, pool.give, self.slot)

    @property
    def capacity(self):
        return self.n_ctx

    def reserve(self, new_tokens):
        self._fits(new_tokens)

    def copy_from(self, src, n):
        """Become a copy of the first `n` positions of `src`'s slot (a prefix another sequence computed)."""
        assert len(self.tokens) == 0 and 0 <= n <= len(src)
        self.reserve(n)
        self._copy(src.slot, self.slot, n)
        self.tokens = list(src.tokens[:n])
