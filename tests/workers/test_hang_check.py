"""The supervisor's hang checks without forking: a stale heartbeat, and a die stuck loading its models."""

import signal
from types import SimpleNamespace

import pytest

from pantheon.serve.environment import Operations
from workers import supervisor as sup_mod
from workers.supervisor import ABORT_GRACE_S, Supervisor
from workers.tables import DIE_STARTING, DIE_UP, Tables, table_bytes


@pytest.fixture
def sup(monkeypatch):
    s = Supervisor.__new__(Supervisor)
    s.config = SimpleNamespace(ops=Operations(hang_timeout=2.0, boot_timeout=30.0))
    s.die_list = [SimpleNamespace(name="cpu0")]
    s.layout = SimpleNamespace(tables=Tables(bytearray(table_bytes(1)), 1))
    s.workers, s.aborted, s.started = {4242: 0}, {}, {0: 100.0}
    s.sent = []
    monkeypatch.setattr(sup_mod, "_signal", lambda pid, sig: s.sent.append((pid, sig)))
    monkeypatch.setattr(sup_mod, "log", lambda msg: None)
    return s


def test_stale_heartbeat_gets_sigabrt_then_sigkill(sup):
    rec = sup.layout.tables.dies[0]
    rec["state"], rec["heartbeat"] = DIE_UP, 100.0
    sup._check_hangs(101.9)
    assert sup.sent == []
    sup._check_hangs(102.1)
    assert sup.sent == [(4242, signal.SIGABRT)]
    sup._check_hangs(102.1 + ABORT_GRACE_S / 2)
    assert sup.sent == [(4242, signal.SIGABRT)]
    sup._check_hangs(102.2 + ABORT_GRACE_S)
    assert sup.sent[-1] == (4242, signal.SIGKILL)


def test_a_die_stuck_loading_is_killed_after_the_boot_timeout(sup):
    sup.layout.tables.dies[0]["state"] = DIE_STARTING
    sup._check_hangs(129.0)
    assert sup.sent == []
    sup._check_hangs(131.0)
    assert sup.sent == [(4242, signal.SIGKILL)]
