"""OpenAI's Responses request bodies checked under their own field names and restated as chat fields."""

import re
import uuid

from pantheon.serve.http import responses_truncation, validate
from pantheon.serve.http.field_types import bad, boolean, known_object, number, only, positive, show, string

# each input item's keys: what a client writes, and what this server's own output items carry back
ITEM_KEYS = {"message": {"type", "role", "content", "id", "status"},
             "function_call": {"type", "id", "call_id", "name", "arguments", "status"},
             "function_call_output": {"type", "id", "call_id", "output", "status"},
             "reasoning": {"type", "id", "summary", "content", "encrypted_content", "status"}}
PART_KEYS = {"input_text": {"type", "text"}, "output_text": {"type", "text", "annotations", "logprobs"},
             "refusal": {"type", "refusal"}}
ROLES = ("user", "assistant", "system", "developer")
TOOL_KEYS = {"type", "name", "description", "parameters", "strict"}
FORMAT_KEYS = {"text": {"type"}, "json_object": {"type"},
               "json_schema": {"type", "name", "schema", "description", "strict"}}
# include values: reasoning items always carry their text (nothing is encrypted); logprobs as asked
INCLUDES = ("reasoning.encrypted_content", "message.output_text.logprobs")
ITEM_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
PAGE_LIMIT = re.compile(r"[0-9]{1,3}")  # ASCII only: "²".isdigit() is true and int("²") fails; int("٣") is 3
STATELESS = "this server stores no responses (--responses-store 0): send the whole conversation as input"


def _text(where, v):
    """A string, or text parts joined (input_text, output_text, refusal)."""
    if isinstance(v, str):
        return v
    if not isinstance(v, list):
        raise bad(where, "expected a string or a list of content parts")
    out = []
    for i, part in enumerate(v):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in PART_KEYS:
            why = "this server runs text models" if str(kind).startswith("input_") else "expected input_text"
            raise bad(f"{where}[{i}].type", f"{show(kind)} parts are not supported: {why}", "unsupported_value")
        known_object(f"{where}[{i}]", part, PART_KEYS[kind])
        key = "refusal" if kind == "refusal" else "text"
        out.append(string(f"{where}[{i}].{key}", part.get(key)))
    return "".join(out)


def _reasoning_text(where, item):
    """A reasoning item's text: its reasoning_text content, else its summary (encrypted_content is opaque)."""
    for key, kind, sep in (("content", "reasoning_text", ""), ("summary", "summary_text", "\n\n")):
        parts = item.get(key) or []
        if not isinstance(parts, list):
            raise bad(f"{where}.{key}", "expected a list")
        texts = []
        for i, part in enumerate(parts):
            known_object(f"{where}.{key}[{i}]", part, {"type", "text"})
            if part.get("type") != kind:
                raise bad(f"{where}.{key}[{i}].type", f"expected {kind}, got {show(part.get('type'))}",
                          "invalid_value")
            texts.append(string(f"{where}.{key}[{i}].text", part.get("text")))
        if texts:
            return sep.join(texts)
    return ""


class _Conversation:
    """Input items folded into chat messages: a function call joins the assistant turn it follows, a
    reasoning item becomes the next assistant turn's reasoning_content, a call's output a tool message."""

    def __init__(self):
        self.messages, self.reasoning = [], ""

    def message(self, where, item):
        role = item.get("role")
        if role not in ROLES:
            raise bad(f"{where}.role", f"expected {', '.join(ROLES)}, got {show(role)}", "invalid_value")
        content = _text(f"{where}.content", item.get("content"))
        self.messages.append(self._assistant(content) if role == "assistant" else {"role": role, "content": content})

    def function_call(self, where, item):
        call = {"id": string(f"{where}.call_id", item.get("call_id")), "type": "function",
                "function": {"name": string(f"{where}.name", item.get("name")),
                             "arguments": string(f"{where}.arguments", item.get("arguments"))}}
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant":
            last = self._assistant("")
            self.messages.append(last)
        elif self.reasoning:
            last["reasoning_content"] = last.get("reasoning_content", "") + self._take_reasoning()
        last.setdefault("tool_calls", []).append(call)

    def function_call_output(self, where, item):
        self.messages.append({"role": "tool", "tool_call_id": string(f"{where}.call_id", item.get("call_id")),
                              "content": _text(f"{where}.output", item.get("output"))})

    def reasoning_item(self, where, item):
        if item.get("encrypted_content") is not None:
            string(f"{where}.encrypted_content", item["encrypted_content"])
        self.reasoning += _reasoning_text(where, item)

    def _assistant(self, content):
        out = {"role": "assistant", "content": content}
        if self.reasoning:
            out["reasoning_content"] = self._take_reasoning()
        return out

    def _take_reasoning(self):
        text, self.reasoning = self.reasoning, ""
        return text


def input_items(name, v):
    """The input as chat messages: a string is one user message; items as _Conversation folds them."""
    if isinstance(v, str):
        return [{"role": "user", "content": v}]
    if not isinstance(v, list) or not v:
        raise bad(name, "expected a string or a non-empty list of input items")
    talk = _Conversation()
    for i, item in enumerate(v):
        where = f"{name}[{i}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "item_reference":
            raise bad(f"{where}.type", "item references are not supported: continue a stored response with "
                      "previous_response_id, or send the items themselves", "unsupported_value")
        if not isinstance(kind, str) or kind not in ITEM_KEYS:
            raise bad(f"{where}.type", f"{show(kind)} items are not supported: expected message, function_call, "
                      "function_call_output or reasoning", "unsupported_value")
        known_object(where, item, ITEM_KEYS[kind])
        getattr(talk, "reasoning_item" if kind == "reasoning" else kind)(where, item)
    if not talk.messages:
        raise bad(name, "the input holds no message", "invalid_value")
    return talk.messages


def checked_input(name, v):
    """The input checked as input_items folds it, kept as items (a string is one user message) so that a stored
    response can be continued item by item."""
    input_items(name, v)
    return [{"type": "message", "role": "user", "content": v}] if isinstance(v, str) else v


def listed(items):
    """Input items as a stored response lists them: each with an id and a status, a message's text as parts."""
    out = []
    for item in items:
        kind = item.get("type", "message")
        item = dict(item, type=kind, status=item.get("status", "completed"))
        item.setdefault("id", f"{ITEM_ID_PREFIX[kind]}_{uuid.uuid4().hex}")
        if kind == "message" and isinstance(item["content"], str):
            part = "output_text" if item["role"] == "assistant" else "input_text"
            item["content"] = [dict({"type": part, "text": item["content"]},
                                    **({"annotations": []} if part == "output_text" else {}))]
        out.append(item)
    return out


def tools(name, v):
    """Function tools (flat: name, parameters); hosted tools (web search, file search...) run on OpenAI's servers."""
    if not isinstance(v, list):
        raise bad(name, "expected a list of tools")
    for i, tool in enumerate(v):
        where = f"{name}[{i}]"
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise bad(f"{where}.type", f"{show(kind)} tools are not supported: only function tools",
                      "unsupported_value")
        known_object(where, tool, TOOL_KEYS)
        string(f"{where}.name", tool.get("name"))
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise bad(f"{where}.parameters", "expected a JSON schema object")
        for key, check in (("description", string), ("strict", boolean)):
            if tool.get(key) is not None:
                check(f"{where}.{key}", tool[key])
    return v


def tool_choice(name, v):
    """auto, none, required, or {"type": "function", "name": ...}."""
    if isinstance(v, str):
        if v not in ("auto", "none", "required"):
            raise bad(name, f"expected auto, none or required, got {show(v)}", "invalid_value")
        return v
    known_object(name, v, {"type", "name"})
    if v.get("type") != "function":
        raise bad(f"{name}.type", f"{show(v.get('type'))} is not supported: expected function", "unsupported_value")
    string(f"{name}.name", v.get("name"))
    return v


def text(name, v):
    """{"format": text | json_object | json_schema (with its schema)}; verbosity is checked and ignored."""
    known_object(name, v, {"format", "verbosity"})
    if v.get("verbosity") not in (None, "low", "medium", "high"):
        raise bad(f"{name}.verbosity", f"expected low, medium or high, got {show(v['verbosity'])}", "invalid_value")
    fmt = v.get("format")
    if fmt is None:
        return v
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if not isinstance(kind, str) or kind not in FORMAT_KEYS:
        raise bad(f"{name}.format.type", f"expected text, json_object or json_schema, got {show(kind)}",
                  "invalid_value")
    known_object(f"{name}.format", fmt, FORMAT_KEYS[kind])
    if kind == "json_schema" and not isinstance(fmt.get("schema"), dict):
        raise bad(f"{name}.format.schema", "expected a JSON schema object")
    return v


def reasoning(name, v):
    """effort becomes the chat route's reasoning_effort (a template variable); the summaries are checked and not
    acted on (a model's reasoning comes back whole)."""
    known_object(name, v, {"effort", "summary", "generate_summary"})
    if v.get("effort") is not None:
        validate.reasoning_effort(f"{name}.effort", v["effort"])
    for key in ("summary", "generate_summary"):
        if v.get(key) not in (None, "auto", "concise", "detailed"):
            raise bad(f"{name}.{key}", f"expected auto, concise or detailed, got {show(v[key])}", "invalid_value")
    return v


def include(name, v):
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise bad(name, "expected a list of strings")
    for x in v:
        if x not in INCLUDES:
            raise bad(name, f"{show(x)} is not supported: expected {' or '.join(INCLUDES)}", "unsupported_value")
    return v


def stream_options(name, v):
    """include_obfuscation is checked and ignored (no padding is added to stream events)."""
    known_object(name, v, {"include_obfuscation"})
    if v.get("include_obfuscation") is not None:
        boolean(f"{name}.include_obfuscation", v["include_obfuscation"])
    return v


RESPONSES = {
    "model": string, "input": checked_input, "instructions": string, "max_output_tokens": positive,
    "temperature": number, "top_p": number, "top_logprobs": validate.top_logprobs,
    "tools": tools, "tool_choice": tool_choice, "parallel_tool_calls": boolean, "text": text, "reasoning": reasoning,
    "include": include, "stream": boolean, "stream_options": stream_options, "user": string,
    "metadata": validate.string_map, "store": boolean, "prompt_cache_key": string, "safety_identifier": string,
    "service_tier": string, "prompt_cache_retention": string,
    "truncation": responses_truncation.mode,
    "background": boolean,
    "previous_response_id": string, "conversation": only(None, "conversations are not supported: continue a stored "
                                                             "response with previous_response_id"),
}

# /v1/responses/input_tokens: the fields that shape the prompt
COUNT = {k: RESPONSES[k] for k in ("model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
                                   "text", "reasoning", "truncation", "previous_response_id", "conversation")}


def chat_body(values):
    """The /v1/chat/completions body these checked fields stand for; `history` holds the items of the stored
    responses the request continues (previous_response_id), oldest first."""
    chat = ([{"role": "system", "content": values["instructions"]}] if values.get("instructions") else [])
    talk = input_items("input", values.get("history", []) + values["input"])
    body = {"model": values.get("model"), "messages": chat + talk, "stream": values.get("stream", False),
            **{k: values[k] for k in ("temperature", "top_p", "parallel_tool_calls") if k in values}}
    if "max_output_tokens" in values:
        body["max_tokens"] = values["max_output_tokens"]
    if values.get("reasoning", {}).get("effort") is not None:
        body["reasoning_effort"] = values["reasoning"]["effort"]
    if "user" in values:  # a session (its KV kept); prompt_cache_key is not one: unrelated requests share it
        body["user"] = values["user"]
    if values.get("tools"):
        body["tools"] = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                           if t.get(k) is not None}} for t in values["tools"]]
    choice = values.get("tool_choice")
    if choice is not None:
        body["tool_choice"] = choice if isinstance(choice, str) else {"type": "function",
                                                                      "function": {"name": choice["name"]}}
    fmt = values.get("text", {}).get("format")
    if fmt is not None and fmt["type"] != "text":
        body["response_format"] = {"type": "json_object"} if fmt["type"] == "json_object" else {
            "type": "json_schema", "json_schema": {"name": fmt.get("name", "output"), "schema": fmt["schema"]}}
    if "message.output_text.logprobs" in values.get("include", ()) or "top_logprobs" in values:
        body.update(logprobs=True, top_logprobs=values.get("top_logprobs", 0))
    return body


def parsed(values):
    """validate.Parsed of the chat request the checked Responses fields stand for (every field it restates was
    checked under its Responses name first)."""
    return validate.check(chat_body(values), validate.CHAT, ())


def item_page(items, params):
    """GET .../input_items: a page of `items` as OpenAI lists them; query `order` (desc, the default, or asc),
    `after` (an item id: the page starts past it), `limit` (1-100, default 20)."""
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise bad("order", f"expected asc or desc, got {show(order)}", "invalid_value")
    limit = params.get("limit", "20")
    if not (isinstance(limit, str) and PAGE_LIMIT.fullmatch(limit) and 1 <= int(limit) <= 100):
        raise bad("limit", f"expected an integer from 1 to 100, got {show(limit)}", "invalid_value")
    ordered = items if order == "asc" else items[::-1]
    after = params.get("after")
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise bad("after", f"no input item {show(after)} in this response", "invalid_value")
        ordered = ordered[ids.index(after) + 1:]
    page = ordered[:int(limit)]
    return {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None, "has_more": len(ordered) > len(page)}
