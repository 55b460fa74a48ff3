"""A stand-in OpenAI server for verify's own tests: answers as the OpenAI API says a server should
(tool calls, json_schema, a session's KV reused by its next turn), except for the one fault a test
switches on, so that the right check must catch it. Tokens are words."""

import http.server
import json
import re
import threading
import time

from tests.pantheon.ctl.local_server import LocalServer

TEXT = "The sea is wide and the waves roll in from far away under a grey sky."
ANSWER = '{"city": "Paris", "population": 2100000}'
N_CTX = 512
# fault -> what the server gets wrong
FAULTS = {
    "unhealthy": "/health reports the model still loading",
    "unlisted": "/v1/models does not list the model",
    "bad_usage": "usage.total_tokens is not prompt + completion",
    "no_done": "a stream ends without data: [DONE]",
    "ignore_stop": "stop strings are ignored",
    "no_ctx_check": "a prompt longer than the context is answered",
    "no_tools": "tool_choice is ignored: plain text comes back",
    "schema_ignored": "response_format is ignored: prose comes back",
    "schema_truncated": "the schema's answer is cut at max_tokens",
    "racy": "requests served at the same time get other text",
    "no_session_cache": "a session's next turn is prefilled again",
    "no_prefix_cache": "a repeated prompt without a session is prefilled again",
    "lose_needle": "long prompts are answered without reading them",
    "tool_prefill_fails": "a tool result in the conversation is a 500",
}


class Double(LocalServer):
    """Started at once; `close()` stops it."""

    def __init__(self, fault=None):
        assert fault is None or fault in FAULTS, fault
        self.fault = fault
        self.sessions = {}           # session id -> words of its last prompt and reply (its KV)
        self.prompts = frozenset()   # prompts answered without a session (the prefix cache)
        self.lock, self.active = threading.Lock(), {}     # request -> it overlapped another
        super().__init__(type("Handler", (_Handler,), {"double": self}))
        self.start()

    def enter(self):
        """Whether another request was being served at any time during this one; under 'racy' each
        is held a moment so that concurrent ones overlap."""
        token = object()
        with self.lock:
            for other in self.active:
                self.active[other] = True
            self.active[token] = bool(self.active)
        if self.fault == "racy":
            time.sleep(0.3)
        with self.lock:
            return self.active.pop(token)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    double = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        fault = self.double.fault
        if self.path == "/health":
            state = "loading" if fault == "unhealthy" else "loaded"
            return self._json(200, {"status": "ok", "models": {"m": {"state": state, "n_ctx": N_CTX}}})
        if self.path == "/v1/models":
            listed = [] if fault == "unlisted" else [{"id": "m", "meta": {"context_length": N_CTX}}]
            return self._json(200, {"data": listed})
        self._json(404, {"error": {"message": "not found", "code": "not_found"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            return self._json(200, {"tokens": body["content"].split()})
        fault, messages = self.double.fault, body.get("messages", [])
        words = " ".join(m.get("content") or "" for m in messages).split()
        if len(words) >= N_CTX and fault != "no_ctx_check":
            return self._json(400, {"error": {"message": "too long", "code": "context_over_budget"}})
        if fault == "tool_prefill_fails" and any(m.get("role") == "tool" for m in messages):
            return self._json(500, {"error": {"message": "prefill failed", "code": "internal_error"}})
        if isinstance(body.get("tool_choice"), dict) and fault != "no_tools":
            return self._tool_call(body["tool_choice"]["function"]["name"])
        text, finish = self._text(body, " ".join(words), self.double.enter())
        self._answer(body, text, finish, len(words), self._cached(words, text))

    def _cached(self, words, text):
        """Words of this prompt the session's previous turn left in its cache; without a session, all
        but the last of a prompt seen before (a prefix cache computes the last token again)."""
        session = self.headers.get("X-Session-Id")
        if session is None:
            seen, key = self.double.prompts, " ".join(words)
            self.double.prompts = seen | {key}
            return len(words) - 1 if key in seen and self.double.fault != "no_prefix_cache" else 0
        before = self.double.sessions.get(session, [])
        self.double.sessions[session] = words + text.split()
        if self.double.fault == "no_session_cache":
            return 0
        common = next((i for i, (a, b) in enumerate(zip(before, words)) if a != b), min(len(before), len(words)))
        return common

    def _tool_call(self, name):
        call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": '{"city": "Paris"}'}}
        self._json(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                              "tool_calls": [call]}, "finish_reason": "tool_calls"}],
                         "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18}})

    def _text(self, body, prompt, overlapped):
        fault = self.double.fault
        secret = re.search(r"secret number is (\d+)", prompt)
        text, finish = (secret[1], "stop") if secret and fault != "lose_needle" else (TEXT, "length")
        if overlapped and fault == "racy":
            text = TEXT.upper()
        if (body.get("response_format") or {}).get("type") == "json_schema":
            answers = {"schema_ignored": (TEXT, "stop"), "schema_truncated": (ANSWER[:12], "length")}
            text, finish = answers.get(fault, (ANSWER, "stop"))
        stops = [body["stop"]] if isinstance(body.get("stop"), str) else body.get("stop") or []
        for stop in [] if fault == "ignore_stop" else stops:
            if stop in text:
                text, finish = text[:text.index(stop)], "stop"
        return text, finish

    def _answer(self, body, text, finish, n_prompt, cached):
        n_out = len(text.split())
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                 "total_tokens": n_prompt + n_out + (1 if self.double.fault == "bad_usage" else 0),
                 "prompt_tokens_details": {"cached_tokens": cached}}
        if not body.get("stream"):
            return self._json(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "finish_reason": finish}], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        events = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]}]
        events += [{"choices": [{"delta": {"content": w}}]} for w in re.findall(r"\S+\s*", text)]
        events += [{"choices": [{"delta": {}, "finish_reason": finish}]}, {"choices": [], "usage": usage}]
        for e in events:
            self.wfile.write(b"data: " + json.dumps(e).encode() + b"\n\n")
        if self.double.fault != "no_done":
            self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def _json(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
