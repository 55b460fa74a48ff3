"""Server-sent events framing for OpenAI streams: `data: {json}` blocks, comments, and `[DONE]`."""

import json

DONE = b"data: [DONE]\n\n"
CONTENT_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(obj):
    """One SSE block carrying `obj` as compact JSON."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def named(kind, obj):
    """One SSE block with an `event:` line naming its type (Anthropic's and OpenAI's Responses streams)."""
    return b"event: " + kind.encode() + b"\n" + event(obj)


def comment(text):
    """An SSE comment line; OpenAI clients skip it, proxies see traffic."""
    return b": " + text.replace("\n", " ").encode() + b"\n\n"
