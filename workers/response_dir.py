"""The directory of a serving tree's Responses store: made before the fronts fork, removed at exit."""

import os
import re
import shutil
import tempfile

from ipc import pid_alive

PREFIX = "pantheon-responses-"  # + the supervisor's pid: the directory of a pid that is gone is an orphan
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)-")
DB_NAME = "responses.sqlite"


def make(pid):
    """The store's file path in a new private directory (mode 0700); orphans of killed trees are removed first."""
    remove_orphans()
    return os.path.join(tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-"), DB_NAME)


def remove(path):
    """Remove the directory holding the store at `path` (the file and SQLite's -wal and -shm beside it)."""
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def remove_orphans():
    """Remove the store directories whose supervisor is gone (one killed with SIGKILL had no time to)."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        match = _OWNED.match(name)
        if match and not pid_alive(int(match.group(1))):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
