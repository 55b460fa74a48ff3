"""The step engine a server loop drives: add requests, abort them, step, collect token events."""

import dataclasses
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from pantheon.errors import ContextOverflow, EngineError
from pantheon.engine.logprobs import MAX_TOP, TokenLogprob, token_logprob
from pantheon.engine.sampled_probs import sample_scored
from pantheon.engine.bad_words import banned_next
from pantheon.engine.classifier import load_classifier
from pantheon.engine.pooling import Pool
from pantheon.engine.prefix import PrefixStore
from pantheon.engine.sampler import Sampler, SamplingParams, without
from pantheon.engine.sizes import PREFILL_CHUNK, SCORED_LOGITS_BYTES
from pantheon.gguf.config import EMBED_KINDS

_SEED_MOD = 2**64


@dataclass(frozen=True)
class EngineConfig:
    """n_ctx: tokens per sequence; max_batch: sequences decoded together (a request's n choices count
    n); max_sessions: kept KV caches (sessions' and the automatic prefix cache's together);
    prefill_chunk: prompt tokens computed per step, so long prompts do not stall running decodes."""

    n_ctx: int = 2048
    max_batch: int = 4
    max_sessions: int = 8
    prefill_chunk: int = PREFILL_CHUNK


@dataclass(frozen=True)
class Request:
    id: int
    prompt: tuple
    max_tokens: int = 128  # 0: only compute the prompt into the cache (llama-server's n_predict 0)
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
    # with logprobs: the distribution the sampler drew from instead (its survivors after the filters and the
    # temperature; llama-server's post_sampling_probs; pantheon.engine.sampled_probs)
    post_sampling: bool = False
    # shares no kept KV cache: starts from a fresh one and leaves its own to no later request (vLLM's cache_salt
    # isolation, llama-server's cache_prompt false)
    private: bool = False
    # choices sampled from one prompt prefill: choice i > 0 starts from a copy of choice 0's prompt KV,
    # with seed + i (a fork() of the constraint, if any)
    n: int = 1
    # None: a generation; a pooling in POOLINGS: an embedding (max_tokens 0): the prompt's final normed
    # hidden states pooled into one EmbeddingEvent, then a DoneEvent, nothing sampled; "rank": a reranker's
    # scores (its classification head over the row it reads) in the EmbeddingEvent instead; "none": every
    # position's state
    embed: Optional[str] = None
    # None: no prompt logprobs; k in 0..MAX_TOP: each prompt token after the first is scored as it is
    # computed (PromptLogprobsEvents, before the first token): OpenAI's echo with logprobs
    prompt_logprobs: Optional[int] = None


@dataclass(frozen=True)
class TokenEvent:
    id: int
    token: int
    index: int
    logprob: Optional[TokenLogprob] = None  # when the request asked for logprobs
    choice: int = 0
    cached: int = 0  # prompt tokens this choice took from a kept cache (known from its first token on)


@dataclass(frozen=True)
class PromptLogprobsEvent:
    id: int
    start: int  # the prompt position of the first scored token (>= 1: nothing predicts the first)
    scores: tuple  # TokenLogprob per prompt token from `start` on, from the logits before it


@dataclass(frozen=True, eq=False)
class EmbeddingEvent:
    id: int
    vector: np.ndarray  # float32 [dim]: pooled, not normalized; [positions, dim] for pooling none


@dataclass(frozen=True)
class DoneEvent:
    id: int
    reason: str  # "stop" | "length" | "abort" | "error"
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    message: str = ""
    choice: int = 0
    final: bool = True  # the request's last DoneEvent (every choice has ended); "error" ends them all
    stop_token: int = -1  # the end token that stopped the choice ("stop" on a token), else -1


def _thinking_at_end(prompt, think_ids):
    """Whether the prompt leaves a <think> block open (templates that start the model thinking)."""
    if len(think_ids) != 2:
        return False
    opened = max((i for i, t in enumerate(prompt) if t == think_ids[0]), default=-1)
    closed = max((i for i, t in enumerate(prompt) if t == think_ids[1]), default=-1)
    return opened > closed


class _Sequence:
    """A running request: its cache, how far its prompt has been computed, what it has generated."""

    def __init__(self, req, cache, cached, sampler, choice=0, constraint=None, pool=None):
        self.req, self.cache, self.cached, self.sampler = req, cache, cached, sampler
        self.choice, self.constraint = choice, constraint
        self.forks = req.n - 1 if choice == 0 else 0  # choices still to start from this prompt's KV
        self.pos = cached
        self.generated = []
        self.thinking, self.think_count = _thinking_at_end(req.prompt, req.think_ids), 0
        self.pool = pool  # an embedding's (or a rerank's) Pool

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

    @property
    def key(self):
        return self.req.id, self.choice

    def next_input(self, budget):
        if self.pos < len(self.req.prompt):
            chunk = self.req.prompt[self.pos:self.pos + budget]
            return list(chunk), self.pos + len(chunk) == len(self.req.prompt)
        return [self.generated[-1]], True

    def done_event(self, reason, message="", final=True, stop_token=-1):
        return DoneEvent(self.req.id, reason, len(self.req.prompt), self.cached, len(self.generated), message,
                         self.choice, final, stop_token)


def _classifier(model):
    head = load_classifier(model.gguf.tensors, model.config)
    if head is None:
        raise EngineError("pooling type rank needs a classification head (cls.output.weight or cls.weight), "
                          "which this model's file lacks")
    return head


def _check_embedding(req, classifier):
    """EngineError unless `req` is a well-formed embedding (or, with `classifier`, rerank) request."""
    if req.embed not in EMBED_KINDS:
        raise EngineError(f"embed must be one of {', '.join(EMBED_KINDS)}, got {req.embed!r}")
    if req.embed == "rank" and classifier is None:
        raise EngineError("this model has no classification head (cls.output.weight): it cannot rank")
    if req.max_tokens != 0 or req.n != 1 or req.constraint is not None or (req.logprobs, req.prompt_logprobs) != (
            None, None):
        raise EngineError("an embedding request generates nothing: max_tokens 0, n 1, no grammar, no logprobs")


class Engine:
    """Continuous batching over one model: every step runs one forward for all running sequences.

    Finished sequences' caches stay in a PrefixStore: a session's next turn takes its own back, and
    any new prompt starts from a copy of the longest cached prefix (automatic prefix caching).
    """

    def __init__(self, model, config=EngineConfig()):
        self.model, self.config = model, config
        self.waiting = deque()
        self.running = OrderedDict()  # (request id, choice) -> _Sequence
        self.store = PrefixStore(config.max_sessions)
        self.prefilled = 0  # prompt tokens run through the model (not those served from a cache or a fork)
        self._aborted = set()  # (request id, choice), choice None for every choice of the request
        # a reranker's head, read with the model (a bad or missing one fails its load): what rank requests run
        self.classifier = _classifier(model) if model.config.pooling == "rank" else None
        self.scored_rows = max(1, SCORED_LOGITS_BYTES // (4 * model.config.n_vocab))  # a scoring chunk's cap

    def add(self, req):
        """Queue `req`; EngineError (nothing queued) when it cannot fit or repeats a live id."""
        if not req.prompt:
            raise EngineError("prompt must contain at least one token")
        if len(req.prompt) >= self.config.n_ctx:
            raise ContextOverflow(f"prompt of {len(req.prompt)} tokens leaves no room in a context of "
                                  f"{self.config.n_ctx}")
        if req.max_tokens < 0:
            raise EngineError(f"max_tokens must be at least 0, got {req.max_tokens}")
        if req.embed is not None:
            _check_embedding(req, self.classifier)
        for name in ("logprobs", "prompt_logprobs"):
            k = getattr(req, name)
            if k is not None and not 0 <= k <= MAX_TOP:
                raise EngineError(f"{name} must be in 0..{MAX_TOP}, got {k}")
        if req.post_sampling and (req.params.mirostat or req.params.infill):
            raise EngineError("post-sampling probabilities are not made by mirostat or the infill sampler")
        if not 1 <= req.n <= self.config.max_batch:
            raise EngineError(f"n must be between 1 and {self.config.max_batch} (the sequences this model "
                              f"decodes together), got {req.n}")
        if any(k[0] == req.id for k in self.running) or any(w.id == req.id for w in self.waiting):
            raise EngineError(f"request id {req.id} is already live")
        Sampler(req.params, self.model.config.n_vocab)
        self.waiting.append(req)

    def abort(self, req_id, choice=None):
        """End `req_id` (only its choice `choice`, when given) at the next step with reason "abort";
        unknown ids are ignored, and so is a choice that has not started (its request is still queued or
        prefilling): the caller drops that choice's tokens instead."""
        self._aborted.add((req_id, choice))

    def drop_cached(self):
        """Memory pressure: every kept cache that no running sequence uses goes."""
        self.store.clear()

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
        for req in [r for r in self.waiting if (r.id, None) in self._aborted]:
            self.waiting.remove(req)
            events += [DoneEvent(req.id, "abort", len(req.prompt), 0, 0, "", i, i == req.n - 1) for i in range(req.n)]
        for key in [k for k in self.running if (k[0], None) in self._aborted or k in self._aborted]:
            events += self._finish(self.running[key], "abort")
        self._aborted.clear()
        return events

    def _admit(self):
        while self.waiting and len(self.running) + self.waiting[0].n <= self.config.max_batch:
            req = self.waiting.popleft()
            cache, cached = self._cache_for(req)
            pool = Pool(self._row(req)) if req.embed is not None else None
            seq = _Sequence(req, cache, cached, self._sampler(req, req.params), constraint=req.constraint, pool=pool)
            self.running[seq.key] = seq

    def _row(self, req):
        """How `req`'s hidden states are pooled: its own pooling, or for a rerank the row its head reads."""
        return self.classifier.row if req.embed == "rank" else req.embed

    def _sampler(self, req, params):
        """A sequence's sampler; the infill sampler also reads token texts (the tokenizer is built then)."""
        piece = self.model.tokenizer.token_bytes if params.infill else None
        return Sampler(params, self.model.config.n_vocab, piece, req.stop_ids)

    def _cache_for(self, req):
        """(cache, tokens already in it): the session's own cache cut to the common prefix, else a copy of
        the longest kept prefix, else a new cache; at least one prompt token is left to run."""
        if self._row(req) in ("mean", "cls", "none") or req.prompt_logprobs is not None or req.private:
            return self._new_cache(), 0  # these read every position's output (or share nothing): every row runs
        cache = self.store.take_session(req.session) if req.session is not None else None
        if cache is not None:
            keep = min(cache.common_prefix(req.prompt), len(req.prompt) - 1)
            cache.truncate(keep)
            return cache, keep
        src, shared = self.store.match(req.prompt)
        keep = min(shared, len(req.prompt) - 1)
        try:
            cache = self._new_cache(spare=src)
        except (EngineError, MemoryError):
            if src is None:
                raise
            cache = self.store.take(src)  # no room for a copy: the sequence extends the kept cache itself
            cache.truncate(keep)
            return cache, keep
        if keep > 0:
            cache.copy_from(src, keep)
        return cache, keep

    def _new_cache(self, spare=None):
        """A fresh cache; while the die has no room for one, kept caches go, least recently used first."""
        while True:
            try:
                return self.model.new_cache(self.config.n_ctx)
            except (EngineError, MemoryError):
                if not self.store.evict_one(spare):
                    raise

    def _fork(self, seq):
        """Choices 1..n-1 of `seq`'s request: each starts from a copy of its prompt KV, computed once."""
        forks, count = [], seq.forks
        seq.forks = 0
        for choice in range(1, count + 1):
            cache = self._new_cache()
            cache.copy_from(seq.cache, len(seq.cache))
            grammar = seq.constraint.fork() if seq.constraint is not None else None
            sampler = self._sampler(seq.req, seq.req.params.for_choice(choice))
            fork = _Sequence(seq.req, cache, seq.cached, sampler, choice, grammar)
            fork.pos = seq.pos
            self.running[fork.key] = fork
            forks.append(fork)
        return forks

    def _advance(self):
        budget = self.config.prefill_chunk
        plan = []
        for seq in self.running.values():
            cap = self.scored_rows if seq.req.prompt_logprobs is not None else budget
            toks, last = seq.next_input(max(min(budget, cap), 1))
            budget -= len(toks) if len(toks) > 1 else 0
            plan.append((seq, toks, last))
        logits = self._forward(plan)
        events = []
        for (seq, toks, last), row in zip(plan, logits):
            if seq.req.prompt_logprobs is not None and seq.pos < len(seq.req.prompt):
                events += self._prompt_scores(seq, row)
            if seq.pos < len(seq.req.prompt):
                seq.pos += len(toks)
                self.prefilled += len(toks)
            if seq.req.embed is not None:
                events += self._embed(seq, row, last)
            elif last and seq.key in self.running and seq.req.max_tokens == 0:
                events += self._finish(seq, "length")  # only the prompt was asked for: it is in the cache now
            elif last and seq.key in self.running:  # a sibling's error may have ended it this step
                for s in [seq] + self._fork(seq):
                    events += self._emit(s, row[-1]) if s.key in self.running else []
        return events

    def _forward(self, plan):
        """One forward over the plan; only steps that need them ask for hidden states or every row's
        logits (a model that never embeds or scores a prompt need not know those keywords)."""
        segments = [(s.cache, t) for s, t, _ in plan]
        wants = {"hidden": [i for i, (s, _, _) in enumerate(plan) if s.req.embed is not None],
                 "every": [i for i, (s, _, _) in enumerate(plan)
                           if s.req.prompt_logprobs is not None and s.pos < len(s.req.prompt)]}
        return self.model.forward(segments, **{k: v for k, v in wants.items() if v})

    def _prompt_scores(self, seq, rows):
        """The chunk's prompt tokens scored by the logits before each (rows [len(chunk), n_vocab] at
        positions pos..): each row predicts the next prompt token, the prompt's last row none."""
        prompt, start = seq.req.prompt, seq.pos + 1
        scores = tuple(token_logprob(row, prompt[p], seq.req.prompt_logprobs, ranked=True)
                       for p, row in zip(range(start, len(prompt)), rows))
        return [PromptLogprobsEvent(seq.req.id, start, scores)] if scores else []

    def _embed(self, seq, rows, last):
        """Pool this step's rows; after the prompt's last chunk the vector goes out and the request ends."""
        seq.pool.add(rows)
        if not last or seq.key not in self.running:
            return []
        vector = seq.pool.vector()  # [dim], or [positions, dim] for pooling none
        if seq.req.embed == "rank":
            vector = self.classifier.scores(vector)  # [n_cls_out]
        return [EmbeddingEvent(seq.req.id, vector)] + self._finish(seq, "stop")

    def _emit(self, seq, logits):
        raw = logits  # logprobs are the model's own distribution, before any mask or bias
        grammar = seq.constraint
        tok = seq.forced_token()
        if tok is None:
            if grammar is not None:
                logits = grammar.mask(logits)  # [n_vocab], -inf where the grammar forbids
            if len(seq.generated) < seq.sampler.params.min_tokens and seq.req.stop_ids:
                logits = without(logits, seq.req.stop_ids)  # [n_vocab], min_tokens: no end yet
            if seq.sampler.params.bad_words:
                logits = without(logits, banned_next(seq.sampler.params.bad_words, seq.generated))  # [n_vocab]
            try:
                tok, scored = self._sample(seq, logits, raw)
            except Exception as e:  # this request's problem only: the batch and the die carry on
                return self._finish(seq, "error", f"sampling failed: {type(e).__name__}: {e}")
        elif seq.req.logprobs is not None:
            scored = TokenLogprob(tok, 0.0, ((tok, 0.0),)[:seq.req.logprobs]) if seq.req.post_sampling else \
                token_logprob(raw, tok, seq.req.logprobs)  # a forced token: the sampler had no say
        else:
            scored = None
        if tok in seq.req.stop_ids:
            return self._finish(seq, "stop", stop_token=tok)
        seq.track(tok)
        seq.generated.append(tok)
        events = [TokenEvent(seq.req.id, tok, len(seq.generated) - 1, scored, seq.choice, seq.cached)]
        if grammar is not None:
            grammar.accept(tok)
            if grammar.finished:
                return events + self._finish(seq, "stop")
        if len(seq.generated) >= seq.req.max_tokens or len(seq.cache) + 1 >= self.config.n_ctx:
            events += self._finish(seq, "length")
        return events

    @staticmethod
    def _sample(seq, logits, raw):
        """(token, its TokenLogprob or None): logprobs from the raw logits, or with post_sampling from the
        distribution the sampler drew from."""
        history, k = list(seq.req.prompt) + seq.generated, seq.req.logprobs
        if k is not None and seq.req.post_sampling:
            return sample_scored(seq.sampler, logits, history, k)
        tok = seq.sampler.sample(logits, history)
        return tok, None if k is None else token_logprob(raw, tok, k)

    def _finish(self, seq, reason, message="", stop_token=-1):
        """DoneEvents of `seq` (and of choices it had not started yet); the request's last is final."""
        del self.running[seq.key]
        if reason == "error":
            return self._fail_request(seq, message)
        if seq.choice == 0 and not seq.req.private:  # n choices share their prompt: one kept cache serves it
            self.store.put(seq.cache, seq.req.session)
        events = [seq.done_event(reason, final=False, stop_token=stop_token)]
        events += [DoneEvent(seq.req.id, reason, len(seq.req.prompt), seq.cached, 0, "", i, False)
                   for i in range(1, seq.forks + 1)]
        final = not any(k[0] == seq.req.id for k in self.running)
        return events[:-1] + [dataclasses.replace(events[-1], final=final)]

    def _fail_request(self, seq, message):
        """An error ends every choice of the request at once, in one DoneEvent (its caches are not kept)."""
        for key in [k for k in self.running if k[0] == seq.req.id]:
            del self.running[key]
        return [seq.done_event("error", message)]

    def fail_all(self, message):
        """DoneEvents with reason "error" for every request (after a step raised): the engine starts clean."""
        events = [DoneEvent(r.id, "error", len(r.prompt), 0, 0, message) for r in self.waiting]
        ended = set()
        for seq in self.running.values():
            if seq.req.id not in ended:
                ended.add(seq.req.id)
                events.append(seq.done_event("error", message))
        self.waiting.clear()
        self.running.clear()
        self._aborted.clear()
        return events
