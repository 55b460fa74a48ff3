"""Mux: several receivers waited on in one poll, served round-robin, re-checked with backoff."""

import struct
import time

from ipc import Channel
from ipc.mux import Mux
from tests.ipc.forking import fork, wait
from tests.ipc.kinds import Kind

STAMP = struct.Struct("<Q")


def _channels(n):
    return [Channel(nslots=8, slot_size=128) for _ in range(n)]


def test_ready_receivers_are_served_round_robin():
    chs = _channels(3)
    for k, ch in enumerate(chs):
        tx = ch.sender()
        for i in range(2):
            tx.send(Kind.TOKENS, 10 * k + i, i, b"", timeout=1)
    mux = Mux([ch.receiver() for ch in chs])
    got = [(i, m.request_id) for i, m in iter(mux.poll, None)]
    assert got == [(0, 0), (1, 10), (2, 20), (0, 1), (1, 11), (2, 21)]


def test_receive_times_out_then_wakes_on_any_ring():
    chs = _channels(2)
    mux = Mux([ch.receiver() for ch in chs])
    t = time.monotonic()
    assert mux.receive(timeout=0.05) is None
    assert 0.045 <= time.monotonic() - t < 1.0

    def child():
        time.sleep(0.05)  # the mux is asleep on both doorbells by now
        chs[1].sender().send(Kind.DONE, 7, 0, STAMP.pack(time.monotonic_ns()), timeout=1)
    pid = fork(child)
    i, m = mux.receive(timeout=2)
    delay = (time.monotonic_ns() - STAMP.unpack(m.payload)[0]) / 1e9
    assert (i, m.kind, m.request_id) == (1, Kind.DONE, 7)
    assert wait(pid) == 0
    assert delay < 0.015  # the doorbell woke it, not a re-check (20 ms, then longer)


def test_dropped_rings_after_idle_cost_at_most_idle_recheck():
    chs = _channels(2)
    for ch in chs:
        ch.doorbell.drop_rings = True  # inherited by the producer: every ring is lost

    def child():
        for i in range(4):
            time.sleep(0.3)
            chs[i % 2].sender().send(Kind.TOKENS, i, i, STAMP.pack(time.monotonic_ns()), timeout=1)
    pid = fork(child)
    mux = Mux([ch.receiver() for ch in chs], recheck_s=0.02, idle_recheck_s=0.1)
    delays = []
    for i in range(4):
        k, m = mux.receive(timeout=2)
        assert (k, m.request_id) == (i % 2, i)
        delays.append((time.monotonic_ns() - STAMP.unpack(m.payload)[0]) / 1e9)
    assert wait(pid) == 0
    assert sorted(delays)[1] <= 0.1 + 0.002
    assert max(delays) <= 0.1 + 0.05


def test_idle_mux_backs_off_and_a_message_resets_it():
    chs = _channels(2)
    mux = Mux([ch.receiver() for ch in chs], recheck_s=0.01, idle_recheck_s=0.04)
    waits = []
    sleep = mux._sleep
    mux._sleep = lambda wait_s: waits.append(round(wait_s, 6)) or sleep(wait_s)
    assert mux.receive(timeout=0.3) is None
    assert waits[:4] == [0.01, 0.02, 0.04, 0.04]
    assert 6 <= len(waits) <= 10
    chs[0].sender().send(Kind.TOKENS, 1, 1, b"x", timeout=1)
    assert mux.receive(timeout=1)[1].request_id == 1
    waits.clear()
    assert mux.receive(timeout=0.05) is None
    assert waits[:2] == [0.01, 0.02]
