"""The step engine a server loop drives: add requests, abort them, step, collect token events."""

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Optional

from pantheon.errors import ContextOverflow, EngineError
from pantheon.engine.logprobs import MAX_TOP, TokenLogprob, token_logprob
from pantheon.engine.sampler import Sampler, SamplingParams
from pantheon.engine.sizes import PREFILL_CHUNK


@dataclass(frozen=True)
class EngineConfig:
    """n_ctx: tokens per sequence; max_batch: sequences decoded together; max_sessions: kept KV caches;
    prefill_chunk: prompt tokens computed per step, so long prompts do not stall running decodes."""

    n_ctx: int = 2048
    max_batch: int = 4
    max_sessions: int = 8
    prefill_chunk: int = PREFILL_CHUNK


@dataclass(frozen=True)
class Request:
    id: int
    prompt: tuple
    max_tokens: int = 128
    params: SamplingParams = field(default_factory=SamplingParams)
    stop_ids: frozenset = frozenset()
    session: Optional[str] = None
    reasoning_budget: int = 0  # >0: after this many tokens inside <think>, force </think>
    think_ids: tuple = ()  # (open, close) token ids of <think> and </think>
    # a grammar (pantheon.text.grammar.Constraint, duck-typed): mask(logits) -> logits before each
    # sample, accept(token) after it, finished once the grammar allows nothing more
    constraint: object = field(default=None, compare=False)
    # None: no logprobs; k in 0..MAX_TOP: each TokenEvent carries the token's logprob and the k best
    # alternatives, from the raw logits (before bias, penalties, grammar, temperature and truncation)
    logprobs: Optional[int] = None


@dataclass(frozen=True)
class TokenEvent:
    id: int
    token: int
    index: int
    logprob: Optional[TokenLogprob] = None  # when the request asked for logprobs


@dataclass(frozen=True)
class DoneEvent:
    id: int
    reason: str  # "stop" | "length" | "abort" | "error"
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    message: str = ""


def _thinking_at_end(prompt, think_ids):
    """Whether the prompt leaves a <think> block open (templates that start the model thinking)."""
    if len(think_ids) != 2:
        return False
    opened = max((i for i, t in enumerate(prompt) if t == think_ids[0]), default=-1)
    closed = max((i for i, t in enumerate(prompt) if t == think_ids[1]), default=-1)
    return opened > closed


class _Sequence:
    """A running request: its cache, how far its prompt has been computed, what it has generated."""

    def __init__(self, req, cache, cached, sampler):
        self.req, self.cache, self.cached, self.sampler = req, cache, cached, sampler
        self.pos = cached
        self.generated = []
        self.thinking, self.think_count = _thinking_at_end(req.prompt, req.think_ids), 0

    def forced_token(self):
        """</think> once the reasoning budget is spent inside a think block, else None."""
        budget = self.req.reasoning_budget
        if budget and self.thinking and self.think_count >= budget:
            return self.req.think_ids[1]
        return None

    def track(self, tok):
        if not self.req.think_ids:
            return
        if tok == self.req.think_ids[0]:
            self.thinking, self.think_count = True, 0
        elif tok == self.req.think_ids[1]:
            self.thinking = False
        elif self.thinking:
            self.think_count += 1

    def next_input(self, budget):
        if self.pos < len(self.req.prompt):
            chunk = self.req.prompt[self.pos:self.pos + budget]
            return list(chunk), self.pos + len(chunk) == len(self.req.prompt)
        return [self.generated[-1]], True

    def done_event(self, reason, message=""):
        return DoneEvent(self.req.id, reason, len(self.req.prompt), self.cached, len(self.generated), message)


class Engine:
    """Continuous batching over one model: every step runs one forward for all running sequences."""

    def __init__(self, model, config=EngineConfig()):
        self.model, self.config = model, config
        self.waiting = deque()
        self.running = OrderedDict()
        self.sessions = OrderedDict()
        self._aborted = set()

    def add(self, req):
        """Queue `req`; EngineError (nothing queued) when it cannot fit or repeats a live id."""
        if not req.prompt:
            raise EngineError("prompt must contain at least one token")
        if len(req.prompt) >= self.config.n_ctx:
            raise ContextOverflow(f"prompt of {len(req.prompt)} tokens leaves no room in a context of {self.config.n_ctx}")
        if req.max_tokens < 1:
            raise EngineError(f"max_tokens must be at least 1, got {req.max_tokens}")
        if req.logprobs is not None and not 0 <= req.logprobs <= MAX_TOP:
            raise EngineError(f"logprobs must be in 0..{MAX_TOP}, got {req.logprobs}")
        if req.id in self.running or any(w.id == req.id for w in self.waiting):
            raise EngineError(f"request id {req.id} is already live")
        Sampler(req.params, self.model.config.n_vocab)
        self.waiting.append(req)

    def abort(self, req_id):
        """End `req_id` at the next step with reason "abort"; unknown ids are ignored."""
        self._aborted.add(req_id)

    @property
    def has_work(self):
        return bool(self.waiting or self.running or self._aborted)

    def step(self):
        """One forward over every running sequence; returns the TokenEvents and DoneEvents it made."""
        events = self._reap_aborted()
        self._admit()
        if self.running:
            events += self._advance()
        return events

    def _reap_aborted(self):
        events = []
        for req in [r for r in self.waiting if r.id in self._aborted]:
            self.waiting.remove(req)
            events.append(DoneEvent(req.id, "abort", len(req.prompt), 0, 0))
        for rid in [r for r in self.running if r in self._aborted]:
            events.append(self._finish(self.running[rid], "abort"))
        self._aborted.clear()
        return events

    def _admit(self):
        while self.waiting and len(self.running) < self.config.max_batch:
            req = self.waiting.popleft()
            cache, cached = self._cache_for(req)
            self.running[req.id] = _Sequence(req, cache, cached, Sampler(req.params, self.model.config.n_vocab))

    def _cache_for(self, req):
        """A session's stored cache cut to the common prefix (at least one token left to run), or a new one."""
        cache = self.sessions.pop(req.session, None) if req.session is not None else None
        if cache is None:
            return self.model.new_cache(self.config.n_ctx), 0
        keep = min(cache.common_prefix(req.prompt), len(req.prompt) - 1)
        cache.truncate(keep)
        return cache, keep

    def _advance(self):
        budget = self.config.prefill_chunk
        plan = []
        for seq in self.running.values():
            toks, last = seq.next_input(max(budget, 1))
            budget -= len(toks) if len(toks) > 1 else 0
            plan.append((seq, toks, last))
        logits = self.model.forward([(s.cache, t) for s, t, _ in plan])
        events = []
        for (seq, toks, last), row in zip(plan, logits):
            seq.pos += len(toks) if seq.pos < len(seq.req.prompt) else 0
            if last:
                events += self._emit(seq, row[-1])
        return events

    def _emit(self, seq, logits):
        raw = logits  # logprobs are the model's own distribution, before any mask or bias
        grammar = seq.req.constraint
        tok = seq.forced_token()
        if tok is None:
            if grammar is not None:
                logits = grammar.mask(logits)  # [n_vocab], -inf where the grammar forbids
            try:
                tok = seq.sampler.sample(logits, list(seq.req.prompt) + seq.generated)
            except Exception as e:  # this request's problem only: the batch and the die carry on
                return [self._finish(seq, "error", f"sampling failed: {type(e).__name__}: {e}")]
        if tok in seq.req.stop_ids:
            return [self._finish(seq, "stop")]
        seq.track(tok)
        seq.generated.append(tok)
        scored = None if seq.req.logprobs is None else token_logprob(raw, tok, seq.req.logprobs)
        events = [TokenEvent(seq.req.id, tok, len(seq.generated) - 1, logprob=scored)]
        if grammar is not None:
            grammar.accept(tok)
            if grammar.finished:
                return events + [self._finish(seq, "stop")]
        if len(seq.generated) >= seq.req.max_tokens or len(seq.cache) + 1 >= self.config.n_ctx:
            events.append(self._finish(seq, "length"))
        return events

    def _finish(self, seq, reason, message=""):
        del self.running[seq.req.id]
        if seq.req.session is not None and reason != "error":
            self.sessions[seq.req.session] = seq.cache
            while len(self.sessions) > self.config.max_sessions:
                self.sessions.popitem(last=False)
        return seq.done_event(reason, message)

    def fail_all(self, message):
        """DoneEvents with reason "error" for every request (after a step raised): the engine starts clean."""
        events = [DoneEvent(r.id, "error", len(r.prompt), 0, 0, message) for r in self.waiting]
        events += [seq.done_event("error", message) for seq in self.running.values()]
        self.waiting.clear()
        self.running.clear()
        self._aborted.clear()
        return events
