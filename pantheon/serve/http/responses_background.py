"""Background Responses (OpenAI's background: true): answered at once as queued, generated in a thread, polled;
a streamed one's events go through the store, so a client that lost its stream resumes it from any front."""

import json
import logging
import os
import queue
import re
import threading
import time

from pantheon.serve.http.backend import BackendError
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.field_types import bad, show
from pantheon.serve.http import sse
from pantheon.serve.response_store import MissingResponse, StoreUnavailable

POLL_S = 0.25  # how often a background generation asks the store whether it was cancelled
TAIL_S = 0.02  # how often a streamed background response's reader looks for events it has not sent
TERMINAL = (b"response.completed", b"response.incomplete", b"response.failed")  # the events that settle one
_END = object()
_HERE = {}  # response id -> CancelPoll of each background generation this process runs (dict ops are atomic)
SEQUENCE = re.compile(r"[0-9]{1,9}")  # starting_after: ASCII digits only ("²".isdigit() is true)
_log = logging.getLogger(__name__)


def check(values, store):
    """A background request needs the store: it is how the client reads the answer (and a stream's events)."""
    if not values.get("background"):
        return
    if store is None or values.get("store", True) is False:
        raise bad("background", "a background response is read back from the store: it needs store true and a "
                  "server with a store (--responses-store above 0)", "unsupported_value")


def resumed(params):
    """GET /v1/responses/{id}'s query: None without stream=true, else the sequence number the stream resumes
    after (starting_after; -1 for the whole stream)."""
    stream = params.get("stream", "false")
    if stream not in ("true", "false"):
        raise bad("stream", f"expected true or false, got {show(stream)}", "invalid_value")
    after = params.get("starting_after")
    if after is not None and not (isinstance(after, str) and SEQUENCE.fullmatch(after)):
        raise bad("starting_after", f"expected a sequence number (a whole number), got {show(after)}",
                  "invalid_value")
    if stream == "false":
        return None
    return -1 if after is None else int(after)


class CancelPoll:
    """The `gone()` of a background generation `gen`: true once its stored response is no longer pending
    (cancelled, deleted or evicted), asked of the store at most every POLL_S (the generation asks at every token,
    the disconnect watch while it waits). Once the first token came, the stored response turns in_progress."""

    def __init__(self, store, response_id, gen):
        self.store, self.response_id, self.gen = store, response_id, gen
        self.asked, self.gone, self.begun = 0.0, False, False

    def stop(self):
        """The response was cancelled or deleted through this process: gone at the next ask, without waiting
        for the store's next reading (a flag the generating thread reads; it alone cancels its stream)."""
        self.gone = True

    def __call__(self):
        now = time.monotonic()
        if self.gone:
            return True
        try:
            if not self.begun and self.gen.first_at is not None:
                self.begun, self.asked = True, now
                self.gone = not self.store.begin(self.response_id)
            elif now - self.asked >= POLL_S:
                self.asked = now
                self.gone = not self.store.pending(self.response_id)
        except StoreUnavailable:
            pass  # a store that cannot be read now cancels nothing; the answer is written when it can be
        return self.gone


def start(reply):
    """Store `reply` as queued, owned by this process, and generate it in a thread; the queued object, or for a
    stream the events to send (read back from the store, see tail). A response the store cannot hold is refused
    (its generation, already started, is cancelled)."""
    queued = reply.response("queued", [])
    try:
        _keep(reply, queued)
        events = _first_events(reply) if reply.values.get("stream") else None
    except StoreUnavailable as exc:
        reply.gen.cancel()
        raise RequestError(str(exc), code="store_unavailable", status=503, type="server_error") from None
    reply.gen.gone = _HERE[reply.id] = CancelPoll(reply.store, reply.id, reply.gen)  # only a cancel stops it now
    run, args = (_run, (reply,)) if events is None else (_write, (reply, events))
    threading.Thread(target=_forgotten, args=(reply.id, run, args), name=f"background-{reply.id}",
                     daemon=True).start()
    return queued if events is None else tail(reply.store, reply.id, -1)


def stop_here(response_id):
    """Stop the generation of a response this process runs (cancelled or deleted here); one run by another
    front stops at its next reading of the store (CancelPoll)."""
    poll = _HERE.get(response_id)
    if poll is not None:
        poll.stop()


def _forgotten(response_id, run, args):
    try:
        run(*args)
    finally:
        _HERE.pop(response_id, None)


def _keep(reply, queued):
    if not reply.store.put(reply.id, reply.values.get("previous_response_id"), queued, reply.input_items(),
                           owner=os.getpid()):
        reply.gen.cancel()
        raise bad("background", "the request's input is larger than the whole response store "
                  "(--responses-store): a background response could not be read back", "invalid_value")


def _first_events(reply):
    """A streamed response's events, its first two (created, queued) already stored: a response with stored
    events is one that can be streamed back."""
    events, first = reply.events(), []
    for _ in range(2):
        event = next(events)
        first.append((reply.seq - 1, event))
    reply.store.append(reply.id, first)
    return events


def _run(reply):
    """The whole answer, settled into the store (nothing is written over a cancelled response)."""
    try:
        reply.whole()
    except BackendError as exc:
        _settle_failed(reply, exc.code, str(exc))
    except Exception as exc:  # a bug: the client polling must still see an end
        _log.exception("background response %s failed", reply.id)
        _settle_failed(reply, "server_error", f"{type(exc).__name__}: {exc}")
    finally:
        reply.gen.cancel()


def _settle_failed(reply, code, message):
    try:
        reply.store.settle(reply.id, reply.response("failed", [], error={"code": code, "message": message}))
    except StoreUnavailable:
        _log.warning("background response %s failed and the store cannot say so", reply.id)


def _write(reply, events):
    """A streamed response's events stored as they come (those made during a write go in the next one), the
    terminal one with the settled object it carries. A response no longer pending (cancelled, deleted, evicted)
    stops its generation."""
    inbox = queue.Queue()
    threading.Thread(target=_make, args=(reply, events, inbox), name=f"events-{reply.id}", daemon=True).start()
    try:
        while True:
            batch = [inbox.get()]
            while not inbox.empty():  # this thread alone takes from the inbox
                batch.append(inbox.get_nowait())
            if not _store(reply, [e for e in batch if isinstance(e, tuple)], batch[-1]):
                return
    except StoreUnavailable:
        _log.warning("background response %s: the store cannot take its events; its generation stops", reply.id)
    finally:
        reply.gen.cancel()


def _make(reply, events, inbox):
    """Run the events in their own thread, so that a write never holds the generation up."""
    try:
        for event in events:
            inbox.put((reply.seq - 1, event))  # the number of the event just made
        inbox.put(_END)
    except Exception as exc:  # a bug: the client reading the stream must still see an end
        _log.exception("background response %s failed", reply.id)
        inbox.put(exc)


def _store(reply, events, last):
    """Write one batch; whether the response is still pending and more may come. Events that end without a
    terminal one (a bug, or an abort that was not a cancel) settle it failed (a cancelled one stays so)."""
    final = next((e for e in events if _kind(e[1]) in TERMINAL), None)
    if final is not None:
        reply.store.settle(reply.id, json.loads(final[1].split(b"data: ", 1)[1])["response"], events)
        return False
    if last is _END or isinstance(last, Exception):
        why = f"{type(last).__name__}: {last}" if last is not _END else "the generation was aborted"
        reply.store.settle(reply.id, reply.response("failed", [], error={"code": "server_error", "message": why}),
                           events)
        return False
    return reply.store.append(reply.id, events)


def _kind(event):
    """An SSE event's type: its `event:` line."""
    return event[len(b"event: "):event.index(b"\n")]


def tail(store, response_id, after):
    """SSE events of a streamed background response after sequence number `after`: those stored, then each as
    its generator stores it, until it settles (one whose generating process died ends with response.failed;
    one deleted or evicted meanwhile just ends)."""
    while True:
        try:
            state, rows = store.events(response_id, after)
        except MissingResponse:
            return
        for after, event in rows:
            yield event
        if state == "orphaned":
            yield from _orphaned(store, response_id, after + 1)
        if state != "pending":
            return
        if not rows:
            time.sleep(TAIL_S)


def _orphaned(store, response_id, number):
    """response.failed for a response whose generating process died (the store reads it as failed)."""
    try:
        failed = store.get(response_id)
    except MissingResponse:
        return
    yield sse.named("response.failed", {"type": "response.failed", "sequence_number": number, "response": failed})
