"""Background Responses (OpenAI's background: true): answered at once as queued, generated in a thread, polled."""

import logging
import os
import threading
import time

from pantheon.serve.http.backend import BackendError
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.field_types import bad
from pantheon.serve.response_store import StoreUnavailable

POLL_S = 0.25  # how often a background generation asks the store whether it was cancelled
_log = logging.getLogger(__name__)


def check(values, store):
    """A background request needs the store (it is how the client reads the answer) and no stream."""
    if not values.get("background"):
        return
    if store is None or values.get("store", True) is False:
        raise bad("background", "a background response is read back from the store: it needs store true and a "
                  "server with a store (--responses-store above 0)", "unsupported_value")
    if values.get("stream"):
        raise bad("background", "streamed background responses are not served: create it without stream and poll "
                  "GET /v1/responses/{id}", "unsupported_value")


class CancelPoll:
    """The `gone()` of a background generation `gen`: true once its stored response is no longer pending
    (cancelled, deleted or evicted), asked of the store at most every POLL_S (the generation asks at every token,
    the disconnect watch while it waits). Once the first token came, the stored response turns in_progress."""

    def __init__(self, store, response_id, gen):
        self.store, self.response_id, self.gen = store, response_id, gen
        self.asked, self.gone, self.begun = 0.0, False, False

    def __call__(self):
        now = time.monotonic()
        try:
            if not self.begun and self.gen.first_at is not None:
                self.begun, self.asked = True, now
                self.gone = not self.store.begin(self.response_id)
            elif not self.gone and now - self.asked >= POLL_S:
                self.asked = now
                self.gone = not self.store.pending(self.response_id)
        except StoreUnavailable:
            pass  # a store that cannot be read now cancels nothing; the answer is written when it can be
        return self.gone


def start(reply):
    """Store `reply` as queued, owned by this process, and generate it in a thread; the queued object. A
    response the store cannot hold is refused (its generation, already started, is cancelled)."""
    queued = reply.response("queued", [])
    try:
        kept = reply.store.put(reply.id, reply.values.get("previous_response_id"), queued, reply.input_items(),
                               owner=os.getpid())
    except StoreUnavailable as exc:
        reply.gen.cancel()
        raise RequestError(str(exc), code="store_unavailable", status=503, type="server_error") from None
    if not kept:
        reply.gen.cancel()
        raise bad("background", "the request's input is larger than the whole response store "
                  "(--responses-store): a background response could not be read back", "invalid_value")
    reply.gen.gone = CancelPoll(reply.store, reply.id, reply.gen)  # the HTTP request ends now; only a cancel stops it
    threading.Thread(target=_run, args=(reply,), name=f"background-{reply.id}", daemon=True).start()
    return queued


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
