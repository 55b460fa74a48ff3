"""Anthropic's Messages API, POST /v1/messages and /v1/messages/count_tokens, over the chat routes' machinery."""

import json
import uuid

from pantheon.serve.http import anthropic_fields, anthropic_models, chat_plan, sse
from pantheon.serve.http.backend import BackendError
from pantheon.serve.http.completions import RestatedChat

PATHS = ("/v1/messages", "/messages")
MODEL_PATHS = ("/v1/models", "/models")
STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}  # OpenAI's finish reason -> Anthropic's
# Anthropic's error type for each HTTP status its clients see
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
               504: "timeout_error"}


def error(message, status):
    """Anthropic's error body."""
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message}}


class AnthropicErrors:
    """Falcon middleware: an error under /v1/messages, or of /v1/models asked by an Anthropic client (it sends
    anthropic-version), is Anthropic's {"type": "error", "error": {...}}."""

    def process_response(self, req, resp, resource, req_succeeded):
        ours = req.path.startswith(PATHS) or (req.path.startswith(MODEL_PATHS) and anthropic_models.asks(req))
        body = resp.media if ours else None
        if isinstance(body, dict) and isinstance(body.get("error"), dict) and body.get("type") != "error":
            resp.media = error(body["error"].get("message", "error"), int(resp.status_code))


def _event(kind, body):
    """One SSE block: Anthropic names each event's type on an `event:` line as well as in its data."""
    return sse.named(kind, dict(type=kind, **body))


def _input(call):
    """A tool call's arguments as the object Anthropic's tool_use.input is; {} where the model wrote no
    object (stop_reason says why, e.g. max_tokens cut it)."""
    try:
        value = json.loads(call["function"]["arguments"])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tool_use(call):
    return {"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": _input(call)}


class _Reply:
    """One Anthropic answer of a started choice: the whole message, or its stream of events."""

    def __init__(self, served, choice, n_prompt):
        self.model, self.choice, self.gen, self.n_prompt = served.name, choice, choice.gen, n_prompt
        self.id = "msg_" + uuid.uuid4().hex[:24]
        self.open, self.index = None, -1  # the content block being streamed ("text" or "thinking"), its index

    def message(self, content, usage, stop=(None, None)):
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop[0], "stop_sequence": stop[1], "usage": usage}

    def usage(self):
        counts = self.gen.usage
        cached = counts["prompt_tokens_details"]["cached_tokens"]
        return {"input_tokens": counts["prompt_tokens"] - cached, "output_tokens": counts["completion_tokens"],
                "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}

    def stop(self):
        """(stop_reason, stop_sequence): a stop sequence, else the OpenAI finish reason the choice gives
        (its rule for a reply that called tools) in Anthropic's words."""
        if self.gen.stops.matched is not None:
            return "stop_sequence", self.gen.stops.matched
        return STOP_REASONS.get(self.choice.reason, "end_turn"), None

    def whole(self):
        """The non-streamed message (the generation runs to its end here)."""
        reply = self.choice.message()
        content = [{"type": "thinking", "thinking": reply["reasoning_content"], "signature": ""}] \
            if reply.get("reasoning_content") else []
        if reply.get("content"):
            content.append({"type": "text", "text": reply["content"]})
        content += [_tool_use(call) for call in reply.get("tool_calls") or ()]
        return self.message(content, self.usage(), self.stop())

    def events(self):
        """message_start, content blocks (text and thinking as they come, tool calls whole at the end),
        message_delta with the stop reason and usage, message_stop; an error event if the die fails."""
        try:
            yield _event("message_start", {"message": self.message([], {"input_tokens": self.n_prompt,
                                                                        "output_tokens": 0})})
            yield from self._deltas(self.choice.deltas())
            if self.gen.finish_reason == "abort":
                return
            yield from self._close()
            for call in self.choice.output.message().get("tool_calls") or ():
                yield from self._call(call)
            stop_reason, sequence = self.stop()
            yield _event("message_delta", {"delta": {"stop_reason": stop_reason, "stop_sequence": sequence},
                                           "usage": self.usage()})
            yield _event("message_stop", {})
        except BackendError as exc:  # the status line is gone: say it in-band, as Anthropic does
            self.gen.cancel()
            yield _event("error", {"error": error(str(exc), exc.status)["error"]})

    def _deltas(self, deltas):
        for delta in deltas:
            for key, kind in (("reasoning_content", "thinking"), ("content", "text")):
                if delta.get(key):
                    yield from self._start(kind)
                    yield _event("content_block_delta", {"index": self.index,
                                                         "delta": {"type": f"{kind}_delta", kind: delta[key]}})

    def _start(self, kind):
        if self.open == kind:
            return
        yield from self._close()
        self.open, self.index = kind, self.index + 1
        block = {"type": kind, kind: ""}
        yield _event("content_block_start", {"index": self.index,
                                             "content_block": dict(block, signature="") if kind == "thinking"
                                             else block})

    def _close(self):
        if self.open is not None:
            self.open = None
            yield _event("content_block_stop", {"index": self.index})

    def _call(self, call):
        self.index += 1
        block = _tool_use(call)
        yield _event("content_block_start", {"index": self.index, "content_block": dict(block, input={})})
        yield _event("content_block_delta", {"index": self.index, "delta": {
            "type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}})
        yield _event("content_block_stop", {"index": self.index})


class _Route(RestatedChat):
    """What both routes share: the body restated as a chat request and an assistant prefill."""

    schema, required = anthropic_fields.COUNT, ("model", "messages")

    def restate(self, values):
        return anthropic_fields.parsed(values)


class Messages(_Route):
    """POST /v1/messages: a chat turn answered as Anthropic's message, or streamed as its events."""

    schema, required = anthropic_fields.MESSAGES, ("model", "max_tokens", "messages")

    def reply(self, served, choice, n_prompt, values):
        return _Reply(served, choice, n_prompt)


class CountTokens(_Route):
    """POST /v1/messages/count_tokens: the prompt's token count, as the model's template renders it."""

    def on_post(self, req, resp):
        served, _, parsed, prefill = self.prepared(req)
        resp.media = {"input_tokens": chat_plan.prompt_tokens(served, parsed, prefill)}
