import time

import pytest

from ipc.doorbell import make_doorbell
from tests.ipc.forking import fork, wait


@pytest.mark.parametrize("kind", ["eventfd", "semaphore"])
def test_wait_times_out_then_wakes_on_ring(kind):
    bell = make_doorbell(kind)
    t = time.monotonic()
    assert bell.wait(0.02) is False
    assert time.monotonic() - t >= 0.015
    bell.ring()
    bell.ring()
    assert bell.wait(1.0) is True
    # several rings collapse into one wake: the consumer re-reads memory, not a count
    assert bell.wait(0.0) is False


@pytest.mark.parametrize("kind", ["eventfd", "semaphore"])
def test_inherited_across_fork(kind):
    bell = make_doorbell(kind)

    def child():
        time.sleep(0.05)
        bell.ring()
    pid = fork(child)
    assert bell.wait(5.0) is True
    assert wait(pid) == 0


@pytest.mark.parametrize("kind", ["eventfd", "semaphore"])
def test_dropped_ring_is_counted_and_never_signals(kind):
    bell = make_doorbell(kind)
    bell.drop_rings = True
    bell.ring()
    assert bell.dropped == 1
    assert bell.wait(0.01) is False


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown doorbell"):
        make_doorbell("carrier-pigeon")
