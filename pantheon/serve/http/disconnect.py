"""Cancel the streams of clients that went away, even while no event flows (queued, prefilling)."""

import itertools
import threading
import time
from contextlib import contextmanager

# waitress puts this callable in the environ when it runs with channel_request_lookahead > 0.
ENVIRON_KEY = "waitress.client_disconnected"


def disconnect_check(environ):
    """A no-argument callable telling whether the client is gone, or None if the server cannot say."""
    check = environ.get(ENVIRON_KEY)
    return check if callable(check) else None


class DisconnectWatch:
    """One thread, started on first use, that polls every watched client between engine events.

    Generation loops also poll between events; this covers the silent stretches when a request
    waits in a queue and its stream yields nothing to poll between.
    """

    def __init__(self, interval=0.05):
        self.interval = interval
        self._entries = {}
        self._cond = threading.Condition()
        self._thread = None
        self._keys = itertools.count()

    @contextmanager
    def watching(self, gone, stream):
        """While the block runs, `stream.cancel()` is called once `gone()` turns true."""
        if gone is None:
            yield
            return
        key = next(self._keys)
        with self._cond:
            self._entries[key] = (gone, stream)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="disconnect-watch", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._entries.pop(key, None)

    def _run(self):
        while True:
            with self._cond:
                while not self._entries:
                    self._cond.wait()
                entries = list(self._entries.items())
            for key, (gone, stream) in entries:
                if gone():
                    stream.cancel()
                    with self._cond:
                        self._entries.pop(key, None)
            time.sleep(self.interval)
