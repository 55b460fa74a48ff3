"""Process hygiene shared by every child: die with the supervisor, reset signals, heartbeat cadence."""

import ctypes
import ctypes.util
import os
import signal

PR_SET_PDEATHSIG = 1
HEARTBEAT_S = 0.25


def adopt_parent_death(parent_pid, sig=signal.SIGKILL):
    """Ask the kernel to kill us when the supervisor dies; exit now if it already has (the race
    between fork and prctl is closed by comparing against the pid recorded before the fork)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def reset_signals():
    """A forked child starts from default dispositions, not the supervisor's handlers."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)


def heartbeat_interval():
    return HEARTBEAT_S
