"""SSE keep-alive: a comment line whenever a stream has been silent a while, so that proxies keep it open."""

import queue
import threading
import time

from pantheon.serve.http import sse

_END = object()
_BACKLOG = 64  # items the producer may run ahead of a slow client (waitress's own buffer holds the rest)
_POLL_S = 0.1  # how often a producer blocked on a full backlog checks whether the body was closed


class KeepAlive:
    """The items of `events` (bytes), made in a helper thread, with `: waiting Ns` comment lines in between
    whenever none has come for `interval` seconds: a request waiting in the queue or prefilling a long
    prompt otherwise sends nothing, and a proxy with an idle timeout (nginx's 60 s) cuts it.

    close() stops the helper; `events` is closed in the helper's thread, the one that runs it.
    """

    def __init__(self, events, interval):
        self._events, self.interval = events, interval
        self._inbox = queue.Queue(_BACKLOG)
        self._closed = threading.Event()
        self._thread = None

    def __iter__(self):
        self._thread = threading.Thread(target=self._pump, name="sse-keepalive", daemon=True)
        self._thread.start()
        started = time.monotonic()
        try:
            while True:
                try:
                    item, error = self._inbox.get(timeout=self.interval)
                except queue.Empty:
                    yield sse.comment(f"waiting {time.monotonic() - started:.0f}s")
                    continue
                batch, end, error = self._gather(item, error)
                if batch:
                    yield batch
                if error is not None:
                    raise error
                if end:
                    return
        finally:
            self._closed.set()

    def _gather(self, item, error):
        """`item` and the items already waiting behind it, as one bytes write (a thread switch per write
        is what this costs a fast stream), and whether the events ended or failed after them."""
        parts = []
        while error is None and item is not _END:
            parts.append(item)
            if len(parts) == _BACKLOG:  # a producer as fast as this loop would hold the write back forever
                return b"".join(parts), False, None
            try:
                item, error = self._inbox.get_nowait()
            except queue.Empty:
                return b"".join(parts), False, None
        return b"".join(parts), item is _END, error

    def close(self):
        self._closed.set()
        if self._thread is None:  # never iterated: nothing runs `events` but this thread
            self._events.close()

    def _pump(self):
        try:
            for item in self._events:
                if not self._put((item, None)):
                    break
            else:
                self._put((_END, None))
        except Exception as exc:  # raised in the consumer's thread, where waitress reports it
            self._put((None, exc))
        finally:
            self._events.close()

    def _put(self, entry):
        """Hand `entry` over, waiting while the backlog is full; False once the body was closed."""
        while not self._closed.is_set():
            try:
                self._inbox.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False
