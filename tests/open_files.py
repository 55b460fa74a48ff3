"""This test process's descriptors open on one file (no other thread's sockets or pipes can disturb the count)."""

import os


def fds_on(path):
    target, fds = os.path.realpath(path), []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                fds.append(fd)
        except FileNotFoundError:  # closed since the listing (listdir's own descriptor, or another thread's)
            continue
    return fds
