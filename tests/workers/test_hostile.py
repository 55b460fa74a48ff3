"""Hostile input against a live pantheon-serve: no request, file or client crashes, poisons or starves it."""

import http.client
import json
import socket
import struct
import time

import psutil
import pytest
from hypothesis import HealthCheck, given, settings

from pantheon.demo import demo_model_path
from tests.pantheon.gguf.craft import VT, gguf_bytes, gstr, kv
from tests.workers.hostile_bodies import request_lines, requests
from tests.workers.serving import Server

FUZZ_CASES, FUZZ_CASES_SLOW = 2_000, 20_000


@pytest.fixture(scope="module")
def server():
    srv = Server(["--model", str(demo_model_path()), "--name", "m", "--http-workers", "2"])
    yield srv
    srv.stop()


def family_rss(server):
    """Bytes resident in every child (fronts and die workers) of the supervisor."""
    return sum(psutil.Process(p).memory_info().rss for p in server.children())


def health(server):
    status, body = server.get("/health")
    return status, json.loads(body) if body else {}


def assert_unharmed(server, kids):
    """Same children (no front or worker died), /health 200 with the die up, and a completion served."""
    assert server.children() == kids, server.log()[-3000:]
    status, body = health(server)
    assert status == 200 and set(body["dies"].values()) == {"up"}, body
    status, raw, _ = server.request("POST", "/v1/completions", {"model": "m", "prompt": "The", "max_tokens": 3})
    assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] >= 1


class Client:
    """One keep-alive connection: thousands of requests without a handshake each."""

    def __init__(self, server, timeout=30):
        host, port = server.url.split("//")[1].split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def post(self, path, raw):
        return self.send("POST", path, raw, {"Content-Type": "application/json"})

    def send(self, method, target, body=None, headers=None):
        self.conn.request(method, target, body, headers or {})
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.getheader("Connection", "").lower() == "close":
            self.conn.close()
        return resp.status, body

    def close(self):
        self.conn.close()


def test_fuzz_every_endpoint_body(server, request):
    """Structural and numeric junk on every POST endpoint: never a 5xx, a death or a hang."""
    kids = server.children()
    client = Client(server)
    cases = FUZZ_CASES_SLOW if request.config.getoption("--run-slow") else FUZZ_CASES

    @settings(max_examples=cases, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(requests)
    def one(case):
        path, body = case
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, out = client.post(path, raw)
        assert status < 500, (path, raw[:300], status, out[:500])
        assert b'data: {"error"' not in out, (path, raw[:300], out[-500:])
        if status == 200 and out.startswith(b"data:"):
            assert out.rstrip().endswith(b"data: [DONE]"), (path, raw[:300], out[-300:])
        if status == 200 and path.startswith("/api/"):  # Ollama's answers: JSON lines, the last one done
            last = json.loads(out.splitlines()[-1])
            assert "error" not in last and last.get("done", True), (path, raw[:300], out[-300:])
        if status == 200 and out.startswith(b"event:"):  # Anthropic's and Responses streams: no error, then the end
            ends = (b'"type":"response.completed"', b'"type":"response.incomplete"') if path == "/v1/responses" \
                else (b'{"type":"message_stop"}',)
            last = out.rstrip().rsplit(b"\n\n", 1)[-1]
            assert b"event: error" not in out and any(end in last for end in ends), (path, raw[:300], out[-300:])

    one()
    client.close()
    assert_unharmed(server, kids)


def test_fuzz_every_route_without_a_body(server, request):
    """Methods, junk path segments (bad percent-escapes, Unicode digits, long ids) and query strings on the
    routes that read the path or the query: never a 5xx, a death or a hang."""
    kids = server.children()
    client = Client(server)
    cases = FUZZ_CASES_SLOW if request.config.getoption("--run-slow") else FUZZ_CASES

    @settings(max_examples=cases, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(request_lines())
    def one(line):
        method, target = line
        status, out = client.send(method, target, b"" if method in ("POST", "PUT", "PATCH") else None)
        assert status < 500, (method, target, status, out[:500])

    one()
    client.close()
    assert_unharmed(server, kids)


@pytest.mark.parametrize("poison", [
    {"prompt": [5, 5, 5, 5, 5], "frequency_penalty": -3e38, "repeat_last_n": -1},
    {"prompt": [5, 5, 5, 5, 5], "presence_penalty": 3.4e38, "frequency_penalty": 3.4e38},
    {"prompt": "x x x x", "repeat_penalty": 1.2e-38, "temperature": 3e38},
    {"prompt": "x", "logit_bias": {str(t): -3.4e38 for t in range(0, 4096, 7)}, "temperature": 1.2e-38},
])
def test_poison_sampling_values_are_served_and_the_die_stays_up(server, poison):
    """The issue's poison requests killed the worker three times over; now each is answered."""
    kids = server.children()
    for _ in range(3):
        status, raw, _ = server.request("POST", "/v1/completions", dict(poison, model="m", max_tokens=4))
        assert status == 200, raw
    assert_unharmed(server, kids)


@pytest.mark.parametrize("poison, field", [({"repeat_penalty": 1e-45}, "repeat_penalty"),
                                           ({"frequency_penalty": -3.5e38}, "frequency_penalty"),
                                           ({"top_k": 2**31}, "top_k"), ({"logit_bias": {"\u00b2": 1}}, "logit_bias")])
def test_values_float32_cannot_hold_are_400_naming_the_field(server, poison, field):
    status, raw, _ = server.request("POST", "/v1/completions", dict(poison, model="m", prompt="x", max_tokens=2))
    assert status == 400 and json.loads(raw)["error"]["param"].startswith(field)


def tiny_gguf(tmp_path, name, value):
    data = gguf_bytes([kv("general.architecture", VT.STRING, gstr("llama")),
                       kv("llama.embedding_length", VT.FLOAT32, struct.pack("<f", value))], [])
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_hostile_admin_loads_are_400_and_the_server_lives(server, tmp_path):
    """A GGUF whose embedding_length is FLOAT32 inf or nan, and /proc/self/mem, killed the supervisor."""
    kids = server.children()
    for path in (tiny_gguf(tmp_path, "inf.gguf", float("inf")), tiny_gguf(tmp_path, "nan.gguf", float("nan")),
                 "/proc/self/mem", "/dev/zero", "/proc/self/environ", str(tmp_path)):
        status, raw, _ = server.request("POST", "/admin/models/load", {"path": path, "name": "evil"}, timeout=60)
        assert status == 400, (path, raw)
        assert json.loads(raw)["error"]["code"] in ("invalid_model", "invalid_path"), raw
    assert_unharmed(server, kids)


def test_overlong_name_and_path_are_400_not_truncated(server, tmp_path):
    longdir = tmp_path / ("d" * 200) / ("e" * 200) / ("f" * 200) / ("g" * 200) / ("h" * 200)
    longdir.mkdir(parents=True)
    target = longdir / "model.gguf"
    target.write_bytes(demo_model_path().read_bytes())
    assert len(str(target).encode()) > 1024
    status, raw, _ = server.request("POST", "/admin/models/load", {"path": str(target), "name": "long"}, timeout=60)
    assert status == 400 and json.loads(raw)["error"]["param"] == "path", raw
    status, raw, _ = server.request("POST", "/admin/models/load", {"path": str(demo_model_path()), "name": "n" * 65},
                                    timeout=60)
    assert status == 400 and json.loads(raw)["error"]["param"] == "name", raw


def test_300_idle_sockets_leave_health_and_completions_working(server):
    host, port = server.url.split("//")[1].split(":")
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(300)]
    try:
        idle[0].sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # a slowloris: headers never end
        started = time.monotonic()
        status, _ = server.get("/health")
        assert status == 200 and time.monotonic() - started < 5
        status, raw, _ = server.request("POST", "/v1/completions", {"model": "m", "prompt": "The", "max_tokens": 3},
                                        timeout=20)
        assert status == 200, raw
    finally:
        for s in idle:
            s.close()


def test_a_16mb_prompt_is_refused_fast_without_growing_the_front(server):
    before = family_rss(server)
    body = json.dumps({"model": "m", "prompt": "a" * 16_000_000, "max_tokens": 1}).encode()
    started = time.monotonic()
    status, raw, _ = server.request("POST", "/v1/completions", body, timeout=60)
    elapsed = time.monotonic() - started
    assert status == 400 and json.loads(raw)["error"]["code"] == "context_over_budget", raw[:300]
    assert elapsed < 10, elapsed
    assert family_rss(server) - before < 100 * 2**20


def test_an_oversized_content_length_is_refused_before_the_body_is_read(server):
    host, port = server.url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 300000000\r\n\r\n{")
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_bodies_whose_message_to_a_die_or_the_supervisor_outgrows_a_ring_message_are_413(server):
    """The body limit (16 MiB) allows more than one ring message (4 MiB) carries: a 4.5 MB grammar that
    compiles, and an admin load padded to 5 MB, are refused in the front, not a 500 or a dead front."""
    kids = server.children()
    grammar = 'root ::= "' + "ab" * 2_250_000 + '"'
    status, raw, _ = server.request("POST", "/v1/completions", {"model": "m", "prompt": "The", "max_tokens": 2,
                                                                "grammar": grammar}, timeout=120)
    assert status == 413 and json.loads(raw)["error"]["code"] == "request_too_large", raw[:300]
    padded = {"path": "x.gguf", "name": "x", "pad": "x" * 5_000_000}
    status, raw, _ = server.request("POST", "/admin/models/load", padded, timeout=60)
    assert status == 413 and json.loads(raw)["error"]["code"] == "request_too_large", raw[:300]
    assert_unharmed(server, kids)


def test_ten_thousand_refused_requests_leave_rss_flat(server):
    kids = server.children()
    client = Client(server)
    bad = [b'{"model": "m", "prompt": "x", "top_k": 2147483648}', b'{"model": "m", "prompt": [99999]}',
           b'{"model": "m", "prompt": "x", "temperature": -1}', b'{"model": "m", "messages": [{"role": ["user"]}]}',
           b"[" * 5000]

    def burst(n):
        for i in range(n):
            status, _ = client.post("/v1/completions" if i % 5 != 3 else "/v1/chat/completions", bad[i % len(bad)])
            assert 400 <= status < 500

    burst(2_000)  # allocator pools and caches settle first
    before = family_rss(server)
    burst(10_000)
    client.close()
    assert family_rss(server) - before < 8 * 2**20
    assert_unharmed(server, kids)


def die_pids(server):
    status, raw, _ = server.request("GET", "/admin/dies")
    return {d["name"]: d["pid"] for d in json.loads(raw)["dies"]}


def read_until_closed(sock, timeout):
    sock.settimeout(timeout)
    out = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return out
        if not chunk:
            return out
        out += chunk


def test_sigterm_drain_refuses_new_work_and_ends_outliving_streams_with_error_and_done():
    """A stream stuck past the drain (its worker stopped) ends with an error event and [DONE]."""
    srv = Server(["--model", str(demo_model_path()), "--name", "m"], env={"PANTHEON_HANG_TIMEOUT": "600"})
    try:
        sock, head = srv.open_stream({"model": "m", "prompt": "The", "max_tokens": 250, "logit_bias": {"2": -100}})
        worker = die_pids(srv)["cpu0"]
        psutil.Process(worker).suspend()
        srv.proc.send_signal(15)
        time.sleep(0.5)
        status, body = health(srv)
        assert status == 503 and body["status"] == "draining", body
        status, raw, _ = srv.request("POST", "/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 2})
        assert status == 503, raw
        rest = head + read_until_closed(sock, 15)
        events = [line for line in rest.split(b"\n") if line.startswith(b"data: ")]
        assert b'"error"' in events[-2] and events[-1] == b"data: [DONE]", rest[-600:]
        assert srv.proc.wait(20) == 0
    finally:
        srv.kill_tree()


def test_max_sessions_refuses_a_new_session_with_429_when_every_session_is_active():
    srv = Server(["--model", str(demo_model_path()), "--name", "m", "--max-sessions", "1", "--max-concurrent", "2"],
                 env={"PANTHEON_HANG_TIMEOUT": "600"})
    try:
        sock, _ = srv.open_stream({"model": "m", "prompt": "The", "max_tokens": 250, "user": "alice"})
        worker = psutil.Process(die_pids(srv)["cpu0"])
        worker.suspend()  # alice's session stays active for as long as the test needs
        try:
            status, raw, headers = srv.request("POST", "/v1/completions",
                                               {"model": "m", "prompt": "x", "max_tokens": 2, "user": "bob"})
        finally:
            worker.resume()
        assert status == 429 and int(headers["Retry-After"]) >= 1, raw
        assert "max-sessions" in json.loads(raw)["error"]["message"]
        sock.close()
        status, raw, _ = srv.request("POST", "/v1/completions",
                                     {"model": "m", "prompt": "x", "max_tokens": 2, "user": "bob"})
        deadline = time.monotonic() + 20
        while status == 429 and time.monotonic() < deadline:  # alice's cancelled stream drains first
            time.sleep(0.2)
            status, raw, _ = srv.request("POST", "/v1/completions",
                                         {"model": "m", "prompt": "x", "max_tokens": 2, "user": "bob"})
        assert status == 200, raw
    finally:
        srv.kill_tree()
