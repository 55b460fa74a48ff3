"""The re-check interval of a sleeping consumer: short while messages flow, backing off while idle."""

DEFAULT_RECHECK_S = 0.020
DEFAULT_IDLE_RECHECK_S = 0.100


class Recheck:
    """How long a consumer may sleep on its doorbell before re-reading shared memory.

    The doorbell can lose a wake-up (docs/ipc.md), so a sleeping consumer re-reads its ring at least
    this often. `base` holds after every message; each wait that ends with nothing to read doubles the
    interval up to `cap`, so an idle consumer wakes 1/cap times a second instead of 1/base.
    """

    __slots__ = ("base", "cap", "interval")

    def __init__(self, base=DEFAULT_RECHECK_S, cap=DEFAULT_IDLE_RECHECK_S):
        if not 0 < base <= cap:
            raise ValueError(f"need 0 < recheck_s <= idle_recheck_s, got {base} and {cap}")
        self.base, self.cap, self.interval = base, cap, base

    def wait(self, now, deadline):
        """Seconds to sleep now: the interval, cut short by `deadline` (None: no deadline)."""
        return self.interval if deadline is None else min(self.interval, deadline - now)

    def traffic(self):
        """A message arrived: back to the short interval."""
        self.interval = self.base

    def empty(self):
        """A wait ended with nothing to read: sleep longer next time."""
        self.interval = min(self.interval * 2, self.cap)
