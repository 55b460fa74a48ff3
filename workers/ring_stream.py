"""One request's events over the rings, resubmitted as continuations when the worker running it dies."""

import array
import dataclasses
import queue
import time

import numpy as np

from ipc.errors import FrameError
from pantheon.serve.http.backend import (Embedding, Finished, GenerationFailed, JobTooLarge, Overloaded,
                                         PromptLogprobs, Tokens, Unavailable)
from workers import protocol
from workers.protocol import ErrorCode, Kind

ACK_TIMEOUT_S = 30.0
MAX_DEATHS = 2  # poison-pill rule: a choice in flight at this many worker deaths is not tried again
RECOVER_S = 30.0  # how long a request waits for a replica to come back after its worker died
RETRY_NAP_S = 0.25


@dataclasses.dataclass(frozen=True)
class Shutdown:
    """Put on a stream's queue when the front stops: the stream ends with an error event and [DONE]."""

    reason: str


@dataclasses.dataclass
class Attempt:
    """One submission under one request id: frame choice i is the request's choice `choices[i]`, and its
    tokens are numbered after `offsets[i]` (what that choice had delivered when the attempt was sent)."""

    choices: tuple
    offsets: tuple
    deaths: int = 0  # worker deaths its choices were in flight at, over the attempts before it
    recover_until: float = 0.0  # while a die restarts, UNAVAILABLE answers are retried until then
    ended: bool = False  # the pump has routed its DONE or ERROR


class RingStream:
    """Events of one request as they arrive on the front's inbound rings.

    When the worker running it dies, the stream resubmits (new request ids, so late frames of the dead
    attempt are dropped) the prompt plus every token already delivered, and numbers the continuation
    after them: the client sees one unbroken stream, no token twice, none missing. Choices of an n > 1
    request that have started continue one by one, each as its own single-choice continuation with
    the seed the die gave it.
    """

    def __init__(self, backend, job):
        self.backend, self.job = backend, job
        self.attempts = {}  # request id -> Attempt, for every attempt still running
        self.events = queue.Queue()
        self.sent = [[] for _ in range(job.n)]  # per choice: token ids delivered to the client, in order
        self.finished = set()  # choices whose end was delivered
        self.stopped = set()  # choices cancelled alone
        self.cancelled = False
        self.replica = None
        self.embedded = False  # an embedding job's vector was delivered
        self.vector = array.array("f")  # its values received so far, in order
        self.scored = 1  # the prompt position of the next prompt logprob to deliver (nothing scores the first)
        self._early = []

    def submit(self, choices=None, deaths=0, recover_until=0.0):
        """Send `choices` (all of them by default) under a fresh request id; returns that id."""
        choices = tuple(range(self.job.n)) if choices is None else choices
        payload = protocol.encode_job(self._job(choices))  # before registering: a refused job leaves nothing
        if len(payload) > self.backend.max_job:
            raise JobTooLarge(f"the request's job is {len(payload)} bytes, over the {self.backend.max_job} bytes "
                              "one job may take to a die: its grammar, schema or logit_bias is too large")
        rid = self.backend.new_id()
        self.attempts[rid] = Attempt(choices, tuple(len(self.sent[c]) for c in choices), deaths, recover_until)
        self.backend.register(rid, self)
        try:
            self.backend.send(Kind.SUBMIT, rid, payload)
        except BaseException:
            self._drop(rid)
            raise
        return rid

    def _job(self, choices):
        """Several choices travel together only before any delivered a token; one is continued after
        what it delivered, as choice 0 of a job of its own."""
        if len(choices) > 1:
            return self.job
        c = choices[0]
        job = self.job if self.job.n == 1 else protocol.one_choice(self.job, c)
        return protocol.continuation(job, self.sent[c]) if self.sent[c] else job

    def _drop(self, rid):
        self.attempts.pop(rid, None)
        self.backend.forget(rid)

    def note_end(self, rid):
        """The pump routed the last frame of attempt `rid`; once cancelled, nobody reads on: forget it."""
        attempt = self.attempts.get(rid)
        if attempt is not None:
            attempt.ended = True
        if self.cancelled:
            self.backend.forget(rid)

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
                self._drop(msg.request_id)
                raise _refusal(msg)

    def _next(self, timeout=None, early=True):
        """The next message of a running attempt (frames of an abandoned attempt are skipped)."""
        while early and self._early:
            msg = self._early.pop(0)
            if msg.request_id in self.attempts:
                return msg
        while True:
            try:
                msg = self.events.get(timeout=timeout)
            except queue.Empty:
                self._forget_all()
                raise Unavailable("the supervisor did not answer in time", retry_after=1.0) from None
            if isinstance(msg, Shutdown):
                self._forget_all()
                raise Unavailable(msg.reason, retry_after=5.0)
            if msg.request_id in self.attempts:
                return msg

    def _forget_all(self):
        for rid in list(self.attempts):
            self._drop(rid)

    def _note_replica(self, msg):
        die = protocol.decode_accepted(bytes(msg.payload))
        if die < self.backend.layout.n_dies:
            self.replica = self.backend.layout.metrics.dies[die]

    def _recover(self, msg):
        """After WORKER_DIED (or no replica while recovering): resubmit the attempt's running choices;
        False when out of time or tries."""
        attempt = self.attempts[msg.request_id]
        code = protocol.decode_error(bytes(msg.payload)).code
        died = code == ErrorCode.WORKER_DIED
        if died and (attempt.deaths + 1 >= MAX_DEATHS or self.cancelled):
            return False
        if not died and not (code == ErrorCode.UNAVAILABLE and time.monotonic() < attempt.recover_until):
            return False
        if not died:
            time.sleep(RETRY_NAP_S)  # the die is restarting: ask again shortly
        self._drop(msg.request_id)
        until = time.monotonic() + RECOVER_S if died else attempt.recover_until
        for part in self._parts(attempt):
            self.submit(part, attempt.deaths + died, until)
        return True

    def _parts(self, attempt):
        """The attempt's choices still running, as the attempts that continue them: all together while
        none has delivered a token (they share one prompt prefill), else one attempt each."""
        running = tuple(c for c in attempt.choices if c not in self.finished and c not in self.stopped)
        if len(running) > 1 and running == attempt.choices and not any(self.sent[c] for c in running):
            return [running]
        return [(c,) for c in running]

    def __iter__(self):
        """Resumable (every message is taken off the queue one at a time), so a consumer that stops at
        a stop string and iterates again still receives the DONE behind it. Request ids are forgotten
        only at their end, never when an iterator is dropped."""
        while len(self.finished) < self.job.n:
            msg = self._next()
            attempt = self.attempts[msg.request_id]
            if msg.kind == Kind.TOKENS:
                yield from self._token(msg, attempt)
            elif msg.kind == Kind.EMBEDDING:
                yield from self._embedding(msg)
            elif msg.kind == Kind.PROMPT_LOGPROBS:
                yield from self._prompt_scores(msg)
            elif msg.kind == Kind.ACCEPTED:
                self._note_replica(msg)
            elif msg.kind == Kind.DONE:
                yield from self._done(msg, attempt)
            elif msg.kind == Kind.ERROR:
                yield from self._error(msg, attempt)

    def _error(self, msg, attempt):
        """An attempt ended without its DONE: finished as it was, continued elsewhere, or the end."""
        if self._all_sent(attempt):
            self._drop(msg.request_id)
            yield from self._end(attempt.choices, "length")  # died after the last token
            return
        if not self._recover(msg):
            self._forget_all()
            raise _refusal(msg)
        yield from self._end([c for c in attempt.choices if c in self.stopped], "abort")  # cancelled alone

    def _token(self, msg, attempt):
        token, scored, i, cached = protocol.decode_token(bytes(msg.payload))
        if i >= len(attempt.choices):
            return
        c = attempt.choices[i]
        seq = msg.seq + attempt.offsets[i]
        if seq == len(self.sent[c]) and c not in self.finished:
            self.sent[c].append(token)
            n = len(self.job.prompt)  # a continuation's own prompt also holds the tokens already sent
            yield Tokens((token,), seq, () if scored is None else (scored,), c, n, min(cached, n))

    def _prompt_scores(self, msg):
        """Scored prompt tokens not delivered yet (a job resubmitted whole scores its prompt again)."""
        scores = protocol.decode_prompt_scores(bytes(msg.payload))
        skip = self.scored - msg.seq
        if 0 <= skip < len(scores):
            self.scored += len(scores) - skip
            yield PromptLogprobs(msg.seq + skip, scores[skip:])

    def _embedding(self, msg):
        """Pieces in order; a resubmitted job sends them again from the first, and those held are skipped.
        The vector goes out once, whole."""
        total, values = protocol.decode_embedding(bytes(msg.payload))
        if self.embedded or msg.seq != len(self.vector):
            return
        self.vector.extend(values)
        if len(self.vector) >= total:
            self.embedded = True
            yield Embedding(np.frombuffer(self.vector, np.float32).copy())  # [total]

    def _done(self, msg, attempt):
        done, final = protocol.decode_done(bytes(msg.payload))
        if final:
            self._drop(msg.request_id)
        if done.choice < len(attempt.choices) and attempt.choices[done.choice] not in self.finished:
            c = attempt.choices[done.choice]
            self.finished.add(c)
            yield Finished(done.reason, len(self.job.prompt), done.cached_tokens, len(self.sent[c]), c,
                           done.stop_token)
        if final:
            yield from self._end(attempt.choices, "abort")  # a choice the die never reported (it ended unstarted)

    def _end(self, choices, reason):
        for c in choices:
            if c not in self.finished:
                self.finished.add(c)
                yield Finished(reason, len(self.job.prompt), 0, len(self.sent[c]), c)

    def _all_sent(self, attempt):
        """Every choice of the attempt still running has delivered max_tokens (an embedding: its vector): a
        death now lost nothing."""
        if self.job.embed is not None:
            return self.embedded
        return all(len(self.sent[c]) >= self.job.max_tokens for c in attempt.choices if c not in self.finished)

    def cancel(self, choice=None):
        """Stop the generation (or one choice of it); a request id is forgotten once its final DONE has
        arrived (see the pump)."""
        if self.cancelled or (choice is not None and (choice in self.stopped or choice in self.finished)):
            return
        if choice is not None and self.job.n > 1:
            self.stopped.add(choice)
            for rid, attempt in list(self.attempts.items()):
                if choice in attempt.choices:
                    alone = len(attempt.choices) == 1
                    self.backend.send(Kind.CANCEL, rid, b"" if alone else protocol.encode_cancel(
                        attempt.choices.index(choice)))
            return
        self.cancelled = True
        for rid, attempt in list(self.attempts.items()):
            self.backend.send(Kind.CANCEL, rid, b"")
            if attempt.ended:
                self.backend.forget(rid)


def final_frame(msg):
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
