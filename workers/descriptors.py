"""The serving tree's open-file limit, raised before anything forks to fit --connection-limit sockets per front."""

import resource

from pantheon.errors import UsageError

MARGIN = 512  # descriptors a front holds besides client sockets: ring doorbells, the response store, logs, files


def fit_open_files(connection_limit):
    """Raise RLIMIT_NOFILE's soft limit (the children inherit it) to `connection_limit` + MARGIN; returns the soft
    limit now in force. UsageError when the hard limit is lower: a front would fail to accept (EMFILE) under a
    load its flags allow."""
    needed = connection_limit + MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise UsageError(f"--connection-limit {connection_limit} needs {needed} open files per HTTP front, but "
                         f"this process may open at most {hard} (the hard RLIMIT_NOFILE): raise it "
                         "(ulimit -Hn, systemd LimitNOFILE=) or lower --connection-limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return needed
