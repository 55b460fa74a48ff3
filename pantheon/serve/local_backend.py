"""An in-process Backend: one engine thread per model, a bounded wait queue, streams over queues."""

import itertools
import math
import queue
import threading
import time
from collections import deque

import numpy as np

from pantheon.engine.scheduler import DoneEvent, EmbeddingEvent, Engine, EngineConfig, PromptLogprobsEvent, Request
from pantheon.errors import EngineError
from pantheon.serve import core
from pantheon.serve.model_card import model_card
from pantheon.serve.http.backend import (Embedding, Finished, GenerationFailed, ModelInfo, Overloaded,
                                         PromptLogprobs, Tokens, UnknownModel, Unavailable)
from pantheon.serve.metrics import Layout, Recorder
from pantheon.text.grammar import Constraint

_SERVICE_SMOOTHING = 0.2  # weight of the newest service time in the running mean
_DEFAULT_SERVICE_S = 1.0  # assumed before any generation has finished


class LocalStream:
    """Events of one generation, fed by its model's engine thread through a queue."""

    def __init__(self, runner, engine_request):
        self.runner, self.request = runner, engine_request
        self.events = queue.Queue()
        self.started = None  # monotonic time the engine admitted it
        self._cancelled = False
        self._stopped = set()  # choices cancelled alone
        self._ended = 0  # choices whose Finished was handed out
        self._done = False
        self._backlog = deque()

    def __iter__(self):
        """Resumable: events taken off the queue wait in `_backlog`, so a consumer that stops after a
        Tokens (a stop string matched) and iterates again still gets the Finished behind it."""
        while not self._done:
            if not self._backlog:
                self._backlog.append(self.events.get())
                while True:
                    try:
                        self._backlog.append(self.events.get_nowait())
                    except queue.Empty:
                        break
            yield self._next_event()

    def _next_event(self):
        """Consecutive token events of one choice become one Tokens, so a slow reader catches up in one go."""
        item = self._backlog.popleft()
        if isinstance(item, Tokens):
            ids, scores = list(item.ids), list(item.logprobs)
            while self._backlog and isinstance(self._backlog[0], Tokens) and self._backlog[0].choice == item.choice:
                more = self._backlog.popleft()
                ids += more.ids
                scores += more.logprobs
            return Tokens(tuple(ids), item.seq, tuple(scores), item.choice, item.prompt_tokens, item.cached_tokens)
        if isinstance(item, Exception):
            self._done = True
            raise item
        if isinstance(item, Finished):
            self._ended += 1
            self._done = self._ended == self.request.n
        return item

    def cancel(self, choice=None):
        if self._cancelled or choice in self._stopped:
            return
        if choice is None or self.request.n == 1:
            self._cancelled = True
            self.runner.commands.put(("cancel", (self, None)))
        else:
            self._stopped.add(choice)
            self.runner.commands.put(("cancel", (self, choice)))


def _card(model):
    """The ModelCard of a model opened from a file; None for one built in memory (no file to describe)."""
    files = getattr(model, "gguf", None)
    return None if files is None else model_card(files, model.config)


class _Runner:
    """One model: its engine, the thread that alone touches it, admission and service-time stats."""

    def __init__(self, name, model, config, max_concurrent, max_queue, recorder, template=None):
        self.name, self.model, self.config = name, model, config
        self.max_concurrent, self.max_queue, self.recorder = max_concurrent, max_queue, recorder
        self.served = core.served_model(name, model.chat_metadata, config.n_ctx, model.tokenizer, template,
                                        min(config.max_batch, max_concurrent), model.config,
                                        _card(model))
        self.commands = queue.Queue()
        self.state = "loaded"
        self.reason = ""  # why the model failed, for /health and /v1/models
        self.stats = {"completed": 0, "aborted": 0, "failed": 0, "running": 0, "queued": 0}
        self.mean_service_s = None
        self._lock = threading.Lock()
        self._load = 0  # accepted and not yet finished
        self._thread = None
        self._ids = itertools.count(1)

    # ---- called from HTTP threads ---------------------------------------------------------------

    def submit(self, req):
        fields = core.generation(req, self.served)
        fields["stop_ids"] = frozenset(fields["stop_ids"])
        constraint = Constraint(self.model.tokenizer, req.grammar) if req.grammar else None
        engine_req = Request(next(self._ids), session=req.session, constraint=constraint, **fields)
        stream = LocalStream(self, engine_req)
        with self._lock:
            if self.state != "loaded":
                raise Unavailable(f"model {self.name} is {self.state}", retry_after=5.0)
            if self._load + req.n > self.max_concurrent + self.max_queue:
                raise Overloaded(f"model {self.name} is at capacity: {self.max_concurrent} running, "
                                 f"{self.max_queue} waiting", self.retry_after())
            self._load += req.n  # each choice takes a place
            self._start_thread()
            self.commands.put(("submit", stream))
        self.recorder.queue_depth(self.name, max(0, self._load - self.max_concurrent))
        return stream

    def retry_after(self):
        """Seconds until a place is likely free: (waiting + 1) mean service times over the slots."""
        waiting = max(0, self._load - self.max_concurrent)
        mean = self.mean_service_s or _DEFAULT_SERVICE_S
        return max(1, math.ceil((waiting + 1) * mean / self.max_concurrent))

    def close(self):
        with self._lock:
            if self.state == "loaded":
                self.state = "unloading"
            thread = self._thread
            self.commands.put(("stop", None))
        if thread is not None:
            thread.join()

    def _start_thread(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"engine-{self.name}", daemon=True)
            self._thread.start()

    # ---- the engine thread ----------------------------------------------------------------------

    def _run(self):
        engine, pending, active = Engine(self.model, self.config), deque(), {}
        try:
            while self._take_commands(engine, pending, active):
                self._admit(engine, pending, active)
                if engine.has_work:
                    self._dispatch(engine.step(), active)
            self._fail(pending, active, Unavailable(f"model {self.name} is shutting down"))
        except Exception as exc:  # the engine broke: fail every request, report the model failed
            with self._lock:
                self.state, self.reason = "failed", f"engine of {self.name} failed: {exc}"
            self._fail(pending, active, GenerationFailed(f"engine of {self.name} failed: {exc}"))

    def _take_commands(self, engine, pending, active):
        """Apply queued commands; block only when there is nothing to step. False on stop."""
        block = not engine.has_work and not (pending and self._fits(pending[0], active))
        while True:
            try:
                kind, item = self.commands.get(block=block)
            except queue.Empty:
                return True
            block = False
            if kind == "stop":
                return False
            if kind == "submit":
                pending.append(item)
            else:
                self._cancel(engine, pending, active, *item)

    def _cancel(self, engine, pending, active, stream, choice):
        """A queued request leaves the queue when the whole of it is cancelled; a running one is aborted
        (one choice of it, or all); one choice of a queued request runs and its tokens are dropped."""
        if stream in pending and choice is None:
            pending.remove(stream)
            for i in range(stream.request.n):
                stream.events.put(Finished("abort", len(stream.request.prompt), 0, 0, i))
            self._finished(None, "abort", stream.request.n)
        elif stream.request.id in active:
            engine.abort(stream.request.id, choice)

    def _fits(self, stream, active):
        """Whether `stream`'s choices fit beside the running ones (each choice takes a place)."""
        return sum(s.request.n for s in active.values()) + stream.request.n <= self.max_concurrent

    def _admit(self, engine, pending, active):
        while pending and self._fits(pending[0], active):
            stream = pending.popleft()
            try:
                engine.add(stream.request)
            except EngineError as exc:
                stream.events.put(GenerationFailed(f"the engine refused the request: {exc}"))
                self._finished(None, "error", stream.request.n)
                continue
            stream.started = time.monotonic()
            active[stream.request.id] = stream
        self._gauges(pending, active)

    def _dispatch(self, events, active):
        for ev in events:
            stream = active.get(ev.id)
            if stream is None:
                continue
            if isinstance(ev, EmbeddingEvent):
                stream.events.put(Embedding(np.array(ev.vector, np.float32).ravel()))  # [dim], or every row's
                continue
            if isinstance(ev, PromptLogprobsEvent):
                stream.events.put(PromptLogprobs(ev.start, ev.scores))
                continue
            if not isinstance(ev, DoneEvent):
                stream.events.put(Tokens((ev.token,), ev.index, () if ev.logprob is None else (ev.logprob,),
                                         ev.choice, len(stream.request.prompt), ev.cached))
                continue
            if ev.reason == "error":
                stream.events.put(GenerationFailed(ev.message or "generation failed"))
            else:
                stream.events.put(Finished(ev.reason, ev.prompt_tokens, ev.cached_tokens, ev.completion_tokens,
                                           ev.choice, ev.stop_token))
            if ev.final:
                del active[ev.id]
                self._finished(stream.started, ev.reason, stream.request.n)
        self.stats["running"] = len(active)
        self.recorder.in_flight(self.name, len(active))

    def _finished(self, started, reason, places=1):
        with self._lock:
            self._load -= places
            if started is not None and reason in ("stop", "length"):
                took = time.monotonic() - started
                mean = self.mean_service_s
                self.mean_service_s = took if mean is None else mean + _SERVICE_SMOOTHING * (took - mean)
        key = {"stop": "completed", "length": "completed", "abort": "aborted"}.get(reason, "failed")
        self.stats[key] += 1
        self.recorder.queue_depth(self.name, max(0, self._load - self.max_concurrent))

    def _gauges(self, pending, active):
        self.stats["running"], self.stats["queued"] = len(active), len(pending)
        self.recorder.in_flight(self.name, len(active))

    def _fail(self, pending, active, error):
        with self._lock:
            while True:
                try:
                    kind, stream = self.commands.get_nowait()
                except queue.Empty:
                    break
                if kind == "submit":
                    pending.append(stream)
        for stream in list(pending) + list(active.values()):
            stream.events.put(error)
            self._finished(None, "error", stream.request.n)
        pending.clear()
        active.clear()
        self._gauges(pending, active)


class LocalBackend:
    """The Backend protocol over pantheon Models in this process (tests, single-process serving).

    models: {served name: pantheon Model}; engine_config: pantheon.engine.scheduler.EngineConfig shared by every
    model (its n_ctx is the served context); max_concurrent: generations running per model;
    max_queue: requests allowed to wait per model beyond those; metrics: a pantheon.serve.metrics.Recorder
    (default: a private one-row table); chat_templates: {served name: Jinja source} overriding a
    model's own template. Engine threads start on the first request.
    """

    def __init__(self, models, engine_config=EngineConfig(), max_concurrent=4, max_queue=16, metrics=None,
                 chat_templates=None):
        if not models:
            raise ValueError("LocalBackend needs at least one model")
        if max_concurrent < 1 or max_queue < 0:
            raise ValueError(f"max_concurrent must be >= 1 and max_queue >= 0, got {max_concurrent}, {max_queue}")
        if metrics is None:
            layout = Layout(models, dies=models)
            metrics = Recorder(layout, layout.table(1))
        self.recorder = metrics
        self.created = int(time.time())
        templates = chat_templates or {}
        self._runners = {name: _Runner(name, model, engine_config, max_concurrent, max_queue, metrics,
                                       templates.get(name)) for name, model in models.items()}

    def models(self):
        return [ModelInfo(r.name, r.state, 1, r.served.n_ctx, self.created,
                          {"max_concurrent": r.max_concurrent, "max_queue": r.max_queue, "reason": r.reason})
                for r in self._runners.values()]

    def served(self, name):
        return self._runner(name).served

    def generate(self, request):
        runner = self._runner(request.model)
        core.admit(runner.served, request)
        return runner.submit(request)

    def health(self):
        """The /health body every backend gives (pantheon.serve.core.health); no dies in this process."""
        return core.health(self.models())

    def metrics(self):
        return self.recorder.render()

    def stats(self):
        """Per model: state, running, queued, completed, aborted, failed counts and mean service time."""
        return {name: dict(r.stats, state=r.state, mean_service_s=r.mean_service_s)
                for name, r in self._runners.items()}

    def close(self):
        """Stop every engine thread; requests still in flight end with Unavailable."""
        for runner in self._runners.values():
            runner.close()

    def _runner(self, name):
        if len(self._runners) == 1:
            return next(iter(self._runners.values()))
        if name not in self._runners:
            raise UnknownModel(f"model {name!r} is not served; available: {', '.join(self._runners)}")
        return self._runners[name]
