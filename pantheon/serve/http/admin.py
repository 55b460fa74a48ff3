"""The admin API: list, load and unload models, list dies; guarded by its own bearer token."""

import hmac
import ipaddress
import json

from pantheon.serve.http import json_body
from pantheon.serve.http.errors import RequestError


class AdminRefused(Exception):
    """An admin operation refused by the instance; `body` is the full OpenAI-style error body."""

    def __init__(self, status, body):
        super().__init__(body["error"]["message"])
        self.status, self.body = status, body


def admin_enabled(host, admin_token):
    """Admin routes run on a loopback bind, or anywhere once a token guards them."""
    if admin_token:
        return True
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class AdminAuth:
    """Falcon middleware for /admin/*: disabled (403) or bearer-token checked (401)."""

    def __init__(self, token, enabled):
        self.token = token.encode() if token else None
        self.enabled = enabled

    def process_request(self, req, resp):
        if not req.path.startswith("/admin"):
            return
        if not self.enabled:
            raise RequestError("the admin API is disabled: bind to a loopback host or set --admin-token",
                               code="admin_disabled", status=403, type="permission_error")
        if self.token is None:
            return
        scheme, _, given = (req.get_header("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
            raise RequestError("missing or incorrect admin token (Authorization: Bearer <admin-token>)",
                               code="invalid_admin_token", status=401, type="authentication_error",
                               headers={"WWW-Authenticate": "Bearer"})


class _Admin:
    def __init__(self, admin, body_limit):
        self.admin, self.body_limit = admin, body_limit

    def _call(self, resp, fn, *args):
        try:
            resp.media = fn(*args)
        except AdminRefused as e:
            resp.status = e.status
            resp.media = e.body

    def _body(self, req):
        body = json_body.read_json(req, self.body_limit)
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        return body


class AdminModels(_Admin):
    def on_get(self, req, resp):
        self._call(resp, lambda: {"models": self.admin.admin_models()})


class AdminDies(_Admin):
    def on_get(self, req, resp):
        self._call(resp, self.admin.admin_dies)


class AdminLoad(_Admin):
    """{"stream": true} answers with SSE progress events ({"state", "elapsed_s"}) then the final {"model"}."""

    def on_post(self, req, resp):
        body = self._body(req)
        if body.pop("stream", False) is not True:
            return self._call(resp, self.admin.admin_load, body)
        events = self.admin.load_progress(body)
        try:
            first = next(events)  # a refusal up front is still a plain HTTP error
        except AdminRefused as e:
            resp.status, resp.media = e.status, e.body
            return
        resp.content_type = "text/event-stream"
        resp.stream = _sse(first, events)


def _sse(first, events):
    yield f"data: {json.dumps(first)}\n\n".encode()
    try:
        for event in events:
            yield f"data: {json.dumps(event)}\n\n".encode()
    except AdminRefused as e:
        yield f"data: {json.dumps(e.body)}\n\n".encode()
    yield b"data: [DONE]\n\n"


class AdminUnload(_Admin):
    def on_post(self, req, resp):
        self._call(resp, self.admin.admin_unload, self._body(req))


def add_admin_routes(app, admin, body_limit):
    app.add_route("/admin/models", AdminModels(admin, body_limit))
    app.add_route("/admin/models/load", AdminLoad(admin, body_limit))
    app.add_route("/admin/models/unload", AdminUnload(admin, body_limit))
    app.add_route("/admin/dies", AdminDies(admin, body_limit))
