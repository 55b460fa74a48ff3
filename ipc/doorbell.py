"""Doorbells: wake a sleeping consumer; never a lock, never the truth (shared memory is)."""

import os
import select

import posix_ipc

from ipc.segment import unique_name


class EventfdDoorbell:
    """An eventfd inherited across fork: no name in /dev/shm at all, reset by one read.

    `drop_rings` is the fault hook the tests use: a dropped ring must cost at most one
    re-check interval, because the consumer re-reads shared memory on every wake.
    """

    kind = "eventfd"

    def __init__(self):
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self.drop_rings = False
        self.dropped = 0

    def fileno(self):
        """The eventfd, for waiting on several doorbells in one poll (ipc.mux)."""
        return self._fd

    def ring(self):
        if self.drop_rings:
            self.dropped += 1
            return
        os.eventfd_write(self._fd, 1)

    def wait(self, timeout):
        """Sleep until rung or `timeout` seconds pass; True when rung. Drains pending rings."""
        if not self._poll.poll(max(0.0, timeout) * 1000.0):
            return False
        self.drain()
        return True

    def drain(self):
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass

    def close(self):
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SemaphoreDoorbell:
    """A POSIX semaphore created and unlinked at once; its mapping is inherited across fork.

    Used only as a doorbell: a process killed while "holding" it holds nothing.
    """

    kind = "semaphore"

    def __init__(self):
        self._sem = posix_ipc.Semaphore(unique_name(), posix_ipc.O_CREX, mode=0o600,
                                        initial_value=0)
        self._sem.unlink()
        self.drop_rings = False
        self.dropped = 0

    def ring(self):
        if self.drop_rings:
            self.dropped += 1
            return
        self._sem.release()

    def wait(self, timeout):
        try:
            self._sem.acquire(max(0.0, timeout))
        except posix_ipc.BusyError:
            return False
        self.drain()
        return True

    def drain(self):
        try:
            while True:
                self._sem.acquire(0)
        except posix_ipc.BusyError:
            pass

    def close(self):
        self._sem.close()


DOORBELLS = {"eventfd": EventfdDoorbell, "semaphore": SemaphoreDoorbell}


def make_doorbell(kind="eventfd"):
    """A doorbell of the named kind (eventfd by default: see docs/ipc.md for the measurements)."""
    try:
        return DOORBELLS[kind]()
    except KeyError:
        raise ValueError(f"unknown doorbell kind {kind!r}; known: {sorted(DOORBELLS)}") from None
