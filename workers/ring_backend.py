"""The Backend the HTTP app uses inside a front process: requests out over rings, tokens back over rings."""

import hashlib
import itertools
import sys
import threading
import time

from ipc.mux import Mux
from pantheon.serve import core
from pantheon.serve.metrics import pressure_lines
from pantheon.serve.settings import context_size
from pantheon.serve.http.backend import ModelInfo, Unavailable, UnknownModel
from pantheon.serve.model_card import model_card
from pantheon.source import open_files, text_side
from workers import protocol
from workers.protocol import Kind
from workers.ring_stream import RingStream, Shutdown, final_frame
from workers.slots import die_names_of, with_pooling
from workers.tables import DIE_STATES, DIE_UP, PRESSURE_LEVELS, SLOT_LOADED, SLOT_LOADING, SLOT_STATES, text

PREPARE_INTERVAL_S = 0.2  # how often a front looks for newly loaded slots to open ahead of requests


def session_hash(session):
    """A stable nonzero 64-bit key for a session id (the supervisor routes on it, workers key caches)."""
    if not session:
        return 0
    return int.from_bytes(hashlib.blake2b(session.encode(), digest_size=8).digest(), "little") or 1


class RingBackend:
    """One per front process; thread-safe for waitress's worker threads."""

    def __init__(self, layout, front, chat_templates=None):
        self.layout, self.front, self.tables = layout, front, layout.tables
        self.chat_templates = chat_templates or {}  # served name -> --chat-template source
        self._out = layout.to_sup[front].sender()
        self.max_job = self._out.max_message  # bytes a SUBMIT body may take
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
            if msg.kind == Kind.ERROR or (msg.kind == Kind.DONE and final_frame(msg)):
                stream.note_end(msg.request_id)

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
                                 {"path": text(rec["path"]), "reason": text(rec["reason"]),
                                  "dies": die_names_of(rec, [d.name for d in self.layout.die_list or ()])}))
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
    files, cfg = open_files(text(rec["path"]), text(rec["config"]) or None, tensors=False)
    tok, meta = text_side(files)
    cfg = with_pooling(cfg, rec)
    n_ctx = context_size(int(rec["ctx_cap"]), cfg.n_ctx_train)
    return core.served_model(text(rec["name"]), meta, n_ctx, tok, template, int(rec["batch_slots"]), cfg,
                             model_card(files, cfg))
