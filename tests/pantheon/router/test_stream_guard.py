"""The router's stream guard (stream_guard.lua) in the haproxy.cfg the router renders, before a scripted upstream.

The upstream plays an instance: it streams events close-delimited (as a front does when the router asks)
and then finishes, dies (its socket closes), or is reset. The client must be told of a death in-band.
"""

import http.client
import json
import re
import socket
import struct
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pantheon.router.config import RouterConfig
from pantheon.router.haproxy_conf import Paths, model_backend, render, write_files
from pantheon.serve.settings import STREAM_END_HEADER
from tests.pantheon.router.fleet_kit import require_haproxy

EVENT = b'data: {"choices":[{"text":"tok","index":0,"finish_reason":null}]}\n\n'
DONE = b"data: [DONE]\n\n"


class Upstream:
    """One scripted response per connection, chosen by the request path; records the request headers."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.headers = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        path = head.split(" ", 2)[1]
        if path == "/health":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            conn.close()
            return
        self.headers.append(head)
        getattr(self, "_" + path.strip("/").replace("-", "_"))(conn)

    @staticmethod
    def _start(conn, n):
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for _ in range(n):
            conn.sendall(EVENT)
            time.sleep(0.01)

    def _finish(self, conn):
        self._start(conn, 5)
        conn.sendall(DONE)
        conn.close()

    def _die(self, conn):
        self._start(conn, 5)
        conn.close()  # what the kernel does for a killed process: FIN, no last event

    def _reset(self, conn):
        self._start(conn, 5)
        time.sleep(0.3)  # let HAProxy take the events before the reset
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    def _large(self, conn):
        self._start(conn, 0)
        conn.sendall(EVENT * 40000)  # ~2.6 MB: more than HAProxy's buffer and the sockets' while unread
        conn.sendall(DONE)
        conn.close()

    def _burst(self, conn):
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for _ in range(100):  # small writes, so the guard runs once per event or so
            conn.sendall(EVENT)
            time.sleep(0.001)
        conn.sendall(DONE)
        conn.close()

    def _json(self, conn):
        conn.sendall(b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"partial": ')
        conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    binary = require_haproxy()
    upstream = Upstream()
    state = tmp_path_factory.mktemp("guard")
    port = _free_port()
    config = RouterConfig(port=port, max_models=1, stream_timeout_s=30)
    paths = Paths(str(state))
    write_files(config, paths)
    backend = model_backend(0)
    text = render(config, paths).replace(f"backend {backend}\n",
                                         f"backend {backend}\n    server s1 127.0.0.1:{upstream.port}\n")
    with open(paths.config, "w") as f:
        f.write(text)
    with open(paths.models_map, "w") as f:
        f.write(f"m {backend}\n")
    log = open(state / "haproxy.log", "w+b")
    proc = subprocess.Popen([binary, "-db", "-f", paths.config], stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        _await_port(port, proc, log)
        yield port, upstream, proc, log
    finally:
        proc.terminate()
        proc.wait(10)
        upstream.close()
        log.close()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _output(log):
    log.seek(0)
    return log.read().decode(errors="replace")


def _await_port(port, proc, log):
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        assert proc.poll() is None, _output(log)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("haproxy did not listen")


def fetch(port, path, pause=0.0):
    """(status, content type, body bytes, whether the body ended cleanly) of one POST through the proxy."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, json.dumps({"model": "m", "stream": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    time.sleep(pause)
    try:
        body, clean = resp.read(), True
    except http.client.IncompleteRead as e:
        body, clean = e.partial, False
    conn.close()
    return resp.status, resp.getheader("Content-Type"), body, clean


def events(body):
    return [block for block in body.split(b"\n\n") if block]


def test_a_finished_stream_passes_unchanged_and_the_instance_is_asked_to_close_delimit(proxy):
    port, upstream, _, _ = proxy
    status, _, body, clean = fetch(port, "/finish")
    assert (status, clean) == (200, True)  # the proxy ended the chunked body: a finished stream
    assert body == EVENT * 5 + DONE
    assert f"{STREAM_END_HEADER.lower()}: close" in upstream.headers[-1].lower()


def test_a_stream_whose_instance_dies_ends_with_an_error_event_and_done(proxy):
    port, _, _, _ = proxy
    status, _, body, clean = fetch(port, "/die")
    assert (status, clean) == (200, True)
    blocks = events(body)
    assert blocks[:5] == [EVENT.strip()] * 5 and blocks[-1] == DONE.strip() and len(blocks) == 7
    error = json.loads(blocks[-2][len(b"data: "):])["error"]
    assert (error["type"], error["code"], error["param"]) == ("server_error", "instance_lost", None)
    assert "s1" in error["message"] and "retry" in error["message"]


def test_a_slow_reader_of_a_large_stream_is_never_told_of_a_loss(proxy):
    port, _, _, _ = proxy
    status, _, body, clean = fetch(port, "/large", pause=2.0)  # the proxy's buffer fills meanwhile
    assert (status, clean) == (200, True)
    assert body == EVENT * 40000 + DONE


def test_a_reset_instance_is_a_cut_connection_without_an_event(proxy):
    """The guard's limit: a reset (or a timeout) is a transport error; HAProxy runs no filter then and
    cuts the client's connection, so the client sees an unfinished body, not an error event."""
    port, _, _, _ = proxy
    status, _, body, clean = fetch(port, "/reset")
    assert status == 200 and not clean
    assert b"instance_lost" not in body and DONE not in body


def test_an_http10_client_gets_the_event_close_delimited(proxy):
    port, _, _, _ = proxy
    body = json.dumps({"model": "m", "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /die HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    assert b" 200 " in head.split(b"\r\n")[0] and b"transfer-encoding" not in head.lower(), head
    assert body.startswith(EVENT) and body.endswith(DONE) and b'"code":"instance_lost"' in body


def test_other_responses_are_not_touched(proxy):
    port, _, _, _ = proxy
    status, ctype, body, _ = fetch(port, "/json")
    assert (status, ctype) == (200, "application/json")
    assert body == b'{"partial": '


def test_concurrent_streams_through_the_guard_keep_haproxy_up(proxy):
    """1000 streams, 32 at a time, each of 100 small writes: the guard runs on both of HAProxy's threads
    at once. Under `lua-load` (one Lua state shared by the threads) HAProxy 2.6 reported Lua stack errors
    ("attempt to index a thread value") and aborted, resetting every client; the router now renders
    `lua-load-per-thread`."""
    port, _, proc, log = proxy
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda _: _fetch_or_error(port, "/burst"), range(1000)))
    whole = sum(1 for a in answers if a == (200, True, EVENT * 100 + DONE))
    print(f"1000 concurrent streams through the guard: {whole} whole")
    assert whole == 1000, [a for a in answers if a != (200, True, EVENT * 100 + DONE)][:3]
    assert proc.poll() is None and "Lua" not in _output(log), _output(log)[-2000:]


def _fetch_or_error(port, path):
    try:
        status, _, body, clean = fetch(port, path)
        return status, clean, body
    except (OSError, http.client.HTTPException) as e:  # a reset or refused connection: HAProxy went down
        return repr(e)


def _ids(port, headers, model="m"):
    """(the X-Request-Id the client got, the one the upstream was sent or None, the status)."""
    sent = len(_upstream_heads)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps({} if model is None else {"model": model})
    conn.request("POST", "/finish", body, dict({"Content-Type": "application/json"}, **headers))
    resp = conn.getresponse()
    resp.read()
    conn.close()
    heads = _upstream_heads[sent:]
    forwarded = [line.split(":", 1)[1].strip() for h in heads for line in h.split("\r\n")
                 if line.lower().startswith("x-request-id:")]
    return resp.getheader("X-Request-Id"), forwarded, resp.status


_upstream_heads = []


@pytest.fixture()
def heads(proxy):
    _upstream_heads[:] = []
    proxy[1].headers = _upstream_heads
    return proxy[0]


def test_every_request_gets_one_request_id_that_the_instance_and_the_client_share(heads):
    port = heads
    got, forwarded, status = _ids(port, {"X-Request-Id": "trace-42/a:b"})
    assert status == 200 and got == "trace-42/a:b" and forwarded == [got]
    got, forwarded, _ = _ids(port, {})
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", got) and forwarded == [got]
    assert _ids(port, {})[0] != got
    for insane in ("has space", "x" * 129, "semi;colon"):
        got, forwarded, _ = _ids(port, {"X-Request-Id": insane})
        assert got != insane and len(got) == 36 and forwarded == [got], insane


def test_the_routers_own_answers_carry_a_request_id(heads):
    port = heads
    got, forwarded, status = _ids(port, {"X-Request-Id": "mine-1"}, model="no-such-model")
    assert (status, got, forwarded) == (404, "mine-1", [])
    got, _, status = _ids(port, {}, model=None)
    assert status == 400 and len(got) == 36
