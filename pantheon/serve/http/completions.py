"""POST /v1/chat/completions and /v1/completions: validate, build the prompt, generate, answer or stream."""

import time
from dataclasses import dataclass
from typing import Optional

from pantheon.serve.http import chat_plan, sse, validate
from pantheon.serve.http.budget import check_text_fits
from pantheon.serve.http.backend import BackendError, ContextOverBudget, GenerationRequest, UnknownModel
from pantheon.serve.http.disconnect import DisconnectWatch, disconnect_check
from pantheon.serve.http.errors import RequestError, error_body
from pantheon.serve.http.generation import Generation
from pantheon.serve.http.shapes import FINGERPRINT, Envelope
from pantheon.engine.sampler import SamplingParams

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
    wanted = parsed.max_tokens or default_max_tokens or room
    sampling = SamplingParams(**parsed.sampling)
    sampling.validate(served.tokenizer.n_vocab)
    return GenerationRequest(served.name, tuple(ids), min(wanted, room), sampling,
                             frozenset(served.tokenizer.stop_ids), session, grammar=grammar)


class SseBody:
    """The WSGI body of a stream; close() (waitress calls it when the socket dies) cancels the generation."""

    def __init__(self, events, generation):
        self._events, self._generation = events, generation

    def __iter__(self):
        return self._events

    def close(self):
        self._events.close()
        self._generation.cancel()


class _GenerateResource:
    chat = False
    schema, required = {}, ()

    def __init__(self, backend, options):
        self.backend, self.options = backend, options

    def on_post(self, req, resp):
        started = time.perf_counter()
        parsed = validate.check(validate.read_json(req, self.options.body_limit), self.schema, self.required)
        served, stream, output = self._start(req, parsed)
        echo = self.echo_text(served, parsed)
        replica = getattr(stream, "replica", None)
        if replica:
            resp.set_header("X-Pantheon-Replica", replica)  # which die runs it: for operators and tests
        gen = Generation(stream, served.tokenizer, parsed.stop, disconnect_check(req.env), self.options.recorder,
                         served.name, started, self.options.watch)
        env = Envelope(self.chat, served.name, self.options.fingerprint, parsed.stream and parsed.include_usage)
        if parsed.stream:
            resp.content_type = sse.CONTENT_TYPE
            resp.set_headers(sse.HEADERS)
            resp.stream = SseBody(self._events(gen, env, output, echo), gen)
        else:
            text = echo + "".join(gen.pieces())
            if output is None:
                resp.media = env.body(text, gen.finish_reason, gen.usage)
            else:
                output.push(text)
                output.finish()
                resp.media = env.body(text, _reason(gen, output), gen.usage, output.message())

    def _start(self, req, parsed):
        """Route, build the prompt, check the budget and start the generation (refusals raise here)."""
        served = resolve(self.backend, parsed.model)
        req.context.model = served.name
        session = req.get_header(SESSION_HEADER) or parsed.user
        ids, output, grammar = self.prepare(served, parsed)
        request = generation_request(served, parsed, ids, session, self.options.default_max_tokens, grammar)
        return served, self.backend.generate(request), output

    def echo_text(self, served, parsed):
        return ""

    def _events(self, gen, env, output, echo=""):
        try:
            if self.chat:
                yield sse.event(env.chunk("", role="assistant"))
            if echo:
                yield sse.event(env.chunk(echo))
            for text in gen.pieces():
                if output is None:
                    yield sse.event(env.chunk(text))
                else:
                    yield from (sse.event(env.delta_chunk(d)) for d in output.push(text))
            if output is not None:
                yield from (sse.event(env.delta_chunk(d)) for d in output.finish())
        except BackendError as exc:  # headers are gone: report in-band, as OpenAI-style servers do
            yield sse.event(error_body(str(exc), exc.type, exc.code))
            yield sse.DONE
            return
        if gen.finish_reason == "abort":
            return
        yield sse.event(env.chunk(None if self.chat else "", _reason(gen, output)))
        if env.include_usage:
            yield sse.event(env.usage_chunk(gen.usage))
        yield sse.DONE


def _reason(gen, output):
    """OpenAI says "tool_calls" when a reply that ended by itself called tools."""
    if output is not None and output.has_calls and gen.finish_reason == "stop":
        return "tool_calls"
    return gen.finish_reason


class ChatCompletions(_GenerateResource):
    chat = True
    schema, required = validate.CHAT, ("messages",)

    def prepare(self, served, parsed):
        """Prompt ids and the parser that splits the reply into content, reasoning and tool calls."""
        plan = chat_plan.plan(served, parsed, self.options.reasoning_format)
        return plan.ids, plan.output, plan.grammar


class Completions(_GenerateResource):
    schema, required = validate.COMPLETIONS, ("prompt",)

    def prepare(self, served, parsed):
        return self.prompt_ids(served, parsed), None, None

    def echo_text(self, served, parsed):
        """With echo, the prompt as text: as sent, or its token ids decoded."""
        if not parsed.echo:
            return ""
        if isinstance(parsed.prompt, str):
            return parsed.prompt
        return served.tokenizer.decode(parsed.prompt)

    def prompt_ids(self, served, parsed):
        if isinstance(parsed.prompt, str):
            check_text_fits(served, parsed.prompt, "the prompt")
            ids = served.prompts.raw(parsed.prompt)
        else:
            ids = parsed.prompt
            if len(ids) >= served.n_ctx:
                return ids  # generation_request refuses it by its length; skip the per-id scan
            bad = [t for t in ids if not 0 <= t < served.tokenizer.n_vocab]
            if bad:
                raise RequestError(f"prompt: token id {bad[0]} is outside the vocabulary of "
                                   f"{served.tokenizer.n_vocab} tokens", param="prompt", code="invalid_value")
        if not ids:
            raise RequestError("prompt: tokenizes to no tokens at all", param="prompt", code="invalid_value")
        return ids

