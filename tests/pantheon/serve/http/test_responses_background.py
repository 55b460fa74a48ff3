"""Background Responses with the official `openai` client: queued at once, polled to the same answer as a
foreground response, cancelled, refused where they cannot be read back."""

import os
import time

import openai
import pytest

from pantheon.serve.http import responses_background
from pantheon.serve.response_store import ResponseStore
from tests.pantheon.serve.http.server import call, stored_served


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """qwen2 under Qwen2.5's template, with a store and one generation slot."""
    server = stored_served(tmp_path_factory.mktemp("store"), max_concurrent=1)
    yield server
    server.close()


@pytest.fixture(scope="module")
def client(kept):
    return openai.OpenAI(base_url=kept.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def poll(client, response_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        got = client.responses.retrieve(response_id)
        if got.status not in ("queued", "in_progress"):
            return got
        assert time.monotonic() < deadline, f"still {got.status}"
        time.sleep(0.05)


def test_a_background_response_is_queued_then_polled_to_the_foreground_answer(client):
    kw = dict(model="qwen2", input="Name a colour.", max_output_tokens=6, temperature=0)
    foreground = client.responses.create(**kw)
    queued = client.responses.create(background=True, **kw)
    assert queued.status in ("queued", "in_progress") and queued.background is True and queued.output == []
    done = poll(client, queued.id)
    assert (done.status, done.background, done.id) == (foreground.status, True, queued.id)
    assert done.output_text == foreground.output_text and done.usage.output_tokens == foreground.usage.output_tokens
    assert [i.content[0].text for i in client.responses.input_items.list(queued.id).data] == ["Name a colour."]
    later = client.responses.create(input="Another?", previous_response_id=done.id, max_output_tokens=2,
                                    model="qwen2", temperature=0)
    assert later.previous_response_id == done.id


def test_cancel_stops_the_generation_and_the_response_stays_cancelled(kept, client):
    assert_idle(kept)
    running = client.responses.create(model="qwen2", input="Tell a long story.", max_output_tokens=400,
                                      temperature=0, background=True)
    stats = lambda: kept.backend.stats()["qwen2"]
    assert_running(kept)
    aborted = stats()["aborted"]
    cancelled = client.responses.cancel(running.id)
    assert cancelled.status == "cancelled"
    deadline = time.monotonic() + 10
    while stats()["running"]:
        assert time.monotonic() < deadline, "the cancelled generation kept its slot"
        time.sleep(0.05)
    assert stats()["aborted"] == aborted + 1, "the generation ran to its end"
    time.sleep(2 * responses_background.POLL_S)
    assert client.responses.retrieve(running.id).status == "cancelled"
    assert client.responses.cancel(running.id).status == "cancelled"  # cancelling twice changes nothing


def assert_idle(kept):
    """No generation of an earlier test still running (a test's cancel runs on)."""
    deadline = time.monotonic() + 10
    while kept.backend.stats()["qwen2"]["running"]:
        assert time.monotonic() < deadline, "an earlier generation still runs"
        time.sleep(0.02)


def assert_running(kept):
    deadline = time.monotonic() + 10
    while not kept.backend.stats()["qwen2"]["running"]:
        assert time.monotonic() < deadline, "the background generation never started"
        time.sleep(0.02)


def test_a_response_is_queued_while_it_waits_and_in_progress_once_it_generates(kept, client):
    """One generation slot: while the first background response holds it (in_progress), the second waits
    (queued); each reading of the second is checked against a reading of the first made after it."""
    assert_idle(kept)
    kw = dict(model="qwen2", temperature=0, background=True)
    first = client.responses.create(input="Tell a long story.", max_output_tokens=150, **kw)
    second = client.responses.create(input="Hi", max_output_tokens=4, **kw)
    seen, deadline = [], time.monotonic() + 60
    while not seen or seen[-1][1] in ("queued", "in_progress"):
        waiting = client.responses.retrieve(second.id).status
        seen.append((waiting, client.responses.retrieve(first.id).status))
        assert time.monotonic() < deadline, seen[-5:]
    both = [waiting for waiting, running in seen if running == "in_progress"]
    assert both and set(both) == {"queued"}, seen
    assert seen[-1][1] == "incomplete" and poll(client, second.id).status == "incomplete"


def test_a_pending_response_cannot_be_continued(kept, client):
    running = client.responses.create(model="qwen2", input="Count.", max_output_tokens=400, temperature=0,
                                      background=True)
    assert_running(kept)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="qwen2", input="And?", previous_response_id=running.id, max_output_tokens=2)
    assert "still being generated" in str(err.value)
    client.responses.cancel(running.id)


def test_a_foreground_response_cannot_be_cancelled(client):
    done = client.responses.create(model="qwen2", input="Hi", max_output_tokens=2, temperature=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.cancel(done.id)
    assert err.value.body["code"] == "not_background"


@pytest.mark.parametrize("extra", [{"stream": True}, {"store": False}])
def test_background_without_a_store_or_with_a_stream_is_a_400(kept, extra):
    body = dict({"model": "qwen2", "input": "Hi", "background": True}, **extra)
    status, _, out = call(kept.port, "POST", "/v1/responses", body)
    assert status == 400 and out["error"]["param"] == "background", out


def test_a_pending_response_whose_generator_died_reads_as_failed(tmp_path):
    """The store records which process generates a pending response; once that process is gone, a poll ends."""
    store = ResponseStore(tmp_path / "responses.sqlite", 1 << 20)
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    store.put("resp_orphan", None, {"id": "resp_orphan", "status": "in_progress", "background": True}, [],
              owner=child)
    got = store.get("resp_orphan")
    assert got["status"] == "failed" and "ended before it finished" in got["error"]["message"]
    store.put("resp_alive", None, {"id": "resp_alive", "status": "queued", "background": True}, [],
              owner=os.getpid())
    assert store.get("resp_alive")["status"] == "queued" and store.pending("resp_alive")
    assert store.begin("resp_alive") and store.get("resp_alive")["status"] == "in_progress"
    assert store.settle("resp_alive", {"id": "resp_alive", "status": "completed", "background": True})
    assert not store.pending("resp_alive") and not store.settle("resp_alive", {"status": "late"})
    assert not store.begin("resp_alive") and not store.begin("resp_never")
    assert store.get("resp_alive")["status"] == "completed"


def test_a_background_request_the_store_cannot_hold_is_refused_and_starts_nothing(tmp_path):
    server = stored_served(tmp_path, limit=1500)
    try:
        status, _, out = call(server.port, "POST", "/v1/responses", {
            "model": "qwen2", "input": "word " * 300, "background": True, "max_output_tokens": 4})
        assert status == 400 and out["error"]["param"] == "background", out
        deadline = time.monotonic() + 5
        while server.backend.stats()["qwen2"]["running"]:
            assert time.monotonic() < deadline, "the refused request's generation runs on"
            time.sleep(0.02)
    finally:
        server.close()
