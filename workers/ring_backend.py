"""The Backend the HTTP app uses inside a front process: requests out over rings, tokens back over rings."""

import dataclasses
import hashlib
import itertools
import queue
import sys
import threading
import time

from ipc.errors import FrameError
from ipc.mux import Mux
from pantheon.serve import core
from pantheon.serve.metrics import pressure_lines
from pantheon.serve.settings import context_size
from pantheon.serve.http.backend import (Finished, GenerationFailed, ModelInfo, Overloaded, Tokens, Unavailable,
                                         UnknownModel)
from pantheon.source import open_text
from workers import protocol
from workers.protocol import ErrorCode, Kind
from workers.tables import DIE_STATES, DIE_UP, PRESSURE_LEVELS, SLOT_LOADED, SLOT_LOADING, SLOT_STATES, text

ACK_TIMEOUT_S = 30.0
MAX_DEATHS = 2  # poison-pill rule: a request in flight at this many worker deaths is not tried again
RECOVER_S = 30.0  # how long a request waits for a replica to come back after its worker died
RETRY_NAP_S = 0.25
PREPARE_INTERVAL_S = 0.2  # how often a front looks for newly loaded slots to open ahead of requests


def session_hash(session):
    """A stable nonzero 64-bit key for a session id (the supervisor routes on it, workers key caches)."""
    if not session:
        return 0
    return int.from_bytes(hashlib.blake2b(session.encode(), digest_size=8).digest(), "little") or 1


@dataclasses.dataclass(frozen=True)
class Shutdown:
    """Put on a stream's queue when the front stops: the stream ends with an error event and [DONE]."""

    reason: str


class RingStream:
    """Events of one request as they arrive on the front's inbound rings.

    When the worker running it dies, the stream resubmits itself (a new request id, so late frames of
    the dead attempt are dropped) with the prompt plus every token already delivered, and numbers the
    continuation after them: the client sees one unbroken stream, no token twice, none missing.
    """

    def __init__(self, backend, job):
        self.backend, self.job = backend, job
        self.rid = None
        self.events = queue.Queue()
        self.sent = [[] for _ in range(job.n)]  # per choice: token ids delivered to the client, in order
        self.finished = set()  # choices whose DONE was delivered
        self.stopped = set()  # choices cancelled alone
        self.offset = 0  # tokens delivered before the current attempt (n = 1: the continuation's start)
        self.deaths = 0  # worker deaths this request was in flight at
        self.recover_until = None
        self.cancelled = False
        self.ended = False  # the pump has routed this attempt's DONE or ERROR
        self.replica = None
        self._early = []

    def submit(self):
        """(Re)send the job under a fresh request id: the prompt extended by what was already sent."""
        self.backend.forget(self.rid)
        self.ended = False
        job = protocol.continuation(self.job, self.sent[0]) if self.sent[0] else self.job
        payload = protocol.encode_job(job)  # before registering: a job the codec refuses leaves nothing behind
        self.rid = self.backend.new_id()
        self.backend.register(self.rid, self)
        self.offset = len(self.sent[0])
        try:
            self.backend.send(Kind.SUBMIT, self.rid, payload)
        except BaseException:
            self.backend.forget(self.rid)
            raise

    def wait_accepted(self):
        """Block until the supervisor accepted the request; raise its refusal (429, 503).

        The die may stream its first tokens before the front reads the acknowledgement (they travel
        on different rings): those wait, in order, in `_early` until iteration starts."""
        while True:
            msg = self._next(ACK_TIMEOUT_S, early=False)
            if msg.kind == Kind.ACCEPTED:
                self._note_replica(msg)
                return
            if msg.kind != Kind.ERROR:
                self._early.append(msg)
                continue
            if not self._recover(msg):
                self.backend.forget(self.rid)
                raise _refusal(msg)

    def _next(self, timeout=None, early=True):
        """The next message of the current attempt (frames of an abandoned attempt are skipped)."""
        while early and self._early:
            msg = self._early.pop(0)
            if msg.request_id == self.rid:
                return msg
        while True:
            try:
                msg = self.events.get(timeout=timeout)
            except queue.Empty:
                self.backend.forget(self.rid)
                raise Unavailable("the supervisor did not answer in time", retry_after=1.0) from None
            if isinstance(msg, Shutdown):
                self.backend.forget(self.rid)
                raise Unavailable(msg.reason, retry_after=5.0)
            if msg.request_id == self.rid:
                return msg

    def _note_replica(self, msg):
        die = protocol.decode_accepted(bytes(msg.payload))
        if die < self.backend.layout.n_dies:
            self.replica = self.backend.layout.metrics.dies[die]

    def _recover(self, msg):
        """After WORKER_DIED (or no replica while recovering): resubmit; False when out of time or tries."""
        code = protocol.decode_error(bytes(msg.payload)).code
        if code == ErrorCode.WORKER_DIED:
            self.deaths += 1
            if not self._resumable():
                self.backend.forget(self.rid)
                raise GenerationFailed(f"the worker running this request died after its {self.job.n} choices had "
                                       f"started; a request with n > 1 is resumed only before its first token")
        if code == ErrorCode.WORKER_DIED and self.deaths < MAX_DEATHS and not self.cancelled:
            self.recover_until = time.monotonic() + RECOVER_S
        elif not (code == ErrorCode.UNAVAILABLE and self.recover_until and time.monotonic() < self.recover_until):
            return False
        if code == ErrorCode.UNAVAILABLE:
            time.sleep(RETRY_NAP_S)  # the die is restarting: ask again shortly
        self.submit()
        return True

    def __iter__(self):
        """Resumable (every message is taken off the queue one at a time), so a consumer that stops at
        a stop string and iterates again still receives the DONE behind it. The request id is
        forgotten only at its end, never when an iterator is dropped."""
        while len(self.finished) < self.job.n:
            msg = self._next()
            if msg.kind == Kind.TOKENS:
                token, scored, choice = protocol.decode_token(bytes(msg.payload))
                seq = msg.seq + (self.offset if choice == 0 else 0)
                if choice < self.job.n and seq == len(self.sent[choice]):
                    self.sent[choice].append(token)
                    yield Tokens((token,), seq, () if scored is None else (scored,), choice)
            elif msg.kind == Kind.ACCEPTED:
                self._note_replica(msg)
            elif msg.kind == Kind.DONE:
                yield from self._done(msg)
            elif msg.kind == Kind.ERROR and self._all_sent():
                self.backend.forget(self.rid)
                yield from self._end_all("length")  # died after the last token
            elif msg.kind == Kind.ERROR and not self._recover(msg):
                self.backend.forget(self.rid)
                raise _refusal(msg)

    def _done(self, msg):
        done, final = protocol.decode_done(bytes(msg.payload))
        if final:
            self.backend.forget(self.rid)
        if done.choice < self.job.n and done.choice not in self.finished:
            self.finished.add(done.choice)
            yield Finished(done.reason, len(self.job.prompt), done.cached_tokens, len(self.sent[done.choice]),
                           done.choice)
        if final:
            yield from self._end_all("abort")  # a choice the die never reported (it ended unstarted)

    def _end_all(self, reason):
        for choice in range(self.job.n):
            if choice not in self.finished:
                self.finished.add(choice)
                yield Finished(reason, len(self.job.prompt), 0, len(self.sent[choice]), choice)

    def _all_sent(self):
        """Every choice still running has delivered max_tokens: a death now lost nothing."""
        return all(len(self.sent[c]) >= self.job.max_tokens for c in range(self.job.n) if c not in self.finished)

    def _resumable(self):
        """One choice resumes as a continuation of what it sent; several only before any was sent."""
        return self.job.n == 1 or not (self.finished or any(self.sent))

    def cancel(self, choice=None):
        """Stop the generation (or one choice of it); the request id is forgotten once its final DONE has
        arrived (see the pump)."""
        if self.cancelled or (choice is not None and (choice in self.stopped or choice in self.finished)):
            return
        if choice is not None and self.job.n > 1:
            self.stopped.add(choice)
            self.backend.send(Kind.CANCEL, self.rid, protocol.encode_cancel(choice))
            return
        self.cancelled = True
        self.backend.send(Kind.CANCEL, self.rid, b"")
        if self.ended:
            self.backend.forget(self.rid)


def _final(msg):
    """Whether a DONE frame ends its request (a malformed one does: the stream reports the error)."""
    try:
        return protocol.decode_done(bytes(msg.payload))[1]
    except FrameError:
        return True


def _refusal(msg):
    """The BackendError an ERROR body stands for (its retry hint becomes Retry-After)."""
    err = protocol.decode_error(bytes(msg.payload))
    retry = err.retry_after or 1.0
    if err.code == ErrorCode.OVERLOADED:
        return Overloaded(err.detail, retry_after=retry)
    if err.code == ErrorCode.UNAVAILABLE:
        return Unavailable(err.detail, retry_after=retry)
    if err.code == ErrorCode.WORKER_DIED:
        return GenerationFailed(f"the worker running this request died: {err.detail} (a request in flight at "
                                f"{MAX_DEATHS} worker deaths is not tried again: poison-pill rule)")
    return GenerationFailed(err.detail or f"request failed ({err.code.name})")


class RingBackend:
    """One per front process; thread-safe for waitress's worker threads."""

    def __init__(self, layout, front, chat_templates=None):
        self.layout, self.front, self.tables = layout, front, layout.tables
        self.chat_templates = chat_templates or {}  # served name -> --chat-template source
        self._out = layout.to_sup[front].sender()
        self._out_lock = threading.Lock()
        self._mux = Mux([layout.from_sup[front].receiver()]
                        + [layout.die_to_front[d][front].receiver() for d in range(layout.n_dies)])
        self._streams, self._lock = {}, threading.Lock()
        # ids start at this incarnation's birth in microseconds: a respawned front must not reuse the ids
        # of its predecessor, whose late frames may still sit in this front's rings
        self._ids = itertools.count(time.monotonic_ns() // 1000 + 1)
        self._served = {}
        self._open_lock = threading.Lock()
        self._thread = None
        self.draining = False

    def active(self):
        """Streams not yet finished."""
        return len(self._streams)

    def end_all(self, reason):
        """End every stream still running (the drain ran out): each raises Unavailable to its reader."""
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.events.put(Shutdown(reason))

    def start(self):
        self._thread = threading.Thread(target=self._pump, name="ring-pump", daemon=True)
        self._thread.start()
        threading.Thread(target=self._prepare, name="served-prepare", daemon=True).start()

    def _prepare(self):
        """Open each new slot's tokenizer and template while its worker still loads the weights (a large
        vocabulary takes a fraction of a second to read), and run both once so their lazy parts
        (regexes, the compiled template) are ready: the first request neither waits for them nor
        shares the front's GIL with them, and costs what the tenth does."""
        tried = set()
        while True:
            for slot, rec in self.tables.live_slots():
                key = (slot, int(rec["serial"]))
                if rec["state"] not in (SLOT_LOADING, SLOT_LOADED) or key in tried:
                    continue
                tried.add(key)
                try:
                    self._opened(slot, rec).prompts.chat([{"role": "user", "content": "Hello, world."}])
                except Exception as e:  # a request opening it again gets the typed error, for its client
                    print(f"pantheon-front {self.front}: preparing slot {slot}: {type(e).__name__}: {e}",
                          file=sys.stderr, flush=True)
            time.sleep(PREPARE_INTERVAL_S)

    def _pump(self):
        while True:
            got = self._mux.receive(0.5)
            if got is None:
                continue
            msg = got[1]
            stream = self._streams.get(msg.request_id)
            if stream is None:
                continue
            stream.events.put(msg)
            if msg.kind == Kind.ERROR or (msg.kind == Kind.DONE and _final(msg)):
                stream.ended = True
                if stream.cancelled:  # nobody will read further: drop the registration now
                    self.forget(msg.request_id)

    def send(self, kind, rid, payload):
        with self._out_lock:
            self._out.send(kind, rid, 0, payload, timeout=5.0)

    def forget(self, rid):
        with self._lock:
            self._streams.pop(rid, None)

    def register(self, rid, stream):
        with self._lock:
            self._streams[rid] = stream

    def new_id(self):
        return protocol.request_id(self.front, next(self._ids))

    def _slot_of(self, name):
        live = [(i, rec) for i, rec in self.tables.live_slots()]
        if len(live) == 1:
            return live[0]
        for i, rec in live:
            if text(rec["name"]) == name:
                return i, rec
        raise UnknownModel(f"model {name!r} is not served here; see GET /v1/models")

    def served(self, name):
        return self._served_slot(*self._slot_of(name))

    def _served_slot(self, slot, rec):
        """Tokenizer and template of a slot, opened once per slot version; 503 unless it is loaded."""
        if rec["state"] == SLOT_LOADING:
            raise Unavailable(f"model {text(rec['name'])!r} is still loading", retry_after=2.0)
        if rec["state"] != SLOT_LOADED:
            raise Unavailable(f"model {text(rec['name'])!r} is {SLOT_STATES[rec['state']]}", retry_after=5.0)
        return self._opened(slot, rec)

    def _opened(self, slot, rec):
        """Open the tokenizer and template of a slot's placement once; a request meeting the prepare
        thread at work waits for its copy rather than opening a second."""
        key = (slot, int(rec["serial"]))
        with self._open_lock:
            if key not in self._served:
                for old in [k for k in self._served if k[0] == slot]:  # an earlier model of the slot
                    del self._served[old]
                self._served[key] = _open_served(rec, self.chat_templates.get(text(rec["name"])))
            return self._served[key]

    def _context(self, slot, rec):
        """The context a request gets: the cap clamped to the model's training context once loaded
        (what the 400 context_over_budget judges by), the cap before."""
        if rec["state"] != SLOT_LOADED:
            return int(rec["ctx_cap"])
        return self._served_slot(slot, rec).n_ctx

    def generate(self, req):
        if self.draining:
            raise Unavailable("the server is shutting down", retry_after=5.0)
        slot, rec = self._slot_of(req.model)
        served = self._served_slot(slot, rec)
        core.admit(served, req)
        job = protocol.Job(slot, session=session_hash(req.session), grammar=req.grammar or "",
                           **core.generation(req, served, int(rec["reasoning_budget"])))
        stream = RingStream(self, job)
        stream.submit()
        stream.wait_accepted()
        return stream

    def _live_replicas(self, rec):
        dies = self.tables.dies
        return sum(1 for d in range(self.layout.n_dies) if int(rec["dies"]) >> d & 1
                   and dies[d]["state"] == DIE_UP)

    def models(self):
        out = []
        for slot, rec in self.tables.live_slots():
            out.append(ModelInfo(text(rec["name"]), SLOT_STATES[rec["state"]], self._live_replicas(rec),
                                 self._context(slot, rec), int(rec["created"]),
                                 {"path": text(rec["path"]), "reason": text(rec["reason"])}))
        return out

    def health(self):
        """The /health body every backend gives, with every die's state (a FAILED die says so)."""
        dies = {d.name: DIE_STATES[self.tables.dies[i]["state"]] for i, d in enumerate(self.layout.die_list or ())}
        return core.health(self.models(), dies, draining=self.draining,
                           pressure=PRESSURE_LEVELS[self.tables.instance[0]["pressure"]])

    def metrics(self):
        inst = self.tables.instance[0]
        return self.layout.metrics.render(self.layout.metrics_rows) + pressure_lines(
            inst["pressure"], inst["ram_available"], inst["ram_total"])


def _open_served(rec, template=None):
    """Tokenizer, template and context of a slot, from its GGUF metadata or HF tokenizer files (no
    weights touched); `template` (--chat-template) overrides the model's."""
    tok, meta, cfg = open_text(text(rec["path"]), text(rec["config"]) or None)
    n_ctx = context_size(int(rec["ctx_cap"]), cfg.n_ctx_train)
    return core.served_model(text(rec["name"]), meta, n_ctx, tok, template, int(rec["batch_slots"]))
