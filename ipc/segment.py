"""Shared-memory segments: made by their owner before fork, unlinked at once, reserved for real."""

import errno
import mmap
import os
import re
import secrets

import posix_ipc

from ipc.errors import SegmentError, ShmFull

PREFIX = "pantheon"
SHM_DIR = "/dev/shm"
_OWNED = re.compile(r"^(?:sem\.)?" + PREFIX + r"-(\d+)-[0-9a-f]+$")


def unique_name():
    """A POSIX IPC name carrying our prefix and pid, so a leak can be traced and swept."""
    return f"/{PREFIX}-{os.getpid()}-{secrets.token_hex(6)}"


class Segment:
    """An anonymous-after-creation shared mapping; fork to share it, nothing to clean up.

    The name exists only between `shm_open` and the `shm_unlink` that follows it; the fd is
    closed once mapped, so the mapping is the only reference and dies with the last process.
    """

    def __init__(self, size):
        if size <= 0:
            raise SegmentError(f"segment size must be positive, got {size}")
        self.size = size
        shm = posix_ipc.SharedMemory(unique_name(), posix_ipc.O_CREX, mode=0o600)
        try:
            shm.unlink()
            _reserve(shm.fd, size)
            self.mmap = mmap.mmap(shm.fd, size)
        finally:
            shm.close_fd()
        self.buf = memoryview(self.mmap)

    def view(self, offset, size):
        """A zero-copy view of [offset, offset+size), bounds-checked."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise SegmentError(f"view [{offset}, {offset + size}) outside segment "
                               f"of {self.size} bytes")
        return self.buf[offset:offset + size]

    def close(self):
        """Drop this process's mapping (views must be released first)."""
        self.buf.release()
        self.mmap.close()


def _reserve(fd, size):
    """Allocate every page now: tmpfs `ftruncate` reserves nothing and a later fault is a SIGBUS."""
    st = os.statvfs(SHM_DIR) if os.path.isdir(SHM_DIR) else None
    if st is not None and size > st.f_bavail * st.f_frsize:
        raise ShmFull(errno.ENOSPC, f"{SHM_DIR} has {st.f_bavail * st.f_frsize} bytes free, "
                      f"segment needs {size}; enlarge it (docker --shm-size) or shrink the rings")
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            raise ShmFull(e.errno, f"cannot reserve {size} bytes in {SHM_DIR}: {e.strerror}; "
                          "enlarge it (docker --shm-size) or shrink the rings") from e
        raise SegmentError(e.errno, f"posix_fallocate({size}) failed: {e.strerror}") from e


def owned_entries(pid=None):
    """Names in /dev/shm that carry our prefix (optionally only those of one pid)."""
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _OWNED.match(name)
        if m and (pid is None or int(m.group(1)) == pid):
            out.append(name)
    return sorted(out)


def reap_orphans():
    """Unlink our entries whose creating pid is gone (a kill -9 inside the create/unlink window).

    Returns the names removed. Safe to call at every supervisor start.
    """
    removed = []
    for name in owned_entries():
        pid = int(_OWNED.match(name).group(1))
        if pid_alive(pid):
            continue
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed.append(name)
        except FileNotFoundError:
            pass
    return removed


def pid_alive(pid):
    """Whether process `pid` exists (one of another user counts as alive: not ours to judge)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
