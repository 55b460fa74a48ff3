"""llama-server's own routes: POST /completion and /infill, GET /props and /slots, POST /apply-template."""

import time

from pantheon import __version__
from pantheon.serve.http import chat_plan, choices, json_body, llama_fields, sampler_order, sse, timings, validate
from pantheon.serve.http.backend import BackendError
from pantheon.serve.http.completions import SESSION_HEADER, SseBody, generation_request, resolve
from pantheon.serve.http.disconnect import disconnect_check
from pantheon.serve.http.errors import error_body
from pantheon.serve.http.fim import fim_prompt
from pantheon.serve.http.field_types import bad, boolean, integer, number, positive, string
from pantheon.serve.http.generation import Generation
from pantheon.serve.http.logprobs import TokenText, native_probabilities
from pantheon.engine.sampler import SamplingParams

# The marks a fill-in-the-middle prompt needs (the tokenizer finds them as llama.cpp does: GGUF keys, then texts).


def native_seed(name, v):
    """llama-server's -1 means a random seed."""
    v = integer(name, v)
    return None if v == -1 else v % 2**64


def native_bias(name, v):
    """{"id": bias} or [[id, bias | false], ...]; false bans the token."""
    if isinstance(v, dict):
        return validate.logit_bias(name, v)
    if not isinstance(v, list) or not all(isinstance(p, list) and len(p) == 2 for p in v):
        raise bad(name, "expected {\"id\": bias} or [[id, bias], ...]", "invalid_type")
    out = {}
    for tok, bias in v:
        tok = integer(f"{name}[]", tok)
        out[tok] = float("-inf") if bias is False else number(f"{name}[{tok}]", bias)
    return out


def _one_prompt(v):
    return isinstance(v, str) or (isinstance(v, list) and bool(v) and all(isinstance(t, int) and not isinstance(t, bool)
                                                                          for t in v))


def native_prompt(name, v):
    """A string, token ids, or a list of those (several prompts: the answer is a list)."""
    if _one_prompt(v):
        return v
    if not isinstance(v, list) or not v or not all(_one_prompt(p) for p in v):
        raise bad(name, "expected a string, a non-empty list of token ids, or a list of those", "invalid_type")
    if len(v) > validate.MAX_PROMPTS:
        raise bad(name, f"at most {validate.MAX_PROMPTS} prompts per request, got {len(v)}", "invalid_value")
    return v


def several(prompt):
    """True for a list of prompts (strings or lists of ids), not one prompt of token ids."""
    return isinstance(prompt, list) and not isinstance(prompt[0], int)


def extra_chunks(name, v):
    if not isinstance(v, list) or not all(isinstance(c, dict) and isinstance(c.get("text", ""), str)
                                          and isinstance(c.get("filename", ""), str) for c in v):
        raise bad(name, "expected a list of {\"filename\", \"text\"}", "invalid_type")
    return v


# the sampling fields under /completion's own checks (its seed and logit_bias shapes); which fields sample is
# validate.SAMPLING_FIELDS, as on the OpenAI routes
SAMPLING = {"temperature": number, "top_k": integer, "top_p": number,
            "min_p": number, "repeat_penalty": number, "repeat_last_n": integer,
            "presence_penalty": number, "frequency_penalty": number, "seed": native_seed,
            "logit_bias": native_bias}
COMPLETION = dict(SAMPLING, **llama_fields.EXTRAS, model=string, prompt=native_prompt, max_tokens=positive,
                  stop=validate.stop, stream=boolean, n=llama_fields.per_prompt,
                  response_fields=llama_fields.strings, t_max_prompt_ms=integer)
INFILL = dict(COMPLETION, input_prefix=string, input_suffix=string, input_extra=extra_chunks)
# llama-server reads a whole chat request here (clients send the body they would send to chat): every
# chat field is checked, and those that only shape generation change nothing in the prompt.
APPLY_TEMPLATE = validate.CHAT


class NativeCompletion:
    """POST /completion: llama-server's shape (content, stop, stop_type, timings...), streamed without [DONE]."""

    schema, required = COMPLETION, ("prompt",)

    def __init__(self, backend, options):
        self.backend, self.options = backend, options

    def on_post(self, req, resp):
        started = time.perf_counter()
        body = validate.fields(json_body.read_json(req, self.options.body_limit), self.schema, self.required)
        served = resolve(self.backend, body.get("model"))
        req.context.model = served.name
        bodies = [dict(body, prompt=p) for p in body["prompt"]] if several(body.get("prompt")) else [body]
        replies = self._start(req, served, bodies, started)
        gens = [r.gen for r in replies]
        if body.get("stream", False):
            resp.content_type = sse.CONTENT_TYPE
            resp.set_headers(sse.HEADERS)
            resp.stream = SseBody(choices.merged([r.events() for r in replies]), *gens,
                                  keepalive=self.options.keepalive)
            return
        try:
            out = [r.final("".join(r.gen.pieces())) for r in replies]
        finally:
            for gen in gens:
                gen.cancel()  # a no-op for those that ended
        resp.media = out if len(out) > 1 or several(body.get("prompt")) else out[0]

    def _start(self, req, served, bodies, started):
        """A _Reply per prompt and completion (n_cmpl of them per prompt, numbered prompt x n_cmpl + k, as
        llama-server orders them); every prompt is checked before any generation starts."""
        session = req.get_header(SESSION_HEADER)
        grammar = llama_fields.compiled_grammar(bodies[0])  # the same for every prompt of the list
        requests = [_request(served, b, self.prompt_ids(served, b), session, self.options.default_max_tokens,
                             grammar) for b in bodies]
        spell = TokenText(served.tokenizer, bodies[0].get("post_sampling_probs", False)) if bodies[0].get(
            "n_probs") else None
        limit = llama_fields.predict_limit(bodies[0])
        replies = []
        try:
            for i, (b, request) in enumerate(zip(bodies, requests)):
                for k, stream in enumerate(choices.split(self.backend.generate(request), request.n)):
                    gen = Generation(stream, served.tokenizer, b.get("stop", ()), disconnect_check(req.env),
                                     self.options.recorder, served.name, started, self.options.watch, limit,
                                     b.get("n_indent", 0))
                    replies.append(_Reply(served, b, list(request.prompt), gen, spell, i * request.n + k))
        except BaseException:
            for r in replies:
                r.gen.cancel()
            raise
        return replies

    def prompt_ids(self, served, body):
        prompt = body["prompt"]
        if isinstance(prompt, str):
            return served.prompts.raw(prompt)
        _check_ids("prompt", prompt, served.tokenizer.n_vocab)
        return prompt


class Infill(NativeCompletion):
    """POST /infill: fill-in-the-middle for models whose vocabulary has FIM tokens."""

    schema, required = INFILL, ()

    def prompt_ids(self, served, body):
        return fim_prompt(served.tokenizer, served.prompts.raw(""), body.get("input_prefix", ""),
                          body.get("input_suffix", ""), body.get("input_extra", ()), body.get("prompt", ""))


def _check_ids(name, ids, n_vocab):
    outside = [t for t in ids if not 0 <= t < n_vocab]
    if outside:
        raise bad(name, f"token id {outside[0]} is outside the vocabulary of {n_vocab} tokens", "invalid_value")


def _request(served, body, ids, session, default_max_tokens, grammar):
    breakers = body.get("dry_sequence_breakers")
    parsed = validate.Parsed(max_tokens=llama_fields.generation_limit(body, "max_tokens"),
                             sampling=sampler_order.apply({k: body[k] for k in validate.SAMPLING_FIELDS
                                                          if body.get(k) is not None},
                                                          body.get("samplers")),
                             logprobs=body.get("n_probs") or None, ignore_eos=body.get("ignore_eos", False),
                             n=llama_fields.choice_count(body),
                             dry_sequence_breakers=None if breakers is None else tuple(breakers),
                             post_sampling=body.get("post_sampling_probs", False), private=llama_fields.private(body))
    if not ids:
        raise bad("prompt", "tokenizes to no tokens at all", "invalid_value")
    return generation_request(served, parsed, ids, session, default_max_tokens, grammar)


class _Reply:
    """llama-server's response objects for one generation."""

    def __init__(self, served, body, ids, gen, spell=None, index=0):
        self.served, self.body, self.ids, self.gen = served, body, ids, gen  # gen.started: the request's start
        self.spell, self._sent = spell, 0  # with n_probs: token spellings, and the probabilities sent
        self._ids_sent = 0  # with return_tokens: the generated ids already sent in stream chunks
        self.index = index  # the prompt's place in a list of prompts

    def events(self):
        try:
            for text in self.gen.pieces():
                yield sse.event(self._partial(text))
        except BackendError as exc:
            yield sse.event(error_body(str(exc), exc.type, exc.code))
            return
        if self.gen.finish_reason != "abort":
            yield sse.event(self.final(""))

    def _partial(self, text):
        out = {"index": self.index, "content": text, "tokens": self._new_ids(), "stop": False, "id_slot": -1,
               "tokens_predicted": self.gen.tokens, "tokens_evaluated": len(self.ids)}
        if self.body.get("timings_per_token"):
            out["timings"] = timings.partial(self.gen)
        return self._probabilities(out)

    def _new_ids(self):
        """With return_tokens, the ids generated since the last chunk (all of them in a whole answer)."""
        if not self.body.get("return_tokens"):
            return []
        ids, self._ids_sent = self.gen.token_ids[self._ids_sent:], len(self.gen.token_ids)
        return ids

    def _probabilities(self, out):
        """`out` with completion_probabilities of the tokens not yet sent, when n_probs asked for them."""
        if self.spell is not None:
            scores, self._sent = self.gen.scores[self._sent:], len(self.gen.scores)
            out["completion_probabilities"] = native_probabilities(self.spell, scores)
        return out

    def final(self, text):
        gen, usage = self.gen, self.gen.usage
        matched = gen.stops.matched
        stop_type = "word" if matched else {"length": "limit"}.get(gen.finish_reason, "eos")
        out = {"index": self.index, "content": text, "tokens": self._new_ids(),
               "id_slot": -1, "stop": True, "model": self.served.name,
               "tokens_predicted": usage["completion_tokens"], "tokens_evaluated": usage["prompt_tokens"],
               "tokens_cached": usage["prompt_tokens_details"]["cached_tokens"],
               "generation_settings": _settings(self.served, self.body), "prompt": self._prompt_text(),
               "has_new_line": "\n" in text, "truncated": False, "stop_type": stop_type,
               "stopping_word": matched or "", "timings": timings.final([gen])}
        out = self._probabilities(out)
        return out if self.body.get("response_fields") is None else picked(out, self.body["response_fields"])

    def _prompt_text(self):
        prompt = self.body.get("prompt", "")
        return prompt if isinstance(prompt, str) else self.served.tokenizer.decode(self.ids, special=True)


def picked(out, paths):
    """llama-server's response_fields: only the fields named, a/b naming out["a"]["b"] (kept under the key
    "a/b"); a path that names nothing is left out."""
    kept = {}
    for path in paths:
        value = out
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            kept[path] = value
    return kept


def _settings(served, body):
    defaults, fields = SamplingParams(), validate.SAMPLING_FIELDS
    params = {k: getattr(defaults, k) for k in fields if k not in ("logit_bias", "seed")}
    applied = sampler_order.apply({k: body[k] for k in fields if k in body}, body.get("samplers"))
    params.update({k: v for k, v in applied.items() if k != "logit_bias"})  # what runs, samplers applied
    return {"n_ctx": served.n_ctx, "model": served.name, **params, **_output_settings(body)}


def _output_settings(body):
    """The request's settings beside the sampler's, as llama-server's generation_settings echo them."""
    limit = llama_fields.generation_limit(body, "max_tokens")
    return {"n_predict": -1 if limit is None else limit, "n_keep": body.get("n_keep", 0),
            "ignore_eos": body.get("ignore_eos", False), "stream": body.get("stream", False),
            "n_probs": body.get("n_probs") or 0, "post_sampling_probs": body.get("post_sampling_probs", False),
            "timings_per_token": body.get("timings_per_token", False),
            "samplers": sampler_order.spelled(body.get("samplers"))}


class Props:
    """GET /props (?model=NAME when several are served): the model's context, template and specials."""

    def __init__(self, backend):
        self.backend = backend

    def on_get(self, req, resp):
        served = resolve(self.backend, req.get_param("model"))
        info = next((m for m in self.backend.models() if m.name == served.name), None)
        tok, template = served.tokenizer, served.prompts.template
        slots = (info.details.get("max_concurrent", 1) * max(1, info.replicas)) if info else 1
        resp.media = {"default_generation_settings": {"n_ctx": served.n_ctx, "params": _settings(served, {})},
                      "total_slots": slots, "model_alias": served.name, "model_path": (info.details.get("path", "")
                                                                                      if info else ""),
                      "chat_template": template.source, "bos_token": template.bos_token,
                      "eos_token": template.eos_token, "n_vocab": tok.n_vocab,
                      "tool_call_format": served.prompts.tool_format,
                      "modalities": {"vision": False, "audio": False}, "build_info": f"pantheon {__version__}"}


class Slots:
    """GET /slots: one entry per served model and replica (the engine's batch slots are not exposed)."""

    def __init__(self, backend):
        self.backend = backend

    def on_get(self, req, resp):
        _, health = self.backend.health()
        states = health.get("models", {})
        out = []
        for info in self.backend.models():
            running = states.get(info.name, {}).get("running", 0)
            for r in range(max(1, info.replicas)):
                out.append({"id": len(out), "model": info.name, "replica": r, "n_ctx": info.n_ctx,
                            "state": info.state, "is_processing": running > 0})
        resp.media = out


class ApplyTemplate:
    """POST /apply-template: the prompt text the chat template makes of `messages` (nothing generated)."""

    def __init__(self, backend, options):
        self.backend, self.options = backend, options

    def on_post(self, req, resp):
        parsed = validate.check(json_body.read_json(req, self.options.body_limit), APPLY_TEMPLATE, ("messages",))
        served = resolve(self.backend, parsed.model)
        req.context.model = served.name
        parsed, prefill = chat_plan.final_prefill(parsed, self.options.prefill_assistant)  # as llama-server's
        text, prefix = chat_plan.prompt_text(served, parsed)
        resp.media = {"prompt": text + prefill + prefix}
