"""A small OpenAI-API client for verify and bench: JSON calls and SSE streams with their timings."""

import http.client
import json
import socket
import time
from dataclasses import dataclass, field
from typing import Optional

from pantheon.ctl.endpoint import Endpoint, decode


@dataclass
class Reply:
    """One answer: HTTP status, the decoded JSON (or text), and seconds it took."""

    status: int
    body: object
    seconds: float

    @property
    def ok(self):
        return self.status == 200 and isinstance(self.body, dict)

    def error(self):
        """'HTTP 400 code: message' from an OpenAI error body, or the status and a snippet."""
        err = self.body.get("error") if isinstance(self.body, dict) else None
        if isinstance(err, dict):
            return f"HTTP {self.status} {err.get('code') or err.get('type') or ''}: {err.get('message', '')}".strip()
        return f"HTTP {self.status}: {str(self.body)[:160]}"


@dataclass
class Stream:
    """What one SSE stream delivered; times are seconds from the request."""

    status: int
    text: str = ""
    chunks: int = 0
    finish_reason: Optional[str] = None
    usage: Optional[dict] = None
    done: bool = False
    error: Optional[str] = None
    first: Optional[float] = None    # first content
    end: Optional[float] = None
    roles: list = field(default_factory=list)


class Api:
    """Talks to the OpenAI routes of one server; `key` is sent as a bearer token."""

    def __init__(self, url, key=None, timeout=300.0):
        self.url, self.timeout, self.endpoint = url, timeout, Endpoint(url, key)

    def get(self, route):
        return self.call("GET", route)

    def post(self, route, body, headers=None):
        return self.call("POST", route, body, headers)

    def call(self, method, route, body=None, headers=None):
        start, conn = time.monotonic(), self.endpoint.connection(self.timeout)
        try:
            conn.request(method, self.endpoint.prefix + route, **self.endpoint.encode(body, headers))
            reply = conn.getresponse()
            raw = reply.read()
            return Reply(reply.status, decode(raw), time.monotonic() - start)
        except (OSError, http.client.HTTPException, socket.timeout) as e:
            return Reply(0, f"{type(e).__name__}: {e}", time.monotonic() - start)
        finally:
            conn.close()

    def stream(self, route, body, headers=None):
        """POST with stream=true; reads every event to [DONE]."""
        start, conn = time.monotonic(), self.endpoint.connection(self.timeout)
        try:
            conn.request("POST", self.endpoint.prefix + route, **self.endpoint.encode(dict(body, stream=True), headers))
            reply = conn.getresponse()
            if reply.status != 200:
                return Stream(reply.status, error=Reply(reply.status, decode(reply.read()), 0).error())
            return _read_events(reply, Stream(200), start)
        except (OSError, http.client.HTTPException, socket.timeout) as e:
            return Stream(0, error=f"{type(e).__name__}: {e}")
        finally:
            conn.close()

def _read_events(reply, s, start):
    for line in reply:
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            s.done, s.end = True, time.monotonic() - start
            break
        _event(s, json.loads(data), time.monotonic() - start)
    return s


def _event(s, event, now):
    if "error" in event:
        s.error = json.dumps(event["error"])[:200]
        return
    s.usage = event.get("usage") or s.usage
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        piece = delta.get("content") if "delta" in choice else choice.get("text")
        if delta.get("role"):
            s.roles.append(delta["role"])
        if piece:
            s.text += piece
            s.chunks += 1
            s.first = now if s.first is None else s.first
        s.finish_reason = choice.get("finish_reason") or s.finish_reason


def chat(model, content, max_tokens=32, **extra):
    """A chat body, greedy unless told otherwise."""
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, **extra}


def message(reply):
    """choices[0].message of a chat reply ({} when absent)."""
    try:
        return reply.body["choices"][0]["message"] or {}
    except (KeyError, IndexError, TypeError):
        return {}


def finish(reply):
    try:
        return reply.body["choices"][0]["finish_reason"]
    except (KeyError, IndexError, TypeError):
        return None


def cached_tokens(usage):
    return ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0
