"""Streams end the right way: stop strings never leak, a vanished client frees its slot, a full queue says 429."""

import json
import socket
import time

import pytest

from pantheon.engine.scheduler import Engine, EngineConfig, Request, TokenEvent
from pantheon.engine.sampler import SamplingParams
from tests.pantheon.serve.http.server import Served, call, open_models

NO_EOS = {"2": -100}


@pytest.fixture(scope="module")
def greedy():
    """Greedy tokens of the test prompt, from the engine directly, and their text piece by piece."""
    model = open_models(("qwen2",))["qwen2"]
    tok = model.tokenizer
    engine = Engine(model, EngineConfig(n_ctx=256))
    engine.add(Request(1, tuple(tok.encode("Once upon a time", add_special=True)), 16,
                       SamplingParams(temperature=0.0, logit_bias={2: -100.0})))
    tokens = []
    while engine.has_work:
        tokens += [e.token for e in engine.step() if isinstance(e, TokenEvent)]
    return tok.decode(tokens), [tok.decode([t]) for t in tokens]


def complete(client, stop, stream):
    kw = dict(model="qwen2", prompt="Once upon a time", max_tokens=16, temperature=0, logit_bias=NO_EOS, stop=stop)
    if not stream:
        out = client.completions.create(**kw)
        return out.choices[0].text, out.choices[0].finish_reason
    chunks = list(client.completions.create(stream=True, **kw))
    return "".join(c.choices[0].text for c in chunks), chunks[-1].choices[0].finish_reason


def spanning_stop(pieces):
    """Two characters either side of the first boundary between two pieces of at least two characters."""
    at = 0
    for left, right in zip(pieces, pieces[1:]):
        at += len(left)
        if len(left) >= 2 and len(right) >= 2:
            return "".join(pieces)[at - 2:at + 2]
    pytest.skip("no two adjacent multi-character pieces in the greedy text")


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_spanning_tokens_cuts_the_text(client, greedy, stream):
    text, pieces = greedy
    stop = spanning_stop(pieces)
    got, reason = complete(client, ["never-there", stop], stream)
    assert (got, reason) == (text[:text.find(stop)], "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_held_back_prefix_is_released_when_no_stop_completes(client, greedy, stream):
    text, _ = greedy
    got, reason = complete(client, text[-2:] + "\u2603\u2603", stream)
    assert (got, reason) == (text, "length")


def open_stream(port, body):
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    sock.sendall(head + data)
    return sock


def read_until(sock, marker):
    buf = b""
    while marker not in buf:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before {marker!r}: {buf[:300]!r}"
        buf += chunk
    return buf


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.fixture
def narrow():
    """One generation slot and one waiting place, a long context so a generation outlives the test steps."""
    server = Served(open_models(("qwen2",)), n_ctx=2048, max_concurrent=1, max_queue=1)
    yield server
    server.close()


LONG = {"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0, "logit_bias": NO_EOS, "stream": True}


def test_full_queue_429_and_vanished_clients_free_their_places(narrow):
    stats = lambda: narrow.backend.stats()["qwen2"]
    running = open_stream(narrow.port, LONG)
    read_until(running, b"data: ")
    waiting = open_stream(narrow.port, LONG)
    wait_for(lambda: stats()["queued"] == 1)
    status, headers, body = call(narrow.port, "POST", "/v1/completions", dict(LONG, stream=False))
    assert status == 429 and body["error"]["type"] == "rate_limit_error"
    # nothing finished yet, so the assumed 1 s service time: ceil((1 waiting + 1) * 1 s / 1 slot)
    assert headers["Retry-After"] == "2"
    waiting.close()  # it never got a byte: the watcher must notice and give its place back
    wait_for(lambda: stats()["aborted"] == 1 and stats()["queued"] == 0)
    assert stats()["running"] == 1
    running.close()
    wait_for(lambda: stats()["aborted"] == 2 and stats()["running"] == 0)
    assert stats()["completed"] == 0
    status, _, body = call(narrow.port, "POST", "/v1/completions", dict(LONG, stream=False, max_tokens=3))
    assert status == 200 and body["usage"]["completion_tokens"] == 3
    assert 'pantheon_in_flight{die="qwen2"} 0' in call(narrow.port, "GET", "/metrics")[2]
