"""Anthropic's Messages request bodies checked under their own field names and restated as OpenAI chat fields."""

import dataclasses
import json

from pantheon.serve.http import validate
from pantheon.serve.http.field_types import bad, boolean, integer, known_object, number, positive, show, string, top_k

# the content blocks a message may hold, and each one's keys (cache_control and citations are hints)
BLOCK_KEYS = {"text": {"type", "text", "cache_control", "citations"},
              "tool_use": {"type", "id", "name", "input", "cache_control"},
              "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
              "thinking": {"type", "thinking", "signature", "cache_control"},
              "redacted_thinking": {"type", "data", "cache_control"}}
ROLE_BLOCKS = {"user": ("text", "tool_result"), "assistant": ("text", "tool_use", "thinking", "redacted_thinking")}
# a tool's keys; cache_control, strict (the grammar always holds a forced call), defer_loading,
# eager_input_streaming, allowed_callers and input_examples are hints this server takes and ignores
TOOL_KEYS = {"type", "name", "description", "input_schema", "cache_control", "strict", "defer_loading",
             "eager_input_streaming", "allowed_callers", "input_examples"}
CHOICES = {"auto": "auto", "any": "required", "none": "none"}
THINKING = ("enabled", "adaptive", "disabled")  # Anthropic's tool_choice type -> OpenAI's
# OpenAI field names a refusal of the restated body names -> the Anthropic field the client sent
RENAMED = {"stop": "stop_sequences", "user": "metadata.user_id"}


def _blocks(name, v, role):
    """The content as a list of checked blocks (a string is one text block)."""
    if isinstance(v, str):
        return [{"type": "text", "text": v}]
    if not isinstance(v, list):
        raise bad(name, "expected a string or a list of content blocks")
    return [_block(f"{name}[{i}]", b, role) for i, b in enumerate(v)]


def _block(where, b, role):
    kind = b.get("type") if isinstance(b, dict) else None
    if kind not in ROLE_BLOCKS[role]:
        why = ("this server runs text models" if kind in ("image", "document")
               else f"a {role} message holds {', '.join(ROLE_BLOCKS[role])} blocks")
        raise bad(f"{where}.type", f"{show(kind)} blocks are not supported: {why}", "unsupported_value")
    known_object(where, b, BLOCK_KEYS[kind])
    for key in {"text": ("text",), "tool_use": ("id", "name"), "tool_result": ("tool_use_id",),
                "thinking": ("thinking",)}.get(kind, ()):
        string(f"{where}.{key}", b.get(key))
    if kind == "tool_use" and not isinstance(b.get("input"), dict):
        raise bad(f"{where}.input", "expected an object")
    if kind == "tool_result":
        b = dict(b, content=_text(f"{where}.content", b.get("content", "")))
    return b


def _text(where, v, sep=""):
    """A string, or text blocks joined with `sep` (a tool result's content, the system prompt)."""
    if isinstance(v, str):
        return v
    blocks = _blocks(where, v, "user")
    if any(b["type"] != "text" for b in blocks):
        raise bad(where, "expected a string or text blocks", "unsupported_value")
    return sep.join(b["text"] for b in blocks)


def messages(name, v):
    """Anthropic messages as OpenAI ones: tool results become tool messages (ahead of the turn's text),
    tool_use blocks tool calls, thinking blocks reasoning_content."""
    if not isinstance(v, list) or not v:
        raise bad(name, "expected a non-empty list of messages")
    out = []
    for i, m in enumerate(v):
        where = f"{name}[{i}]"
        known_object(where, m, {"role", "content"})
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLE_BLOCKS:
            raise bad(f"{where}.role", f"expected \"user\" or \"assistant\", got {show(role)}", "invalid_value")
        blocks = _blocks(f"{where}.content", m.get("content"), role)
        out.extend(_user(blocks) if role == "user" else [_assistant(blocks)])
    return out


def _user(blocks):
    tools = [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]}
             for b in blocks if b["type"] == "tool_result"]
    texts = [b["text"] for b in blocks if b["type"] == "text"]
    return tools + ([{"role": "user", "content": "".join(texts)}] if texts or not tools else [])


def _assistant(blocks):
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    out = {"role": "assistant", "content": text}
    thinking = "".join(b["thinking"] for b in blocks if b["type"] == "thinking")
    if thinking:
        out["reasoning_content"] = thinking
    calls = [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
             for b in blocks if b["type"] == "tool_use"]
    return dict(out, tool_calls=calls) if calls else out


def system(name, v):
    """The system prompt: a string, or text blocks joined with newlines."""
    return _text(name, v, "\n")


def tools(name, v):
    """Client tools as OpenAI functions; Anthropic's server tools (web search, code execution...) are not run here."""
    if not isinstance(v, list):
        raise bad(name, "expected a list of tools")
    out = []
    for i, tool in enumerate(v):
        where = f"{name}[{i}]"
        known_object(where, tool, TOOL_KEYS)
        if tool.get("type", "custom") != "custom":
            raise bad(f"{where}.type", f"server tool {show(tool['type'])} is not supported: only client tools "
                      "(a name and an input_schema)", "unsupported_value")
        if not isinstance(tool.get("input_schema"), dict):
            raise bad(f"{where}.input_schema", "expected a JSON schema object")
        fn = {"name": string(f"{where}.name", tool.get("name")), "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            fn["description"] = string(f"{where}.description", tool["description"])
        out.append({"type": "function", "function": fn})
    return out


def tool_choice(name, v):
    known_object(name, v, {"type", "name", "disable_parallel_tool_use"})
    if v.get("type") not in ("auto", "any", "tool", "none"):
        raise bad(f"{name}.type", f"expected auto, any, tool or none, got {show(v.get('type'))}", "invalid_value")
    if v["type"] == "tool":
        string(f"{name}.name", v.get("name"))
    if v.get("disable_parallel_tool_use") is not None:
        boolean(f"{name}.disable_parallel_tool_use", v["disable_parallel_tool_use"])
    return v


def thinking(name, v):
    """enabled (thinking on, at most budget_tokens of it), adaptive (on, the model's budget) or disabled;
    `display` is checked and the thinking always shown."""
    known_object(name, v, {"type", "budget_tokens", "display"})
    if v.get("type") not in THINKING:
        raise bad(f"{name}.type", f"expected {', '.join(THINKING)}, got {show(v.get('type'))}", "invalid_value")
    if v["type"] == "enabled":
        integer(f"{name}.budget_tokens", v.get("budget_tokens"), 1)
    if v.get("display") not in (None, "summarized", "omitted"):
        raise bad(f"{name}.display", f"expected summarized or omitted, got {show(v['display'])}", "invalid_value")
    return v


def output_config(name, v):
    """{"format": {"type": "json_schema", "schema": {...}}} as the reply's grammar; `effort` checked."""
    known_object(name, v, {"format", "effort"})
    if v.get("effort") not in (None, "low", "medium", "high", "xhigh", "max"):
        raise bad(f"{name}.effort", f"expected low, medium, high, xhigh or max, got {show(v['effort'])}",
                  "invalid_value")
    fmt = v.get("format")
    if fmt is not None:
        known_object(f"{name}.format", fmt, {"type", "schema"})
        if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            raise bad(f"{name}.format", "expected {\"type\": \"json_schema\", \"schema\": {...}}", "invalid_value")
    return v


def stop_sequences(name, v):
    if not isinstance(v, list):
        raise bad(name, "expected a list of strings")
    return validate.stop(name, v)


def metadata(name, v):
    known_object(name, v, {"user_id"})
    if v.get("user_id") is not None:
        string(f"{name}.user_id", v["user_id"])
    return v


COUNT = {"model": string, "messages": messages, "system": system, "tools": tools, "tool_choice": tool_choice,
         "thinking": thinking}
# cache_control (prefix caching here is automatic), service_tier, inference_geo and speed change nothing
MESSAGES = dict(COUNT, max_tokens=positive, stop_sequences=stop_sequences, temperature=number, top_p=number,
                top_k=top_k, stream=boolean, metadata=metadata, output_config=output_config,
                cache_control=validate.ignored(lambda n, v: known_object(n, v, {"type", "ttl"})),
                service_tier=validate.ignored(string), inference_geo=validate.ignored(string),
                speed=validate.ignored(string))


def parsed(values):
    """(validate.Parsed of the chat request these checked fields stand for, assistant prefill text). A final
    assistant message without tool calls is a prefill: the reply continues it."""
    chat = ([{"role": "system", "content": values["system"]}] if values.get("system") else []) + values["messages"]
    prefill = ""
    if chat[-1]["role"] == "assistant" and not chat[-1].get("tool_calls"):
        prefill = chat.pop()["content"]
    if not any(m["role"] != "system" for m in chat):
        raise bad("messages", "a conversation needs a user message before an assistant prefill", "invalid_value")
    body = {"model": values.get("model"), "messages": chat, "stream": values.get("stream", False),
            **{k: values[k] for k in ("max_tokens", "temperature", "top_p", "top_k", "tools") if k in values}}
    body.update(_choice(values.get("tool_choice")))
    if "stop_sequences" in values:
        body["stop"] = list(values["stop_sequences"])
    if values.get("metadata", {}).get("user_id") is not None:
        body["user"] = values["metadata"]["user_id"]
    think = values.get("thinking")
    if think is not None:
        body["chat_template_kwargs"] = {"enable_thinking": think["type"] != "disabled"}
    fmt = values.get("output_config", {}).get("format")
    if fmt is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
    out = validate.check_restated(body, RENAMED)
    budget = think.get("budget_tokens", 0) if think else 0
    return dataclasses.replace(out, reasoning_budget=budget), prefill


def _choice(v):
    if v is None:
        return {}
    out = {"tool_choice": CHOICES.get(v["type"]) or {"type": "function", "function": {"name": v["name"]}}}
    if v.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out

