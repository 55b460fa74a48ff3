"""Background Responses with the official `openai` client: queued at once, polled to the same answer as a
foreground response, cancelled, refused where they cannot be read back."""

import http.client
import json
import os
import time
import types

import openai
import pytest

from pantheon.serve.http import responses_background
from pantheon.serve.response_store import MissingResponse, ResponseStore
from tests.pantheon.serve.http.server import call, stored_served


LONG = 1800  # tokens of a generation that is cancelled: seconds of work (400 of them take 0.3 s on a 2-core VM)


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """qwen2 under Qwen2.5's template, with a store, one generation slot and room for LONG tokens."""
    server = stored_served(tmp_path_factory.mktemp("store"), n_ctx=2048, max_concurrent=1)
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
    running = client.responses.create(model="qwen2", input="Tell a long story.", max_output_tokens=LONG,
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
    first = client.responses.create(input="Tell a long story.", max_output_tokens=600, **kw)
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
    running = client.responses.create(model="qwen2", input="Count.", max_output_tokens=LONG, temperature=0,
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


def test_background_without_a_store_is_a_400(kept):
    body = {"model": "qwen2", "input": "Hi", "background": True, "store": False}
    status, _, out = call(kept.port, "POST", "/v1/responses", body)
    assert status == 400 and out["error"]["param"] == "background", out


def orphaned(tmp_path):
    """A store holding resp_orphan, pending under a process that has ended."""
    store = ResponseStore(tmp_path / "responses.sqlite", 1 << 20)
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
    store.put("resp_orphan", None, {"id": "resp_orphan", "status": "in_progress", "background": True}, [],
              owner=child)
    return store


def test_a_pending_response_whose_generator_died_reads_as_failed(tmp_path):
    """The store records which process generates a pending response; once that process is gone, a poll ends."""
    store = orphaned(tmp_path)
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


def test_a_cancel_through_the_generating_process_stops_it_without_waiting_for_the_store(tmp_path, monkeypatch):
    """The store is read at most every POLL_S; a cancel or delete made in the process that runs the generation
    stops it at its next token instead (another front's still waits for the store's next reading)."""
    store = ResponseStore(tmp_path / "responses.sqlite", 1 << 20)
    store.put("resp_here", None, {"id": "resp_here", "status": "queued", "background": True}, [], owner=os.getpid())
    gen = types.SimpleNamespace(first_at=None)
    poll = responses_background._HERE["resp_here"] = responses_background.CancelPoll(store, "resp_here", gen)
    monkeypatch.setattr(responses_background, "POLL_S", 3600.0)  # the store is not read again in this test
    assert poll() is False and store.pending("resp_here")
    responses_background.stop_here("resp_other")
    assert poll() is False
    responses_background.stop_here("resp_here")
    assert poll() is True and store.pending("resp_here")  # the store was not what said so
    responses_background._HERE.pop("resp_here")


def test_a_background_generation_is_forgotten_by_its_process_once_it_ends(kept, client):
    assert_idle(kept)
    done = poll(client, client.responses.create(model="qwen2", input="Hi", max_output_tokens=2, temperature=0,
                                                background=True).id)
    deadline = time.monotonic() + 5
    while done.id in responses_background._HERE:
        assert time.monotonic() < deadline, "an ended background generation is still listed"
        time.sleep(0.01)


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


def test_a_streamed_background_response_streams_the_foreground_answer_and_resumes_from_any_event(kept, client):
    """Created queued, queued, in_progress, then the foreground stream's events; retrieve(stream=True,
    starting_after=n) sends the same events from n + 1 on, and the stored object is the final one."""
    kw = dict(model="qwen2", input="Name a colour.", max_output_tokens=12, temperature=0)
    foreground = [e for e in client.responses.create(stream=True, **kw)]
    events = list(client.responses.create(background=True, stream=True, **kw))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.type for e in events[:3]] == ["response.created", "response.queued", "response.in_progress"]
    assert events[0].response.status == "queued" and events[0].response.background
    assert kinds(events[3:]) == kinds(foreground[2:])  # as many deltas as the die's token batches made
    assert events[-1].response.output_text == foreground[-1].response.output_text
    response_id = events[0].response.id
    for after in (0, 5, len(events) - 2):
        again = list(client.responses.retrieve(response_id, stream=True, starting_after=after))
        assert [(e.sequence_number, e.type) for e in again] == [(e.sequence_number, e.type) for e in events[after + 1:]]
    assert list(client.responses.retrieve(response_id, stream=True)) == events
    assert client.responses.retrieve(response_id) == events[-1].response


def kinds(events):
    """The event types, a run of one type counted once."""
    return [kind for n, kind in enumerate(e.type for e in events) if n == 0 or kind != events[n - 1].type]


def text_events(port, path, body=None, limit=None):
    """(the response id, the (sequence_number, type, delta) of each event) of an SSE stream read over raw HTTP;
    after `limit` events the connection is dropped, as by a client that lost its network."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST" if body else "GET", path, json.dumps(body) if body else None,
                 {"Content-Type": "application/json"})
    got, ids, resp = [], set(), conn.getresponse()
    assert resp.status == 200, resp.read()
    for line in resp:
        if line.startswith(b"data: "):
            event = json.loads(line[6:])
            got.append((event["sequence_number"], event["type"], event.get("delta", "")))
            ids.add(event["response"]["id"] if "response" in event else None)
            if len(got) == limit:
                break
    conn.close()
    return (ids - {None}).pop() if ids - {None} else None, got


def test_a_dropped_stream_goes_on_generating_and_is_resumed_where_it_broke(kept, client):
    kw = dict(model="qwen2", input="Tell a long story.", max_output_tokens=60, temperature=0)
    whole = client.responses.create(**kw).output_text
    response_id, first = text_events(kept.port, "/v1/responses", dict(kw, background=True, stream=True), limit=6)
    assert poll(client, response_id).output_text == whole  # the generation outlived its stream
    _, rest = text_events(kept.port, f"/v1/responses/{response_id}?stream=true&starting_after={first[-1][0]}")
    assert [n for n, _, _ in first + rest] == list(range(len(first) + len(rest)))
    assert "".join(d for _, kind, d in first + rest if kind == "response.output_text.delta") == whole


def test_cancel_ends_a_streamed_background_response_and_its_readers(kept, client):
    assert_idle(kept)
    response_id, _ = text_events(kept.port, "/v1/responses", dict(model="qwen2", input="Count.", background=True,
                                                                   stream=True, max_output_tokens=LONG), limit=4)
    assert_running(kept)
    assert client.responses.cancel(response_id).status == "cancelled"
    _, tail = text_events(kept.port, f"/v1/responses/{response_id}?stream=true")  # ends: nothing more comes
    assert tail[0][:2] == (0, "response.created") and tail[-1][1] not in ("response.completed", "response.failed")
    deadline = time.monotonic() + 10
    while kept.backend.stats()["qwen2"]["running"]:
        assert time.monotonic() < deadline, "the cancelled generation kept its slot"
        time.sleep(0.05)
    assert client.responses.retrieve(response_id).status == "cancelled"


@pytest.mark.parametrize("query, param", [("stream=yes", "stream"), ("stream=true&starting_after=-1", "starting_after"),
                                          ("stream=true&starting_after=%C2%B2", "starting_after"),
                                          ("stream=true", "stream")])
def test_a_bad_stream_query_or_a_response_that_was_not_streamed_is_a_400(kept, client, query, param):
    done = client.responses.create(model="qwen2", input="Hi", max_output_tokens=2, temperature=0)
    status, _, out = call(kept.port, "GET", f"/v1/responses/{done.id}?{query}")
    assert status == 400 and out["error"]["param"] == param, out
    assert call(kept.port, "GET", "/v1/responses/resp_none?stream=true")[0] == 404


def test_a_stream_whose_generator_died_ends_with_response_failed(tmp_path):
    store = orphaned(tmp_path)
    assert store.append("resp_orphan", [(0, b"event: response.created\ndata: {}\n\n")])
    tail = list(responses_background.tail(store, "resp_orphan", -1))
    assert tail[0].startswith(b"event: response.created") and tail[-1].startswith(b"event: response.failed")
    assert json.loads(tail[-1].split(b"data: ")[1])["sequence_number"] == 1


def test_a_streams_events_count_in_the_store_bound_and_go_with_their_response(tmp_path):
    store = ResponseStore(tmp_path / "responses.sqlite", 4000)
    store.put("resp_a", None, {"id": "resp_a", "status": "queued"}, [], owner=os.getpid())
    assert store.append("resp_a", [(n, b"x" * 100) for n in range(10)])
    assert store.settle("resp_a", {"id": "resp_a", "status": "completed"}, [(10, b"y" * 100)])
    assert [n for n, _ in store.events("resp_a", 7)[1]] == [8, 9, 10] and store.events("resp_a", -1)[0] == "settled"
    store.put("resp_plain", None, {"id": "resp_plain", "status": "completed"}, [])
    assert store.streamed("resp_a") and not store.streamed("resp_plain")
    assert not store.append("resp_a", [(11, b"z")])  # settled: nothing more is written
    for n in range(3):  # 1,100 bytes of events each: the fourth evicts the first
        store.put(f"resp_{n}", None, {"id": f"resp_{n}", "status": "queued"}, [], owner=os.getpid())
        store.append(f"resp_{n}", [(k, b"x" * 100) for k in range(11)])
    with pytest.raises(MissingResponse):
        store.events("resp_a", -1)
    store.delete("resp_2")
    assert store._db().execute("SELECT COUNT(*) FROM events WHERE id IN ('resp_a', 'resp_2')").fetchone()[0] == 0
