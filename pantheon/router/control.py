"""The control plane's own small HTTP server (loopback, behind HAProxy): registry, /v1/models(/{id}), /health."""

import hmac
import json
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pantheon.router.fleet import FleetError

MAX_BODY = 64 * 1024
MODEL_PREFIX = "/v1/models/"


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port, router):
        super().__init__(("127.0.0.1", port), Handler)
        self.router = router

    def handle_error(self, request, client_address):
        """HAProxy resets idle keep-alive connections to this server: routine, not worth a traceback."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pantheon-router"

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path  # a query (a client's ?limit=) changes nothing here
        if path == "/v1/models":
            return self._send(200, self.server.router.models_list())
        if path.startswith(MODEL_PREFIX):
            return self._model(urllib.parse.unquote(path[len(MODEL_PREFIX):]))
        if path in ("/health", "/v1/health"):
            ok, body = self.server.router.health()
            return self._send(200 if ok else 503, body)
        if path == "/registry/fleet":
            return self._registry(lambda body, peer: self.server.router.fleet_view(), body=False)
        self._error(404, f"no route GET {path}", "not_found")

    def _model(self, name):
        """GET /v1/models/{name}: the fleet's entry for one model, as the servers answer it."""
        entry = next((m for m in self.server.router.models_list()["data"] if m["id"] == name), None)
        if entry is None:
            return self._error(404, f"model {name!r} is not served by any instance", "model_not_found")
        self._send(200, entry)

    def do_POST(self):
        routes = {"/registry/register": self.server.router.register,
                  "/registry/heartbeat": self.server.router.heartbeat}
        if self.path in routes:
            return self._registry(routes[self.path])
        self._error(404, f"no route POST {self.path}", "not_found")

    def do_DELETE(self):
        if self.path == "/registry/deregister":
            return self._registry(self.server.router.deregister)
        self._error(404, f"no route DELETE {self.path}", "not_found")

    def _registry(self, action, body=True):
        if not self._authorized():
            return self._error(401, "the registry routes need the router's shared token (Bearer)", "invalid_token")
        try:
            parsed = self._json() if body else None
            self._send(200, action(parsed, self._peer()))
        except FleetError as e:
            self._error(e.status, str(e), "invalid_registry_request")

    def _authorized(self):
        token = self.server.router.config.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    def _peer(self):
        """The instance's IP: HAProxy's X-Forwarded-For (last hop), else the socket peer."""
        forwarded = self.headers.get("X-Forwarded-For")
        return forwarded.split(",")[-1].strip() if forwarded else self.client_address[0]

    def _json(self):
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise FleetError("Content-Length is not a number") from None
        if not 0 < length <= MAX_BODY:
            raise FleetError(f"a registry body is 1..{MAX_BODY} bytes of JSON", 413 if length > MAX_BODY else 400)
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, ValueError) as e:
            raise FleetError(f"the body is not JSON: {e}") from None

    def _error(self, status, message, code):
        self._send(status, {"error": {"message": message, "type": "invalid_request_error", "param": None,
                                      "code": code}})

    def _send(self, status, doc):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
