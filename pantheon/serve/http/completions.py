"""POST /v1/chat/completions and /v1/completions: validate, build the prompt, generate, answer or stream."""

import copy
import time
from dataclasses import dataclass
from typing import Optional

from pantheon.serve.http import best_of, chat_plan, choices, json_body, sse, timings, truncation, validate
from pantheon.serve.http.budget import check_text_fits
from pantheon.serve.http.backend import BackendError, ContextOverBudget, GenerationRequest, UnknownModel
from pantheon.serve.http.disconnect import DisconnectWatch, disconnect_check
from pantheon.serve.http.errors import RequestError, error_body
from pantheon.serve.http.fim import fim_prompt
from pantheon.serve.http.generation import Generation
from pantheon.serve.http.keepalive import KeepAlive
from pantheon.serve.http.logprobs import TokenText
from pantheon.serve.http.shapes import FINGERPRINT, Envelope, total_usage
from pantheon.engine.sampler import SamplingParams
from pantheon.text import dry_breakers

SESSION_HEADER = "X-Session-Id"


@dataclass
class Options:
    """What the generation routes share: default_max_tokens None means "until the context is full"."""

    default_max_tokens: Optional[int] = 512
    body_limit: int = 16 * 2**20
    fingerprint: str = FINGERPRINT
    recorder: object = None  # pantheon.serve.metrics.Recorder of this process, or None
    watch: DisconnectWatch = None
    reasoning_format: str = "auto"  # --reasoning-format: "none" leaves <think> text in content
    responses: object = None  # pantheon.serve.response_store.ResponseStore, or None: no response is stored
    keepalive: float = 0.0  # seconds of silence after which an SSE stream gets a comment line (0: never)
    prefill_assistant: bool = True  # a final assistant message starts the reply (--no-prefill-assistant: off)


def resolve(backend, name):
    """The ServedModel for `name`; a missing name is a 400 when several models are served."""
    try:
        return backend.served(name)
    except UnknownModel:
        if name is None:
            raise RequestError("model: required when several models are served", param="model",
                               code="missing_required_parameter") from None
        raise


def generation_request(served, parsed, ids, session, default_max_tokens, grammar=None):
    """Budget check and clamp: prompt + 1 must fit n_ctx; max_tokens is cut to the room left."""
    n = len(ids)
    if n + 1 > served.n_ctx:
        raise ContextOverBudget(f"the prompt has {n} tokens; with at least one token to generate it does "
                                f"not fit the context of {served.n_ctx} tokens of model {served.name}", n, served.n_ctx)
    room = served.n_ctx - n
    wanted = {-1: room, None: default_max_tokens or room}.get(parsed.max_tokens, parsed.max_tokens)
    stops = frozenset(served.tokenizer.stop_ids) | _stop_tokens(parsed, served)  # (checks allowed_token_ids too)
    sampling = SamplingParams(**_with_breakers(_banned_eos(parsed, served.tokenizer.stop_ids), parsed, served),
                              bad_words=bad_word_ids(served.tokenizer, parsed.bad_words))
    sampling.validate(served.tokenizer.n_vocab)
    runs, field = max(parsed.n, parsed.best_of), "n" if parsed.best_of <= parsed.n else "best_of"
    if runs > served.max_choices:
        raise RequestError(f"{field}: model {served.name} runs at most {served.max_choices} choices per request (the "
                           f"sequences it decodes together: --batch-slots), got {runs}", param=field)
    # best_of ranks candidates by their tokens' logprobs: scored even when the answer shows none
    scored = 0 if parsed.logprobs is None and parsed.best_of > parsed.n else parsed.logprobs
    return GenerationRequest(served.name, tuple(ids), min(wanted, room), sampling, stops, session, grammar=grammar,
                             logprobs=scored, n=runs, prompt_logprobs=_prompt_scored(parsed),
                             reasoning_budget=parsed.reasoning_budget, post_sampling=_post_sampling(parsed, sampling),
                             private=parsed.private)


def _room(parsed):
    """The tokens a prompt cut to the context leaves to generate: max_tokens when it is given."""
    return parsed.max_tokens if parsed.max_tokens is not None and parsed.max_tokens > 0 else 1


def _prompt_scored(parsed):
    """The alternatives each prompt token is scored with: the most that echo with logprobs or vLLM's
    prompt_logprobs shows (each trims its own); None when neither asks."""
    asked = [k for k in (_echo_scored(parsed), parsed.prompt_logprobs) if k is not None]
    return max(asked, default=None)


def _echo_scored(parsed):
    """The alternatives an echoed completion prompt's tokens show (a chat echo is text only, as vLLM's)."""
    return parsed.logprobs if parsed.echo and parsed.messages is None else None


def _scoring(parsed, ids):
    """A choice's fields for its prompt: the ids (when scored, or shown: vLLM's return_token_ids), and what echo
    and vLLM's prompt_logprobs show of them."""
    out = {"prompt_ids": tuple(ids), "return_ids": True} if parsed.return_ids else {}
    if _prompt_scored(parsed) is None:
        return out
    return dict(out, prompt_ids=tuple(ids), prompt_k=parsed.prompt_logprobs, echo_k=_echo_scored(parsed))


def _post_sampling(parsed, sampling):
    """llama-server's post_sampling_probs, for a request that asked for logprobs (it changes nothing else)."""
    if not parsed.post_sampling or parsed.logprobs is None:
        return False
    if sampling.mirostat or sampling.infill:
        raise RequestError("post_sampling_probs: mirostat and the infill sampler draw by rules of their own; "
                           "their probabilities are not reported", param="post_sampling_probs",
                           code="unsupported_value")
    return True


def _stop_tokens(parsed, served):
    """vLLM's stop_token_ids, each inside the vocabulary (and its allowed_token_ids checked alike)."""
    for name, ids in (("stop_token_ids", parsed.stop_token_ids),
                      ("allowed_token_ids", parsed.sampling.get("allowed_ids", ()))):
        outside = [t for t in ids if t >= served.tokenizer.n_vocab]
        if outside:
            raise RequestError(f"{name}: token id {outside[0]} is outside the vocabulary of "
                               f"{served.tokenizer.n_vocab} tokens", param=name, code="invalid_value")
    return frozenset(parsed.stop_token_ids)


def bad_word_ids(tokenizer, words):
    """vLLM's bad_words as token sequences: each word as the text begins with it, and as a later word (with a
    space before it) when that tokenizes to other tokens of the same count (vLLM's rule)."""
    out = []
    for word in words:
        alone = tuple(tokenizer.encode(word.lstrip(), add_special=False, parse_special=False))
        spaced = tuple(tokenizer.encode(" " + word.lstrip(), add_special=False, parse_special=False))
        out += [alone] + ([spaced] if spaced[:1] != alone[:1] and len(spaced) == len(alone) else [])
    return tuple(w for w in out if w)


def _with_breakers(sampling, parsed, served):
    """DRY's sequence breakers as the model's token sequences, where DRY is on (only ids cross to a die)."""
    if not sampling.get("dry_multiplier"):
        return sampling
    return dict(sampling, dry_breakers=dry_breakers.breakers(served.tokenizer, parsed.dry_sequence_breakers))


def _banned_eos(parsed, stop_ids):
    """The sampling fields, with every end-of-generation token banned when ignore_eos is set."""
    if not parsed.ignore_eos:
        return parsed.sampling
    bias = {**parsed.sampling.get("logit_bias", {}), **{t: float("-inf") for t in stop_ids}}
    return dict(parsed.sampling, logit_bias=bias)


@dataclass(frozen=True)
class Plan:
    """One choice to generate: its prompt ids, chat output parser, grammar and echoed prompt text."""

    ids: list
    output: object = None
    grammar: Optional[str] = None
    echo: str = ""


class SseBody:
    """The WSGI body of a stream; close() (waitress calls it when the socket dies) cancels the generations.
    keepalive > 0: a comment line after that many seconds of silence (pantheon.serve.http.keepalive)."""

    def __init__(self, events, *generations, keepalive=0.0):
        self._events, self._generations = (KeepAlive(events, keepalive) if keepalive > 0 else events), generations

    def __iter__(self):
        return iter(self._events)

    def close(self):
        for generation in self._generations:
            generation.cancel()
        self._events.close()


def answer_one(resp, gen, stream, events, whole, content_type=sse.CONTENT_TYPE, headers=None, keepalive=0.0):
    """A single started generation's answer: its `events` streamed (a closed socket cancels it), else the
    body `whole()` builds, after which the generation is cancelled (a no-op once it ended). keepalive: see
    SseBody (0 for a body that is not SSE)."""
    if stream:
        resp.content_type = content_type
        resp.set_headers(headers or {})
        resp.stream = SseBody(events, gen, keepalive=keepalive)
        return
    try:
        resp.media = whole()
    finally:
        gen.cancel()


class _GenerateResource:
    chat = False
    schema, required = {}, ()

    def __init__(self, backend, options):
        self.backend, self.options = backend, options

    def on_post(self, req, resp):
        started = time.perf_counter()
        parsed = validate.check(json_body.read_json(req, self.options.body_limit), self.schema, self.required)
        served = resolve(self.backend, parsed.model)
        req.context.model = served.name
        picks = self.start(req, served, parsed, started)
        replica = getattr(picks[0].gen.stream, "replica", None)
        if replica:
            resp.set_header("X-Pantheon-Replica", replica)  # which die runs it: for operators and tests
        env = Envelope(self.chat, served.name, self.options.fingerprint, parsed.stream and parsed.include_usage,
                       parsed.timings_per_token, parsed.request_id, parsed.include_usage and parsed.continuous_usage)
        if parsed.stream:
            resp.content_type = sse.CONTENT_TYPE
            resp.set_headers(sse.HEADERS)
            resp.stream = SseBody(self._events(picks, env), *(c.gen for c in picks), keepalive=self.options.keepalive)
        else:
            try:
                bodies = best_of.best(picks, [choices.whole(env, c) for c in picks], parsed.n, parsed.best_of)
            finally:
                for c in picks:
                    c.gen.cancel()  # a no-op for those that ended; the others must not run on unread
            resp.media = dict(env.body(bodies, total_usage(c.gen.usage for c in picks)),
                              timings=timings.final(c.gen for c in picks))
            if self.chat and parsed.prompt_logprobs is not None:  # vLLM's: the one prompt's, beside the choices
                resp.media["prompt_logprobs"] = picks[0].vllm_prompt_logprobs()
            if self.chat and parsed.return_ids:
                resp.media["prompt_token_ids"] = list(picks[0].prompt_ids)

    def start(self, req, served, parsed, started, plans=None):
        """Build every prompt first (a bad one starts nothing), then start one generation per prompt, split
        into its n choices (choice index = prompt index x n + k, as OpenAI numbers them); a refusal cancels
        those already started. `plans`: prompts built by the caller (default: this route's prepare)."""
        session = req.get_header(SESSION_HEADER) or parsed.user
        plans = self.prepare(served, parsed) if plans is None else plans
        spell = None if parsed.logprobs is None else TokenText(served.tokenizer, parsed.post_sampling,
                                                               parsed.tokens_as_ids)
        if parsed.post_sampling and spell is not None and not self.chat:
            raise RequestError("post_sampling_probs: served on /completion and /v1/chat/completions (OpenAI's "
                               "text_completion logprobs have no place for probabilities)",
                               param="post_sampling_probs", code="unsupported_value")
        requests = [generation_request(served, parsed, p.ids, session, self.options.default_max_tokens, p.grammar)
                    for p in plans]
        picks = []
        try:
            for i, (plan, request) in enumerate(zip(plans, requests)):
                streams = choices.split(self.backend.generate(request), request.n)
                for k, stream in enumerate(streams):
                    gen = Generation(stream, served.tokenizer, parsed.stop, disconnect_check(req.env),
                                     self.options.recorder, served.name, started, self.options.watch,
                                     parsed.predict_limit, parsed.min_indent, parsed.sampling.get("min_tokens", 0),
                                     parsed.include_stop, not parsed.skip_special)
                    output = plan.output if k == 0 else copy.deepcopy(plan.output)  # a parser per choice
                    picks.append(choices.Choice(i * request.n + k, gen, output, plan.echo, spell,
                                                **_scoring(parsed, plan.ids)))
        except BaseException:
            for c in picks:
                c.gen.cancel()
            raise
        return picks

    def _events(self, picks, env):
        try:
            for chunk in choices.merged([choices.chunks(env, c) for c in picks]):
                yield sse.event(chunk)
        except BackendError as exc:  # headers are gone: report in-band, as OpenAI-style servers do
            for c in picks:
                c.gen.cancel()
            yield sse.event(error_body(str(exc), exc.type, exc.code))
            yield sse.DONE
            return
        if any(c.gen.finish_reason == "abort" for c in picks):
            return
        if env.include_usage:
            yield sse.event(dict(env.usage_chunk(total_usage(c.gen.usage for c in picks)),
                                 timings=timings.final(c.gen for c in picks)))
        yield sse.DONE


class ChatCompletions(_GenerateResource):
    chat = True
    schema, required = validate.CHAT, ("messages",)

    def prepare(self, served, parsed, prefill=None):
        """The prompt and the parser that splits the reply into content, reasoning and tool calls; `prefill`
        starts the reply (see chat_plan.plan); None: a final assistant message's text does (final_prefill)."""
        echo, keep = chat_plan.echoed(parsed), truncation.limit(served, parsed.truncate, _room(parsed))
        if prefill is None:
            parsed, prefill = chat_plan.final_prefill(parsed, self.options.prefill_assistant)
        plan = chat_plan.plan(served, parsed, self.options.reasoning_format, prefill)
        return [Plan(truncation.last(plan.ids, keep), plan.output, plan.grammar, echo)]


class Completions(_GenerateResource):
    schema, required = validate.COMPLETIONS, ("prompt",)

    def prepare(self, served, parsed):
        """One choice per prompt of the list, in order; with a `suffix`, each prompt is the text before a gap
        that the model fills (OpenAI's insert mode, a FIM prompt as Ollama's `suffix` and llama-server's
        /infill build it)."""
        if parsed.suffix is not None:
            return [Plan(self.fill_ids(served, p, parsed), grammar=parsed.grammar) for p in parsed.prompt]
        keep = truncation.limit(served, parsed.truncate, _room(parsed))
        plans = []
        for p in parsed.prompt:
            ids = self.prompt_ids(served, p, parsed.add_special, keep)
            whole = keep is None or len(ids) < keep  # fewer tokens than kept: none were cut
            echo = "" if not parsed.echo else self.echo_text(served, p if whole else ids)
            plans.append(Plan(ids, grammar=parsed.grammar, echo=echo))
        return plans

    @staticmethod
    def fill_ids(served, prompt, parsed):
        if parsed.echo or parsed.truncate is not None:
            field = "echo" if parsed.echo else "truncate_prompt_tokens"
            raise RequestError(f"suffix: {field} and suffix do not combine (the answer goes in the middle)",
                               param="suffix", code="invalid_value")
        if not isinstance(prompt, str):
            raise RequestError("suffix: the prompt must be text to fill a gap after it", param="prompt",
                               code="invalid_type")
        check_text_fits(served, prompt + parsed.suffix, "the prompt and suffix")
        return fim_prompt(served.tokenizer, served.prompts.raw(""), prompt, parsed.suffix, param="suffix")

    @staticmethod
    def echo_text(served, prompt):
        """The prompt as text: as sent, or its token ids decoded."""
        return prompt if isinstance(prompt, str) else served.tokenizer.decode(prompt)

    def prompt_ids(self, served, prompt, add_special=True, keep=None):
        """The prompt's ids, its last `keep` when that many are asked for (vLLM's truncate_prompt_tokens)."""
        if isinstance(prompt, str):
            text = prompt if keep is None else truncation.last_text(served, prompt, keep)
            check_text_fits(served, text, "the prompt")
            ids = truncation.last(served.prompts.raw(text, add_special), keep)
        else:
            ids = truncation.last(prompt, keep)
            if len(ids) >= served.n_ctx:
                return ids  # generation_request refuses it by its length; skip the per-id scan
            bad = [t for t in ids if not 0 <= t < served.tokenizer.n_vocab]
            if bad:
                raise RequestError(f"prompt: token id {bad[0]} is outside the vocabulary of "
                                   f"{served.tokenizer.n_vocab} tokens", param="prompt", code="invalid_value")
        if not ids:
            raise RequestError("prompt: tokenizes to no tokens at all", param="prompt", code="invalid_value")
        return ids


class RestatedChat:
    """A route whose body restates a chat request under another API's names (Anthropic's Messages, OpenAI's
    Responses): `restate(values)` gives (validate.Parsed, assistant prefill); `reply(served, choice, n_prompt,
    values)` shapes one started choice's answer, with `whole()` and `events()`."""

    schema, required = {}, ()

    def __init__(self, backend, options):
        self.backend, self.options = backend, options
        self.bridge = ChatCompletions(backend, options)  # starts generations exactly as /v1/chat/completions does

    def prepared(self, req):
        """(served model, checked values, validate.Parsed, prefill) of the request."""
        values = validate.fields(json_body.read_json(req, self.options.body_limit), self.schema, self.required)
        served = resolve(self.backend, values.get("model"))
        req.context.model = served.name
        return (served, values) + tuple(self.restate(values))

    def on_post(self, req, resp):
        parsed, choice, reply = self.started(req)
        self.answer(resp, parsed, choice, reply)
        self.answered(resp, reply)

    def started(self, req):
        """(validate.Parsed, the started choice, its reply) of a request."""
        started = time.perf_counter()
        served, values, parsed, prefill = self.prepared(req)
        plans = self.bridge.prepare(served, parsed, prefill)
        choice = self.bridge.start(req, served, parsed, started, plans)[0]
        return parsed, choice, self.reply(served, choice, len(plans[0].ids), values)

    def answer(self, resp, parsed, choice, reply):
        answer_one(resp, choice.gen, parsed.stream, reply.events(), reply.whole, headers=sse.HEADERS,
                   keepalive=self.options.keepalive)

    def answered(self, resp, reply):
        """After the answer is set (a stream's headers are not yet sent): a route's own response headers."""
