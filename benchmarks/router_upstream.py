"""A scripted instance for bench_router.py --synthetic: registers model `m` with a router and streams on a clock.

It answers POST /v1/completions with `max_tokens` completion events `interval` seconds apart, then the
finish event and `data: [DONE]`, framed as pantheon-serve's fronts frame them (chunked; close-delimited
when the router sends X-Pantheon-Stream-End: close); POST /tokenize and GET /health answer at once.
No model runs, so what the router adds is not lost in a model's step-to-step noise.
"""

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pantheon.serve.settings import STREAM_END_HEADER

HEARTBEAT_S = 1.0


def _event(text, finish=None):
    chunk = {"id": "cmpl-bench", "object": "text_completion", "created": 0, "model": "m",
             "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    interval = 0.0

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._reply(200, b'{"status":"ok"}')

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/tokenize":
            self._reply(200, b'{"tokens":[1,2,3,4]}')
        else:
            self._stream(int(body.get("max_tokens", 16)))

    def _reply(self, status, payload):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, n):
        closing = self.headers.get(STREAM_END_HEADER, "").lower() == "close"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection" if closing else "Transfer-Encoding", "close" if closing else "chunked")
        self.end_headers()
        events = [_event(" tok") for _ in range(n)] + [_event("", "length"), b"data: [DONE]\n\n"]
        for i, ev in enumerate(events):
            if 0 < i < n:
                time.sleep(self.interval)
            self.wfile.write(ev if closing else b"%x\r\n%s\r\n" % (len(ev), ev))
            self.wfile.flush()
        if closing:
            self.close_connection = True
        else:
            self.wfile.write(b"0\r\n\r\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # HAProxy closing an idle keep-alive connection is not news


class ScriptedInstance:
    """Listens on a free loopback port, registers `m` with the router and heartbeats until stop()."""

    def __init__(self, router_url, interval):
        handler = type("Handler", (_Handler,), {"interval": interval})
        self.httpd = _Server(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.router_url = router_url
        self._stop = threading.Event()
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self._registry("register")
        threading.Thread(target=self._beat, daemon=True).start()

    def _registry(self, route):
        body = json.dumps({"instance": "scripted", "models": ["m"], "address": self.url.split("//")[1]}).encode()
        req = urllib.request.Request(f"{self.router_url}/registry/{route}", data=body,
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()

    def _beat(self):
        while not self._stop.wait(HEARTBEAT_S):
            self._registry("heartbeat")

    def stop(self):
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
