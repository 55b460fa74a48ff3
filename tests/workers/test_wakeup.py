"""The supervisor's sleep wakes at once when a signal handler or another thread rings it."""

import os
import signal
import threading
import time

from workers.wakeup import Wakeup


def test_a_signal_handler_wakes_the_sleeper_at_once():
    wake, got = Wakeup(), []

    def handler(sig, frame):
        got.append(sig)
        wake.ring()

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        t = time.monotonic()
        assert wake.sleep(10) is True
        assert time.monotonic() - t < 5 and got == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, old)
        wake.close()


def test_rings_coalesce_and_an_unrung_sleep_times_out():
    wake = Wakeup()
    for _ in range(100_000):  # more than the pipe holds: ringing never blocks
        wake.ring()
    assert wake.sleep(1) is True
    t = time.monotonic()
    assert wake.sleep(0.05) is False and time.monotonic() - t >= 0.04
    wake.close()
