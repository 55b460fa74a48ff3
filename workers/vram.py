"""Before a GPU die restarts, wait until the driver shows its memory back near the empty baseline."""

import time

POLL_S = 0.25
RECOVERED = 0.75  # the share of the dead worker's memory that must be back (Ollama's rule)
WAIT_S = 5.0


class Reclaim:
    """Tracks one die's recovery: `read_used()` returns bytes used on it now (NVML), or None if unknown."""

    def __init__(self, read_used, baseline, wait_s=WAIT_S, clock=time.monotonic):
        self.read_used, self.baseline = read_used, baseline
        self.wait_s, self.clock = wait_s, clock
        self.peak = self.started = None

    def begin(self):
        """Call when the worker died: remember how much it held."""
        self.peak, self.started = self.read_used(), self.clock()

    def state(self):
        """'ready' when memory is back (or unknown), 'waiting' within the bounded wait, 'degraded' after it."""
        used = self.read_used()
        if used is None or self.peak is None or self.peak <= self.baseline:
            return "ready"
        if self.peak - used >= RECOVERED * (self.peak - self.baseline):
            return "ready"
        return "waiting" if self.clock() - self.started < self.wait_s else "degraded"
