"""A stand-in OpenAI server for verify's own tests: answers as the OpenAI API says a server should
(tool calls, json_schema, cached_tokens on a repeated prompt), except for the fault a test switches
on (`ignore_stop`), so that the right check must catch it."""

import http.server
import json
import re
import threading

TEXT = "The sea is wide and the waves roll in from far away under a grey sky."
N_CTX = 512


class Double:
    def __init__(self, ignore_stop=False):
        self.ignore_stop = ignore_stop
        self.seen = set()     # prompts answered before: their tokens count as cached
        handler = type("Handler", (_Handler,), {"double": self})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    double = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/health":
            return self._json(200, {"status": "ok", "models": {"m": {"state": "loaded", "n_ctx": N_CTX}}})
        if self.path == "/v1/models":
            return self._json(200, {"data": [{"id": "m", "meta": {"context_length": N_CTX}}]})
        self._json(404, {"error": {"message": "not found", "code": "not_found"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            return self._json(200, {"tokens": body["content"].split()})
        prompt = " ".join(m.get("content") or "" for m in body.get("messages", []))
        if len(prompt.split()) >= N_CTX:
            return self._json(400, {"error": {"message": "too long", "code": "context_over_budget"}})
        if isinstance(body.get("tool_choice"), dict):
            return self._tool_call(body["tool_choice"]["function"]["name"])
        cached = len(prompt.split()) if prompt in self.double.seen else 0
        self.double.seen.add(prompt)
        self._answer(body, self._text(body, prompt), len(prompt.split()), cached)

    def _tool_call(self, name):
        call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": '{"city": "Paris"}'}}
        self._json(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": None,
                                                              "tool_calls": [call]}, "finish_reason": "tool_calls"}],
                         "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18}})

    def _text(self, body, prompt):
        secret = re.search(r"secret number is (\d+)", prompt)
        text, finish = (secret[1], "stop") if secret else (TEXT, "length")
        if (body.get("response_format") or {}).get("type") == "json_schema":
            text, finish = '{"city": "Paris", "population": 2100000}', "stop"
        stops = [body["stop"]] if isinstance(body.get("stop"), str) else body.get("stop") or []
        for stop in [] if self.double.ignore_stop else stops:
            if stop in text:
                text, finish = text[:text.index(stop)], "stop"
        return text, finish

    def _answer(self, body, text_finish, n_prompt, cached):
        text, finish = text_finish
        usage = {"prompt_tokens": n_prompt, "completion_tokens": len(text.split()),
                 "total_tokens": n_prompt + len(text.split()), "prompt_tokens_details": {"cached_tokens": cached}}
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
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def _json(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
