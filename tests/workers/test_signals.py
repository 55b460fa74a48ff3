"""Signals: SIGTERM drains streams, a second SIGINT stops at once, a killed supervisor takes its children."""

import os
import signal
import time

import pytest

from ipc import owned_entries
from tests.conftest import shared_path
from tests.workers.serving import Server

pytestmark = pytest.mark.usefixtures("compiled_kernels")  # its servers run models under timeouts


def alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def server():
    srv = Server(["--http-workers", "2", "--model", str(shared_path("golden", "llama-q8_0.gguf")), "--name", "m"])
    yield srv
    if srv.proc.poll() is None:
        os.killpg(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()


def open_stream(server, max_tokens):
    return server.open_stream({"model": "m", "prompt": "x", "max_tokens": max_tokens, "logit_bias": {"2": -100}})


def read_all(sock):
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return out
        out += chunk


def test_sigterm_drains_running_streams_then_exits_clean(server):
    kids = server.children()
    sock, head = open_stream(server, 400)
    server.proc.send_signal(signal.SIGTERM)
    rest = head + read_all(sock)
    assert b'"finish_reason":"length"' in rest and rest.endswith(b"0\r\n\r\n")
    assert b"data: [DONE]" in rest
    assert server.stop(timeout=20) == 0
    assert wait_gone(kids, 5), "children outlived the supervisor"
    assert owned_entries(server.proc.pid) == []


def test_second_sigint_stops_at_once(server):
    sock, _ = open_stream(server, 1900)
    server.proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGINT)
    server.proc.wait(timeout=5)
    assert time.monotonic() - started < 3
    sock.close()


def test_killed_supervisor_takes_every_child_down(server):
    kids = server.children()
    assert len(kids) >= 3  # two fronts and one die worker
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    assert wait_gone(kids, 5), [k for k in kids if alive(k)]
    assert owned_entries(server.proc.pid) == []
