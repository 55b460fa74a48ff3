"""Replica choice: least-busy, unless a session's cache, or a cached prompt prefix, lives on a replica that
is not clearly busier."""

import array
import hashlib
from collections import OrderedDict

PREFIX_BLOCK = 16  # tokens per block, as the engine's prefix cache (pantheon.engine.prefix.BLOCK) counts them
PREFIX_BLOCKS = 4  # leading full blocks the affinity key covers: the shared system prompt, not the question


def clearly_busier(preferred_load, least_load):
    """The affinity replica is given up only when it is ahead by more than one request and by 1.5x."""
    return preferred_load - least_load > 1 and preferred_load > 1.5 * least_load


def pick_replica(candidates, load, preferred=None):
    """The die to run on: `candidates` are live replica dies, `load` maps die -> requests in flight."""
    assert candidates
    least = min(candidates, key=lambda d: (load.get(d, 0), d))
    if preferred in candidates and not clearly_busier(load.get(preferred, 0), load.get(least, 0)):
        return preferred
    return least


def prefix_key(prompt, block=PREFIX_BLOCK, blocks=PREFIX_BLOCKS):
    """A stable nonzero 64-bit hash of the prompt's leading full blocks (at most `blocks`), or 0 when it
    has no full block: requests sharing it share a cacheable prefix, so they go where it is cached."""
    n = min(len(prompt) // block, blocks) * block
    if n == 0:
        return 0
    data = array.array("I", prompt[:n]).tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") or 1


class SessionMap:
    """(model, session or prefix key) -> die that holds its cache; least recently used entries fall out."""

    def __init__(self, capacity=4096):
        self.capacity = capacity
        self._map = OrderedDict()

    def get(self, key):
        die = self._map.get(key)
        if die is not None:
            self._map.move_to_end(key)
        return die

    def put(self, key, die):
        self._map[key] = die
        self._map.move_to_end(key)
        while len(self._map) > self.capacity:
            self._map.popitem(last=False)

    def forget_die(self, die):
        """A die restarted: its caches are gone, so its sessions may go anywhere."""
        for key in [k for k, d in self._map.items() if d == die]:
            del self._map[key]
