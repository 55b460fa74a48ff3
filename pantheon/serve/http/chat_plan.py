"""A chat request's prompt and reply shape: tools in the template, forced calls, reasoning split."""

import dataclasses
import json
from dataclasses import dataclass
from typing import Optional

from pantheon.serve.http.budget import check_text_fits
from pantheon.serve.http.errors import RequestError
from pantheon.text import grammar as grammars
from pantheon.text import tool_formats
from pantheon.text.chat_output import THINK_CLOSE, THINK_OPEN, ChatOutput

REASONING_FORMATS = ("auto", "deepseek", "none")


@dataclass
class ChatPlan:
    ids: list  # the prompt's token ids
    output: ChatOutput  # turns the generated text into content, reasoning_content and tool_calls
    grammar: Optional[str] = None  # compiled grammar the reply must follow (JSON mode, forced call)


def plan(served, parsed, reasoning_format="auto", prefill=""):
    """Render the conversation for `served` and make the reply's parser (RequestError on a bad choice).
    prefill: the start of the reply, written by the client (Anthropic's final assistant message)."""
    text, prefix = prompt_text(served, parsed)
    if prefill and prefix:
        raise RequestError("tool_choice: a forced tool call cannot follow an assistant prefill", param="tool_choice",
                           code="invalid_value")
    thinking = not prefix and _thinking_after(text.rstrip().endswith(THINK_OPEN), prefill)
    text += prefill
    tools = parsed.tools if parsed.tools and parsed.tool_choice != "none" else None
    fmt = served.prompts.tool_format if tools else None
    named = parsed.tool_choice["function"]["name"] if tools and isinstance(parsed.tool_choice, dict) else None
    output = ChatOutput(fmt, (parsed.reasoning_format or reasoning_format) != "none", thinking,
                        parsed.parallel_tool_calls, prefix, named)
    grammar = (_call_grammar(fmt, tools, parsed.tool_choice) if prefix
               else format_grammar(parsed.response_format) or parsed.grammar)
    return ChatPlan(served.prompts.encode_chat(text + prefix), output, grammar)


def _thinking_after(opened, prefill):
    """Whether the reply starts inside a think block: the template opened one (`opened`) or the prefill did,
    and the prefill did not close it (so a prefill that continues a thought keeps reasoning_content apart)."""
    last_open, last_close = prefill.rfind(THINK_OPEN), prefill.rfind(THINK_CLOSE)
    if last_open == last_close:  # neither in the prefill
        return opened
    return last_open > last_close


def format_grammar(response_format):
    """json_object: any JSON object; json_schema: its schema (strict or not, the grammar holds it)."""
    kind = (response_format or {}).get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema") or {"type": "object"}
    else:
        schema = response_format["json_schema"].get("schema") or {"type": "object"}
    return _compiled("response_format", grammars.JSON_SCHEMA, json.dumps(schema))


def _call_grammar(fmt, tools, choice):
    """What follows a forced call's opener: the named tool's arguments, or any tool's name and arguments."""
    params = {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in tools}
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        return _compiled("tool_choice", grammars.JSON_SCHEMA, json.dumps(params[name]))
    mid = {tool_formats.LLAMA3: '", "parameters": ', tool_formats.MISTRAL_NAMED: tool_formats.MISTRAL_ARGS}.get(
        fmt, '", "arguments": ')
    name_text = (lambda n: n) if fmt == tool_formats.MISTRAL_NAMED else (lambda n: json.dumps(n)[1:-1])
    alternatives = [f"{json.dumps(name_text(n) + mid)} {grammars.lark_json(p)}" for n, p in params.items()]
    return _compiled("tool_choice", grammars.LARK, "start: " + " | ".join(alternatives))


def _compiled(field, kind, text):
    try:
        return grammars.compile_spec(kind, text)
    except Exception as exc:
        raise RequestError(f"{field}: {exc}", param=field, code="invalid_value") from None


def final_prefill(parsed, enabled=True):
    """(the request without its final assistant message, that message's text) when the reply continues it:
    llama-server's assistant prefill (on unless `enabled` is False: --no-prefill-assistant) or vLLM's
    continue_final_message; (the request, "") otherwise. A final message with tool calls is a finished turn."""
    messages = parsed.messages
    last = messages[-1]
    if parsed.continue_final and last["role"] != "assistant":
        raise RequestError("continue_final_message: the last message must be the assistant's, which the reply "
                           "continues", param="continue_final_message", code="invalid_value")
    if last["role"] != "assistant" or last.get("tool_calls") or not (enabled or parsed.continue_final):
        return parsed, ""
    if len(messages) > 1 and messages[-2]["role"] == "assistant":
        raise RequestError("messages: cannot have 2 or more assistant messages at the end of the list (the last "
                           "one starts the reply)", param="messages", code="invalid_value")
    return dataclasses.replace(parsed, messages=messages[:-1]), _flat(last.get("content")) or ""


def echoed(parsed):
    """vLLM's chat echo: the final message's text leads the reply when that message is the assistant's (the
    reply's role; the reply continues it or follows it); '' otherwise."""
    if not (parsed.echo and parsed.messages and parsed.messages[-1]["role"] == "assistant"):
        return ""
    return _flat(parsed.messages[-1].get("content")) or ""


def prompt_text(served, parsed):
    """(rendered conversation, forced call opener to append) — also what /apply-template answers."""
    prompts = served.prompts
    tools = parsed.tools if parsed.tools and parsed.tool_choice != "none" else None
    fmt = prompts.tool_format if tools else None
    messages = [dict(m, content=_flat(m.get("content"))) for m in parsed.messages]
    check_text_fits(served, "".join(m["content"] or "" for m in messages), "the conversation")
    if fmt == tool_formats.GENERIC:
        messages = with_system(messages, tool_formats.generic_instruction(tools, parsed.parallel_tool_calls))
    text = prompts.render(messages, tools, **parsed.template_kwargs)
    check_text_fits(served, text, "the rendered conversation")
    return text, _forced_opener(fmt, tools, parsed.tool_choice)


def prompt_tokens(served, parsed, prefill=""):
    """How many tokens the prompt of this chat request is (the count_tokens / input_tokens routes)."""
    return len(prompt_ids(served, parsed, prefill))


def prompt_ids(served, parsed, prefill=""):
    """The token ids of this chat request's prompt, as a generation would start from them."""
    text, opener = prompt_text(served, parsed)
    return served.prompts.encode_chat(text + prefill + opener)


def _forced_opener(fmt, tools, choice):
    """The start of a call appended to the prompt when tool_choice is "required" or names a function."""
    if tools is None or choice == "auto":
        return ""
    if choice == "required":
        return tool_formats.opener(fmt)
    name = choice["function"]["name"]
    if name not in {t["function"]["name"] for t in tools}:
        raise RequestError(f"tool_choice: function {name!r} is not among the tools", param="tool_choice",
                           code="invalid_value")
    return tool_formats.opener(fmt, name)


def with_system(messages, text):
    """The conversation with `text` added to its system message (one is put first if there is none)."""
    if messages and messages[0]["role"] == "system":
        first = messages[0].get("content") or ""
        return [dict(messages[0], content=f"{first}\n\n{text}" if first else text)] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def _flat(content):
    """Text parts joined into one string, so templates that expect a string see one."""
    if isinstance(content, list):
        return "".join(part["text"] for part in content)
    return content
