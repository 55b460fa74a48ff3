"""SSE keep-alive: a silent stream gets comment lines, which OpenAI's and Anthropic's clients skip."""

import json
import threading
import time

import pytest

from pantheon.serve.http import keepalive
from pantheon.serve.http.keepalive import KeepAlive
from tests.pantheon.serve.http.server import Served, call, open_models
from tests.pantheon.serve.http.test_streams import NO_EOS, open_stream, read_until, wait_for


def slow(items, delay, done=None):
    """`items` after `delay` seconds each; `done` is set when the generator is closed or ends."""
    try:
        for item in items:
            time.sleep(delay)
            yield item
    finally:
        if done is not None:
            done.set()


def test_a_silent_stream_gets_comments_between_its_items():
    out = list(KeepAlive(slow([b"data: 1\n\n", b"data: 2\n\n"], 0.35), 0.1))
    data = [x for x in out if x.startswith(b"data:")]
    comments = [x for x in out if x.startswith(b": waiting ")]
    assert data == [b"data: 1\n\n", b"data: 2\n\n"] and len(comments) >= 4
    assert out.index(data[0]) >= 2 and all(c.endswith(b"s\n\n") for c in comments)


def test_items_that_keep_coming_get_no_comment_and_those_waiting_go_out_together():
    items = [b"data: %d\n\n" % i for i in range(20)]
    assert b"".join(KeepAlive(slow(items, 0.001), 5.0)) == b"".join(items)
    body = KeepAlive(iter(()), 5.0)  # as if the helper had run ahead of a slow client:
    for entry in [(b"b", None), (b"c", None), (keepalive._END, None)]:
        body._inbox.put(entry)
    assert body._gather(b"a", None) == (b"abc", True, None)
    failure = RuntimeError("late")
    body._inbox.put((None, failure))
    assert body._gather(b"a", None) == (b"a", False, failure)


def test_an_error_of_the_events_is_raised_to_the_consumer_after_its_items():
    def failing():
        yield b"1"
        raise RuntimeError("boom")

    body = iter(KeepAlive(failing(), 5.0))
    assert next(body) == b"1"
    with pytest.raises(RuntimeError, match="boom"):
        next(body)


def test_closing_an_unread_body_closes_its_events():
    done = threading.Event()
    events = slow([b"1"], 0.0, done)
    next(events)  # started, so closing it runs its finally
    KeepAlive(events, 1.0).close()
    assert done.is_set()


def test_closing_while_the_events_are_silent_stops_the_helper_once_they_move():
    """The helper thread runs the events; after close() it takes no more of them and closes them."""
    release, done = threading.Event(), threading.Event()

    def held():
        try:
            yield b"1"
            release.wait(10)
            yield b"2"
            yield b"3"
        finally:
            done.set()

    body = KeepAlive(held(), 0.05)
    reader = iter(body)
    assert next(reader) == b"1"
    assert next(reader).startswith(b": waiting")
    reader.close()
    body.close()
    release.set()  # in the server, cancelling the generation is what ends the wait
    assert done.wait(5) and not body._thread.join(5) and not body._thread.is_alive()


def test_a_slow_client_holds_the_producer_back():
    made = []

    def fast():
        for i in range(10_000):
            made.append(i)
            yield b"%d" % i

    body = KeepAlive(fast(), 5.0)
    reader = iter(body)
    next(reader)
    time.sleep(0.3)
    assert len(made) <= 2 * keepalive._BACKLOG + 2  # one write's worth taken, a backlog's waiting, one in hand
    reader.close()
    body.close()


@pytest.fixture(scope="module")
def narrow():
    """One generation slot, and comments after 50 ms of silence."""
    server = Served(open_models(("qwen2",)), n_ctx=1024, max_concurrent=1, max_queue=2, sse_keepalive=0.05)
    yield server
    server.close()


def test_a_queued_stream_gets_comments_until_its_turn_and_then_its_answer(narrow):
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "logit_bias": NO_EOS}
    want = call(narrow.port, "POST", "/v1/completions", body)[2]["choices"][0]["text"]
    running = open_stream(narrow.port, dict(body, max_tokens=400, stream=True))
    read_until(running, b"data: ")
    waiting = open_stream(narrow.port, dict(body, stream=True))
    wait_for(lambda: narrow.backend.stats()["qwen2"]["queued"] == 1)
    raw = read_until(waiting, b": waiting")
    assert b"data: {" not in raw  # silent but for the comments: still queued
    running.close()
    raw += read_until(waiting, b"data: [DONE]")
    waiting.close()
    text = "".join(chunk["choices"][0]["text"] for chunk in _events(raw) if chunk != "[DONE]")
    assert text == want


def _events(raw):
    body = raw.split(b"\r\n\r\n", 1)[1].decode()
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:])
            for line in body.split("\n") if line.startswith("data: ")]


def queued_behind_a_stream(server):
    """Start a long stream that holds the one slot, and drop it 0.4 s later: a request made meanwhile waits
    in the queue (getting comments), then runs."""
    running = open_stream(server.port, {"prompt": "Once", "max_tokens": 400, "temperature": 0, "logit_bias": NO_EOS,
                                        "stream": True})
    read_until(running, b"data: ")
    threading.Timer(0.4, running.close).start()


def test_openai_and_anthropic_clients_skip_the_comments(narrow):
    """A streamed request that waited in the queue (comments first) reads as the answer without a stream."""
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    client = openai.OpenAI(base_url=narrow.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    kw = dict(model="qwen2", prompt="Once upon a time", max_tokens=24, temperature=0, logit_bias=NO_EOS)
    whole = client.completions.create(**kw).choices[0].text
    queued_behind_a_stream(narrow)
    assert "".join(c.choices[0].text for c in client.completions.create(stream=True, **kw)) == whole
    claude = anthropic.Anthropic(base_url=narrow.url, api_key="unused", max_retries=0, timeout=60)
    kw = dict(model="qwen2", max_tokens=24, extra_body={"temperature": 0}, messages=[{"role": "user", "content": "Hi"}])
    whole = claude.messages.create(**kw).content[0].text
    queued_behind_a_stream(narrow)
    with claude.messages.stream(**kw) as stream:
        assert "".join(stream.text_stream) == whole
