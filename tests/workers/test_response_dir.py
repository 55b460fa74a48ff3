"""The Responses store's directory: private, named for its supervisor, removed at exit or as an orphan."""

import os
import stat
import subprocess
import sys
import tempfile

from workers import response_dir


def dead_pid():
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_store_lives_in_a_private_directory_named_for_its_supervisor():
    path = response_dir.make(os.getpid())
    try:
        folder = os.path.dirname(path)
        assert os.path.basename(folder).startswith(f"{response_dir.PREFIX}{os.getpid()}-")
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.path.basename(path) == response_dir.DB_NAME
    finally:
        response_dir.remove(path)
    assert not os.path.exists(os.path.dirname(path))


def test_an_orphan_is_removed_and_a_live_trees_directory_is_kept():
    orphan = tempfile.mkdtemp(prefix=f"{response_dir.PREFIX}{dead_pid()}-")
    open(os.path.join(orphan, response_dir.DB_NAME), "w").close()
    live = response_dir.make(os.getpid())  # make() removes orphans first
    try:
        assert not os.path.exists(orphan) and os.path.isdir(os.path.dirname(live))
        response_dir.remove_orphans()
        assert os.path.isdir(os.path.dirname(live))
    finally:
        response_dir.remove(live)
