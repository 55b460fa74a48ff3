"""Automatic prefix caching: finished sequences' KV caches, found again by chained hashes of their token blocks.

A cache is indexed by the hash of every full BLOCK of its token ids, each hash chained with its
parent's (vLLM's automatic prefix caching), so the longest cached prefix of a new prompt is found
by walking the prompt's block hashes until one is missing; the candidates' token ids are then
compared exactly (a hash collision can never serve wrong KV). Entries are whole per-sequence
caches, kept least recently used first: anonymous ones (a request without a session) leave before
sessions when the store is over its capacity, under memory pressure, or when a new sequence needs
the room.
"""

from collections import OrderedDict
from dataclasses import dataclass

BLOCK = 16


def block_hashes(tokens, block=BLOCK):
    """Chained hash of every full block of `tokens`: h[i] = hash((h[i-1], ids of block i))."""
    out, h = [], 0
    for i in range(len(tokens) // block):
        h = hash((h, tuple(tokens[i * block:(i + 1) * block])))
        out.append(h)
    return out


@dataclass
class _Entry:
    cache: object
    hashes: list
    session: object = None


class PrefixStore:
    """Kept KV caches: by session id (taken back by the session) and by block hashes (copied from).

    `capacity` bounds the entries of both kinds together (the engine's max_sessions kept caches)."""

    def __init__(self, capacity, block=BLOCK):
        self.capacity, self.block = capacity, block
        self._entries = OrderedDict()  # key -> _Entry, least recently used first
        self._index = {}  # block hash -> set of keys whose cache holds that block
        self._serial = 0

    def __len__(self):
        return len(self._entries)

    @property
    def sessions(self):
        return [e.session for e in self._entries.values() if e.session is not None]

    def put(self, cache, session=None):
        """Keep a finished sequence's cache; an anonymous one replaces anonymous caches it extends."""
        if session is None and not self._worth_keeping(cache):
            return
        key = ("session", session) if session is not None else ("anon", self._next_serial())
        self._drop(key)
        hashes = block_hashes(cache.tokens, self.block)
        self._entries[key] = _Entry(cache, hashes, session)
        for h in hashes:
            self._index.setdefault(h, set()).add(key)
        while len(self._entries) > self.capacity and self.evict_one():
            pass

    def _next_serial(self):
        self._serial += 1
        return self._serial

    def _worth_keeping(self, cache):
        """False when `cache` has no full block, or an anonymous entry already holds all of it; anonymous
        entries whose tokens are a prefix of `cache`'s go (it serves everything they did)."""
        if len(cache) < self.block or self.capacity < 1:
            return False
        for key, e in list(self._entries.items()):
            if e.session is not None:
                continue
            shared = e.cache.common_prefix(cache.tokens)
            if shared == len(cache):
                self._entries.move_to_end(key)
                return False
            if shared == len(e.cache):
                self._drop(key)
        return True

    def take_session(self, session):
        """The session's own cache, removed from the store (its sequence extends it), or None."""
        entry = self._drop(("session", session))
        return None if entry is None else entry.cache

    def match(self, tokens):
        """(cache, n): the kept cache sharing the longest prefix with `tokens` and that length; (None, 0)
        when no cache shares a full block. The cache stays kept (callers copy from it)."""
        keys = set()
        for h in block_hashes(tokens, self.block):
            found = self._index.get(h)
            if not found:
                break
            keys = found
        best, n = None, 0
        for key in sorted(keys, key=str):
            shared = self._entries[key].cache.common_prefix(tokens)
            if shared > n:
                best, n = key, shared
        if best is None:
            return None, 0
        self._entries.move_to_end(best)
        return self._entries[best].cache, n

    def take(self, cache):
        """`cache`, removed from the store (a sequence extends it in place)."""
        key = next(k for k, e in self._entries.items() if e.cache is cache)
        return self._drop(key).cache

    def evict_one(self, spare=None):
        """Drop the least recently used anonymous cache, else the least recently used session's, never
        the cache `spare`; False when there is nothing to drop."""
        keys = [k for k, e in self._entries.items() if e.cache is not spare]
        anonymous = [k for k in keys if self._entries[k].session is None]
        if not keys:
            return False
        self._drop((anonymous or keys)[0])
        return True

    def clear(self):
        self._entries.clear()
        self._index.clear()

    def _drop(self, key):
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        for h in entry.hashes:
            keys = self._index.get(h)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._index[h]
        return entry
