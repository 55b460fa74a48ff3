"""A tiny local HTTP server answering pantheon-serve's admin contract with canned payloads."""

import copy
import http.server
import json
import time

from tests.pantheon.ctl.local_server import LocalServer

MODELS = {"models": [
    {"slot": 1, "name": "small", "path": "/models/small.gguf", "dies": ["cpu1"], "state": "loading",
     "reason": "", "in_flight": 0, "ctx": 2048},
    {"slot": 0, "name": "big", "path": "/models/big.gguf", "dies": ["cpu0", "cpu1"], "state": "loaded",
     "reason": "", "in_flight": 3, "ctx": 4096},
    {"slot": 2, "name": "broken", "path": "/models/broken.gguf", "dies": ["cpu0"], "state": "failed",
     "reason": "worker exited with signal 9", "in_flight": 0, "ctx": 4096},
]}

DIES = {"dies": [
    {"name": "cpu0", "kind": "cpu", "cores": [0, 1], "gpu": None,
     "ram": {"total": 32 << 30, "available": 12 << 30}, "vram": None, "models": ["big", "broken"],
     "pid": 4242, "restarts": 1, "in_flight": 3, "state": "up"},
    {"name": "cuda0", "kind": "cuda", "cores": [], "gpu": {"name": "NVIDIA H200", "uuid": "GPU-1234"},
     "ram": None, "vram": {"total": 141 << 30, "used": 3 << 29}, "models": [],
     "pid": 0, "restarts": 0, "in_flight": 0, "state": "down"},
], "pressure": {"level": "WATCH", "available": 12 << 30}}

HEALTH = {"status": "ok", "models": {"big": {"state": "loaded", "replicas": 1, "n_ctx": 4096,
                                             "running": 2, "queued": 1}}}


def error(status, message, code, type_="invalid_request_error", param=None, **extra):
    return status, {"error": {"message": message, "type": type_, "code": code, "param": param, **extra}}


class StubServer(LocalServer):
    """http.server on 127.0.0.1:0 in a thread; `routes[(method, path)] = (status, body[, delay_s])`.

    A body that is a str is sent as text/html; every request is recorded in `requests`.
    """

    def __init__(self):
        self.routes = {("GET", "/admin/models"): (200, copy.deepcopy(MODELS)),
                       ("GET", "/admin/dies"): (200, copy.deepcopy(DIES)),
                       ("GET", "/health"): (200, copy.deepcopy(HEALTH))}
        self.requests = []
        super().__init__(_handler(self), poll_s=0.02)

    def answer(self, method, path):
        status, body, *delay = self.routes.get((method, path), error(404, f"no route {path}", "not_found"))
        if delay:
            time.sleep(delay[0])
        return status, body


def _handler(stub):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self._serve(None)

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._serve(json.loads(raw))

        def _serve(self, body):
            stub.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers),
                                  "body": body})
            status, answer = stub.answer(self.command, self.path)
            data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
            kind = "text/html" if isinstance(answer, str) else "application/json"
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass   # the client gave up first (timeout tests)

        def log_message(self, *args):
            pass

    return Handler
