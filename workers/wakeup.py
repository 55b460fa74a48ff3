"""The supervisor's sleep: a self-pipe that signal handlers and the dispatcher thread write to.

As in gunicorn's arbiter, a signal handler only queues the signal and writes a byte; the main loop
sleeps in select() on the pipe's read end and wakes at once, then handles the queue in order.
"""

import os
import select


class Wakeup:
    def __init__(self):
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def ring(self):
        """Safe in a signal handler and from any thread; a full pipe already means "wake up"."""
        try:
            os.write(self._w, b".")
        except (BlockingIOError, OSError):
            pass

    def sleep(self, timeout):
        """Until rung or `timeout` seconds; True when rung."""
        ready, _, _ = select.select([self._r], [], [], timeout)
        if not ready:
            return False
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self):
        os.close(self._r)
        os.close(self._w)
