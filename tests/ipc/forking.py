"""Helpers for tests that fork real processes: run a child body, collect its exit status."""

import os
import traceback


def fork(body, *args):
    """Run body(*args) in a forked child; the child exits 0 on success, 1 on any exception."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            body(*args)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    return pid


def wait(pid):
    """Exit code of a child (negative signal number if it was killed)."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
