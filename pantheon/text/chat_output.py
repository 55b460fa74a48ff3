"""A chat reply as it is generated: `<think>` text split off, tool calls parsed out, OpenAI deltas."""

import secrets
import string

from pantheon.text import tool_formats
from pantheon.text.json_scan import partial_suffix

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_ALNUM = string.ascii_letters + string.digits


def call_id(fmt):
    """A fresh tool-call id; Mistral templates insist on nine letters and digits."""
    if fmt in (tool_formats.MISTRAL, tool_formats.MISTRAL_NAMED):
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return "call_" + secrets.token_hex(12)


class ChatOutput:
    """Feed generated text with push(); each call returns the OpenAI `delta` objects now safe to send.

    tool_format: a pantheon.text.tool_formats format, or None to leave tool-call text in content.
    split_reasoning: `<think>...</think>` at the start of the reply goes to `reasoning_content`.
    thinking: the prompt already opened `<think>` (the reply starts inside the reasoning).
    parallel: False keeps only the first tool call. prefix: text the prompt forced the reply to
    start with (a tool-call opener), parsed as if generated but never sent as content. forced_name:
    the call tool_choice named; the whole reply is then that call, its arguments the raw text
    generated even when it is not JSON (nothing constrains the model's output yet).
    """

    def __init__(self, tool_format=None, split_reasoning=True, thinking=False, parallel=True, prefix="",
                 forced_name=None):
        self.fmt, self.split, self.thinking, self.parallel = tool_format, split_reasoning, thinking, parallel
        self.text, self.prefix, self.forced_name = prefix, prefix, forced_name
        self._reasoning, self._content, self._calls = "", "", []  # what was sent: [id, name, arguments]

    def push(self, text):
        self.text += text
        return self._diff(final=False)

    def finish(self):
        """The deltas left once generation has ended (held-back text, the rest of the calls)."""
        return self._diff(final=True)

    def message(self):
        """The whole assistant message (call after finish())."""
        reasoning, content, calls = self._state(final=True)
        msg = {"role": "assistant", "content": content if content or not calls else None}
        if reasoning:
            msg["reasoning_content"] = reasoning
        if calls:
            msg["tool_calls"] = [{"id": self._calls[i][0], "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for i, c in enumerate(calls)]
        return msg

    @property
    def has_calls(self):
        return bool(self._calls)

    def _diff(self, final):
        reasoning, content, calls = self._state(final)
        out = []
        if len(reasoning) > len(self._reasoning) and reasoning.startswith(self._reasoning):
            out.append({"reasoning_content": reasoning[len(self._reasoning):]})
            self._reasoning = reasoning
        if len(content) > len(self._content) and content.startswith(self._content):
            out.append({"content": content[len(self._content):]})
            self._content = content
        for i, call in enumerate(calls):
            out += self._call_delta(i, call)
        return out

    def _call_delta(self, i, call):
        if i >= len(self._calls):
            self._calls.append([call.id or call_id(self.fmt), call.name, call.arguments])
            fn = {"name": call.name, "arguments": call.arguments}
            return [{"tool_calls": [{"index": i, "id": self._calls[i][0], "type": "function", "function": fn}]}]
        sent = self._calls[i][2]
        if len(call.arguments) > len(sent) and call.arguments.startswith(sent):
            self._calls[i][2] = call.arguments
            return [{"tool_calls": [{"index": i, "function": {"arguments": call.arguments[len(sent):]}}]}]
        return []

    def _state(self, final):
        """(reasoning, content, calls) of the text so far; before the end only what cannot change."""
        reasoning, rest = self._split(final)
        if self.fmt is None:
            return reasoning, rest, []
        parsed = tool_formats.parse(self.fmt, rest, final)
        calls = parsed.calls if self.parallel else parsed.calls[:1]
        if self.forced_name is not None:
            raw = rest[len(self.prefix):].strip()
            return reasoning, "", calls[:1] or [tool_formats.Call(self.forced_name, raw)]
        return reasoning, parsed.content.strip(), calls

    def _split(self, final):
        """(reasoning, the rest) when the reply opens with <think>; ("", text) otherwise."""
        text = self.text
        if not self.split:
            return "", text
        if not self.thinking:
            body = text.lstrip()
            if not body.startswith(THINK_OPEN):
                undecided = not final and THINK_OPEN.startswith(body)
                return "", "" if undecided else text
            text = body[len(THINK_OPEN):]
        k = text.find(THINK_CLOSE)
        if k < 0:
            held = text if final else text[:len(text) - partial_suffix(text, THINK_CLOSE)]
            return held.strip(), ""
        return text[:k].strip(), text[k + len(THINK_CLOSE):].lstrip()
