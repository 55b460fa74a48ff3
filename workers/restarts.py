"""Restart policy of one die: exponential backoff, and FAILED after too many restarts too quickly."""

import time
from collections import deque

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
INTENSITY = 5  # more than this many restarts ...
PERIOD_S = 60.0  # ... within this window marks the die FAILED (Erlang's supervisor intensity)


class RestartPolicy:
    def __init__(self, intensity=INTENSITY, period_s=PERIOD_S, first_s=BACKOFF_FIRST_S, max_s=BACKOFF_MAX_S):
        self.intensity, self.period_s = intensity, period_s
        self.first_s, self.max_s = first_s, max_s
        self.history = deque()
        self.due_at = None

    def allow(self, now=None):
        """Record a crash; False when it exceeds the intensity limit (the die should stay FAILED)."""
        now = time.monotonic() if now is None else now
        self.history.append(now)
        while self.history and now - self.history[0] > self.period_s:
            self.history.popleft()
        return len(self.history) <= self.intensity

    def backoff(self):
        """Delay before the next start: doubles with each recent crash, capped."""
        return min(self.max_s, self.first_s * 2 ** max(0, len(self.history) - 1))

    def schedule(self, now):
        self.due_at = now + self.backoff()

    def due(self, now):
        return self.due_at is not None and now >= self.due_at

    def clear(self):
        self.due_at = None
