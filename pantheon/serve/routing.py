"""Replica choice: least-busy, unless a session's cache lives on a replica that is not clearly busier."""

from collections import OrderedDict


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


class SessionMap:
    """(model, session) -> die that holds its prefix cache; least recently used entries fall out."""

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
