"""The instance's side of the router registry: register, heartbeat at the router's pace, survive, deregister."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pantheon.serve.registration import Registrar
from pantheon.serve.settings import Registry


class FakeRegistry(ThreadingHTTPServer):
    """Records (method, path, body, authorization) and answers as the router does, with a short interval."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls, self.arrived = [], threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def paths(self):
        return [c[1] for c in self.calls]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.calls.append((self.command, self.path, body, self.headers.get("Authorization")))
        self.server.arrived.set()
        reply = json.dumps({"heartbeat_interval_s": 0.05}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_POST = do_DELETE = _answer


@pytest.fixture
def registry():
    server = FakeRegistry()
    yield server
    server.shutdown()
    server.server_close()


def snapshot():
    return {"models": ["A"], "load": {"in_flight": 1, "queued": 0, "kv_pressure": 0.25, "pressure": "OK"}}


def await_calls(registry, n, timeout=10):
    deadline = time.monotonic() + timeout
    while len(registry.calls) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(registry.calls) >= n, registry.calls


def test_registers_then_heartbeats_at_the_routers_pace_then_deregisters(registry):
    logs = []
    registrar = Registrar(Registry(registry.url, "tok", ""), ("127.0.0.1", 8123), snapshot, logs.append).start()
    await_calls(registry, 4)
    registrar.deregister()
    method, path, body, auth = registry.calls[0]
    assert (method, path, auth) == ("POST", "/registry/register", "Bearer tok")
    assert body == {"instance": "127.0.0.1:8123", "address": "127.0.0.1:8123", **snapshot()}
    assert set(registry.paths()[1:-1]) == {"/registry/heartbeat"}
    assert registry.calls[-1][:3] == ("DELETE", "/registry/deregister", {"instance": "127.0.0.1:8123"})


def test_an_error_in_one_snapshot_skips_one_heartbeat_not_all(registry):
    """read_slot raises RuntimeError when the supervisor stays mid-write; the thread must live on."""
    logs, failures = [], iter([RuntimeError("model slot 3 stayed mid-write")])

    def flaky():
        for failure in failures:
            raise failure
        return snapshot()

    registrar = Registrar(Registry(registry.url, None, ""), ("127.0.0.1", 8124), flaky, logs.append).start()
    await_calls(registry, 3)
    registrar.deregister()
    assert any("stayed mid-write" in line for line in logs), logs
    assert registry.paths()[:2] == ["/registry/register", "/registry/heartbeat"]


def test_nothing_is_sent_before_a_model_is_loaded(registry):
    registrar = Registrar(Registry(registry.url, None, ""), ("0.0.0.0", 8125), lambda: {"models": []}, print)
    registrar.interval = 0.02
    registrar.start()
    time.sleep(0.3)
    registrar.deregister()
    assert registry.calls == []
