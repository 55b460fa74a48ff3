"""Wait on several receivers at once: one poll over their eventfd doorbells, shared memory re-checked."""

import select
import time

from ipc.recheck import DEFAULT_IDLE_RECHECK_S, DEFAULT_RECHECK_S, Recheck


class Mux:
    """Round-robin over receivers; sleeps on all their doorbells together when every ring is empty.

    Each receiver must use an eventfd doorbell (the default): a semaphore has no fd to poll.
    """

    def __init__(self, receivers, spin_s=20e-6, recheck_s=DEFAULT_RECHECK_S, idle_recheck_s=DEFAULT_IDLE_RECHECK_S):
        self.receivers = list(receivers)
        self.spin_s, self.recheck = spin_s, Recheck(recheck_s, idle_recheck_s)
        self._poll = select.poll()
        for r in self.receivers:
            self._poll.register(r._bell.fileno(), select.POLLIN)
        self._next = 0

    def poll(self):
        """(index, Message) of the next ready receiver, or None; never blocks."""
        n = len(self.receivers)
        for step in range(n):
            i = (self._next + step) % n
            msg = self.receivers[i].poll()
            if msg is not None:
                self._next = (i + 1) % n
                return i, msg
        return None

    def receive(self, timeout=None):
        """Next (index, Message), or None after `timeout` seconds (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        spin_end = time.monotonic() + self.spin_s
        slept = False
        while True:
            got = self.poll()
            if got is not None:
                self.recheck.traffic()
                return got
            if slept:
                self.recheck.empty()  # the last wait ended with nothing to read
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            if now >= spin_end:
                self._sleep(self.recheck.wait(now, deadline))
                slept = True

    def _sleep(self, wait):
        rings = [r._ring for r in self.receivers]
        for ring in rings:
            ring.sleeping = 1
        if all(ring.peek() < 0 for ring in rings):
            for _fd, _ in self._poll.poll(max(0.0, wait) * 1000.0):
                pass
        for r in self.receivers:
            r._ring.sleeping = 0
            r._bell.drain()
