"""Scanning JSON that may still be arriving: where a value ends, or that it has not ended yet."""

import json
import re

_SCALAR = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?|true|false|null")
_WS = " \t\r\n"
_CLOSE = {"{": "}", "[": "]"}


class NotJson(ValueError):
    """The text at this place cannot be (the start of) a JSON value."""


def skip_ws(text, i):
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def value_end(text, i):
    """Index just past the JSON value starting at text[i]; None while it is incomplete."""
    if i >= len(text):
        return None
    c = text[i]
    if c == '"':
        return string_end(text, i)
    if c in _CLOSE:
        return _container_end(text, i)
    m = _SCALAR.match(text, i)
    if m is None:
        if _could_start_scalar(text[i:]):
            return None
        raise NotJson(f"not JSON at {text[i:i + 20]!r}")
    # a number may go on: it is complete only once something follows it
    return m.end() if m.end() < len(text) else None


def _could_start_scalar(tail):
    return any(word.startswith(tail) for word in ("true", "false", "null")) or tail in ("-",)


def string_end(text, i):
    """Index just past the string literal opening at text[i]; None while unterminated."""
    j = i + 1
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == '"':
            return j + 1
        j += 1
    return None


def _container_end(text, i):
    stack, j = [_CLOSE[text[i]]], i + 1
    while j < len(text):
        c = text[j]
        if c == '"':
            end = string_end(text, j)
            if end is None:
                return None
            j = end
            continue
        if c in _CLOSE:
            stack.append(_CLOSE[c])
        elif c in "}]":
            if c != stack.pop():
                raise NotJson(f"mismatched {c!r} in {text[i:j + 1][-40:]!r}")
            if not stack:
                return j + 1
        j += 1
    return None


def partial_string(text, i):
    """(decoded prefix, complete) of the string literal opening at text[i]; escapes are cut whole."""
    end = string_end(text, i)
    if end is not None:
        try:
            return json.loads(text[i:end]), True
        except ValueError as exc:
            raise NotJson(f"bad string: {exc}") from None
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            step = _escape_length(text, j)
            if j + step > len(text):
                break
            j += step
        else:
            j += 1
    try:
        return json.loads(text[i:j] + '"'), False
    except ValueError as exc:
        raise NotJson(f"bad string escape: {exc}") from None


def _escape_length(text, j):
    """Characters of the escape at text[j]; a high surrogate waits for its low half."""
    if text[j + 1:j + 2] != "u":
        return 2
    if text[j + 2:j + 4].lower() in ("d8", "d9", "da", "db"):
        return 12
    return 6


def members(text, i):
    """([(key, value_start, value_end or None)], end or None) of the object opening at text[i].

    Keys are decoded strings. Stops at the first incomplete key or value (end is then None);
    raises NotJson where the text cannot continue an object.
    """
    if i >= len(text) or text[i] != "{":
        raise NotJson("expected an object")
    out, j = [], skip_ws(text, i + 1)
    if j < len(text) and text[j] == "}":
        return out, j + 1
    while j < len(text):
        if text[j] != '"':
            raise NotJson(f"expected a key at {text[j:j + 20]!r}")
        key_end = string_end(text, j)
        if key_end is None:
            return out, None
        key, _ = partial_string(text, j)
        j = skip_ws(text, key_end)
        if j >= len(text):
            return out, None
        if text[j] != ":":
            raise NotJson(f"expected ':' after key {key!r}")
        start = skip_ws(text, j + 1)
        end = value_end(text, start)
        out.append((key, start, end))
        if end is None:
            return out, None
        j = skip_ws(text, end)
        if j >= len(text):
            return out, None
        if text[j] == "}":
            return out, j + 1
        if text[j] != ",":
            raise NotJson(f"expected ',' or '}}' after {key!r}")
        j = skip_ws(text, j + 1)
    return out, None


def partial_suffix(text, marker):
    """Length of the longest tail of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
