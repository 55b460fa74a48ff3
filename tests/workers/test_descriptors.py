"""The open-file limit a serving tree needs for --connection-limit sockets per front."""

import multiprocessing
import resource
import subprocess
import sys

import pytest

from pantheon.errors import UsageError
from tests.workers.serving import ROOT
from workers import descriptors


def _in_child(soft, hard, connection_limit, answers):
    """fit_open_files under the given limits, in a child (limits are per process and only go down for good)."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        got = descriptors.fit_open_files(connection_limit)
        answers.put(("ok", got, resource.getrlimit(resource.RLIMIT_NOFILE)))
    except UsageError as exc:
        answers.put(("refused", str(exc), resource.getrlimit(resource.RLIMIT_NOFILE)))


def child(soft, hard, connection_limit):
    ctx = multiprocessing.get_context("fork")
    answers = ctx.Queue()
    proc = ctx.Process(target=_in_child, args=(soft, hard, connection_limit, answers))
    proc.start()
    proc.join(30)
    return answers.get(timeout=5)


@pytest.fixture(autouse=True)
def _room():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"this host's hard open-file limit ({hard}) is too low to test raising the soft one")


def test_a_low_soft_limit_is_raised_to_fit_the_connection_limit():
    kind, got, (soft, hard) = child(256, 4096, 1000)
    assert kind == "ok" and got == soft == 1000 + descriptors.MARGIN and hard == 4096


def test_a_soft_limit_that_already_fits_is_left_alone():
    assert child(4096, 4096, 1000) == ("ok", 4096, (4096, 4096))


def test_a_hard_limit_below_the_need_is_a_usage_error_naming_the_flag():
    kind, message, limits = child(256, 1024, 1000)
    assert kind == "refused" and "--connection-limit 1000" in message and "1024" in message
    assert limits == (256, 1024)  # nothing changed


def test_pantheon_serve_refuses_a_connection_limit_its_hard_limit_cannot_hold():
    """Before any die or front is forked: exit 2 with the reason."""
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1024))
    out = subprocess.run([sys.executable, str(ROOT / "bin" / "pantheon-serve"), "--port", "0",
                          "--connection-limit", "2000"], preexec_fn=limit, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--connection-limit 2000 needs" in out.stderr, out.stderr
