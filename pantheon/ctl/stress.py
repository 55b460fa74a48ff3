"""verify --stress: a needle-in-a-haystack ladder at growing context up to the cap, and one long
tool-response prefill (the recipe stack's ~25K-token case, capped by the model's context)."""

import random
import time

from pantheon.ctl import api
from pantheon.ctl.verify import FAIL, PASS

LADDER = (0.125, 0.25, 0.5, 0.9)     # fractions of the context the haystack fills
TOOL_PREFILL_TOKENS = 25_000
ANSWER_ROOM = 64                      # tokens kept free for the question and the answer
FILLER = ("The committee reviewed the quarterly figures, noted the weather, and adjourned until the next "
          "meeting. ")


def _tokens(t, text):
    reply = t.api.post("/tokenize", {"model": t.model, "content": text})
    return len(reply.body["tokens"]) if reply.ok else None


def _filler(t, tokens):
    """Filler text of about `tokens` tokens, measured with the server's own tokenizer."""
    per = _tokens(t, FILLER * 8) or 8 * len(FILLER) // 4
    return FILLER * max(1, int(tokens * 8 / per))


def check_needle_ladder(t):
    """Each rung hides a number at mid depth of a haystack and asks for it back."""
    if not t.n_ctx:
        return FAIL, "no context_length in /v1/models"
    rungs = [_rung(t, frac) for frac in LADDER]
    figures = "; ".join(f"{r['prompt']} tok {'found' if r['found'] else 'MISSED' if r['status'] == 200 else r['error']}"
                        f" {r['prefill']:.1f} s" for r in rungs)
    return (PASS if all(r["found"] for r in rungs) else FAIL), figures


def _rung(t, frac):
    secret = str(random.Random(int(frac * 1000)).randrange(100000, 999999))
    hay = _filler(t, max(32, int(t.n_ctx * frac) - ANSWER_ROOM))
    middle = len(hay) // 2
    text = f"{hay[:middle]} The secret number is {secret}. {hay[middle:]}\nWhat is the secret number? " \
           "Answer with the number only."
    s = t.api.stream("/v1/chat/completions", api.chat(t.model, text, 16, stream_options={"include_usage": True}))
    prompt = (s.usage or {}).get("prompt_tokens", "?")
    return {"prompt": prompt, "status": s.status, "found": s.done and secret in s.text,
            "prefill": s.first or s.end or 0.0, "error": s.error}


def check_tool_prefill(t):
    """A tool result of up to 25K tokens in one turn: the server must prefill it and answer."""
    if not t.n_ctx:
        return FAIL, "no context_length in /v1/models"
    size = max(64, min(TOOL_PREFILL_TOKENS, t.n_ctx - 4 * ANSWER_ROOM))
    result = _filler(t, size)
    call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "notes"}'}}
    messages = [{"role": "user", "content": "Summarise the notes file."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": result}]
    start = time.monotonic()
    reply = t.api.post("/v1/chat/completions", {"model": t.model, "messages": messages, "max_tokens": 8,
                                                "temperature": 0})
    note = ""
    if reply.status == 400 and "template" in reply.error():
        # a template without a tool role: the same text as a user turn still exercises the prefill
        note = " (template has no tool role: sent as a user turn)"
        reply = t.chat("Summarise these notes:\n" + result, 8)
    seconds, health = time.monotonic() - start, t.api.get("/health")
    if not reply.ok or health.status != 200:
        return FAIL, f"{reply.error()}; /health then {health.status}{note}"
    prompt = reply.body["usage"]["prompt_tokens"]
    return PASS, f"{prompt} prompt tokens prefilled in {seconds:.1f} s ({prompt / seconds:.0f} tok/s){note}"


STRESS = (check_needle_ladder, check_tool_prefill)
