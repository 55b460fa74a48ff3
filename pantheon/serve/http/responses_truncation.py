"""OpenAI's Responses `truncation: "auto"`: a conversation too long for the context loses its oldest turns."""

import dataclasses

from pantheon.serve.http import chat_plan
from pantheon.serve.http.backend import ContextOverBudget
from pantheon.serve.http.field_types import bad, show

MODES = ("disabled", "auto")


def mode(name, v):
    """`disabled` (OpenAI's default: a conversation too long for the context is a 400) or `auto`."""
    if v not in MODES:
        raise bad(name, f"expected \"disabled\" or \"auto\", got {show(v)}", "invalid_value")
    return v


def fitted(served, parsed, room):
    """`parsed` whose oldest turns (a user message and all up to the next one; the leading system messages
    stay) are dropped until its prompt leaves `room` tokens of the context; the newest turn always stays (one
    that alone does not fit is refused later, as without truncation)."""
    while not _fits(served, parsed, room):
        lead = next((i for i, m in enumerate(parsed.messages) if m["role"] not in ("system", "developer")), None)
        starts = [i for i, m in enumerate(parsed.messages) if m["role"] == "user" and i > (lead or 0)]
        if lead is None or not starts:
            return parsed
        parsed = dataclasses.replace(parsed, messages=parsed.messages[:lead] + parsed.messages[starts[0]:])
    return parsed


def _fits(served, parsed, room):
    try:
        return len(chat_plan.prompt_ids(served, parsed)) + room <= served.n_ctx
    except ContextOverBudget:  # too long to tokenize at all
        return False
