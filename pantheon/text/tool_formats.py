"""Tool-call formats of the major template families: which one a template uses, and parsing it.

Every parser takes the whole text generated so far and `final` (the generation has ended). Before
the end it returns only what can no longer change: content that cannot turn out to be the start of
a call, and calls whose name is complete, with the raw JSON text of their arguments so far. So the
parse of a longer text always extends the parse of a shorter one, which is what streaming needs.
"""

import json
from dataclasses import dataclass
from typing import Optional

from pantheon.text.json_scan import NotJson, members, partial_string, partial_suffix, skip_ws, value_end

HERMES, LLAMA3, GENERIC = "hermes", "llama3", "generic"
MISTRAL, MISTRAL_NAMED = "mistral", "mistral_named"  # [TOOL_CALLS][{...}] (Nemo); [TOOL_CALLS]name[ARGS]{...}
NAME_KEYS = ("name",)
ARG_KEYS = ("arguments", "parameters")
HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
MISTRAL_OPEN, MISTRAL_ARGS, MISTRAL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


@dataclass
class Call:
    name: str
    arguments: str  # raw JSON text of the arguments (so far)
    id: Optional[str] = None


@dataclass
class Parsed:
    content: str
    calls: list


def detect(template_source):
    """The tool-call format a chat template teaches its model, as llama.cpp tells them apart."""
    src = template_source or ""
    if HERMES_OPEN in src and "<function=" not in src and "<arg_key>" not in src:
        return HERMES
    if MISTRAL_OPEN in src:
        return MISTRAL_NAMED if MISTRAL_ARGS in src else MISTRAL
    if "<|start_header_id|>" in src and "ipython" in src and '"parameters"' in src:
        return LLAMA3
    return GENERIC


def parse(fmt, text, final):
    parsers = {HERMES: parse_hermes, LLAMA3: parse_llama3, MISTRAL: parse_mistral, MISTRAL_NAMED: parse_mistral,
               GENERIC: parse_generic}
    return parsers[fmt](text, final)


def opener(fmt, name=None):
    """The text a reply starts with when a call is forced: up to the arguments when `name` is given."""
    if fmt == MISTRAL_NAMED:
        return MISTRAL_OPEN + (f"{name}{MISTRAL_ARGS}" if name else "")
    head = {HERMES: HERMES_OPEN + '\n{"name": "', LLAMA3: '{"name": "', MISTRAL: MISTRAL_OPEN + '[{"name": "',
            GENERIC: '{"tool_call": {"name": "'}[fmt]
    if name is None:
        return head
    key = "parameters" if fmt == LLAMA3 else "arguments"
    return head + json.dumps(name)[1:-1] + f'", "{key}": '



def _held(text, final, marker):
    """`text` less a tail that could still grow into `marker` (nothing is held once generation ends)."""
    return text if final else text[:len(text) - partial_suffix(text, marker)]


def call_object(text, i, require_args=True):
    """(Call or None, end or None) of a call object {"name": ..., "arguments": {...}} at text[i].

    The Call is None until its name is complete and its arguments have begun (so a plain JSON
    object is never mistaken for a call before it ends); end is None while the object is open.
    """
    found, end = members(text, i)
    byname = {k: (s, e) for k, s, e in found}
    name = next((byname[k] for k in NAME_KEYS if k in byname), None)
    args = next((byname[k] for k in ARG_KEYS if k in byname), None)
    call_id = byname.get("id")
    if name is None or name[1] is None or text[name[0]] != '"' or (args is None and (require_args or end is None)):
        return None, end
    arguments = "{}" if args is None else _arguments(text, *args)
    if arguments is None:
        return None, end
    ident = partial_string(text, call_id[0])[0] if call_id and call_id[1] and text[call_id[0]] == '"' else None
    return Call(partial_string(text, name[0])[0], arguments, ident), end


def _arguments(text, start, end):
    """Raw JSON text of an arguments value; a JSON string holding JSON is unwrapped once complete."""
    if start >= len(text):
        return ""
    if text[start] == '"':
        return None if end is None else partial_string(text, start)[0]
    return text[start:] if end is None else text[start:end]


def parse_hermes(text, final):
    """Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number of them."""
    content, calls, pos = [], [], 0
    while True:
        k = text.find(HERMES_OPEN, pos)
        if k < 0:
            content.append(_held(text[pos:], final, HERMES_OPEN))
            break
        content.append(text[pos:k])
        j = skip_ws(text, k + len(HERMES_OPEN))
        if j >= len(text):
            break
        try:
            call, end = call_object(text, j, require_args=False) if text[j] == "{" else (None, -1)
        except NotJson:
            call, end = None, -1
        if end == -1 or (call is None and end is not None):  # not a JSON call: the marker was plain text
            content.append(HERMES_OPEN)
            pos = k + len(HERMES_OPEN)
            continue
        if call is not None:
            calls.append(call)
        if end is None:
            break
        close = text.find(HERMES_CLOSE, end)
        pos = len(text) if close < 0 else close + len(HERMES_CLOSE)
    return Parsed("".join(content), calls)


def _objects(text, j, final, separators=";"):
    """Calls in a row of JSON call objects from text[j]; None when the text is not such a row."""
    calls = []
    while j < len(text):
        if text[j] != "{":
            return None
        call, end = call_object(text, j)
        if end is None:
            return calls + ([call] if call is not None else [])
        if call is None:
            return None
        calls.append(call)
        j = skip_ws(text, end)
        while j < len(text) and text[j] in separators:
            j = skip_ws(text, j + 1)
    return calls


def parse_llama3(text, final):
    """Llama 3.x: the reply is `{"name": ..., "parameters": {...}}` (after `<|python_tag|>` maybe)."""
    j = skip_ws(text, 0)
    if text.startswith(PYTHON_TAG, j):
        j = skip_ws(text, j + len(PYTHON_TAG))
    elif not final and PYTHON_TAG.startswith(text[j:]):
        return Parsed("", [])
    if j >= len(text) or text[j] != "{":
        return Parsed(text if (final or j < len(text)) else "", [])
    try:
        calls = _objects(text, j, final)
    except NotJson:
        calls = None
    if calls is None or (final and not calls):
        return Parsed(text, [])
    return Parsed("", calls)


def parse_mistral(text, final):
    """Mistral: `[TOOL_CALLS][{...}, ...]` (Nemo) or `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}` (later)."""
    k = text.find(MISTRAL_OPEN)
    if k < 0:
        return Parsed(_held(text, final, MISTRAL_OPEN), [])
    j = skip_ws(text, k + len(MISTRAL_OPEN))
    try:
        calls = _mistral_array(text, j) if text[j:j + 1] == "[" else _mistral_named(text, j)
    except NotJson:
        return Parsed(text, [])
    return Parsed(text[:k], calls)


def _mistral_array(text, j):
    calls, j = [], skip_ws(text, j + 1)
    while j < len(text) and text[j] == "{":
        call, end = call_object(text, j)
        if call is not None:
            calls.append(call)
        if end is None:
            break
        j = skip_ws(text, end)
        j = skip_ws(text, j + 1) if text[j:j + 1] == "," else j
    return calls


def _mistral_named(text, j):
    calls = []
    while j < len(text):
        hits = [(text.find(m, j), m) for m in (MISTRAL_ARGS, MISTRAL_ID)]
        hits = [h for h in hits if h[0] >= 0]
        if not hits:
            break
        marker = min(hits)
        name, j = text[j:marker[0]].strip(), marker[0] + len(marker[1])
        call_id = None
        if marker[1] == MISTRAL_ID:
            a = text.find(MISTRAL_ARGS, j)
            if a < 0:
                break
            call_id, j = text[j:a].strip(), a + len(MISTRAL_ARGS)
        start = skip_ws(text, j)
        end = value_end(text, start)
        calls.append(Call(name, _arguments(text, start, end) or "", call_id))
        if end is None:
            break
        j = skip_ws(text, end)
        if not text.startswith(MISTRAL_OPEN, j):
            break
        j += len(MISTRAL_OPEN)
    return calls


def parse_generic(text, final):
    """llama.cpp's fallback: the reply is `{"tool_call": {...}}`, `{"tool_calls": [...]}` or `{"response": "..."}`."""
    j = skip_ws(text, 0)
    if j >= len(text):
        return Parsed(text if final else "", [])
    if text[j] != "{":
        return Parsed(text, [])
    try:
        return _generic_object(text, j, final)
    except NotJson:
        return Parsed(text, [])


def _generic_object(text, j, final):
    found, end = members(text, j)
    if final and end is None and not found:
        return Parsed(text, [])
    for key, start, stop in found:
        if key == "response" and text[start:start + 1] == '"':
            return Parsed(partial_string(text, start)[0], [])
        if key == "tool_call" and text[start:start + 1] == "{":
            call, _ = call_object(text, start)
            return Parsed("", [call] if call is not None else [])
        if key == "tool_calls" and text[start:start + 1] == "[":
            return Parsed("", _mistral_array(text, start))
    if end is not None or (found and found[-1][0] not in ("response", "tool_call", "tool_calls")):
        return Parsed(text, []) if end is not None or final else Parsed("", [])
    return Parsed(text if final else "", [])


def generic_instruction(tools, parallel):
    """The system text llama.cpp adds for templates with no tool format of their own."""
    shape = ('{"tool_calls": [{"name": <function name>, "arguments": <object>, "id": <string>}, ...]}'
             if parallel else '{"tool_call": {"name": <function name>, "arguments": <object>}}')
    return ("Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` "
            f"reply to the user's request. A tool call is {shape}; a reply is {{\"response\": <text>}}. "
            f"The tools:\n{json.dumps([t.get('function', t) for t in tools], ensure_ascii=False)}")
