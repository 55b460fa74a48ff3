"""Ollama's generation routes, POST /api/chat and /api/generate, over the OpenAI routes' machinery; NDJSON streams."""

import json
import time
from datetime import datetime, timedelta, timezone

from pantheon.serve.http import chat_plan, json_body, ollama_fields, validate
from pantheon.serve.http import logprobs as shapes_lp
from pantheon.serve.http.backend import BackendError, UnknownModel
from pantheon.serve.http.budget import check_text_fits
from pantheon.serve.http.completions import ChatCompletions, Plan, answer_one, resolve
from pantheon.serve.http.field_types import bad
from pantheon.serve.http.fim import fim_prompt

CONTENT_TYPE = "application/x-ndjson"
NS = 1_000_000_000  # Ollama reports every duration in nanoseconds


def now(later=timedelta(0)):
    """created_at (or, `later` on, expires_at) as Ollama writes it: RFC 3339, UTC."""
    return (datetime.now(timezone.utc) + later).isoformat().replace("+00:00", "Z")


def shown_name(served):
    """The name Ollama clients see: a name without a tag is `name:latest`, as Ollama's own."""
    return served.name if ":" in served.name else f"{served.name}:latest"


def resolve_tagged(backend, name):
    """The served model for an Ollama name: exact, else without the `:latest` tag Ollama adds."""
    try:
        return resolve(backend, name)
    except UnknownModel:
        if name is None or not name.endswith(":latest"):
            raise
        return resolve(backend, name.removesuffix(":latest"))


class OllamaErrors:
    """Falcon middleware: an error under /api/ is Ollama's {"error": "message"}, the shape its clients read."""

    def process_response(self, req, resp, resource, req_succeeded):
        body = resp.media if req.path.startswith("/api/") else None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            resp.media = {"error": body["error"].get("message", "error")}


class _Reply:
    """One Ollama answer of a started choice: NDJSON chunks, or the whole object; `chat` shapes a message."""

    def __init__(self, served, choice, started, chat, context=None):
        self.name, self.choice, self.gen, self.started = shown_name(served), choice, choice.gen, started
        self.chat, self.context = chat, context  # context: the prompt ids, for /api/generate's "context"

    def lines(self):
        """The streamed body: a line per piece of text, the tool calls whole, then the final object."""
        try:
            yield from (_line(chunk) for chunk in self._chunks())
        except BackendError as exc:  # the status line is gone: say it in-band, as Ollama does
            self.gen.cancel()
            yield _line({"error": str(exc)})

    def _chunks(self):
        output = self.choice.output
        for text in self.gen.pieces():
            deltas = output.push(text) if output is not None else [{"content": text}]
            yield from self._pieces(deltas)
        if self.gen.finish_reason == "abort":
            return
        if output is not None:
            yield from self._pieces(output.finish())
            calls = _calls(output.message())
            if calls:
                yield self._chunk({"content": "", "tool_calls": calls}, None)
        yield self.final({"content": ""})

    def _pieces(self, deltas):
        for delta in deltas:
            piece = {k: v for k, v in _renamed(delta).items() if k != "tool_calls"}
            if piece:
                yield self._chunk(piece, self._new_logprobs())

    def _chunk(self, piece, logprobs):
        body = {"model": self.name, "created_at": now(), **self._shaped(piece), "done": False}
        return dict(body, logprobs=logprobs) if logprobs else body

    def _shaped(self, piece):
        """A chat message ({"message": {...}}) or generate's response and thinking fields."""
        if self.chat:
            return {"message": {"role": "assistant", **piece}}
        out = {"response": piece.get("content", "")}
        return dict(out, thinking=piece["thinking"]) if piece.get("thinking") else out

    def _new_logprobs(self):
        new = self.choice.new_logprobs(True)
        return new["content"] if new else None

    def whole(self):
        """The non-streamed answer (the generation runs to its end here)."""
        text = "".join(self.gen.pieces())
        output = self.choice.output
        if output is None:
            return self.final({"content": text}, logprobs=True)
        output.push(text)
        output.finish()
        message = output.message()
        piece = {k: v for k, v in _renamed(message).items() if k in ("content", "thinking")}
        piece["content"] = piece.get("content") or ""
        calls = _calls(message)
        return self.final(dict(piece, tool_calls=calls) if calls else piece, logprobs=True)

    def final(self, piece, logprobs=False):
        gen, usage = self.gen, self.gen.usage
        end = gen.ended_at or time.perf_counter()
        first = gen.first_at or end
        body = {"model": self.name, "created_at": now(), **self._shaped(piece), "done": True,
                "done_reason": gen.finish_reason, "total_duration": _ns(end - self.started), "load_duration": 0,
                "prompt_eval_count": usage["prompt_tokens"], "prompt_eval_duration": _ns(first - self.started),
                "eval_count": usage["completion_tokens"], "eval_duration": _ns(end - first)}
        if self.context is not None:
            body["context"] = list(self.context) + list(gen.token_ids)
        if logprobs and self.choice.spell is not None:
            body["logprobs"] = shapes_lp.chat_content(self.choice.spell, gen.scores)
        return body


def _line(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _ns(seconds):
    return max(0, int(seconds * NS))


def _renamed(delta):
    """OpenAI's reasoning_content is Ollama's thinking."""
    return {("thinking" if k == "reasoning_content" else k): v for k, v in delta.items() if v is not None}


def _calls(message):
    """Ollama's tool calls: the arguments as an object (as generated when they are not valid JSON)."""
    out = []
    for call in message.get("tool_calls") or ():
        try:
            args = json.loads(call["function"]["arguments"])
        except ValueError:
            args = call["function"]["arguments"]
        out.append({"id": call["id"], "function": {"name": call["function"]["name"], "arguments": args}})
    return out


def _loaded(values, served, chat):
    """The answer to an empty request, which Ollama clients send to load a model (it is loaded already)."""
    if values.get("keep_alive") in (0, 0.0, "0", "0s", "0m", "0h"):
        raise bad("keep_alive", "unloading is an admin operation here: POST /admin/models/unload "
                  "(pantheon-ctl unload)", "unsupported_value")
    body = {"model": shown_name(served), "created_at": now()}
    body.update({"message": {"role": "assistant", "content": ""}} if chat else {"response": ""})
    return dict(body, done=True, done_reason="load")


class _OllamaRoute:
    """What /api/chat and /api/generate share: the body, the model, starting one choice, the answer."""

    schema = {}
    chat = True

    def __init__(self, backend, options):
        self.backend, self.options = backend, options
        self.bridge = ChatCompletions(backend, options)  # starts generations exactly as /v1 does

    def on_post(self, req, resp):
        started = time.perf_counter()
        values = validate.fields(json_body.read_json(req, self.options.body_limit), self.schema, ("model",))
        served = resolve_tagged(self.backend, values["model"])
        req.context.model = served.name
        stream = values.get("stream", True)  # Ollama streams unless told not to
        if self.is_empty(values):
            resp.media = _loaded(values, served, self.chat)
            return
        parsed, plan, context = self.prepare(served, values, stream)
        choice = self.bridge.start(req, served, parsed, started, [plan])[0]
        reply = _Reply(served, choice, started, self.chat, context)
        answer_one(resp, choice.gen, stream, reply.lines(), reply.whole, CONTENT_TYPE)


class OllamaChat(_OllamaRoute):
    schema = ollama_fields.CHAT

    @staticmethod
    def is_empty(values):
        return not values.get("messages")

    def prepare(self, served, values, stream):
        parsed = ollama_fields.parsed(served.name, values["messages"], values, stream)
        parsed, prefill = chat_plan.final_prefill(parsed, self.options.prefill_assistant)  # Ollama continues it too
        plan = chat_plan.plan(served, parsed, self.options.reasoning_format, prefill)
        return parsed, Plan(plan.ids, plan.output, plan.grammar), None


class OllamaGenerate(_OllamaRoute):
    """A prompt through the model's chat template (with `system`), or `raw`, or with `suffix` a
    fill-in-the-middle prompt; `context` (the ids an earlier answer returned) goes first."""

    schema = ollama_fields.GENERATE
    chat = False

    @staticmethod
    def is_empty(values):
        return not values.get("prompt") and not values.get("suffix") and not values.get("context")

    def prepare(self, served, values, stream):
        if values.get("template"):
            raise bad("template", "Go templates are not supported: the model's chat template (or the server's "
                      "--chat-template) renders the prompt; send raw: true with a prompt already formatted",
                      "unsupported_value")
        prompt, raw = values.get("prompt", ""), values.get("raw", False) or "suffix" in values
        messages = None if raw else ([{"role": "system", "content": values["system"]}] if "system" in values
                                     else []) + [{"role": "user", "content": prompt}]
        parsed = ollama_fields.parsed(served.name, messages, values, stream)
        if raw:
            plan = Plan(self._raw_ids(served, values, prompt), None, chat_plan.format_grammar(parsed.response_format))
        else:
            chat = chat_plan.plan(served, parsed, self.options.reasoning_format)
            plan = Plan(chat.ids, chat.output, chat.grammar)
        plan = Plan(self._with_context(served, values.get("context"), plan.ids), plan.output, plan.grammar)
        return parsed, plan, None if raw else plan.ids

    @staticmethod
    def _raw_ids(served, values, prompt):
        check_text_fits(served, prompt + values.get("suffix", ""), "prompt")
        if "suffix" in values:
            return fim_prompt(served.tokenizer, served.prompts.raw(""), prompt, values["suffix"])
        return served.prompts.raw(prompt)

    @staticmethod
    def _with_context(served, context, ids):
        """An earlier answer's ids, then this prompt's without its BOS (the context begins with one)."""
        if not context:
            return ids
        n_vocab = served.tokenizer.n_vocab
        if not all(0 <= t < n_vocab for t in context):
            raise bad("context", f"a token id is outside the vocabulary of {n_vocab} tokens", "invalid_value")
        bos = served.prompts.raw("")
        return list(context) + list(ids[len(bos):] if bos and list(ids[:len(bos)]) == bos else ids)
