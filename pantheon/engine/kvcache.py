"""Per-sequence key/value cache: float16 arrays (llama.cpp's default KV type) that grow by doubling up to the
context limit."""

import numpy as np

from pantheon.errors import ContextOverflow


class SequenceTokens:
    """The token ids a sequence's cache was computed from, and the bookkeeping every cache shares
    (the CPU KVCache here, the GPU pool's DeviceCache): length, the context bound, prefix matching."""

    def __init__(self, n_ctx):
        self.n_ctx = n_ctx
        self.tokens = []

    def __len__(self):
        return len(self.tokens)

    def _fits(self, new_tokens):
        """Positions needed for `new_tokens` more, or ContextOverflow past the context."""
        need = len(self.tokens) + new_tokens
        if need > self.n_ctx:
            raise ContextOverflow(f"sequence of {need} tokens exceeds the context of {self.n_ctx}")
        return need

    def truncate(self, n):
        """Keep the first `n` positions (prefix reuse); later ones are overwritten when extended."""
        assert 0 <= n <= len(self.tokens)
        del self.tokens[n:]

    def common_prefix(self, tokens):
        """Length of the longest common prefix of the cached ids and `tokens`."""
        n = min(len(self.tokens), len(tokens))
        a = np.asarray(self.tokens[:n])  # [n]
        b = np.asarray(tokens[:n])  # [n]
        diff = np.flatnonzero(a != b)  # [mismatches]
        return int(diff[0]) if diff.size else n


class KVCache(SequenceTokens):
    """Keys and values of one sequence for every layer; `tokens` are the ids they were computed from.

    k, v: float16 [n_layer, n_head_kv, capacity, head_dim]; positions [0, len) are valid.
    """

    def __init__(self, cfg, n_ctx, initial=64):
        super().__init__(n_ctx)
        self._shape = (cfg.n_layer, cfg.n_head_kv, 0, cfg.head_dim)
        self.k = self.v = None
        self._alloc(min(initial, n_ctx))

    @property
    def capacity(self):
        return self.k.shape[2]

    @property
    def nbytes(self):
        return self.k.nbytes + self.v.nbytes

    def _alloc(self, cap):
        n_layer, n_kv, _, hd = self._shape
        k = np.zeros((n_layer, n_kv, cap, hd), dtype=np.float16)  # [L, kv, cap, hd]
        v = np.zeros((n_layer, n_kv, cap, hd), dtype=np.float16)  # [L, kv, cap, hd]
        if self.k is not None:
            n = len(self.tokens)
            k[:, :, :n] = self.k[:, :, :n]
            v[:, :, :n] = self.v[:, :, :n]
        self.k, self.v = k, v

    def reserve(self, new_tokens):
        """Make room for `new_tokens` more positions, or raise ContextOverflow."""
        need = self._fits(new_tokens)
        if need > self.capacity:
            self._alloc(min(self.n_ctx, max(need, 2 * self.capacity)))

    def copy_from(self, src, n):
        """Become a copy of the first `n` positions of `src` (a prefix another sequence computed)."""
        assert len(self.tokens) == 0 and 0 <= n <= len(src)
        self.reserve(n)
        self.k[:, :, :n] = src.k[:, :, :n]  # [L, kv, n, hd]
        self.v[:, :, :n] = src.v[:, :, :n]  # [L, kv, n, hd]
        self.tokens = list(src.tokens[:n])
